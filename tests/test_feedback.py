"""Query feedback (feedback.py): the words chosen from the best hits, how two rankings combine, and the per-memory
document frequencies kept in step with the store. Through the server, on both backends: test_memory_server_tools.py."""

from __future__ import annotations

import pytest

from mycelian_agent.memory_server.feedback import (
    EntryFields,
    TermStatistics,
    combine,
    expansion_terms,
    feedback_words,
)


def test_feedback_words_are_topic_words() -> None:
    assert feedback_words("I adopted Biscuit, a GOLDEN retriever, on 12 May at 10am (id a1b2).") == [
        "adopted", "biscuit", "golden", "retriever", "may"]


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


class _Memory:
    """A memory's entries as the store would report them; records the reads."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = rows
        self.reads: list[int] = []

    def last_seq(self) -> int:
        return max(self.rows, default=0)

    def load(self, after_seq: int) -> list[EntryFields]:
        # (seq, raw_entry, summary, tags, time): the text as the raw entry, no summary, no tags.
        self.reads.append(after_seq)
        return [(seq, text, "", "{}", None) for seq, text in sorted(self.rows.items()) if seq > after_seq]


def test_statistics_follow_appends_and_deletes() -> None:
    memory, stats = _Memory({1: "golden retriever", 2: "golden hour photos"}), TermStatistics()

    def frequencies(*words: str) -> tuple[int, dict[str, int]]:
        return stats.frequencies("m", words, memory.last_seq(), memory.load)

    assert frequencies("golden", "retriever", "unseen") == (2, {"golden": 2, "retriever": 1, "unseen": 0})
    assert frequencies("golden") == (2, {"golden": 2})
    assert memory.reads == [-1]  # unchanged: no read
    memory.rows[5] = "golden gate bridge, golden light"
    assert frequencies("golden", "bridge") == (3, {"golden": 3, "bridge": 1})
    assert memory.reads == [-1, 2]  # only the new entry was read
    del memory.rows[5]  # the newest entry deleted (by another process): its seq is gone, so recounted
    assert frequencies("golden", "bridge") == (2, {"golden": 2, "bridge": 0})
    assert memory.reads[-1] == -1
    del memory.rows[1]  # an older one, deleted through this store, which reports it
    stats.forget("m")
    assert frequencies("golden", "retriever") == (1, {"golden": 1, "retriever": 0})
    assert memory.reads == [-1, 2, -1, -1]


def test_statistics_keep_the_most_recently_searched_memories() -> None:
    stats = TermStatistics(capacity=2)
    memories = {name: _Memory({1: f"word{name} topic"}) for name in "abc"}

    def search(name: str) -> None:
        stats.frequencies(name, ["topic"], memories[name].last_seq(), memories[name].load)

    for name in "abc":
        search(name)
    search("a")  # dropped when "c" came: counted again
    search("c")  # still kept
    assert [len(memories[name].reads) for name in "abc"] == [2, 1, 1]
    search("b")  # dropped when "a" came back
    assert [len(memories[name].reads) for name in "abc"] == [2, 2, 1]


def test_statistics_count_each_entry_once_under_concurrent_searches() -> None:
    from concurrent.futures import ThreadPoolExecutor

    memory, stats = _Memory({seq: f"entry about topic{seq % 7} and gardens" for seq in range(1, 201)}), TermStatistics()

    def search(_: int) -> tuple[int, dict[str, int]]:
        return stats.frequencies("m", ["gardens"], memory.last_seq(), memory.load)

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(search, range(16))) == [(200, {"gardens": 200})] * 16
        memory.rows.update({seq: "gardens again" for seq in range(201, 301)})
        assert list(pool.map(search, range(16))) == [(300, {"gardens": 300})] * 16
    assert memory.reads == [-1, 200]  # one count, one tail: the searches of a memory wait for its counting


def test_statistics_count_bm25_stems_and_lengths() -> None:
    memory, stats = _Memory({1: "Running marathons", 2: "She runs"}), TermStatistics()
    assert stats.term_statistics("m", ["run", "marathon", "she"], memory.last_seq(), memory.load) == (
        2, {"run": 2, "marathon": 1, "she": 1}, 4)
