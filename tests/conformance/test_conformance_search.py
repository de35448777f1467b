"""Conformance: search on small hand-made memories whose first hits are known — words, stems, names, dates, the
neighbouring turns, time bounds, paging, queries of any text, no hit — the same on every backend
(``conftest.BACKENDS``). The ranking code is shared; each backend finds the candidates, the neighbours and the
statistics with its own index, and these results show whether it does so faithfully."""

from __future__ import annotations

from typing import Any

import pytest
from conformance import ids, search

from mycelian_agent.errors import InputError
from mycelian_agent.memory_server import MemoryStore


class Chat:
    """A vault with one memory, and a shorthand to add an entry whose summary is its text."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.vault = str(store.create_vault("home")["vaultId"])
        self.memory = self.new_memory("chat")

    def new_memory(self, title: str) -> str:
        return str(self.store.create_memory(self.vault, title, "NOTES")["memoryId"])

    def add(self, text: str, memory: str | None = None, **extra: Any) -> str:
        return str(self.store.add_entry(self.vault, memory or self.memory, text, text, **extra)["entryId"])

    def ids(self, query: str, memory: str | None = None, **options: Any) -> list[str]:
        return ids(self.store, memory or self.memory, query, **options)


@pytest.fixture
def chat(store: MemoryStore) -> Chat:
    return Chat(store)


def test_words_match_by_their_stems(chat: Chat) -> None:
    runs = chat.add("She was running two marathons.")
    chat.add("The weather was nice.")
    assert chat.ids("Does she run a marathon?")[0] == runs


def test_a_name_is_found_through_the_speaker_tag(chat: Chat) -> None:
    # A speaker's own turns rarely contain their name; the other speaker's turns do.
    chat.add("Nice! Caroline, that sounds lovely.", tags={"speaker": "Melanie"})
    chat.add("I painted the kitchen.", tags={"speaker": "Melanie"})
    for i in range(6):  # enough entries that BM25's IDF tells rare words from common ones (and no neighbours)
        chat.add(f"Filler line {i}.", tags={"speaker": "Melanie"})
    hers = chat.add("I painted a sunset last week.", tags={"speaker": "Caroline", "dia_id": "D1:3"})
    assert chat.ids("What did Caroline paint?")[0] == hers
    assert chat.ids("d1") == []  # tag values with digits (ids, counters) are not words of the entry


def test_the_date_is_searchable_in_words(chat: Chat) -> None:
    may = chat.add("We went to the museum.", conversation_time="2023-05-08T13:56:00Z")
    chat.add("We went to the park.", conversation_time="2023-07-20T10:00:00Z")
    assert chat.ids("May", top_ke=1) == [may]
    assert chat.ids("Where did we go on 8 May, 2023?")[0] == may


def test_the_answer_following_a_matching_question_is_found(chat: Chat) -> None:
    question = chat.add("How often do you work out with your family?", conversation_time="2024-01-10T12:00:00Z")
    answer = chat.add("Three times a week!", conversation_time="2024-01-10T12:01:00Z")
    chatter = chat.add("Unrelated chatter about the weather.", conversation_time="2024-01-10T12:02:00Z")
    # The turn two steps on takes a small share too (ranking.CONTEXT_FAR_AFTER): a topic runs over several turns.
    assert chat.ids("How often does John work out with his family?") == [question, answer, chatter]
    assert chat.ids("work out family", before="2024-01-10T12:00:30Z") == [question]  # neighbours obey the bounds
    # An entry's own words still come first: the neighbour only borrows a share of its score, the turn two steps
    # away (ranking.CONTEXT_FAR_BEFORE) a smaller one.
    assert chat.ids("weather") == [chatter, answer, question]
    later = chat.add("Sure.", conversation_time="2024-01-10T15:00:00Z")  # over an hour away: another conversation
    assert later not in chat.ids("weather chatter", top_ke=25)


def test_the_turn_after_a_question_takes_a_larger_share_than_the_turn_after_a_statement(chat: Chat) -> None:
    def conversation(memory: str, turns: tuple[str, ...]) -> list[str]:
        # Two exchanges three hours apart: no shares between them.
        return [
            chat.add(text, memory, conversation_time=f"2024-01-10T{12 + 3 * (i // 2)}:0{i % 2}:00Z")
            for i, text in enumerate(turns)
        ]

    # The two matching turns have the same words; their followers share none with the query. With one share for
    # every follower the two would tie (and the newer, the statement's follower, would come first).
    asked, answer, stated, follower = conversation(
        chat.memory, ("Did you paint the lake?", "Yes, last summer.", "I paint the lake.", "Then we had dinner.")
    )
    found = chat.ids("paint lake", top_ke=4)
    assert set(found[:2]) == {asked, stated} and found[2:] == [answer, follower]
    other = chat.new_memory("cjk")  # a full-width question mark asks too
    asked, answer, stated, follower = conversation(
        other, ("Did you paint the lake\uff1f", "Yes, last summer.", "I paint the lake.", "Then we had dinner.")
    )
    assert chat.ids("paint lake", other, top_ke=4)[2:] == [answer, follower]


def test_results_and_neighbours_never_cross_memories(chat: Chat) -> None:
    other = chat.new_memory("other")
    mine = []
    for i in range(4):  # interleaved: every neighbour by sequence number belongs to the other memory
        mine.append(chat.add(f"kayak trip number {i}"))
        chat.add(f"secret reply {i}", other)
    assert set(chat.ids("kayak", top_ke=25)) == set(mine)
    assert chat.ids("secret reply", top_ke=25) == []


def test_ranking_scores_raw_entries_and_options(chat: Chat) -> None:
    grows = chat.store.add_entry(
        chat.vault,
        chat.memory,
        "We talked about gardening and tomatoes.",
        "The user grows tomatoes.",
        {"speaker": "Ana"},
        "2024-03-05T10:00:00Z",
    )["entryId"]
    chat.store.add_entry(chat.vault, chat.memory, "tomatoes tomatoes", "food")
    chat.store.add_entry(chat.vault, chat.memory, "The weather was nice.", "weather")
    found = search(chat.store, chat.memory, "Which tomatoes does the user grow?", top_ke=2, include_raw_entries=True)
    scores = [e["score"] for e in found["entries"]]
    assert found["count"] == len(scores) == 2 and scores == sorted(scores, reverse=True) and scores[-1] > 0
    first = found["entries"][0]
    assert first == {
        "entryId": grows,
        "summary": "The user grows tomatoes.",
        "rawEntry": "We talked about gardening and tomatoes.",
        "score": first["score"],
        "match": "words",
        "creationTime": first["creationTime"],
        "conversationTime": "2024-03-05T10:00:00.000000Z",
        "tags": {"speaker": "Ana"},
    }
    assert "rawEntry" not in search(chat.store, chat.memory, "tomatoes")["entries"][0]


def test_query_feedback_finds_what_the_best_hits_talk_about(chat: Chat) -> None:
    """An entry sharing no word with the query is found through the words of the query's best hit (feedback.py),
    once the memory is large enough for feedback."""
    cat = chat.add("I adopted a cat")

    def day(n: int) -> str:
        return f"2024-{1 + n // 28:02d}-{1 + n % 28:02d}T12:00:00Z"

    puppy = chat.add("We adopted a puppy last week: Biscuit, a golden retriever.", conversation_time=day(0))
    shoes = chat.add("Biscuit the golden retriever chewed my shoes again.", conversation_time=day(40))
    assert chat.ids("Tell me about the puppy.") == [puppy]  # a small memory: no feedback
    topics = [
        f"We talked about {a} and {b}."
        for a in ("work", "travel", "music", "cooking", "rain", "books")
        for b in ("plans", "friends", "money", "news", "sleep", "sport", "art", "school", "food", "games")
    ]
    chat.store.add_entries(
        chat.vault,
        chat.memory,
        [
            {"raw_entry": t, "summary": t, "conversation_time": f"2024-06-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"}
            for i, t in enumerate(topics)
        ],
    )
    # The cat shares "adopted" with the best hit: a weaker match, last.
    assert chat.ids("Tell me about the puppy.") == [puppy, shoes, cat]
    assert chat.ids("golden retriever shoes", top_ke=2) == [shoes, puppy]  # the query's own words first


def test_time_bounds_are_exclusive_on_conversation_time_then_creation_time(chat: Chat) -> None:
    made = {
        month: chat.add(f"ski trip {month}", conversation_time=f"2024-{month}-10T12:00:00Z")
        for month in ("01", "02", "03")
    }
    undated = chat.add("ski trip")

    def found(**bounds: str) -> set[str]:
        return set(chat.ids("ski", top_ke=25, **bounds))

    assert found() == {*made.values(), undated}
    assert found(after="2024-01-15T00:00:00Z", before="2024-02-15T00:00:00+00:00") == {made["02"]}
    assert found(before="2024-02-10T12:00:00Z") == {made["01"]}  # exclusive
    assert found(after="2025-01-01T00:00:00Z") == {undated}  # no conversation time: the creation time counts
    assert found(after="2024-03-10T12:00:00Z", before="2025-01-01T00:00:00Z") == set()


# (query, whether it finds "A kayak trip." said by Jon): operators, quotes and SQL are never syntax; the words left
# in the query are searched like any others.
QUERIES = [
    ('NEAR("kayak" trip) AND OR NOT *x* ^y col:z', True),
    ("'); DROP TABLE entries;--", False),
    ('mkey : "m0" OR labels : kayak', True),
    ("kayak\x00trip", True),
    ("{raw_entry summary} : kayak*", True),
    ('"*(){}^:-_', False),
    ('"', False),
    ("*", False),
    ("NEAR(", False),
    ("NEAR(kayak trip, 2)", True),
    ("AND OR NOT", False),
    ("kayak AND", True),
    ("') --", False),
    ("DROP TABLE entries", False),
    ("col:kayak", True),
    ("^kayak", True),
    ("kayak*", True),
    ("(((", False),
    ("\x00", False),
    ("\U0001f600 \U0001f408", False),
    ("-kayak", True),
    ("rowid = 1", False),
    ("mkey : *", False),
    ("jon", True),
    ("Jon's trip?", True),
    ("a:b:c & | ! <-> kayak", True),
    ("@@ to_tsquery('x')", False),
]


def test_any_text_is_a_safe_query_and_no_hit_is_an_empty_result(chat: Chat) -> None:
    kayak = chat.add("A kayak trip.", tags={"speaker": "Jon"})
    before = chat.store.snapshot()
    for query, finds in QUERIES:
        found = search(chat.store, chat.memory, query)
        assert [e["entryId"] for e in found["entries"]] == ([kayak] if finds else []), query
        assert found["count"] == len(found["entries"])
    assert chat.store.snapshot() == before  # and every table intact
    none = search(chat.store, chat.memory, "zebra")
    assert (none["entries"], none["count"], none["contexts"]) == ([], 0, [])
    sql = 'Robert\'); DROP TABLE entries;-- said "hi" AND NOT NEAR(x)'
    bobby = chat.store.add_entry(chat.vault, chat.memory, sql, "little bobby")["entryId"]
    assert chat.store.get_entry(chat.vault, chat.memory, bobby)["rawEntry"] == sql
    found = search(chat.store, chat.memory, "DROP TABLE entries", include_raw_entries=True)["entries"]
    assert (found[0]["entryId"], found[0]["rawEntry"]) == (bobby, sql)


@pytest.mark.parametrize("count", [30, 60])  # 60: enough entries for query feedback (feedback.py)
def test_offset_pages_through_one_ranking(chat: Chat, count: int) -> None:
    topics = ("basil", "slugs", "compost", "sunlight", "seedlings", "frost", "mulch")
    chat.store.add_entries(
        chat.vault,
        chat.memory,
        [
            {
                "raw_entry": f"Garden note {i}: the tomatoes need water, {topics[i % 7]}" + " again" * (i % 5),
                "summary": f"Garden note {i}: the tomatoes need water, {topics[i % 7]}" + " again" * (i % 5),
                "conversation_time": f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}T10:00:00Z",
            }
            for i in range(count)
        ],
    )
    deep = chat.ids("tomatoes water", top_ke=25)
    pages: list[str] = []
    for offset in range(0, count + 10, 10):
        pages += chat.ids("tomatoes water", top_ke=10, offset=offset)
    assert pages[:25] == deep and len(pages) == count == len(set(pages))
    assert chat.ids("tomatoes water", top_ke=10, offset=count) == []
    with pytest.raises(InputError, match="offset"):
        chat.ids("tomatoes water", top_ke=10, offset=-1)


def test_the_neighbourhood_is_the_links_of_the_entries_and_of_their_neighbours(chat: Chat) -> None:
    """``neighbourhood`` answers what two ``neighbour_links`` reads would: the links of the given entries, and of
    each of their neighbours that is not given, across another memory's interleaved entries, a gap of more than
    CONTEXT_GAP_DAYS, a deleted entry and a question; seqs of another memory or of no entry give nothing."""
    store = chat.store
    other = chat.new_memory("other")
    day = "2024-03-{:02d}T10:00:00Z"
    texts = [
        "Where is the kayak?",
        "In the shed.",
        "Thanks!",
        "The canoe leaks.",
        "Fix it?",
        "Later.",
        "Paddles are new.",
        "Done.",
    ]
    written = []
    for i, text in enumerate(texts):
        written.append(chat.add(text, conversation_time=day.format(1 if i < 4 else 20)))  # a gap after the 4th
        chat.add(f"noise {i}", other, conversation_time=day.format(1))
    store.delete_entry(chat.vault, chat.memory, written[6])
    seqs = {row["entry_id"]: seq for seq, row in store.entry_rows(chat.memory, range(1, 100)).items()}
    foreign = sorted(store.entry_rows(other, range(1, 100)))
    assert len(seqs) == 7 and len(foreign) == 8
    seqs[written[6]] = -1  # (deleted)
    for given in (
        [seqs[written[0]]],
        [seqs[written[2]], seqs[written[7]]],
        sorted(seqs.values())[1:],
        [seqs[written[4]], foreign[0], 10_000],
    ):
        links, around = store.neighbourhood(chat.memory, given)
        expected = sorted(store.neighbour_links(chat.memory, given))
        assert sorted(links) == expected
        near = sorted({n for _, p, f, _ in expected for n in (p, f) if n is not None} - set(given))
        assert {seq: around[seq] for seq in near} == {
            link[0]: link for link in store.neighbour_links(chat.memory, near)
        }
    assert store.neighbourhood(chat.memory, []) == ([], {})
