"""The SQLite store, migrations, query building and argument parsing of the memory server (no MCP)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from mycelian_agent.errors import ConfigError, InputError, MemoryServerError
from mycelian_agent.memory_server.storage.sqlite import lexical
from mycelian_agent.memory_server.storage.sqlite.lexical import UNRANKED, match_expression, time_bounds
from mycelian_agent.memory_server.storage.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.storage.validation import parse_rfc3339
from mycelian_agent.memory_server.text.analysis import ENTRY_WEIGHTS, query_stems
from mycelian_agent.words import MAX_QUERY_TERMS, query_terms


def test_migrations_are_numbered_idempotent_and_resume(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("INSERT INTO vaults VALUES ('v', 'old', '', '2024-01-01T00:00:00.000000Z')")
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    for _ in range(2):
        with contextlib.closing(Store.open(db)) as store:
            conn = store.connection
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert store.list_vaults() == [{"vaultId": "v", "title": "old"}]
            assert store.counts()["entry_vectors"] == 0


def test_open_refusals(tmp_path: Path) -> None:
    # (a newer schema: tests/conformance)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(
        MemoryServerError,
        match=r"junk.db is not a memory database \(file is not a database\): is "
        r"--db the right file\? `mycelian-agent check ",
    ):
        Store.open(junk)
    with pytest.raises(ConfigError, match="synchronous"):
        Store.open(":memory:", synchronous="OFF")
    with contextlib.closing(Store.open(tmp_path / "full.db", synchronous="full")) as store:
        assert store.connection.execute("PRAGMA synchronous").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("What did the user say about Denver?", ["user", "say", "denver"]),
        ("the of and", ["the", "of", "and"]),  # only stop words: keep them
        ('NEAR("cat" dog) AND OR NOT *x* ^y col:z', ["near", "cat", "dog", "x", "y", "col", "z"]),
        ("'); DROP TABLE entries;--", ["drop", "table", "entries"]),
        ('"*(){}^:-_', []),
        ("Café CAFÉ cafe", ["café", "cafe"]),
        ("snake_case_word", ["snake", "case", "word"]),
    ],
)
def test_query_terms(query: str, terms: list[str]) -> None:
    assert query_terms(query) == terms


def test_query_terms_are_capped_and_quoted() -> None:
    many = " ".join(f"word{i}" for i in range(200))
    assert len(query_terms(many)) == MAX_QUERY_TERMS
    assert match_expression(["12xa", "12xb"]) == '"12xa" OR "12xb"'


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01t12:00:00z", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01 12:00:00+02:00", "2024-05-01T10:00:00.000000Z"),
        ("2024-05-01T12:00:00.123456789-01:30", "2024-05-01T13:30:00.123456Z"),
        ("2024-12-31T23:59:59.5-05:00", "2025-01-01T04:59:59.500000Z"),
    ],
)
def test_rfc3339_normalisation(text: str, normalised: str) -> None:
    assert parse_rfc3339("t", text) == normalised


@pytest.mark.parametrize(
    "text", ["2024-05-01", "2024-05-01T12:00:00", "2024-05-01T25:00:00Z", "May 1 2024", "2024-05-01T12:00:00+24:00"]
)
def test_rfc3339_refusals(text: str) -> None:
    with pytest.raises(InputError, match="t "):
        parse_rfc3339("t", text)


def _reference(conn: sqlite3.Connection, memory_id: str, terms: list[str], limit: int) -> list[tuple[int, float]]:
    """Plain BM25 over every term's keyed stem, joined to the rows exactly: what the optimisations keep."""
    from mycelian_agent.memory_server.storage.sqlite import postings

    sql = (
        f"SELECT e.seq, bm25(entries_fts, {', '.join(map(str, ENTRY_WEIGHTS))}) FROM entries_fts "
        "JOIN entries e ON e.seq = entries_fts.rowid "
        "WHERE entries_fts MATCH ? AND e.memory_id = ? ORDER BY 2, e.seq DESC LIMIT ?"
    )
    key = postings.memory_key(conn, memory_id)
    assert key is not None
    expression = match_expression([postings.keyed(key, [stem]) for stem in dict.fromkeys(query_stems(terms))])
    return [(seq, -rank) for seq, rank in conn.execute(sql, (expression, memory_id, limit))]


def _check_candidates(
    conn: sqlite3.Connection, memory_id: str, terms: list[str], limit: int, after: str | None = None
) -> None:
    """The search's candidates (``lexical.rank_entries``) are plain BM25's best ``limit``, scores and all; when they
    are all the matches (of every term, or of the terms left once the common ones are pruned), unranked."""
    from mycelian_agent.memory_server.storage.sqlite import postings

    where, params = time_bounds(after, None)
    got = lexical.rank_entries(conn, postings.memory_key(conn, memory_id), terms, limit, where, params)
    reference = _reference(conn, memory_id, terms, limit)
    if got and all(score == UNRANKED for _, score in got):
        assert sorted(seq for seq, _ in got) == sorted(seq for seq, _ in reference), (terms, limit)
    else:
        assert [score for _, score in got] == pytest.approx([s for _, s in reference], abs=1e-4), (terms, limit)


def test_optimised_search_ranks_like_plain_bm25() -> None:
    import random

    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(300)]
    with contextlib.closing(Store.open(":memory:")) as store:
        v = store.create_vault("v")["vaultId"]
        big = store.create_memory(v, "big", "NOTES")["memoryId"]
        small = store.create_memory(v, "small", "NOTES")["memoryId"]
        for i in range(1500):
            memory = big if i % 3 else small  # big holds 2/3 of the index, small 1/3
            words = rng.choices(vocabulary, weights=[1 / (k + 1) for k in range(300)], k=12)
            store.add_entry(v, memory, " ".join(words + (["user"] if i % 5 else [])), "The user said " + words[0])
        conn = store.connection
        queries = [["user", "said", "w3"], ["user", "w250"], ["said", "w1", "w2", "w299"], ["user", "said"], ["w7"]]
        for memory in (big, small):
            for terms in queries:
                for limit in (1, 5, 25):
                    _check_candidates(conn, memory, terms, limit)
            _check_candidates(conn, memory, ["w3"], 5, after="2000-01-01T00:00:00.000000Z")


def test_servers_opening_a_new_file_together_all_start(tmp_path: Path) -> None:
    # Switching a new file to WAL needs it alone, and SQLite answers "database is locked" at once (no busy timeout)
    # while another connection opens it too: two servers or replays started together on a new file failed ~1 time
    # in 6. Store.open retries the switch within the busy timeout.
    import threading

    for round_ in range(20):
        path = tmp_path / f"new{round_}.db"
        start, errors = threading.Barrier(4), list[BaseException]()

        def open_it() -> None:
            start.wait()
            try:
                Store.open(path).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
