"""Dense feedback (Rocchio in embedding space): entries like the best hits, in other sessions, get two places.

A question whose evidence sits in several turns ("What martial arts has John done?") finds the turns that share its
words, and the lexical-dominant fusion (``fusion.py``) keeps the others out of the top 10 however close their
vectors are ("I'm doing kickboxing" shares no word with it). So, once the fused ranking is known, the query vector
``q`` is moved, as Rocchio's relevance feedback does (Rocchio 1971; in embedding space as in ANCE-PRF and vector PRF,
Li et al., TOIS 2023), towards the centroid ``c`` of the vectors of the first :data:`FEEDBACK_HITS` fused hits and
away from the memory's centroid ``m`` (Rocchio's non-relevant set; it removes what every turn of the conversation
shares: the "On <date> <name> said:" frame, greetings):

    q' = q + BETA * c - GAMMA * m

The memory's vectors are scanned again with ``q'`` (stored vectors: nothing is encoded), and its
:data:`FEEDBACK_SLOTS` nearest entries not among the first :data:`FEEDBACK_AFTER` places are put right after them;
the rest follow in their fused order. The first places never change, so recall@1 is the fusion's.

Measured on LoCoMo dev (BENCHMARKS.md §3, "dense feedback"): without ``m`` the moved query ranks the missing
multi-hop evidence lower than ``q`` does (the centroid of a few turns is mostly the frame every turn shares);
with it the evidence is found, and a weight on the fused score instead of reserved places is too weak against the
lexical share to let it in. Only the exact scan gives a search this space (``DenseHits.space``); a memory searched
through an approximate index (pgvector's HNSW) keeps the fused ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mycelian_agent.memory_server.storage.rows import DenseHits

__all__ = ["FEEDBACK_AFTER", "FEEDBACK_BETA", "FEEDBACK_GAMMA", "FEEDBACK_HITS", "FEEDBACK_SLOTS", "ScanSpace",
           "extend", "rocchio"]

#: Fused hits whose vectors make the centroid (3 / 5 / 10 at the kept setting: see BENCHMARKS.md §3).
FEEDBACK_HITS = 5
#: Weight of the hits' centroid, and of the memory's centroid taken away (the query's own weight is 1).
FEEDBACK_BETA = 0.5
FEEDBACK_GAMMA = 0.5
#: Places of the fused ranking kept as they are before the feedback's entries.
FEEDBACK_AFTER = 5
#: Entries of the moved query placed after them.
FEEDBACK_SLOTS = 2


class ScanSpace:
    """The vectors behind an exact scan (``DenseHits.space``): the query's unit vector ``query``, the memory's
    ``matrix`` (one row per seq of ``seqs``) and ``inside``, which rows are within the search's time bounds."""

    def __init__(self, query: Any, seqs: Sequence[int], matrix: Any, inside: Any) -> None:
        self.query = query
        self.seqs = seqs
        self.matrix = matrix
        self.inside = inside
        self._position: Callable[[int], int | None] | None = None

    def nearest(self, hits: Sequence[int], k: int, beta: float = FEEDBACK_BETA,
                gamma: float = FEEDBACK_GAMMA) -> list[int]:
        """The ``k`` seqs inside the bounds nearest to the query moved towards ``hits`` (:func:`rocchio`), best
        first; ties go to the later entry."""
        import numpy as np

        if self._position is None:
            self._position = {int(seq): i for i, seq in enumerate(self.seqs)}.get
        rows = [i for i in (self._position(seq) for seq in hits) if i is not None]
        if not rows or k <= 0 or not len(self.seqs):
            return []
        vector = rocchio(self.query, self.matrix[rows], self.matrix, beta, gamma)
        scores = np.where(self.inside, self.matrix @ vector, -np.inf)
        k = min(k, int(np.isfinite(scores).sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        order = np.lexsort((-np.asarray(self.seqs)[top], -scores[top]))
        return [int(self.seqs[i]) for i in top[order]]


def rocchio(query: Any, relevant: Any, memory: Any, beta: float = FEEDBACK_BETA,
            gamma: float = FEEDBACK_GAMMA) -> Any:
    """``query + beta * mean(relevant) - gamma * mean(memory)`` (rows are vectors): Rocchio's moved query, with the
    memory as the non-relevant set. Not normalised: only the order of its dot products is used."""
    return query + beta * relevant.mean(axis=0) - gamma * memory.mean(axis=0)


def extend(
    fused: Sequence[tuple[int, float]],
    dense: DenseHits | None,
    limit: int,
    *,
    hits: int = FEEDBACK_HITS,
    after: int = FEEDBACK_AFTER,
    slots: int = FEEDBACK_SLOTS,
) -> list[tuple[int, float]]:
    """``fused`` (``(seq, score)``, best first) with the ``slots`` entries nearest to the query moved towards its
    first ``hits`` placed after its first ``after`` (each scored as the entry it is placed above, so scores still
    descend); ``limit`` at most. Unchanged when the dense side has no :class:`ScanSpace` or ``fused`` is shorter
    than ``after``."""
    space = dense.space if dense is not None else None
    if not isinstance(space, ScanSpace) or slots <= 0 or len(fused) <= after or after < 1:
        return list(fused[:limit])
    head = list(fused[:after])
    shown = {seq for seq, _ in head}
    near = [seq for seq in space.nearest([seq for seq, _ in fused[:hits]], after + slots) if seq not in shown]
    added = near[:slots]
    rest = [(seq, score) for seq, score in fused[after:] if seq not in added]
    score = rest[0][1] if rest else head[-1][1]
    return (head + [(seq, score) for seq in added] + rest)[:limit]
