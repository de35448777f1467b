"""Lexical search through the real server: stemming, names from tags, dates in words, neighbour context, the
schema 3 upgrade of an existing database, and any text as a safe query.

Tests using ``chat`` run on SQLite and on PostgreSQL (the ``memory_db`` fixture, conftest.py): both backends share
the ranking code, and each builds its own index and neighbour query."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.storage.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.testing import BackgroundSession, call_json
from mycelian_agent.memory_server.retrieval import search


@pytest.fixture
async def chat(memory_db: str):
    bg = await BackgroundSession.start(create_server(memory_db))
    s = bg.session
    v = (await call_json(s, "create_vault", title="home"))["vaultId"]
    m = (await call_json(s, "create_memory_in_vault", vault_id=v, title="chat", memory_type="NOTES"))["memoryId"]
    yield bg, v, m
    await bg.aclose()


async def _add(bg: BackgroundSession, v: str, m: str, text: str, **extra) -> str:
    entry = await call_json(bg.session, "add_entry", vault_id=v, memory_id=m, raw_entry=text, summary=text, **extra)
    return entry["entryId"]


async def _search(bg: BackgroundSession, m: str, query: str, **options) -> list[str]:
    found = await call_json(bg.session, "search_memories", memory_id=m, query=query, **options)
    return [e["entryId"] for e in found["entries"]]


async def test_stemmed_words_match(chat) -> None:
    bg, v, m = chat
    runs = await _add(bg, v, m, "She was running two marathons.")
    await _add(bg, v, m, "The weather was nice.")
    assert (await _search(bg, m, "Does she run a marathon?"))[0] == runs


async def test_a_name_is_found_through_the_speaker_tag(chat) -> None:
    bg, v, m = chat
    # A speaker's own turns rarely contain their name; the other speaker's turns do.
    await _add(bg, v, m, "Nice! Caroline, that sounds lovely.", tags={"speaker": "Melanie"})
    await _add(bg, v, m, "I painted the kitchen.", tags={"speaker": "Melanie"})
    for i in range(6):  # enough entries that BM25's IDF tells rare words from common ones (and no neighbours)
        await _add(bg, v, m, f"Filler line {i}.", tags={"speaker": "Melanie"})
    hers = await _add(bg, v, m, "I painted a sunset last week.", tags={"speaker": "Caroline", "dia_id": "D1:3"})
    assert (await _search(bg, m, "What did Caroline paint?"))[0] == hers
    # Tag values with digits (ids, counters) are not words of the entry.
    assert await _search(bg, m, "d1") == []


async def test_the_date_is_searchable_in_words(chat) -> None:
    bg, v, m = chat
    may = await _add(bg, v, m, "We went to the museum.", conversation_time="2023-05-08T13:56:00Z")
    await _add(bg, v, m, "We went to the park.", conversation_time="2023-07-20T10:00:00Z")
    assert await _search(bg, m, "May", top_ke=1) == [may]
    assert (await _search(bg, m, "Where did we go on 8 May, 2023?"))[0] == may


async def test_the_answer_following_a_matching_question_is_found(chat) -> None:
    bg, v, m = chat
    times = {}
    for minute, text in (("00", "How often do you work out with your family?"), ("01", "Three times a week!")):
        times[text] = await _add(bg, v, m, text, conversation_time=f"2024-01-10T12:{minute}:00Z")
    question, answer = times.values()
    chatter = await _add(bg, v, m, "Unrelated chatter about the weather.", conversation_time="2024-01-10T12:02:00Z")
    # The turn two steps on takes a small share too (ranking.CONTEXT_FAR_AFTER): a topic runs over several turns.
    assert await _search(bg, m, "How often does John work out with his family?") == [question, answer, chatter]
    # The neighbour obeys the time bounds like every result.
    assert await _search(bg, m, "work out family", before="2024-01-10T12:00:30Z") == [question]
    # An entry's own words still come first: the neighbour only borrows a share of its score, the turn two steps
    # away (ranking.CONTEXT_FAR_BEFORE) a smaller one.
    weather = await _search(bg, m, "weather")
    assert weather == [chatter, answer, question]
    # An entry more than an hour away is another conversation: no share.
    later = await _add(bg, v, m, "Sure.", conversation_time="2024-01-10T15:00:00Z")
    assert later not in await _search(bg, m, "weather chatter", top_ke=25)


async def test_the_turn_after_a_question_takes_a_larger_share_than_the_turn_after_a_statement(chat) -> None:
    bg, v, m = chat

    async def conversation(memory: str, turns: tuple[str, ...]) -> list[str]:
        # Two exchanges three hours apart: no shares between them.
        return [await _add(bg, v, memory, text, conversation_time=f"2024-01-10T{12 + 3 * (i // 2)}:0{i % 2}:00Z")
                for i, text in enumerate(turns)]

    # The two matching turns have the same words; their followers share none with the query. With one share for
    # every follower the two would tie (and the newer, the statement's follower, would come first).
    asked, answer, stated, follower = await conversation(
        m, ("Did you paint the lake?", "Yes, last summer.", "I paint the lake.", "Then we had dinner."))
    found = await _search(bg, m, "paint lake", top_ke=4)
    assert set(found[:2]) == {asked, stated} and found[2:] == [answer, follower]
    # A full-width question mark asks too.
    other = (await call_json(bg.session, "create_memory_in_vault", vault_id=v, title="cjk", memory_type="NOTES"))[
        "memoryId"
    ]
    asked, answer, stated, follower = await conversation(
        other, ("Did you paint the lake\uff1f", "Yes, last summer.", "I paint the lake.", "Then we had dinner."))
    assert (await _search(bg, other, "paint lake", top_ke=4))[2:] == [answer, follower]


async def test_neighbours_never_cross_memories(chat) -> None:
    bg, v, m = chat
    other = (await call_json(bg.session, "create_memory_in_vault", vault_id=v, title="other", memory_type="NOTES"))[
        "memoryId"
    ]
    mine = []
    for i in range(4):  # interleaved: every neighbour by sequence number belongs to the other memory
        mine.append(await _add(bg, v, m, f"kayak trip number {i}"))
        await _add(bg, v, other, f"secret reply {i}")
    found = await _search(bg, m, "kayak", top_ke=25)
    assert set(found) == set(mine)


@pytest.mark.parametrize(
    ("query", "finds"),
    [
        ('NEAR("kayak" trip) AND OR NOT *x* ^y col:z', True),
        ("'); DROP TABLE entries;--", False),
        ('mkey : "m0" OR labels : kayak', True),
        ("kayak\x00trip", True),
        ("{raw_entry summary} : kayak*", True),
        ('"*(){}^:-_', False),
    ],
)
async def test_any_text_is_a_safe_query(chat, query: str, finds: bool) -> None:
    bg, v, m = chat
    kayak = await _add(bg, v, m, "A kayak trip.", tags={"speaker": "Jon"})
    found = await call_json(bg.session, "search_memories", memory_id=m, query=query)
    assert [e["entryId"] for e in found["entries"]] == ([kayak] if finds else [])
    if finds:
        assert set(found["entries"][0]) == {"entryId", "summary", "score", "creationTime", "tags"}
    assert await _search(bg, m, "kayak") == [kayak]  # the table is intact


async def test_deleted_entries_leave_the_index(chat) -> None:
    bg, v, m = chat
    gone = await _add(bg, v, m, "walrus", tags={"speaker": "Ann"}, conversation_time="2023-05-08T13:56:00Z")
    kept = await _add(bg, v, m, "walrus", tags={"speaker": "Ann"})
    await call_json(bg.session, "delete_entry", vault_id=v, memory_id=m, entry_id=gone)
    assert await _search(bg, m, "walrus Ann May", top_ke=25) == [kept]

    def check(store: Store) -> dict[str, int]:
        if isinstance(store, Store):  # SQLite's own check of the FTS index against its content
            store.connection.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        return store.counts()

    counts = await bg.runner.call(check)
    assert counts["entries"] == counts["entries_fts"] == 1


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


@pytest.mark.parametrize("count", [30, 60])  # 60: enough entries for query feedback (feedback.py)
async def test_offset_pages_through_one_ranking(chat, count: int) -> None:
    bg, v, m = chat
    topics = ("basil", "slugs", "compost", "sunlight", "seedlings", "frost", "mulch")
    for i in range(count):
        await _add(bg, v, m, f"Garden note {i}: the tomatoes need water, {topics[i % 7]}" + " again" * (i % 5),
                   conversation_time=f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}T10:00:00Z")
    deep = await _search(bg, m, "tomatoes water", top_ke=25)
    pages = []
    for offset in range(0, count + 10, 10):
        pages += await _search(bg, m, "tomatoes water", top_ke=10, offset=offset)
    assert pages[:25] == deep and len(pages) == count == len(set(pages))
    assert await _search(bg, m, "tomatoes water", top_ke=10, offset=count) == []
    with pytest.raises(Exception, match="offset"):
        await _search(bg, m, "tomatoes water", top_ke=10, offset=-1)


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
