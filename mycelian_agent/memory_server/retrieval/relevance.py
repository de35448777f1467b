"""Relevance: the 0-1 ``score`` a person reads on each ``search_memories`` entry and context snapshot.

The ranking's own scores (BM25 and the steps on it, ``pipeline.rank_entries``) order one search's entries but mean
nothing across searches: a BM25 sum grows with the question's length and the memory's statistics, and the fused
score is relative to the best hit. The wire ``score`` is instead an absolute relevance, computed after the ranking
and without changing it, so that one threshold means the same thing for every question and memory:

- **word evidence** ``w(e)``: the share of the question's informative word weight the entry holds,
  ``sum idf(t) over the query's stems t the entry's indexed terms hold / sum idf(t) over all the query's stems``,
  with BM25's weights (``bm25.idf`` from the memory's own statistics, a stem the question holds twice counted twice).
  A word in nearly every entry weighs ~0, a rare one most; a question word no entry holds still weighs (nothing
  answers that part of the question). ``w = 1``: the entry holds every informative word of the question. A turn
  found through its neighbour (the answer after the question that holds the words) takes the share of the
  neighbour's ``w`` that the ranking's neighbour rule gives it (:func:`borrowed`: 0.8 after a question).
- **meaning evidence** ``m(e)`` (only with a dense index): how far the entry's cosine stands above the memory's
  typical cosine (the median the fusion uses), relative to the distance from there to a perfect 1.0, times
  :data:`MEANING_CEILING`: ``MEANING_CEILING * clip((cos - typical) / (1 - typical), 0, 1)``. Capped below the
  ceiling because e5-small's cosine excess does not separate answerable from unanswerable questions (BENCHMARKS.md
  §3): above :data:`MEANING_CEILING` an entry shares the question's words; at or below it, meaning may be all.
- **relevance** ``r(e) = max(w(e), m(e))``, then made non-increasing down the ranking
  (``score_i = min(r_i, score_{i-1})``, :func:`non_increasing`): a hit never reads as more relevant than one the
  ranking put above it, and a page's scores depend only on the ranking above it (paging with ``offset`` gives each
  entry the score it has in one long list).

Context snapshots get the word evidence of their content against the same weights (the share of the question's
informative word weight the snapshot holds), made non-increasing down the returned list the same way.

The constants were read off LoCoMo dev (BENCHMARKS.md §3, "Issue 38: scores a person can read").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from mycelian_agent.memory_server.retrieval import bm25
from mycelian_agent.memory_server.retrieval.ranking import (
    CONTEXT_AFTER_QUESTION,
    CONTEXT_BEFORE,
    CONTEXT_FAR_AFTER,
    CONTEXT_FAR_BEFORE,
    CONTEXT_WEIGHT,
)
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.memory_server.storage.rows import DenseHits, Link
from mycelian_agent.memory_server.text.analysis import query_stems, tokens

__all__ = [
    "MEANING_CEILING",
    "DenseSeen",
    "borrowed",
    "entry_relevance",
    "meaning_evidence",
    "non_increasing",
    "stem_weights",
    "text_relevance",
    "word_evidence",
]

#: The highest score meaning alone gives: a hit above it holds words of the question. Hits found by meaning alone are
#: as rarely evidence as the lowest word hits, and at this ceiling they score among those. Measured on LoCoMo dev:
#: BENCHMARKS.md §3 "Issue 38: scores a person can read", the meaning ceiling.
MEANING_CEILING = 0.5


def stem_weights(store: MemoryStore, memory_id: str, terms: Sequence[str]) -> dict[str, float]:
    """BM25's weight of each stem of the query words ``terms`` (``bm25.idf`` from the memory's statistics; a stem
    two query words share weighs twice, as ``bm25.rank`` weighs it)."""
    stems = query_stems(terms)
    if not stems:
        return {}
    counts = store.term_counts(memory_id, sorted(set(stems)), ())
    weights: dict[str, float] = {}
    for stem in stems:
        # A memory without entries (its context snapshots searched) has no statistics: every stem weighs alike.
        weight = bm25.idf(counts.entries, counts.stems.get(stem, 0)) if counts.entries else 1.0
        weights[stem] = weights.get(stem, 0.0) + weight
    return weights


def word_evidence(weights: Mapping[str, float], held: Iterable[str] | Mapping[str, float]) -> float:
    """The share of the query's stem ``weights`` (:func:`stem_weights`) that the stems ``held`` (an entry's indexed
    terms) cover: 0 to 1."""
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    have = held if isinstance(held, Mapping) else set(held)
    return min(1.0, sum(weight for stem, weight in weights.items() if stem in have) / total)


def meaning_evidence(cosine: float | None, typical: float, ceiling: float = MEANING_CEILING) -> float:
    """``ceiling * clip((cosine - typical) / (1 - typical), 0, 1)``: 0 for an entry no nearer than the memory's
    typical entry, ``ceiling`` for a perfect match; 0 without a cosine."""
    if cosine is None or typical >= 1.0:
        return 0.0
    return ceiling * min(1.0, max(0.0, (cosine - typical) / (1.0 - typical)))


def non_increasing(values: Iterable[float]) -> list[float]:
    """``values`` capped by every value before them (``out_i = min(v_i, out_{i-1})``), clipped to [0, 1]."""
    out: list[float] = []
    cap = 1.0
    for value in values:
        cap = min(cap, max(0.0, value))
        out.append(cap)
    return out


def entry_relevance(
    store: MemoryStore,
    memory_id: str,
    terms: Sequence[str],
    seqs: Sequence[int],
    dense: DenseHits | None,
    weights: Mapping[str, float] | None = None,
) -> list[float]:
    """The relevance ``max(word, meaning evidence)`` of the memory's entries ``seqs`` for the query words
    ``terms``, in the given order (not yet :func:`non_increasing`); ``dense``: the dense side the search used
    (None: words only). An entry's word evidence is its own, or the share of a neighbouring turn's that the
    ranking passes to it (:func:`borrowed`), whichever is larger."""
    if not seqs:
        return []
    weights = stem_weights(store, memory_id, terms) if weights is None else weights
    links, around = store.neighbourhood(memory_id, list(seqs))
    steps = {link[0]: link for link in (*links, *around.values())}
    near = {n for link in steps.values() for n in (link[1], link[2]) if n is not None}
    entries = store.entry_terms(memory_id, sorted(set(seqs) | set(steps) | near))
    own = {seq: word_evidence(weights, terms_of.frequencies) for seq, terms_of in entries.items()}
    cosines: dict[int, float] = {}
    if dense is not None and dense.best is not None:
        cosines = {seq: dense.cosines[seq] for seq in seqs if seq in dense.cosines}
        unknown = [seq for seq in seqs if seq not in cosines]
        if unknown and dense.more is not None:
            cosines.update(dense.more(unknown))
    out = []
    for seq in seqs:
        words = max(own.get(seq, 0.0), borrowed(seq, steps, own))
        meaning = meaning_evidence(cosines.get(seq), dense.typical) if dense is not None else 0.0
        out.append(max(words, meaning))
    return out


def borrowed(seq: int, steps: Mapping[int, Link], own: Mapping[int, float]) -> float:
    """The largest share of a neighbouring turn's word evidence ``own`` that the ranking's neighbour rule
    (``ranking.with_context``: the turn after a question takes :data:`~.ranking.CONTEXT_AFTER_QUESTION` of its
    score, after anything else :data:`~.ranking.CONTEXT_WEIGHT`, the turn before :data:`~.ranking.CONTEXT_BEFORE`,
    two turns away :data:`~.ranking.CONTEXT_FAR_AFTER` / :data:`~.ranking.CONTEXT_FAR_BEFORE`) passes to entry
    ``seq``; ``steps``: seq -> its :data:`Link` (``(seq, previous, next, asks)``), for ``seq`` and its neighbours.
    An answer shares no word with the question before it, yet the question's words are why it was found."""
    link = steps.get(seq)
    if link is None:
        return 0.0
    _, previous, following, _ = link
    shares = []
    if previous is not None:
        before = steps.get(previous)
        asks = before is not None and before[3]
        shares.append((CONTEXT_AFTER_QUESTION if asks else CONTEXT_WEIGHT) * own.get(previous, 0.0))
        if before is not None and before[1] is not None and before[1] != seq:
            shares.append(CONTEXT_FAR_AFTER * own.get(before[1], 0.0))
    if following is not None:
        shares.append(CONTEXT_BEFORE * own.get(following, 0.0))
        after = steps.get(following)
        if after is not None and after[2] is not None and after[2] != seq:
            shares.append(CONTEXT_FAR_BEFORE * own.get(after[2], 0.0))
    return max(shares, default=0.0)


def text_relevance(weights: Mapping[str, float], text: str) -> float:
    """The word evidence of a free text (a context snapshot) against the query's stem ``weights``."""
    return word_evidence(weights, tokens(text))


class DenseSeen:
    """A store as one search's ranking sees it, keeping the dense side (:class:`DenseHits`) each ranking asked for:
    the relevance needs the cosines the ranking used, and the query is encoded once. Every other attribute is the
    store's own. ``view`` is what to hand to ``rank_entries``; :attr:`dense` the merged dense side afterwards."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._seen: list[DenseHits] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def view(self) -> MemoryStore:
        """This object typed as the store it stands for (it answers every read the store does)."""
        return cast(MemoryStore, self)

    def dense_hits(self, *args: Any, **kwargs: Any) -> DenseHits | None:
        """The store's :meth:`~MemoryStore.dense_hits` (whatever its arguments), kept."""
        found = self._store.dense_hits(*args, **kwargs)
        if found is not None:
            self._seen.append(found)
        return found

    @property
    def dense(self) -> DenseHits | None:
        """The dense side of every ranking of the search, merged (same query and bounds: the same cosines and
        typical cosine; the deepest one's ``more``), or None when none had one."""
        if not self._seen:
            return None
        if len(self._seen) == 1:
            return self._seen[0]
        cosines: dict[int, float] = {}
        for hits in self._seen:
            cosines.update(hits.cosines)
        nearest = sorted(cosines, key=lambda seq: (-cosines[seq], -seq))
        last = self._seen[-1]
        return DenseHits(cosines, nearest, self._seen[0].typical, last.more, last.path)
