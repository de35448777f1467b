"""Dense feedback (Rocchio in embedding space): entries like the best hits, in other sessions, get two places.

A question whose evidence sits in several turns ("What martial arts has John done?") finds the turns that share its
words, and the lexical-dominant fusion (``fusion.py``) keeps the others out of the top 10 however close their
vectors are ("I'm doing kickboxing" shares no word with it). So, once the fused ranking is known, the query vector
``q`` is moved, as Rocchio's relevance feedback does (Rocchio 1971; in embedding space as in ANCE-PRF and vector PRF,
Li et al., TOIS 2023), towards the centroid ``c`` of the vectors of the first :data:`FEEDBACK_HITS` fused hits and
away from the memory's centroid ``m`` (Rocchio's non-relevant set; it takes away what every turn of the conversation
shares: the "On <date> <name> said:" frame, greetings):

    q' = q + FEEDBACK_BETA * c - FEEDBACK_GAMMA * m

The memory's vectors are scanned again with ``q'`` (the stored vectors of the search's own scan: nothing is
encoded), and its :data:`FEEDBACK_SLOTS` nearest entries not among the first :data:`FEEDBACK_AFTER` places are put
right after them. To make room in the first :data:`FEEDBACK_WINDOW` places, the entries there whose vectors are
closest to an entry ranked above them (near-repeats of a better hit, mostly its own session's turns) move to just
below the window, not the last ones. The first places never change, so recall@1 is the fusion's.

Measured on LoCoMo dev, in process (BENCHMARKS.md §3, "Dense feedback"): any@10 / all@10 0.872 / 0.768 -> 0.901 /
0.796, no category and no conversation lower at @10. Each part counts: without ``m`` the moved query ranks the
missing multi-hop evidence lower than ``q`` does (the centroid of a few turns is mostly the frame every turn
shares); pushing out the last places instead of the near-repeats lost questions whose evidence sat at 9-10; a
weight on the fused score instead of places is too weak against the lexical share to let anything in. The dense
index hands the search its vectors (``DenseHits.space``): the exact scan's matrix, or, for a memory searched through
pgvector's HNSW index, the index itself (the moved query is one more approximate search; the centroid is that of
the memory's sample, so the two paths agree while a memory is no larger than its sample).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mycelian_agent.memory_server.retrieval import fusion
from mycelian_agent.memory_server.retrieval.products import rows_dot
from mycelian_agent.memory_server.storage.rows import DenseHits

__all__ = [
    "FEEDBACK_AFTER",
    "FEEDBACK_BETA",
    "FEEDBACK_GAMMA",
    "FEEDBACK_HITS",
    "FEEDBACK_SLOTS",
    "FEEDBACK_WINDOW",
    "FeedbackSpace",
    "IndexSpace",
    "ScanSpace",
    "extend",
    "fuse",
    "redundant",
    "rocchio",
]

#: Fused hits whose vectors make the centroid (3 / 5 / 10 at the kept setting: see BENCHMARKS.md §3).
FEEDBACK_HITS = 5
#: Weight of the hits' centroid, and of the memory's centroid taken away (the query's own weight is 1).
FEEDBACK_BETA = 0.5
FEEDBACK_GAMMA = 0.5
#: Places of the fused ranking kept as they are before the feedback's entries.
FEEDBACK_AFTER = 5
#: Entries of the moved query placed after them.
FEEDBACK_SLOTS = 2
#: The first page a reader takes (recall is measured at 10): the entries the placed ones push out of it are those
#: most like an entry above them, not the last ones.
FEEDBACK_WINDOW = 10


class FeedbackSpace(ABC):
    """The vectors behind one search's dense side (``DenseHits.space``), as the feedback needs them: the query's unit
    vector, the memory's centroid, stored vectors by seq, and the entries nearest to any vector within the search's
    time bounds. Made by the dense index: :class:`ScanSpace` for the exact scan, :class:`IndexSpace` for an
    approximate index."""

    query: Any

    @property
    @abstractmethod
    def centroid(self) -> Any:
        """The memory's mean vector (Rocchio's non-relevant centroid)."""

    @abstractmethod
    def vectors(self, seqs: Sequence[int]) -> Mapping[int, Any]:
        """seq -> stored vector of those of ``seqs`` that have one."""

    @abstractmethod
    def nearest_to(self, vector: Any, k: int) -> list[int]:
        """The ``k`` seqs nearest to ``vector`` (by dot product) within the bounds, best first."""

    def nearest(
        self, hits: Sequence[int], k: int, beta: float = FEEDBACK_BETA, gamma: float = FEEDBACK_GAMMA
    ) -> list[int]:
        """The ``k`` seqs inside the bounds nearest to the query moved towards ``hits`` (:func:`rocchio`), best
        first; none when no hit has a vector."""
        import numpy as np

        found = self.vectors(hits)
        if not found or k <= 0:
            return []
        relevant = np.stack([found[seq] for seq in hits if seq in found])
        return self.nearest_to(rocchio(self.query, relevant, self.centroid, beta, gamma), k)


class ScanSpace(FeedbackSpace):
    """:class:`FeedbackSpace` of an exact scan: the query's unit vector ``query``, the memory's ``matrix`` (one row per
    seq of ``seqs``; its mean is the centroid) and ``inside``, which rows are within the search's time bounds.
    ``mean(matrix)`` gives the centroid when the index keeps it between searches (default: computed here)."""

    def __init__(
        self, query: Any, seqs: Sequence[int] | Any, matrix: Any, inside: Any, mean: Callable[[Any], Any] | None = None
    ) -> None:
        self.query = query
        self.seqs = seqs
        self.matrix = matrix
        self.inside = inside
        self._rows: Callable[[int], int | None] | None = None
        self._mean = mean or (lambda matrix: matrix.mean(axis=0))
        self._centroid: Any = None

    @property
    def centroid(self) -> Any:
        if self._centroid is None:  # computed on first use: only a search with fused hits needs it
            self._centroid = self._mean(self.matrix)
        return self._centroid

    def row(self, seq: int) -> int | None:
        """The row of ``seq`` in :attr:`matrix`, None when it has no vector."""
        if self._rows is None:
            import numpy as np

            array = np.asarray(self.seqs)
            if len(array) > 1 and not bool(np.all(array[1:] > array[:-1])):
                self._rows = {int(seq): i for i, seq in enumerate(array)}.get
            else:  # the usual case (a memory's vectors in write order): no table of every seq per search

                def find(seq: int) -> int | None:
                    i = int(np.searchsorted(array, seq))
                    return i if i < len(array) and array[i] == seq else None

                self._rows = find
        return self._rows(seq)

    def vectors(self, seqs: Sequence[int]) -> Mapping[int, Any]:
        rows = {seq: self.row(seq) for seq in seqs}
        return {seq: self.matrix[row] for seq, row in rows.items() if row is not None}

    def nearest_to(self, vector: Any, k: int) -> list[int]:
        import numpy as np

        if not len(self.seqs):
            return []
        scores = np.where(self.inside, rows_dot(self.matrix, vector), -np.inf)
        k = min(k, int(np.isfinite(scores).sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        order = np.lexsort((-np.asarray(self.seqs)[top], -scores[top]))  # best first; ties: the later entry
        return [int(self.seqs[i]) for i in top[order]]


class IndexSpace(FeedbackSpace):
    """:class:`FeedbackSpace` of an approximate index: ``centroid`` from the memory's sample (as its typical cosine
    is), ``vectors(seqs)`` and ``nearest_to(vector, k)`` asked of the index."""

    def __init__(
        self,
        query: Any,
        centroid: Any,
        vectors: Callable[[Sequence[int]], Mapping[int, Any]],
        nearest_to: Callable[[Any, int], list[int]],
    ) -> None:
        self.query = query
        self._centroid = centroid
        self._vectors = vectors
        self._nearest_to = nearest_to

    @property
    def centroid(self) -> Any:
        return self._centroid

    def vectors(self, seqs: Sequence[int]) -> Mapping[int, Any]:
        return self._vectors(seqs)

    def nearest_to(self, vector: Any, k: int) -> list[int]:
        return self._nearest_to(vector, k)


def rocchio(
    query: Any, relevant: Any, centroid: Any, beta: float = FEEDBACK_BETA, gamma: float = FEEDBACK_GAMMA
) -> Any:
    """``query + beta * mean(relevant) - gamma * centroid``: Rocchio's moved query (``relevant``: one vector a row),
    with the memory's ``centroid`` as the non-relevant set. Not normalised: only the order of its dot products is
    used."""
    return query + beta * relevant.mean(axis=0) - gamma * centroid


def fuse(lexical: Sequence[tuple[int, float]], dense: DenseHits | None, limit: int) -> list[tuple[int, float]]:
    """``fusion.fuse`` of ``lexical`` and ``dense`` then :func:`extend`: ``limit`` at most. Fused
    :data:`FEEDBACK_WINDOW` deep whatever ``limit`` (with the dense candidates of ``limit``), because the feedback
    reorders that many places: a short page is then the start of a longer one (else an entry could show on two
    pages of a search, and another on none). A page of at most :data:`FEEDBACK_AFTER` entries is the fusion's
    alone (the feedback never changes those places), without the feedback's work."""
    if limit <= FEEDBACK_AFTER:
        return fusion.fuse(lexical, dense, limit)
    window = max(limit, FEEDBACK_WINDOW)
    fused = fusion.fuse(lexical, dense, window, dense_candidates=limit * fusion.DENSE_CANDIDATES)
    return extend(fused, dense, limit)


def extend(
    fused: Sequence[tuple[int, float]],
    dense: DenseHits | None,
    limit: int,
    *,
    hits: int = FEEDBACK_HITS,
    after: int = FEEDBACK_AFTER,
    slots: int = FEEDBACK_SLOTS,
    window: int = FEEDBACK_WINDOW,
) -> list[tuple[int, float]]:
    """``fused`` (``(seq, score)``, best first) with the ``slots`` entries nearest to the query moved towards its
    first ``hits`` (:meth:`FeedbackSpace.nearest`) placed after its first ``after``; to make room, the entries of places
    ``after + 1`` to ``window`` most like an entry above them (:func:`redundant`) move to just after the window.
    ``limit`` at most; scores still descend (a placed entry scores as the entry after it). Unchanged when the dense
    side has no :class:`FeedbackSpace` or ``fused`` has no more than ``after`` entries."""
    space = dense.space if dense is not None else None
    if not isinstance(space, FeedbackSpace) or slots <= 0 or len(fused) <= after or after < 1:
        return list(fused[:limit])
    head = [seq for seq, _ in fused[:after]]
    shown = set(head)
    added = [seq for seq in space.nearest([seq for seq, _ in fused[:hits]], after + slots) if seq not in shown][:slots]
    inside = [seq for seq, _ in fused[after:window] if seq not in added]
    moved = set(redundant(space, head, inside, max(0, len(added) + len(inside) - (window - after))))
    rest = [seq for seq, _ in fused[window:] if seq not in added]
    order = head + added + [seq for seq in inside if seq not in moved] + [seq for seq in inside if seq in moved]
    order += rest
    scores = dict(fused)
    ranked: list[tuple[int, float]] = []
    for i, seq in enumerate(order[:limit]):
        if seq in added:
            following = next((s for s in order[i + 1 :] if s not in added), None)
            score = scores[following] if following is not None else ranked[-1][1]
        else:
            score = scores[seq]
        ranked.append((seq, min(score, ranked[-1][1]) if ranked else score))
    return ranked


def redundant(space: FeedbackSpace, above: Sequence[int], candidates: Sequence[int], count: int) -> list[int]:
    """The ``count`` seqs of ``candidates`` (in rank order, below ``above``) whose vectors are closest to an entry
    ranked above them (the highest dot product with any of ``above`` or an earlier candidate); entries without a
    vector count as unlike any."""
    import numpy as np

    if count <= 0:
        return []
    found = space.vectors([*above, *candidates])
    closeness: dict[int, float] = {}
    for i, seq in enumerate(candidates):
        earlier = [found[s] for s in (*above, *candidates[:i]) if s in found]
        closeness[seq] = float(rows_dot(np.stack(earlier), found[seq]).max()) if seq in found and earlier else -2.0
    return sorted(candidates, key=lambda seq: -closeness[seq])[:count]
