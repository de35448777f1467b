"""SQLite's lexical search: the schema 3 upgrade of an existing database, the FTS5 plan counts, ranking by parts, a
memory with few matches; and the neighbours' shares in ``ranking.with_context``.

What search promises on every backend (stems, names from tags, dates in words, neighbour context, time bounds,
paging, any text as a safe query) is tests/conformance/test_conformance_search.py."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from mycelian_agent.memory_server.storage.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION
from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.storage.sqlite.store import Store


def test_a_schema_2_database_upgrades_in_place(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for version in (1, 2):
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 2")
        conn.execute(
            "INSERT INTO vaults VALUES ('11111111-1111-4111-8111-111111111111', 'v', '', '2024-01-01T00:00:00.000000Z')"
        )
        conn.execute(
            "INSERT INTO memories VALUES ('22222222-2222-4222-8222-222222222222', "
            "'11111111-1111-4111-8111-111111111111', 'm', 'NOTES', '', '2024-01-01T00:00:00.000000Z')"
        )
        rows = [("I love painting sunsets.", "Caroline"), ("Me too!", "Melanie")]
        rows += [(f"Filler line {i} about nothing.", "Melanie") for i in range(6)]  # so that IDF is not ~0
        for i, (text, speaker) in enumerate(rows):
            conn.execute(
                "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
                "summary, tags) VALUES (?, '22222222-2222-4222-8222-222222222222', "
                "'11111111-1111-4111-8111-111111111111', ?, '2023-05-08T13:56:00.000000Z', ?, ?, ?)",
                (f"3333333{i}-3333-4333-8333-333333333333", f"2024-01-01T00:00:0{i}.000000Z", text, text,
                 f'{{"speaker": "{speaker}"}}'),
            )
        conn.commit()
    with contextlib.closing(Store.open(db)) as store:
        conn = store.connection
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        memory, vault = "22222222-2222-4222-8222-222222222222", "11111111-1111-4111-8111-111111111111"
        # The old rows were re-indexed with their names and dates.
        found = search(store, memory, "Caroline in May 2023", top_ke=1)["entries"]
        assert [e["entryId"] for e in found] == ["33333330-3333-4333-8333-333333333333"]
        assert search(store, memory, "stemmed: paints", top_ke=1)["count"] == 1
        # And they leave the index cleanly: the delete trigger recomputes the values it indexed.
        store.delete_entry(vault, memory, "33333330-3333-4333-8333-333333333333")
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        assert store.counts()["entries_fts"] == len(rows) - 1
        assert search(store, memory, "Caroline sunsets", top_ke=5)["count"] == 0
    with contextlib.closing(Store.open(db)) as store:  # a second open finds nothing to do
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_plan_counts_are_kept_until_the_database_changes(tmp_path) -> None:
    # The FTS5 counts that plan a search are read once while nothing changes; a write by this connection or a
    # commit by another drops them.
    from mycelian_agent.memory_server.storage.sqlite.lexical import PlanCounts

    path = tmp_path / "c.db"
    conn, other = sqlite3.connect(path), sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.executemany("INSERT INTO t (x) VALUES (?)", [("red fox",), ("red hen",)])
    conn.commit()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    counts = PlanCounts()

    def red() -> int:
        return counts.count(conn, "t", '"red"')

    def matches() -> int:
        return sum("MATCH" in sql for sql in statements)

    assert red() == 2 and red() == 2 and matches() == 1
    conn.execute("INSERT INTO t (x) VALUES ('red cat')")
    conn.commit()
    assert red() == 3 and matches() == 2
    other.execute("INSERT INTO t (x) VALUES ('red owl')")
    other.commit()
    assert red() == 4 and matches() == 3
    conn.close()
    other.close()


def test_the_turns_two_steps_away_take_smaller_shares_through_the_neighbours() -> None:
    from mycelian_agent.memory_server.retrieval import ranking

    hits = [(10, 1.0)]
    links = [(10, 9, 11, False)]
    outer = [(9, 8, 10, False), (11, 10, 12, True)]
    ranked = dict(ranking.with_context(hits, links, {8, 9, 10, 11, 12}, 10, outer=outer))
    assert ranked[12] == pytest.approx(ranking.CONTEXT_FAR_AFTER)
    assert ranked[8] == pytest.approx(ranking.CONTEXT_FAR_BEFORE)
    assert ranked[11] == pytest.approx(ranking.CONTEXT_WEIGHT) and ranked[9] == pytest.approx(ranking.CONTEXT_BEFORE)
    # Outside the search's bounds, past a conversation gap (no link), or without ``outer``: nothing.
    assert 12 not in dict(ranking.with_context(hits, links, {8, 9, 10, 11}, 10, outer=outer))
    assert 12 not in dict(ranking.with_context(hits, links, {8, 9, 10, 11, 12}, 10, outer=[(11, 10, None, True)]))
    assert set(dict(ranking.with_context(hits, links, {8, 9, 10, 11, 12}, 10))) == {9, 10, 11}


def test_ranking_by_parts_finds_the_same_rows_as_the_whole_query(tmp_path, monkeypatch) -> None:
    # A memory that fills the file is ranked by parts (lexical._Query) when its terms match many rows: the same
    # rows and scores as one OR query, with and without time bounds, for queries of 2 to 4 live terms.
    import random

    from mycelian_agent.memory_server.storage.sqlite import lexical

    rng = random.Random(4)
    words = "apple river stone cloud maple violet harbor lantern copper meadow".split()
    store = Store.open(tmp_path / "parts.db")
    v = store.create_vault("v")["vaultId"]
    m = store.create_memory(v, "m", "chat")["memoryId"]
    for batch in range(12):
        store.add_entries(v, m, [
            {"raw_entry": " ".join(rng.choices(words, k=rng.randint(2, 9))),
             "summary": " ".join(rng.choices(words, k=rng.randint(1, 4))),
             "conversation_time": f"2024-03-{1 + (batch * 100 + i) % 28:02d}T10:00:00Z"}
            for i in range(100)])
    monkeypatch.setattr(lexical, "_PARTS_MIN_POSTINGS", 1)
    conn = store.connection
    counts = lexical.PlanCounts()
    total = lexical.indexed_rows(conn, "entries_fts")
    used = 0
    for _ in range(40):
        terms = rng.sample([*words, "absent"], rng.randint(2, 5))
        for after, before in ((None, None), ("2024-03-05T00:00:00.000000Z", "2024-03-20T00:00:00.000000Z")):
            where, params = lexical.time_bounds(after, before)
            parts = lexical._query(conn, lexical._ENTRIES, None, terms, total, counts)
            whole = lexical._Query(None, tuple(terms), lexical._ENTRIES.columns)
            used += parts.bounds is not None
            for limit in (5, 50):
                assert (lexical._rank(conn, lexical._ENTRIES, m, parts, limit, False, where, params)
                        == lexical._rank(conn, lexical._ENTRIES, m, whole, limit, False, where, params))
    assert used > 40  # most queries took the parts path
    store.close()


def test_a_memory_with_few_matches_gives_them_all_unranked(tmp_path) -> None:
    # rank_entries (the server's candidates) skips bm25() when every match fits: the same set as the ranking.
    from mycelian_agent.memory_server.storage.sqlite import lexical

    store = Store.open(tmp_path / "few.db")
    v = store.create_vault("v")["vaultId"]
    m = store.create_memory(v, "m", "chat")["memoryId"]
    store.add_entries(v, m, [{"raw_entry": f"kayak trip {i}" if i % 3 else f"river day {i}", "summary": "s"}
                             for i in range(30)])
    conn = store.connection
    few = lexical.rank_entries(conn, m, ["kayak"], 50, "", [])
    ranked = lexical._search(conn, lexical._ENTRIES, m, ["kayak"], 50)
    assert {s for s, _ in few} == {s for s, _ in ranked} and len(few) == 20
    assert {score for _, score in few} == {lexical.UNRANKED}
    many = lexical.rank_entries(conn, m, ["kayak", "river"], 5, "", [])
    assert many == lexical._search(conn, lexical._ENTRIES, m, ["kayak", "river"], 5)  # more matches: ranked
    store.close()
