"""Per-memory term statistics (term_stats.py) on both backends: kept equal to a recount from scratch by every kind of
write, backfilled by the migration that adds them, and shared by every store on one database."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.term_stats import STEM, WORD
from mycelian_agent.memory_server.retrieval import search


def _stored(store: MemoryStore) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int, str], int]]:
    """The statistics tables as they are: ``{memory: (entries, tokens)}``, ``{(memory, kind, term): entries}``."""
    with store.maintenance_connection() as conn:
        memories = [tuple(row.values()) if isinstance(row, dict) else tuple(row)
                    for row in conn.execute("SELECT memory_id, entries, tokens FROM memory_stats").fetchall()]
        terms = [tuple(row.values()) if isinstance(row, dict) else tuple(row)
                 for row in conn.execute("SELECT memory_id, kind, term, entries FROM term_stats").fetchall()]
    return ({m: (int(n), int(t)) for m, n, t in memories},
            {(m, int(k), term): int(n) for m, k, term, n in terms})


def _recounted(store: MemoryStore) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int, str], int]]:
    """What the tables must hold: every memory's entries counted from scratch."""
    entries: defaultdict[str, list[tuple[Any, ...]]] = defaultdict(list)
    with store.maintenance_connection() as conn:
        for row in conn.execute("SELECT memory_id, raw_entry, summary, tags, "
                                "coalesce(conversation_time, creation_time) AS moment FROM entries ORDER BY seq"):
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
    assert total.rows() == [(STEM, "marathon", 1), (STEM, "run", 2), (STEM, "she", 1),
                            (WORD, "marathons", 1), (WORD, "running", 1), (WORD, "runs", 1)]
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


def test_every_kind_of_write_keeps_the_statistics_equal_to_a_recount(memory_db: str) -> None:
    store = open_store(memory_db, pool_size=2)
    try:
        vault = store.create_vault("stats")["vaultId"]
        kept = store.create_memory(vault, "kept", "CHAT")["memoryId"]
        gone = store.create_memory(vault, "gone", "CHAT")["memoryId"]
        first = store.add_entry(vault, kept, "I adopted a golden retriever", "User adopted a dog",
                                {"speaker": "Ana"}, "2024-05-03T10:00:00Z", idempotency_key="k1")
        retry = store.add_entry(vault, kept, "I adopted a golden retriever", "User adopted a dog",
                                {"speaker": "Ana"}, "2024-05-03T10:00:00Z", idempotency_key="k1")
        assert retry["deduplicated"]
        _assert_counted(store)
        batch = [{"raw_entry": f"Walked the retriever by the river, day {i}", "summary": f"Walk {i} by the river",
                  "tags": {"speaker": "Ana" if i % 2 else "Ben"}, "idempotency_key": f"b{i}"} for i in range(12)]
        batch.append(dict(batch[3]))  # the same key twice in one call: stored once
        added = store.add_entries(vault, kept, batch)
        assert (added["stored"], added["deduplicated"]) == (12, 1)
        assert store.add_entries(vault, kept, batch)["stored"] == 0  # the whole call retried
        store.add_entries(vault, gone, batch[:5])
        _assert_counted(store)
        stored = _stored(store)
        # A call refused part-way (a key reused with another text) stores nothing and counts nothing.
        with pytest.raises(MemoryServerError, match="conflicts"):
            store.add_entries(vault, kept, [{"raw_entry": "a new line about kayaks", "summary": "kayaks"},
                                            {**batch[0], "raw_entry": "something else"}])
        assert _stored(store) == stored
        store.delete_entry(vault, kept, first["entryId"])
        store.delete_entry(vault, kept, added["entries"][5]["entryId"])
        _assert_counted(store)
        assert _stored(store)[1].get((kept, WORD, "adopted")) is None  # its only entry deleted: no zero row
        store.delete_memory(vault, gone)
        assert gone not in _stored(store)[0] and not any(key[0] == gone for key in _stored(store)[1])
        _assert_counted(store)
        counts = store.term_counts(kept, ["river", "retriev", "nowhere"], ["river", "adopted"])
        assert counts == (11, _stored(store)[0][kept][1], {"river": 11, "retriev": 11, "nowhere": 0},
                          {"river": 11, "adopted": 0})
        for entry in store.list_entries(vault, kept, limit=50)["entries"]:
            store.delete_entry(vault, kept, entry["entryId"])
        assert _stored(store) == ({}, {})
        assert store.term_counts(kept, ["river"], ["river"]) == (0, 0, {"river": 0}, {"river": 0})
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database file or URL that two stores can open at once."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return request.getfixturevalue("pg_url")


def test_two_stores_on_one_database_see_each_others_writes(shared_db: str) -> None:
    with contextlib.closing(open_store(shared_db, pool_size=2)) as one, \
            contextlib.closing(open_store(shared_db, pool_size=2)) as two:
        vault = one.create_vault("shared")["vaultId"]
        memory = one.create_memory(vault, "m", "CHAT")["memoryId"]
        ids = [one.add_entry(vault, memory, f"Note {i} about the garden and roses", f"garden note {i}")["entryId"]
               for i in range(60)]
        one.add_entry(vault, memory, "The kayak trip is on Sunday", "kayak trip")
        assert search(two, memory, "kayak", top_ke=1)["entries"][0]["summary"] == "kayak trip"
        before = search(one, memory, "garden roses", top_ke=5)
        for entry_id in ids[:40]:  # deleted by the other store
            two.delete_entry(vault, memory, entry_id)
        assert one.term_counts(memory, ["garden"], ["roses"]) == two.term_counts(memory, ["garden"], ["roses"])
        assert one.term_counts(memory, ["garden"], ["roses"])[0] == 21
        with contextlib.closing(open_store(shared_db, pool_size=1)) as fresh:
            assert search(one, memory, "garden roses", top_ke=5) == search(fresh, memory, "garden roses", top_ke=5)
        assert search(one, memory, "garden roses", top_ke=5) != before
        _assert_counted(one)


@contextlib.contextmanager
def _before_term_stats(monkeypatch: pytest.MonkeyPatch, migrations: Any, store_class: type) -> Iterator[None]:
    """A store at the schema version before the statistics: the migrations up to theirs, and writes that keep none
    (what the previous release wrote)."""
    version = next(i for i, steps in enumerate(migrations.MIGRATIONS) if migrations._count_terms in steps)
    with monkeypatch.context() as old:
        old.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:version])
        old.setattr(migrations, "SCHEMA_VERSION", version)
        if store_class.__name__ == "Store":
            old.setattr(store_class, "_write_statistics", lambda self, conn: self._delta.take())
        else:
            old.setattr(store_class, "_write_statistics", staticmethod(lambda conn, delta: delta.take()))
        yield


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_migration_counts_the_entries_already_stored(backend: str, tmp_path: Path, request: pytest.FixtureRequest,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "sqlite":
        from mycelian_agent.memory_server.storage.sqlite import migrations
        from mycelian_agent.memory_server.storage.sqlite.store import Store as store_class
        target = str(tmp_path / "old.db")
    else:
        from mycelian_agent.memory_server.storage.postgres import migrations
        from mycelian_agent.memory_server.storage.postgres.store import PostgresStore as store_class
        target = request.getfixturevalue("pg_fresh_url")
    with _before_term_stats(monkeypatch, migrations, store_class), \
            contextlib.closing(open_store(target, pool_size=1)) as old:
        vault = old.create_vault("old")["vaultId"]
        memories = [old.create_memory(vault, f"m{i}", "CHAT")["memoryId"] for i in range(3)]
        for i, memory in enumerate(memories[:2]):  # the third stays empty
            old.add_entries(vault, memory, [
                {"raw_entry": f"Entry {k} of memory {i}: caf\u00e9 talk about {'boats' if k % 3 else 'trains'}",
                 "summary": f"talk {k}", "tags": {"speaker": "Ana"}, "conversation_time": "2023-05-08T13:56:00Z"}
                for k in range(20 + i)])
    with contextlib.closing(open_store(target, pool_size=1)) as store:
        stored = _stored(store)
        assert stored == _recounted(store) and set(stored[0]) == set(memories[:2])
        assert store.term_counts(memories[1], ["boat", "cafe"], ["trains"]) == (21, stored[0][memories[1]][1],
                                                                                  {"boat": 14, "cafe": 21},
                                                                                  {"trains": 7})
        store.add_entry(vault, memories[2], "now counted as it is written", "counted")
        _assert_counted(store)
