"""Fusion of the lexical (BM25) ranking with dense cosine similarities: a lexical-dominant convex combination.

Reciprocal rank fusion throws the scores away: an entry BM25 ranks 1st by a wide margin and one it barely ranks
40th move by the same steps, so a weak dense model can push strong lexical matches out of the top k (it did:
LoCoMo any@10 fell from 0.54 to 0.49 with RRF). A convex combination of normalised scores keeps the margins
(Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", TOIS 2023, find it beats RRF and
needs one weight):

    fused(e) = LEXICAL_SHARE * lex(e) + (1 - LEXICAL_SHARE) * dense(e)

- ``lex(e)`` = BM25(e) / max BM25 over the candidates (0 when the entry has no lexical score): in [0, 1].
- ``dense(e)`` = how far e's cosine stands above the memory's typical cosine, relative to the best one:
  ``clip((cos(e) - typical) / (best - typical), 0, 1)``. Half the memory gets 0, so dense similarity that any
  entry has (shared topic of the whole conversation, the static model's common-word bias) adds nothing; only
  entries that are unusually close to the query gain.

With ``LEXICAL_SHARE`` well above one half an entry with a clear lexical lead keeps it; the dense side reorders
lexical near-ties and lifts an entry BM25 missed only above weak lexical matches.

The fusion needs no more than a few cosines (:class:`DenseHits`, a row type of ``storage/rows.py``): the query's
nearest entries (which give the best
cosine and the dense candidates), the cosines of the lexical candidates, and the typical cosine. The typical cosine
is the median over a fixed sample of the memory (:data:`SAMPLE` entries picked by a hash of their seq,
:func:`sample_order`, defined in ``storage/vectors.py`` next to its SQL), not over every entry, so an approximate
index (pgvector's HNSW, ``storage/postgres/vectors.py``) that returns only the nearest entries fuses exactly as the
exact scan does. A memory of at most :data:`SAMPLE` entries is
its own sample (the median of every cosine, as before); in a larger one the sample median's standard error is about
``1.25 * sd / sqrt(SAMPLE)``, a few thousandths of a cosine for e5-small, whose cosines spread over ~0.05.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# The dense side's row type and the sample's order are storage's (a database picks the same sample by SQL):
# re-exported here for the fusion's users.
from mycelian_agent.memory_server.storage.rows import DenseHits
from mycelian_agent.memory_server.storage.vectors import sample_order

__all__ = ["DENSE_CANDIDATES", "LEXICAL_SHARE", "SAMPLE", "DenseHits", "fuse", "fuse_scan", "sample_order", "scan_hits"]

#: Weight of the normalised lexical score (the dense side gets the rest): the largest share at which no category is
#: below lexical search alone. The strong lexical side leaves the dense side what it is for: entries no query word
#: reaches (a paraphrase has no lexical score at all, so its rank is the dense side's whatever the share).
#: Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
LEXICAL_SHARE = 0.95
#: Entries the dense side adds as candidates beyond the lexical ones (its nearest), per result requested.
DENSE_CANDIDATES = 2
#: Entries of a memory whose cosines give its typical cosine (the median): the first in :func:`sample_order`.
SAMPLE = 256


def scan_hits(seqs: Sequence[int] | Any, cosines: Any, k: int, *, sample: Any = None) -> DenseHits | None:
    """:class:`DenseHits` from an exact scan: ``cosines`` of every entry ``seqs`` of the memory (a numpy vector; -inf
    outside the search's bounds), with the ``k`` nearest. None when no entry is inside the bounds. ``seqs`` may be a
    numpy int array; ``sample``: the first :data:`SAMPLE` of ``sample_order(seqs)``, when the caller keeps them
    between searches."""
    import numpy as np

    cosines = np.asarray(cosines, dtype=np.float64)
    finite = np.isfinite(cosines)
    if not len(seqs) or not finite.any():
        return None
    if sample is None:
        sample = sample_order(seqs)[:SAMPLE]
    inside = cosines[sample][finite[sample]]
    # Bounds that leave no sampled entry: the median of every entry inside them.
    typical = float(np.median(inside if len(inside) else cosines[finite]))
    k = min(max(k, 1), int(finite.sum()))
    masked = np.where(finite, cosines, -np.inf)
    top = np.argpartition(-masked, k - 1)[:k]
    top = top[np.lexsort((-np.asarray(seqs)[top], -masked[top]))]  # best first; ties: the later entry
    values = {int(seqs[i]): float(cosines[i]) for i in top}
    position = _positions(seqs)

    def more(wanted: Sequence[int]) -> dict[int, float]:
        found = {}
        for seq in wanted:
            i = position(seq)
            if i is not None and finite[i]:
                found[int(seq)] = float(cosines[i])
        return found

    return DenseHits(values, [int(seqs[i]) for i in top], typical, more, "scan")


def fuse(
    lexical: Sequence[tuple[int, float]],
    dense: DenseHits | None,
    limit: int,
    *,
    lexical_share: float = LEXICAL_SHARE,
    dense_candidates: int | None = None,
) -> list[tuple[int, float]]:
    """Fuse ``lexical`` ``(seq, score)`` hits (score > 0, best first) with ``dense`` → ``(seq, fused score)`` best
    first, ``limit`` at most. Candidates: every lexical hit, and the ``dense_candidates`` (default ``limit *``
    :data:`DENSE_CANDIDATES`) nearest entries."""
    if limit <= 0:
        return []
    if dense is None or dense.best is None:
        return [(seq, score) for seq, score in lexical[:limit]]
    best_cosine, typical = dense.best, dense.typical
    spread = best_cosine - typical
    cosines = dict(dense.cosines)
    unknown = [seq for seq, _ in lexical if seq not in cosines]
    if unknown and dense.more is not None:
        cosines.update(dense.more(unknown))

    def share(seq: int) -> float:
        cosine = cosines.get(seq)
        if cosine is None or spread <= 0:
            return 0.0
        return min(1.0, max(0.0, (cosine - typical) / spread))

    candidates = dict(lexical)
    extra = limit * DENSE_CANDIDATES if dense_candidates is None else dense_candidates
    for seq in dense.nearest[: max(extra, 0)]:
        candidates.setdefault(seq, 0.0)
    best = max(candidates.values(), default=0.0)
    fused = {
        seq: lexical_share * (score / best if best > 0 else 0.0) + (1.0 - lexical_share) * share(seq)
        for seq, score in candidates.items()
    }
    return sorted(fused.items(), key=lambda pair: (-pair[1], -pair[0]))[:limit]


def fuse_scan(
    lexical: Sequence[tuple[int, float]],
    seqs: Sequence[int],
    cosines: Any,
    limit: int,
    *,
    lexical_share: float = LEXICAL_SHARE,
    dense_candidates: int | None = None,
) -> list[tuple[int, float]]:
    """:func:`fuse` with the dense side from an exact scan (``cosines`` of every entry ``seqs``; see
    :func:`scan_hits`)."""
    extra = limit * DENSE_CANDIDATES if dense_candidates is None else dense_candidates
    hits = scan_hits(seqs, cosines, extra)
    return fuse(lexical, hits, limit, lexical_share=lexical_share, dense_candidates=dense_candidates)


def _positions(seqs: Sequence[int]) -> Callable[[int], int | None]:
    """Index of a seq in ``seqs``: a binary search when they ascend (a dense index keeps them in write order), else
    a dict. Only the candidates are looked up, so a dict of a 10,000-entry memory would cost more than the rest."""
    import numpy as np

    array = np.asarray(seqs)
    if len(array) > 1 and not bool(np.all(array[1:] > array[:-1])):
        table = {int(seq): i for i, seq in enumerate(array)}
        return table.get

    def find(seq: int) -> int | None:
        i = int(np.searchsorted(array, seq))
        return i if i < len(array) and array[i] == seq else None

    return find
