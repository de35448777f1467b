"""Query feedback (pseudo-relevance feedback, after RM3): the best first hits lend their words to a second search.

A question and the turn that answers it often share few words ("What did Caroline take away from the book?"
against "It taught me self-acceptance"), while the turns the question does find carry the topic's other words.
So the search runs twice: once with the query's terms, once with the :data:`FEEDBACK_TERMS` words that weigh most
in its top :data:`FEEDBACK_DOCS` hits — a word's share of a hit's text, times that hit's score relative to the best
one, times the word's IDF in the memory; words matching many entries are passed over (:data:`FEEDBACK_POSTINGS`).
The second ranking, without the hits the words came from, is added at :data:`FEEDBACK_WEIGHT` of the first
(scaled to the first's best score). Both backends share this code, so their expansions are the same words.

The document frequencies are the memory's term statistics, kept in the database by each write (``term_stats.py``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from mycelian_agent.memory_server.text.analysis import feedback_words

__all__ = [
    "FEEDBACK_DOCS",
    "FEEDBACK_MIN_ENTRIES",
    "FEEDBACK_POSTINGS",
    "FEEDBACK_TERMS",
    "FEEDBACK_WEIGHT",
    "combine",
    "expansion_terms",
    "feedback_words",
]

#: Hits (after neighbour context) whose words are weighed. This, FEEDBACK_TERMS and FEEDBACK_WEIGHT were tuned on
#: LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
FEEDBACK_DOCS = 5
#: Words added to the second search.
FEEDBACK_TERMS = 10
#: Weight of the second ranking against the first: the smaller end of the flat part. The hits the words came from
#: get no second score (they match their own words best: with it, any@1 fell).
FEEDBACK_WEIGHT = 0.2
#: At most this many entries (the sum of the chosen words' frequencies) match the second search. Its cost grows with
#: the entries its words match, and words found in hundreds of entries say little about one topic: below this
#: budget recall was the same on LoCoMo dev, and a memory where every word is common pays less.
#: BENCHMARKS.md §3 "Tuned constants".
FEEDBACK_POSTINGS = 250
#: Smaller memories get no feedback: it assumes the top hits are a small sample of a larger memory, and in a few
#: dozen entries they are a good part of it (the second search would return the first one's hits and neighbours).
FEEDBACK_MIN_ENTRIES = 10 * FEEDBACK_DOCS


def expansion_terms(
    hits: Sequence[tuple[Sequence[str], float]],
    entries: int,
    frequencies: Mapping[str, int],
    exclude: Collection[str],
    limit: int = FEEDBACK_TERMS,
    postings: int = FEEDBACK_POSTINGS,
) -> list[str]:
    """Up to ``limit`` words that weigh most in ``hits`` (``(words of a hit, its score > 0)``, best first), other
    than ``exclude`` (the query's own terms): sum over hits of ``count / len(words) * score / best * idf``, with
    ``idf = log(entries / frequency)``. Heavier words whose frequencies would take the total past ``postings``
    are passed over for lighter ones."""
    if not hits or limit <= 0 or entries <= 0:
        return []
    best = hits[0][1]
    weight: dict[str, float] = {}
    for words, score in hits:
        if not words or best <= 0:
            continue
        share = score / best / len(words)
        for word, count in Counter(words).items():
            frequency = frequencies.get(word, 0)
            if frequency:
                weight[word] = weight.get(word, 0.0) + count * share * math.log(entries / frequency)
    chosen: list[str] = []
    read = 0
    for word, value in sorted(weight.items(), key=lambda pair: (-pair[1], pair[0])):
        if len(chosen) == limit or value <= 0:
            break
        if word not in exclude and read + frequencies[word] <= postings:
            chosen.append(word)
            read += frequencies[word]
    return chosen


def combine(
    first: Sequence[tuple[int, float]], second: Sequence[tuple[int, float]], weight: float = FEEDBACK_WEIGHT
) -> list[tuple[int, float]]:
    """``first`` plus ``weight`` times ``second`` (``(seq, score > 0)`` lists, best first), the second scaled to
    the first's best score; best first, ties to the newer entry."""
    if not first or not second:
        return list(first) or list(second)
    scale = weight * first[0][1] / second[0][1]
    scores = dict(first)
    for seq, score in second:
        scores[seq] = scores.get(seq, 0.0) + scale * score
    return sorted(scores.items(), key=lambda pair: (-pair[1], -pair[0]))
