"""Ranking in small memories (5-50 turns), on both backends (the ``memory_db`` fixture): every real memory starts
small, where BM25's statistics are a handful of entries (bm25.py). Turns are stored as the agent writes them
(summary "On <date> <speaker> said: ...", the agent's tags); each case names the turn that must come first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.base import MemoryStore

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(memory_db: str):
    opened = open_store(memory_db)
    yield opened
    opened.close()


def _memory(
    store: MemoryStore,
    turns: list[tuple[str, str]],
    *,
    day: str = "2024-03-02",
    thread: str = "chat",
    start: int = 0,
    memory: tuple[str, str] | None = None,
) -> tuple[tuple[str, str], list[str]]:
    """Store ``(speaker, text)`` turns (speaker "assistant" for the assistant) a minute apart; their entry ids."""
    if memory is None:
        vault = store.create_vault(f"v-{thread}-{start}")["vaultId"]
        memory = (vault, store.create_memory(vault, thread, "CHAT")["memoryId"])
    ids = []
    for i, (speaker, text) in enumerate(turns, start=start):
        who = "the assistant" if speaker == "assistant" else speaker
        tags = {
            "role": "assistant" if speaker == "assistant" else "user",
            "thread": thread,
            "turn": str(i),
            "msg": str(i + 1),
        }
        if speaker != "assistant":
            tags["speaker"] = speaker
        entry = store.add_entry(
            memory[0],
            memory[1],
            raw_entry=text,
            summary=f"On {day} {who} said: {text}",
            tags=tags,
            conversation_time=f"{day}T10:{i:02d}:00Z",
        )
        ids.append(entry["entryId"])
    return memory, ids


def _first(store: MemoryStore, memory: tuple[str, str], query: str, k: int = 5) -> list[dict]:
    return search(store, memory[1], query, top_ke=k, include_raw_entries=True)["entries"]


def test_quickstart_trip_dates_come_first(store: MemoryStore) -> None:
    conversation = json.loads((REPO / "examples" / "quickstart_conversation.json").read_text())
    memory = None
    start = 0
    for session in conversation["sessions"]:
        turns = [(m.get("name") or m["role"], m["content"]) for m in session["messages"]]
        memory, _ = _memory(
            store,
            turns,
            day=session["conversation_time"][:10],
            thread=conversation["conversation_id"],
            start=start,
            memory=memory,
        )
        start += len(turns)
    found = _first(store, memory, "When is the Lisbon trip?")
    assert "June 15 to June 22" in found[0]["rawEntry"], [e["rawEntry"] for e in found]
    # Scores a person can read: the best hit holds every informative word of the question ("Lisbon", "trip"), so
    # its relevance is 1.0; every score is in [0, 1] and none rises down the list.
    assert found[0]["score"] == 1.0 and all(0.0 <= e["score"] <= 1.0 for e in found)
    assert [e["score"] for e in found] == sorted((e["score"] for e in found), reverse=True)


def test_a_statement_ranks_above_the_assistant_echoing_it(store: MemoryStore) -> None:
    memory, ids = _memory(
        store,
        [
            ("Ana", "Hi, can you help me plan meals for next week?"),
            ("assistant", "Of course! Any foods to avoid?"),
            ("Ana", "I'm allergic to peanuts."),
            ("assistant", "Noted: you're allergic to peanuts, so no peanut sauces or satay."),
            ("Ana", "Great, and I love spicy food."),
            ("assistant", "Spicy it is. I'll add some curries."),
        ],
    )
    found = _first(store, memory, "What am I allergic to?")
    assert found[0]["entryId"] == ids[2], [e["rawEntry"] for e in found]
    found = _first(store, memory, "peanuts allergy")
    assert found[0]["entryId"] == ids[2], [e["rawEntry"] for e in found]


@pytest.mark.parametrize(
    ("turns", "query", "current"),
    [
        (
            [
                ("Ben", "My address is 12 Elm Street, Springfield."),
                ("assistant", "Thanks, I saved your address."),
                ("Ben", "I also like jazz concerts."),
                ("assistant", "Nice, I'll look out for jazz nights."),
                ("Ben", "Quick update: I moved last week, my new address is 48 Oak Avenue, Portland."),
                ("assistant", "Got it."),
            ],
            "What is my address?",
            4,
        ),
        (
            [
                ("Cleo", "Our team dinner is on Friday at Luigi's."),
                ("assistant", "Sounds fun."),
                ("Cleo", "The team dinner on Friday is cancelled, Luigi's closed for renovations."),
                ("assistant", "Sorry to hear that."),
            ],
            "When is the team dinner?",
            2,
        ),
        (
            [
                ("Dev", "The dentist appointment is on May 3 at 9am."),
                ("assistant", "I'll remind you."),
                ("Dev", "Lots of work this week."),
                ("assistant", "Hang in there."),
                ("Dev", "The dentist moved my appointment to May 10 at 2pm."),
                ("assistant", "Updated."),
            ],
            "When is the dentist appointment?",
            4,
        ),
    ],
)
def test_a_later_turn_that_changes_a_fact_ranks_above_the_stale_one(store: MemoryStore, turns, query, current) -> None:
    memory, ids = _memory(store, turns)
    found = _first(store, memory, query)
    assert found[0]["entryId"] == ids[current], [e["rawEntry"] for e in found]


@pytest.mark.parametrize(
    ("turns", "query", "first"),
    [
        # A later mention that changes nothing: the first, fuller statement stays first.
        (
            [
                ("Eve", "I adopted a dog named Rex in March."),
                ("assistant", "Congratulations!"),
                ("Eve", "Rex the dog loves the beach."),
                ("assistant", "Lovely."),
            ],
            "When did I adopt the dog?",
            0,
        ),
        # A change said by someone else is not this person's update of their own fact.
        (
            [
                ("Finn", "My gym class is on Tuesdays."),
                ("Gus", "My gym class moved to Thursdays."),
                ("assistant", "Noted both."),
            ],
            "When is the gym class?",
            0,
        ),
    ],
)
def test_only_a_stated_change_by_the_same_person_moves_above_the_first_statement(
    store: MemoryStore, turns, query, first
) -> None:
    memory, ids = _memory(store, turns)
    found = _first(store, memory, query)
    assert found[0]["entryId"] == ids[first], [e["rawEntry"] for e in found]


def test_an_assistants_reaction_ranks_just_below_the_statement_it_follows(store: MemoryStore) -> None:
    memory, ids = _memory(
        store,
        [
            ("Priya", "Outside work I've started taking cello lessons on Thursday evenings."),
            ("assistant", "Lovely instrument! Is it at a music school?"),
            ("Priya", "No, a retired teacher gives lessons from her flat in Leith."),
            ("assistant", "Nice change."),
        ],
    )
    # The reaction holds the question's words, the statement none: the statement first, the reaction next.
    found = _first(store, memory, "What musical instrument am I learning?")
    assert [e["entryId"] for e in found[:2]] == [ids[0], ids[1]], [e["rawEntry"] for e in found]
    # The exchange was found through the reaction's words: the statement reads as relevant as the reaction.
    assert found[0]["score"] == found[1]["score"] > 0.5, found
    # A person's reply (a named speaker) keeps its own place: there the reply is often the answer.
    memory, ids = _memory(
        store,
        [
            ("Ana", "Outside work I've started taking cello lessons on Thursday evenings."),
            ("Ben", "Lovely instrument! Is it at a music school?"),
        ],
        thread="people",
    )
    assert _first(store, memory, "What musical instrument am I learning?")[0]["entryId"] == ids[1]


def test_a_statement_brought_in_by_its_reactions_words_is_a_word_match(store: MemoryStore) -> None:
    memory, ids = _memory(
        store,
        [
            ("Priya", "Outside work I've started taking cello lessons on Thursday evenings."),
            ("assistant", "Lovely instrument! Is it at a music school?"),
        ],
    )
    found = _first(store, memory, "musical instrument")
    assert [(e["entryId"], e["match"]) for e in found[:2]] == [(ids[0], "words"), (ids[1], "words")], found
