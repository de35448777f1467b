"""Coverage for questions about a person (``memory_server/retrieval/coverage.py``): the turns of the speaker a
question names
rank above the other person's turns that only mention them, on both backends (the ``memory_db`` fixture)."""

from __future__ import annotations

import pytest

from mycelian_agent.memory_server.retrieval import rank_entries, search
from mycelian_agent.memory_server.retrieval.coverage import boost_named_speakers
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.words import query_terms


@pytest.fixture
def store(memory_db: str):
    opened = open_store(memory_db)
    yield opened
    opened.close()


def _store_sessions(
    store: MemoryStore, sessions: list[tuple[str, list[tuple[str, str]]]]
) -> tuple[str, dict[str, str]]:
    """Store ``(day, [(speaker, text)])`` sessions as the agent writes turns; the memory id and entry id by text."""
    vault = store.create_vault("v-coverage")["vaultId"]
    memory = store.create_memory(vault, "chat", "CHAT")["memoryId"]
    ids = {}
    turn = 0
    for day, turns in sessions:
        for i, (speaker, text) in enumerate(turns):
            tags = {"role": "user", "thread": "chat", "turn": str(turn), "speaker": speaker}
            entry = store.add_entry(
                vault,
                memory,
                raw_entry=text,
                summary=f"On {day} {speaker} said: {text}",
                tags=tags,
                conversation_time=f"{day}T10:{i:02d}:00Z",
            )
            ids[text] = entry["entryId"]
            turn += 1
    return memory, ids


MOUNTAINS = "We camped in the mountains last week, it was lovely."
BEACH = "This spring we camped at the beach with the kids."
CONVERSATION = [
    (
        "2024-03-02",
        [
            ("Ben", "Ana, I read a piece about camping gear. Camping is getting popular, Ana."),
            ("Ana", MOUNTAINS),
            ("Ben", "Sounds peaceful. I stayed home and fixed my bike."),
            ("Ana", "The kids loved the hike too."),
        ],
    ),
    (
        "2024-04-10",
        [
            ("Ben", "Ana, my cousin says camping with kids is hard. Camping stories, Ana!"),
            ("Ana", BEACH),
            ("Ben", "I went to a concert downtown."),
            ("Ana", "Which band played?"),
        ],
    ),
]


def _top(store: MemoryStore, memory: str, query: str, k: int, names: bool = True) -> list[str]:
    rows = rank_entries(store, memory, query, query_terms(query), k, names=names)
    return [found.row["entry_id"] for found in rows]


def test_the_named_persons_turns_from_two_sessions_both_come_first(store: MemoryStore) -> None:
    memory, ids = _store_sessions(store, CONVERSATION)
    question = "Where has Ana camped?"
    evidence = {ids[MOUNTAINS], ids[BEACH]}
    # Ben's turns name Ana and say "camping" twice: plain BM25 puts them first, the evidence (Ana's own turns, one
    # in each session) below.
    assert set(_top(store, memory, question, 2, names=False)) != evidence
    assert set(_top(store, memory, question, 2)) == evidence
    # The same through the search tool (scores still ordered, a factor on BM25's scale).
    found = search(store, memory, question, top_ke=2)["entries"]
    assert {e["entryId"] for e in found} == evidence
    assert found[0]["score"] >= found[1]["score"] > 0


def test_a_question_naming_no_speaker_keeps_its_order(store: MemoryStore) -> None:
    memory, _ = _store_sessions(store, CONVERSATION)
    question = "Where did someone go camping?"
    assert _top(store, memory, question, 5) == _top(store, memory, question, 5, names=False)


def test_boost_named_speakers() -> None:
    hits = [(1, 3.0), (2, 2.5), (3, 1.0)]
    speakers = {1: frozenset({"ben"}), 2: frozenset({"ana"}), 3: frozenset({"ana"})}
    assert boost_named_speakers(hits, speakers, ["ana", "camp"], 0.5) == [(2, 3.75), (1, 3.0), (3, 1.5)]
    # Nobody named, or every ranked entry's speaker named: the order and the scores stay.
    assert boost_named_speakers(hits, speakers, ["camp"], 0.5) == hits
    assert boost_named_speakers(hits, speakers, ["ana", "ben"], 0.5) == hits
    assert boost_named_speakers(hits, {}, ["ana"], 0.5) == hits
    assert boost_named_speakers(hits, speakers, ["ana"], 0.0) == hits
