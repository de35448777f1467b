"""Query feedback (feedback.py): the words chosen from the best hits and how two rankings combine. The per-memory
document frequencies: test_term_stats.py. Through the server, on both backends: test_memory_server_tools.py."""

from __future__ import annotations

import pytest

from mycelian_agent.memory_server.retrieval.feedback import (
    combine,
    expansion_terms,
    feedback_words,
)


def test_feedback_words_are_topic_words() -> None:
    assert feedback_words("I adopted Biscuit, a GOLDEN retriever, on 12 May at 10am (id a1b2).") == [
        "adopted",
        "biscuit",
        "golden",
        "retriever",
        "may",
    ]


def test_expansion_weighs_share_score_and_rarity() -> None:
    hits = [(["golden", "retriever", "biscuit", "dog"], 10.0), (["dog", "park", "biscuit"], 5.0)]
    frequencies = {"golden": 2, "retriever": 2, "biscuit": 2, "dog": 100, "park": 50}
    terms = expansion_terms(hits, 100, frequencies, exclude={"dog"})
    # "dog" is the query's own word (and in every entry: IDF 0 anyway); "biscuit" is in both hits.
    assert terms == ["biscuit", "golden", "retriever", "park"]
    assert expansion_terms(hits, 100, frequencies, exclude=set(), limit=2) == ["biscuit", "golden"]
    assert expansion_terms([], 100, frequencies, exclude=set()) == []
    assert expansion_terms(hits, 0, frequencies, exclude=set()) == []


def test_expansion_passes_over_words_that_match_too_many_entries() -> None:
    hits = [(["common", "rare", "middling"], 1.0)]
    frequencies = {"common": 300, "rare": 3, "middling": 200}
    entries = 10_000
    assert expansion_terms(hits, entries, frequencies, exclude=set(), postings=250) == ["rare", "middling"]
    assert expansion_terms(hits, entries, frequencies, exclude=set(), postings=100) == ["rare"]
    assert expansion_terms(hits, entries, frequencies, exclude=set(), postings=1000) == ["rare", "middling", "common"]


def test_combine_scales_the_second_ranking_to_the_first() -> None:
    first = [(1, 8.0), (2, 4.0), (3, 3.9)]
    second = [(3, 100.0), (4, 50.0)]
    combined = dict(combine(first, second, weight=0.5))
    assert combined == {1: 8.0, 2: 4.0, 3: pytest.approx(3.9 + 4.0), 4: pytest.approx(2.0)}
    assert [seq for seq, _ in combine(first, second, weight=0.5)] == [1, 3, 2, 4]
    assert combine(first, [], 0.5) == first
    assert [seq for seq, _ in combine([(5, 1.0), (6, 1.0)], [], 0.3)] == [5, 6]
    # Ties go to the newer entry, as in every ranking of the store.
    assert [seq for seq, _ in combine([(5, 1.0)], [(6, 1.0)], 1.0)] == [6, 5]
