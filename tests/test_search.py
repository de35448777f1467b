"""SQLite's lexical search: the upgrade of an existing database, the index keyed by memory, ranking by parts, a
memory with few matches; and the neighbours' shares in ``ranking.with_context``.

What search promises on every backend (stems, names from tags, dates in words, neighbour context, time bounds,
paging, any text as a safe query) is tests/conformance/test_conformance_search.py."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.storage.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION
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
                (
                    f"3333333{i}-3333-4333-8333-333333333333",
                    f"2024-01-01T00:00:0{i}.000000Z",
                    text,
                    text,
                    f'{{"speaker": "{speaker}"}}',
                ),
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
        # And they leave the index cleanly: the delete recomputes the values it indexed.
        store.delete_entry(vault, memory, "33333330-3333-4333-8333-333333333333")
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        assert store.counts()["entries_fts"] == len(rows) - 1
        assert search(store, memory, "Caroline sunsets", top_ke=5)["count"] == 0
    with contextlib.closing(Store.open(db)) as store:  # a second open finds nothing to do
        assert store.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_each_memory_has_its_own_postings(tmp_path) -> None:
    # The FTS tables hold keyed terms (postings.py): a memory's rows carry only its key, FTS5's counts of a keyed
    # stem are the memory's term statistics, and deleting an entry or a memory removes exactly its postings.
    from mycelian_agent.memory_server.storage.sqlite import lexical, postings

    store = Store.open(tmp_path / "keys.db")
    v = store.create_vault("v")["vaultId"]
    first, second = (store.create_memory(v, name, "chat")["memoryId"] for name in ("first", "second"))
    store.add_entries(v, first, [{"raw_entry": f"kayak trip {i}", "summary": "river"} for i in range(5)])
    store.add_entries(v, second, [{"raw_entry": f"kayak lesson {i}", "summary": "lake"} for i in range(7)])
    store.put_context(v, second, "## Facts\n- kayak lessons on the lake")
    conn = store.connection
    keys = {m: postings.memory_key(conn, m) for m in (first, second)}
    assert None not in keys.values() and len(set(keys.values())) == 2
    conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, entries_fts, row)")

    def vocabulary(key: int) -> dict[str, int]:
        rows = conn.execute("SELECT term, doc FROM temp.vocab").fetchall()
        return {term.split("x", 1)[1]: n for term, n in rows if term.startswith(f"{key}x")}

    for memory in (first, second):
        stems = ["kayak", "trip", "lesson", "river", "lake"]
        counted = store.term_counts(memory, stems, ()).stems
        assert lexical.term_rows(conn, "entries_fts", keys[memory], stems) == {s: counted.get(s, 0) for s in stems}
    assert vocabulary(keys[first])["kayak"] == 5 and vocabulary(keys[second])["kayak"] == 7
    assert {term.split("x", 1)[0] for (term,) in conn.execute("SELECT term FROM temp.vocab")} == {
        str(k) for k in keys.values()
    }
    assert {seq for seq, _ in lexical.rank_entries(conn, keys[first], ["kayak"], 50, "", [])} == {
        row["seq"] for row in conn.execute("SELECT seq FROM entries WHERE memory_id = ?", (first,))
    }
    entry = store.list_entries(v, first, limit=1)["entries"][0]["entryId"]
    store.delete_entry(v, first, entry)
    assert vocabulary(keys[first])["kayak"] == 4
    store.delete_memory(v, second)
    assert not any(term.startswith(f"{keys[second]}x") for (term,) in conn.execute("SELECT term FROM temp.vocab"))
    assert conn.execute("SELECT count(*) FROM contexts_fts_docsize").fetchone()[0] == 0
    for table in ("entries_fts", "contexts_fts"):
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    # A new memory never takes a deleted memory's key (AUTOINCREMENT).
    third = store.create_memory(v, "third", "chat")["memoryId"]
    assert postings.memory_key(conn, third) > max(keys.values())
    assert search(store, third, "kayak", top_ke=5)["count"] == 0
    store.close()


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
    # A query whose terms match many of the memory's rows is ranked by parts (lexical._Query): the same rows and
    # scores as one OR query, with and without time bounds, for queries of 2 to 4 terms.
    import random

    from mycelian_agent.memory_server.storage.sqlite import lexical, postings

    rng = random.Random(4)
    words = "apple river stone cloud maple violet harbor lantern copper meadow".split()
    store = Store.open(tmp_path / "parts.db")
    v = store.create_vault("v")["vaultId"]
    m = store.create_memory(v, "m", "chat")["memoryId"]
    for batch in range(12):
        store.add_entries(
            v,
            m,
            [
                {
                    "raw_entry": " ".join(rng.choices(words, k=rng.randint(2, 9))),
                    "summary": " ".join(rng.choices(words, k=rng.randint(1, 4))),
                    "conversation_time": f"2024-03-{1 + (batch * 100 + i) % 28:02d}T10:00:00Z",
                }
                for i in range(100)
            ],
        )
    other = store.create_memory(v, "other", "chat")["memoryId"]  # a second memory: its rows must not count
    store.add_entries(v, other, [{"raw_entry": "apple river stone", "summary": "cloud"}] * 50)
    monkeypatch.setattr(lexical, "_PARTS_MIN_POSTINGS", 1)
    conn = store.connection
    key = postings.memory_key(conn, m)
    assert key is not None
    total = lexical.indexed_rows(conn, "entries_fts")
    used = 0
    for _ in range(40):
        terms = rng.sample(words, rng.randint(2, 4))
        found = lexical.term_rows(conn, "entries_fts", key, terms)
        for after, before in ((None, None), ("2024-03-05T00:00:00.000000Z", "2024-03-20T00:00:00.000000Z")):
            where, params = lexical.time_bounds(after, before)
            parts = lexical._query(key, terms, found, total)
            whole = lexical._Query(parts.terms)
            used += parts.bounds is not None
            for limit in (5, 50):
                assert lexical._rank(conn, lexical._ENTRIES, parts, limit, where, params) == lexical._rank(
                    conn, lexical._ENTRIES, whole, limit, where, params
                )
    assert used > 40  # most queries took the parts path
    store.close()


def test_a_memory_with_few_matches_gives_them_all_unranked(tmp_path) -> None:
    # rank_entries (the server's candidates) skips bm25() when every match fits: the same set as the ranking.
    from mycelian_agent.memory_server.storage.sqlite import lexical, postings

    store = Store.open(tmp_path / "few.db")
    v = store.create_vault("v")["vaultId"]
    m = store.create_memory(v, "m", "chat")["memoryId"]
    store.add_entries(
        v, m, [{"raw_entry": f"kayak trip {i}" if i % 3 else f"river day {i}", "summary": "s"} for i in range(30)]
    )
    conn = store.connection
    key = postings.memory_key(conn, m)
    few = lexical.rank_entries(conn, key, ["kayak"], 50, "", [])
    counts = lexical._entry_counts(conn, key)
    ranked = lexical._search(conn, lexical._ENTRIES, key, ["kayak"], 50, counts)
    assert {s for s, _ in few} == {s for s, _ in ranked} and len(few) == 20
    assert {score for _, score in few} == {lexical.UNRANKED}
    many = lexical.rank_entries(conn, key, ["kayak", "river"], 5, "", [])
    assert many == lexical._search(conn, lexical._ENTRIES, key, ["kayak", "river"], 5, counts)  # more: ranked
    store.close()


def test_a_large_memory_leaves_its_most_common_terms_out_of_the_candidate_query(tmp_path, monkeypatch) -> None:
    # In a memory of at least LARGE_MEMORY_ROWS rows, a term in half of them or more makes no candidates while the
    # other terms find enough rows; a query of such terms alone still finds rows (the fallback to every term).
    from mycelian_agent.memory_server.storage.sqlite import lexical, postings

    store = Store.open(tmp_path / "large.db")
    v = store.create_vault("v")["vaultId"]
    m = store.create_memory(v, "m", "chat")["memoryId"]
    store.add_entries(
        v,
        m,
        [
            {"raw_entry": f"the user said hello {i}" + (" kayak" if i % 10 == 0 else ""), "summary": "chat"}
            for i in range(60)
        ],
    )
    other = store.create_memory(v, "other", "chat")["memoryId"]  # most of the file: no term of m is common in it
    for _ in range(2):
        store.add_entries(v, other, [{"raw_entry": f"weather report {i}", "summary": "rain"} for i in range(100)])
    conn = store.connection
    key = postings.memory_key(conn, m)
    queried: list[tuple[str, ...]] = []
    rank = lexical._rank
    monkeypatch.setattr(
        lexical, "_rank", lambda c, i, query, *rest: queried.append(query.terms) or rank(c, i, query, *rest)
    )
    monkeypatch.setattr(lexical, "LARGE_MEMORY_ROWS", 50)
    found = lexical.rank_entries(conn, key, ["user", "kayak"], 5, "", [])
    kayak = {row[0] for row in conn.execute("SELECT seq FROM entries WHERE raw_entry LIKE '%kayak%'")}
    assert {seq for seq, _ in found} <= kayak and len(found) == 5
    assert queried == [(f"{key}xkayak",)]
    assert len(lexical.rank_entries(conn, key, ["user"], 5, "", [])) == 5
    monkeypatch.setattr(lexical, "LARGE_MEMORY_ROWS", 100)  # an exact search ranks the user's rows too
    queried.clear()
    lexical.rank_entries(conn, key, ["user", "kayak"], 5, "", [])
    assert queried == [(f"{key}xuser", f"{key}xkayak")]
    store.close()
