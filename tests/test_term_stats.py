"""Per-memory term statistics (term_stats.py): counting and deltas, and the migration that backfills them on both
backends. That every write keeps them equal to a recount, and that every store on one database shares them, is in
tests/conformance (every backend)."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mycelian_agent.memory_server.storage import open_store, term_stats
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.memory_server.storage.term_stats import STEM, WORD


def _stored(store: MemoryStore) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int, str], int]]:
    """The statistics tables as they are: ``{memory: (entries, tokens)}``, ``{(memory, kind, term): entries}``."""
    with store.maintenance_connection() as conn:
        memories = [
            tuple(row.values()) if isinstance(row, dict) else tuple(row)
            for row in conn.execute("SELECT memory_id, entries, tokens FROM memory_stats").fetchall()
        ]
        terms = [
            tuple(row.values()) if isinstance(row, dict) else tuple(row)
            for row in conn.execute("SELECT memory_id, kind, term, entries FROM term_stats").fetchall()
        ]
    return ({m: (int(n), int(t)) for m, n, t in memories}, {(m, int(k), term): int(n) for m, k, term, n in terms})


def _recounted(store: MemoryStore) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int, str], int]]:
    """What the tables must hold: every memory's entries counted from scratch."""
    entries: defaultdict[str, list[tuple[Any, ...]]] = defaultdict(list)
    with store.maintenance_connection() as conn:
        for row in conn.execute(
            "SELECT memory_id, raw_entry, summary, tags, "
            "coalesce(conversation_time, creation_time) AS moment FROM entries ORDER BY seq"
        ):
            values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
            entries[values[0]].append(values[1:])
    memories, terms = {}, {}
    for memory_id, rows in entries.items():
        total = term_stats.recount(rows)
        memories[memory_id] = (total.entries, total.tokens)
        terms.update({(memory_id, kind, term): n for kind, term, n in total.rows()})
    return memories, terms


def _assert_counted(store: MemoryStore) -> None:
    stored, recounted = _stored(store), _recounted(store)
    assert stored[0] == recounted[0]
    assert stored[1] == recounted[1]


def test_an_entry_counts_its_stems_length_and_feedback_words() -> None:
    total = term_stats.recount([("Running marathons", "", "{}", None), ("She runs", "", {}, None)])
    assert (total.entries, total.tokens) == (2, 4)
    assert total.rows() == [
        (STEM, "marathon", 1),
        (STEM, "run", 2),
        (STEM, "she", 1),
        (WORD, "marathons", 1),
        (WORD, "running", 1),
        (WORD, "runs", 1),
    ]
    # The date (conversation time, else creation time) and the labels are BM25 fields; the feedback words are not.
    dated = term_stats.entry_counts("Hi", "", {"speaker": "Ana", "turn": "7"}, "2024-05-03T10:00:00Z")
    assert dated.stems == {"hi", "ana", "3", "mai", "2024"} and dated.words == frozenset() and dated.tokens == 5


def test_a_delta_nets_out_and_forgets_a_deleted_memory() -> None:
    delta = term_stats.Delta()
    one = term_stats.entry_counts("golden retriever", "", {}, None)
    delta.add("m", one, seq=1)
    delta.add("m", one, -1)
    delta.add("n", one, seq=2)
    delta.drop("n")
    assert delta.take() == [] and delta.written == []
    delta.add("m", one, seq=3)
    [(memory, change)] = delta.take()
    assert memory == "m" and change.entries == 1 and (STEM, "golden", 1) in change.rows()
    assert delta.take() == [] and [seq for seq, _ in delta.written] == [3]


@contextlib.contextmanager
def _before_term_stats(monkeypatch: pytest.MonkeyPatch, migrations: Any, store_class: type) -> Iterator[None]:
    """A store at the schema version before the statistics: the migrations up to theirs, and writes that keep none
    (what the previous release wrote)."""
    version = next(i for i, steps in enumerate(migrations.MIGRATIONS) if migrations._count_terms in steps)
    with monkeypatch.context() as old:
        old.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:version])
        old.setattr(migrations, "SCHEMA_VERSION", version)
        if store_class.__name__ == "Store":
            from mycelian_agent.memory_server.storage.sqlite import postings

            old.setattr(store_class, "_write_statistics", lambda self, conn: self._delta.take())
            # Nor the index keyed by memory (migration 5): the schema's triggers index the entries.
            old.setattr(store_class, "_key", lambda self, conn, memory_id: 0)
            for name in ("create_key", "index_entry", "index_context"):
                old.setattr(postings, name, lambda *args: None)
        else:
            old.setattr(store_class, "_write_statistics", staticmethod(lambda conn, delta: delta.take()))
        yield


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_migration_counts_the_entries_already_stored(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "sqlite":
        from mycelian_agent.memory_server.storage.sqlite import migrations
        from mycelian_agent.memory_server.storage.sqlite.store import Store as store_class

        target = str(tmp_path / "old.db")
    else:
        from mycelian_agent.memory_server.storage.postgres import migrations
        from mycelian_agent.memory_server.storage.postgres.store import PostgresStore as store_class

        target = request.getfixturevalue("pg_fresh_url")
    with (
        _before_term_stats(monkeypatch, migrations, store_class),
        contextlib.closing(open_store(target, pool_size=1)) as old,
    ):
        vault = old.create_vault("old")["vaultId"]
        memories = [old.create_memory(vault, f"m{i}", "CHAT")["memoryId"] for i in range(3)]
        for i, memory in enumerate(memories[:2]):  # the third stays empty
            old.add_entries(
                vault,
                memory,
                [
                    {
                        "raw_entry": f"Entry {k} of memory {i}: caf\u00e9 talk about {'boats' if k % 3 else 'trains'}",
                        "summary": f"talk {k}",
                        "tags": {"speaker": "Ana"},
                        "conversation_time": "2023-05-08T13:56:00Z",
                    }
                    for k in range(20 + i)
                ],
            )
    with contextlib.closing(open_store(target, pool_size=1)) as store:
        stored = _stored(store)
        assert stored == _recounted(store) and set(stored[0]) == set(memories[:2])
        assert store.term_counts(memories[1], ["boat", "cafe"], ["trains"]) == (
            21,
            stored[0][memories[1]][1],
            {"boat": 14, "cafe": 21},
            {"trains": 7},
        )
        store.add_entry(vault, memories[2], "now counted as it is written", "counted")
        _assert_counted(store)
