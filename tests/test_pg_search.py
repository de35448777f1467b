"""PostgreSQL search by memory: the two-column GIN index (``btree_gin``) and its fallback, the document
frequencies taken from BM25's statistics, and the bounded ranking of queries matching many rows.

Against a real throwaway cluster (conftest.py ``pg_cluster``), as tests/test_postgres.py.
"""

from __future__ import annotations

import logging

import pytest

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.storage.postgres import connecting as pg_store
from mycelian_agent.memory_server.storage.postgres import lexical as pg_lexical
from mycelian_agent.memory_server.storage.postgres.migrations import MEMORY_INDEX, PENDING_LIST_KB, SCHEMA_VERSION
from mycelian_agent.memory_server.storage.postgres.store import PostgresStore

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


def _query(url: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params or None)
        return cursor.fetchall() if cursor.description is not None else []


def _indexes(url: str, table: str) -> set[str]:
    return {name for (name,) in _query(url, "SELECT indexname FROM pg_indexes WHERE tablename = %s", table)}


def _fill(store: PostgresStore, vault: str, title: str, texts: list[str]) -> str:
    memory = store.create_memory(vault, title, "NOTES")["memoryId"]
    for k in range(0, len(texts), 100):
        store.add_entries(vault, memory, [{"raw_entry": t, "summary": t} for t in texts[k : k + 100]])
    return memory


def test_migration_indexes_entries_and_contexts_by_memory(pg_fresh_url: str) -> None:
    PostgresStore.open(pg_fresh_url, pool_size=1).close()
    assert _query(pg_fresh_url, "SELECT extname FROM pg_extension WHERE extname = 'btree_gin'") == [("btree_gin",)]
    assert MEMORY_INDEX in _indexes(pg_fresh_url, "entries") and "entries_tsv" not in _indexes(pg_fresh_url, "entries")
    assert "contexts_memory_tsv" in _indexes(pg_fresh_url, "contexts")
    assert "contexts_tsv" not in _indexes(pg_fresh_url, "contexts")
    columns = _query(pg_fresh_url, "SELECT indexdef FROM pg_indexes WHERE indexname = %s", MEMORY_INDEX)
    assert columns == [
        (
            "CREATE INDEX entries_memory_tsv ON public.entries USING gin (memory_id, tsv) "
            f"WITH (gin_pending_list_limit='{PENDING_LIST_KB}')",
        )
    ]
    assert _pending_limits(pg_fresh_url) == {MEMORY_INDEX: PENDING_LIST_KB, "contexts_memory_tsv": PENDING_LIST_KB}


def _pending_limits(url: str) -> dict[str, int]:
    rows = _query(
        url,
        "SELECT c.relname, o.option_value FROM pg_class c, pg_options_to_table(c.reloptions) o "
        "WHERE c.relkind = 'i' AND o.option_name = 'gin_pending_list_limit'",
    )
    return {name: int(value) for name, value in rows}


def test_without_the_extension_right_the_single_column_indexes_stay_and_it_is_said_once(
    pg_cluster, pg_fresh_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may create tables but not extensions (no CREATE right on the database): the migration still
    completes, search still works, and the store says once per process what an administrator can do."""
    role = "mycelian_limited"
    database = pg_fresh_url.rsplit("/", 1)[1]
    _query(pg_cluster.url(), f"DROP ROLE IF EXISTS {role}")
    _query(pg_cluster.url(), f"CREATE ROLE {role} LOGIN")
    try:
        _query(pg_fresh_url, f"GRANT CREATE ON SCHEMA public TO {role}")
        _query(pg_fresh_url, f"REVOKE CREATE ON DATABASE {database} FROM PUBLIC")
        limited = pg_fresh_url.replace(f"{pg_cluster.user}@", f"{role}@")
        monkeypatch.setattr(pg_store, "_said_no_memory_index", False)
        with caplog.at_level(logging.WARNING, logger=pg_store.__name__):
            store = PostgresStore.open(limited, pool_size=1)
            PostgresStore.open(limited, pool_size=1).close()
        said = [r.getMessage() for r in caplog.records if "btree_gin" in r.getMessage()]
        assert len(said) == 1 and "CREATE EXTENSION btree_gin" in said[0]
        try:
            assert _query(pg_fresh_url, "SELECT max(version) FROM mycelian_schema") == [(SCHEMA_VERSION,)]
            assert _query(pg_fresh_url, "SELECT extname FROM pg_extension WHERE extname = 'btree_gin'") == []
            assert "entries_tsv" in _indexes(pg_fresh_url, "entries")
            assert MEMORY_INDEX not in _indexes(pg_fresh_url, "entries")
            assert _pending_limits(pg_fresh_url) == {"entries_tsv": PENDING_LIST_KB, "contexts_tsv": PENDING_LIST_KB}
            vault = store.create_vault("home")["vaultId"]
            memory = _fill(store, vault, "trips", ["We took the kayak out.", "The paddle is ashore."])
            store.put_context(vault, memory, "Plans: kayak weekend")
            found = search(store, memory, "kayak", top_ke=5)
            assert found["entries"][0]["summary"] == "We took the kayak out."
            assert [c["context"] for c in found["contexts"]] == ["Plans: kayak weekend"]
        finally:
            store.close()
    finally:
        _query(pg_cluster.url(), f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        _query(pg_cluster.url(), f"DROP ROLE IF EXISTS {role}")


def test_document_frequencies_from_bm25_statistics_match_the_index_counts(pg_url: str) -> None:
    """The frequencies the ranking takes from BM25's statistics (Porter stems) are the index's own counts for
    words both stemmers agree on; another memory's entries count in neither."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        kinds = ("the kayak trip", "a quiet walking day", "rest")
        texts = [f"Day {i}: {kinds[i % 3]}" for i in range(60)]
        memory = _fill(store, vault, "trips", texts)
        _fill(store, vault, "other", ["kayak kayak kayak"] * 30)
        terms = ["kayak", "trip", "walking", "quiet", "kayak-trip"]  # the last: three lexemes, two stems, counted

        def statistics(stems: list[str]) -> tuple[int, dict[str, int], int]:
            counts = store.term_counts(memory, stems, ())
            return counts.entries, counts.stems, counts.tokens

        known = pg_lexical.known(terms, statistics)
        with store._read() as conn:
            lexemes_of = store._lexicon.lexemes(conn, terms)
            from_statistics = pg_lexical.frequencies(conn, "entries", memory, lexemes_of, known)
            counted = pg_lexical.frequencies(conn, "entries", memory, lexemes_of, None)
        assert from_statistics == counted == (60, {"kayak": 20, "trip": 20, "walk": 20, "quiet": 20, "kayak-trip": 0})
    finally:
        store.close()


def test_a_query_matching_many_rows_ranks_a_bounded_part_of_them(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above EXACT_ROWS matches, the rows holding the two rarest words and the newest matches are ranked: an old
    entry holding both words is still found, and the newest single-word matches fill the rest."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        kinds = ("the harbour is calm", "the kayak needs wax", "nothing happened")
        texts = ["The harbour kayak race was won by Ines."] + [f"Note {i}: {kinds[i % 3]}." for i in range(300)]
        memory = _fill(store, vault, "notes", texts)
        exact = search(store, memory, "harbour kayak", top_ke=10)["entries"]
        assert exact[0]["summary"] == texts[0]
        monkeypatch.setattr(pg_lexical, "EXACT_ROWS", 40)
        monkeypatch.setattr(pg_lexical, "BOUNDED_ROWS", 10)
        monkeypatch.setattr(pg_lexical, "NEWEST_ROWS", 30)
        statements: list[str] = []
        real = psycopg.Connection.execute

        def seen(self, query, params=None, **kwargs):
            statements.append(str(query))
            return real(self, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", seen)
        bounded = search(store, memory, "harbour kayak", top_ke=10)["entries"]
        assert any("UNION ALL" in s for s in statements)  # the bounded ranking ran
        assert bounded[0]["summary"] == texts[0]
        newest = {t for t in texts[-30:]}
        assert sum(e["summary"] in newest for e in bounded[1:]) >= 5
        # Time bounds far from the newest rows: the bounded part finds too few inside them, so every match ranks.
        oldest = store.list_entries(vault, memory, limit=50, after="2000-01-01T00:00:00Z")["entries"]
        before = oldest[40]["creationTime"]
        early = search(store, memory, "harbour kayak", top_ke=10, before=before)["entries"]
        assert early[0]["summary"] == texts[0] and len(early) == 10
        assert all(e["creationTime"] < before for e in early)
        with store._read() as conn:  # each part is bounded: conjunction rows + newest rows at most
            ranked = pg_lexical.rank(conn, store._lexicon, "entries", memory, ["harbour", "kayak"], 200)
            # The conjunction rows are the first in the table's order whatever the plan: no scan starts midway.
            assert conn.execute("SHOW synchronize_seqscans").fetchone() == {"synchronize_seqscans": "off"}
        assert 1 <= len(ranked) <= 10 + 30
    finally:
        store.close()


def test_a_bounded_ranking_keeps_every_row_of_a_rare_word(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above EXACT_ROWS matches, an old entry holding only the query's rarest word (not the common one) is still
    ranked: every row of the rarest words that fit in BOUNDED_ROWS is scored, not only rows holding both words."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        texts = ["I'm flying to Lisbon on May 3rd."] + [f"Note {i}: the trip budget is fine." for i in range(300)]
        memory = _fill(store, vault, "notes", texts)
        monkeypatch.setattr(pg_lexical, "EXACT_ROWS", 40)
        monkeypatch.setattr(pg_lexical, "BOUNDED_ROWS", 10)
        monkeypatch.setattr(pg_lexical, "NEWEST_ROWS", 30)
        with store._read() as conn:
            ranked = pg_lexical.rank(conn, store._lexicon, "entries", memory, ["lisbon", "trip"], 10)
        first = store.entry_rows(memory, [ranked[0][0]])[ranked[0][0]]
        assert first["summary"] == texts[0]
    finally:
        store.close()


def test_contexts_ranked_in_one_statement_score_as_the_general_ranking(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``contexts`` (one statement: the ranking computed in SQL, read with the rows and the newest snapshot) gives
    ``rank``'s seqs and exact scores: with a common word (in half the snapshots or more, pruned from the
    candidates), with only rare words, with too few rows for the rare words alone, with none, and past EXACT_ROWS
    (where ``rank`` ranks)."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        memory = store.create_memory(vault, "notes", "NOTES")["memoryId"]
        for i in range(12):
            lines = [f"- kayak trip {i} to the harbour" if i % 3 else "- a quiet day", f"- note {i}"]
            store.put_context(vault, memory, "## Facts\n" + "\n".join(lines * (1 + i)))
        queries = (
            ["kayak", "harbour"],
            ["note", "quiet"],
            ["quiet"],
            ["kayak", "day", "nothing"],
            ["absent"],
            ["note", "kayak", "harbour", "quiet"],
        )

        def both(terms: list[str], limit: int) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
            with store._read() as conn:
                ranked, latest = pg_lexical.contexts(conn, store._lexicon, memory, terms, limit, latest=True)
                assert latest is not None and latest["content"].endswith("- note 11")
                general = pg_lexical.rank(conn, store._lexicon, "contexts", memory, terms, limit)
            return [(int(row["seq"]), score) for row, score in ranked], general

        for terms in queries:
            for limit in (1, 2, 5, 20):
                one, general = both(terms, limit)
                assert one == general
        monkeypatch.setattr(pg_lexical, "EXACT_ROWS", 3)
        handed, general = both(["kayak", "note"], 5)
        assert handed == general and len(handed) == 5
    finally:
        store.close()


def test_migration_5_keeps_context_tsvectors_in_their_rows(pg_fresh_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot's tsvector written by version 4 lies out of line (TOAST); version 5 keeps it in the row
    (``STORAGE MAIN``, the text going out instead), rewrites the snapshots so, and search finds the same snapshots
    with the same scores."""
    import mycelian_agent.memory_server.storage.postgres.migrations as migrations

    facts = "## Facts\n" + "\n".join(f"- fact {i}: Ines paddled {i} km on lake number{i}" for i in range(60))
    with monkeypatch.context() as v4:
        v4.setattr(migrations, "SCHEMA_VERSION", 4)
        store = PostgresStore.open(pg_fresh_url, pool_size=1)
        vault = store.create_vault("home")["vaultId"]
        memory = store.create_memory(vault, "lakes", "NOTES")["memoryId"]
        store.add_entry(vault, memory, "Ines paddled", "Ines paddled")
        store.put_context(vault, memory, facts)
        before = search(store, memory, "Ines lake paddled", top_kc=2)["contexts"]
        store.close()
    storage = "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'tsv'"
    assert _query(pg_fresh_url, storage, "contexts") == [("x",)]
    toast = _query(pg_fresh_url, "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'contexts'")[0][0]
    # The one value out of line is the tsvector (what its chunks hold is its stored size; the text compressed).
    outside = f"SELECT (SELECT sum(octet_length(chunk_data)) FROM {toast}) = pg_column_size({{}}) FROM contexts"
    assert _query(pg_fresh_url, f"SELECT count(DISTINCT chunk_id) FROM {toast}") == [(1,)]
    assert _query(pg_fresh_url, outside.format("tsv")) == [(True,)]
    store = PostgresStore.open(pg_fresh_url, pool_size=1)  # migrates to version 5
    try:
        assert _query(pg_fresh_url, "SELECT max(version) FROM mycelian_schema") == [(SCHEMA_VERSION,)]
        assert _query(pg_fresh_url, storage, "contexts") == [("m",)]
        _query(pg_fresh_url, "VACUUM contexts")
        # Now the text goes out (the row is large) and the tsvector, the memory id and the time stay in the row.
        assert _query(pg_fresh_url, f"SELECT count(DISTINCT chunk_id) FROM {toast}") == [(1,)]
        assert _query(pg_fresh_url, outside.format("content")) == [(True,)]
        assert search(store, memory, "Ines lake paddled", top_kc=2)["contexts"] == before
    finally:
        store.close()


def test_rankings_in_a_large_memory_are_never_prepared(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory of more than EXACT_ROWS entries: its rankings are planned for their own lexemes every time (a
    prepared statement turns to a generic plan after five runs); a small memory's are prepared as usual."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        kinds = ("the harbour is calm", "the kayak needs wax", "nothing happened")
        large = _fill(store, vault, "large", [f"Note {i}: {kinds[i % 3]}." for i in range(300)])
        small = _fill(store, vault, "small", [f"Note {i}: {kinds[i % 3]}." for i in range(30)])
        monkeypatch.setattr(pg_lexical, "EXACT_ROWS", 40)
        monkeypatch.setattr(pg_lexical, "NEWEST_ROWS", 30)

        def prepared() -> list[str]:
            with store._read() as conn:
                rows = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
            return [
                row["statement"] for row in rows if "ts_rank" in row["statement"] and "FROM entries" in row["statement"]
            ]

        for _ in range(8):
            search(store, large, "harbour kayak", top_ke=10)
            search(store, large, "wax", top_ke=10)
        assert prepared() == []
        for _ in range(8):
            search(store, small, "harbour kayak", top_ke=10)
        assert prepared() != []
    finally:
        store.close()


def test_entries_keep_their_bm25_terms_and_older_rows_are_analysed(
    pg_fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 6: each write stores its entry's BM25 terms (``terms.py``), exactly what the analysis gives; a
    fresh store (an empty entry cache) reads them, and rows from before (NULL) are analysed from their text."""
    import mycelian_agent.memory_server.storage.postgres.migrations as migrations
    from mycelian_agent.memory_server.text.analysis import entry_terms

    tags = {"speaker": "Ines", "topic": "lakes"}
    texts = [
        ("Ines paddled 12 km?", "Ines paddled on Lake Bled", "2023-05-08T13:56:00Z"),
        ("Café crème at the hütte", "Coffee after the hike", None),
    ]

    def add(store: PostgresStore, vault: str, memory: str) -> None:
        for raw, summary, at in texts:
            store.add_entry(vault, memory, raw, summary, tags=tags, conversation_time=at)

    with monkeypatch.context() as v5:
        v5.setattr(migrations, "SCHEMA_VERSION", 5)
        PostgresStore.open(pg_fresh_url, pool_size=1).close()
    assert _query(pg_fresh_url, "SELECT count(*) FROM information_schema.columns WHERE column_name = 'terms'") == [(0,)]
    store = PostgresStore.open(pg_fresh_url, pool_size=1)  # migrates to version 6
    try:
        assert _query(pg_fresh_url, "SELECT max(version) FROM mycelian_schema") == [(SCHEMA_VERSION,)]
        vault = store.create_vault("home")["vaultId"]
        memory = store.create_memory(vault, "lakes", "NOTES")["memoryId"]
        add(store, vault, memory)
        add(store, vault, memory)
        # The first two as a row written before version 6 holds them.
        _query(
            pg_fresh_url, "UPDATE entries SET terms = NULL WHERE seq IN (SELECT seq FROM entries ORDER BY seq LIMIT 2)"
        )
        stored = _query(pg_fresh_url, "SELECT seq, terms IS NOT NULL FROM entries ORDER BY seq")
        assert [known for _, known in stored] == [False, False, True, True]
        rows = store.entry_rows(memory, [seq for seq, _ in stored])
        expected = {
            seq: entry_terms(
                row["raw_entry"], row["summary"], row["tags"], row["conversation_time"] or row["creation_time"]
            )
            for seq, row in rows.items()
        }
    finally:
        store.close()
    fresh = PostgresStore.open(pg_fresh_url, pool_size=1)
    try:
        assert fresh.entry_terms("00000000-0000-4000-8000-000000000000", [seq for seq, _ in stored]) == {}
        found = fresh.entry_terms(memory, [seq for seq, _ in stored])
        assert found == expected
        assert [list(found[seq].frequencies.items()) for seq, _ in stored] == [
            list(expected[seq].frequencies.items()) for seq, _ in stored
        ]
    finally:
        fresh.close()


def test_search_contexts_reads_the_ranking_and_the_newest_snapshot_together(pg_url: str) -> None:
    """``search_contexts`` (two statements) gives what ``ranked_contexts`` and ``latest_context`` give (the
    default of ``MemoryStore``): with matches, without, without terms, and in a memory without snapshots."""
    store = PostgresStore.open(pg_url, pool_size=1)
    try:
        vault = store.create_vault("home")["vaultId"]
        memory = store.create_memory(vault, "notes", "NOTES")["memoryId"]
        empty = store.create_memory(vault, "empty", "NOTES")["memoryId"]
        for i in range(5):
            store.put_context(vault, memory, f"## Facts\n- kayak trip {i}" if i % 2 else f"## Facts\n- a quiet day {i}")
        for target in (memory, empty):
            for terms in (["kayak"], ["quiet", "day"], ["absent"], []):
                for limit in (1, 3):
                    expected = (
                        store.ranked_contexts(target, terms, limit) if terms else [],
                        store.latest_context(target),
                    )
                    assert store.search_contexts(target, terms, limit) == expected
        ranked, latest = store.search_contexts(memory, ["kayak"], 3)
        assert len(ranked) == 2 and latest is not None and latest["content"].endswith("a quiet day 4")
    finally:
        store.close()
