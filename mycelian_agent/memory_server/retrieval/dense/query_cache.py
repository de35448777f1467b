"""Query vectors kept for the next time the same question is asked: :class:`QueryVectorCache`.

A search's query is encoded before anything else of the dense side runs, and that encoding is most of a hybrid
search's time (e5-small: ~9 ms on two free cores, ~17 on one, against ~2.5 ms for the rest of the dense side at
10,000 entries; BENCHMARKS.md §3). Chat pipelines ask the same question again (a retry, a recall and then a search,
``search_memories`` paging with ``offset``), and a query's vector depends only on its text and the model, so a
small least-recently-used map of them saves the encoder on every repeat. Vectors are read-only arrays: a caller
that changed one would change every later search of that query.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["QUERY_CACHE_SIZE", "QueryVectorCache", "normalise_query"]

#: Query vectors kept per dense index (384 float32 each: ~1.6 MB at this size).
QUERY_CACHE_SIZE = 1024


def normalise_query(query: str) -> str:
    """``query`` with its whitespace collapsed to single spaces and trimmed: the text that is encoded and the key it
    is kept under, so that queries differing only in spacing share one vector."""
    return " ".join(query.split())


class QueryVectorCache:
    """A bounded, thread-safe map from ``(model, normalised query)`` to the query's unit vector.

    :meth:`vector` returns the kept vector or computes it with ``encode(text)`` (outside the lock: two threads
    asking for the same new query may both encode it, which is cheaper than making one wait on the other's lock),
    keeping at most ``size`` vectors, the least recently used going first. ``size`` 0 keeps none. ``hits`` and
    ``misses`` count the lookups (benchmarks, tests).
    """

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a query cache's size must be an integer >= 0 (got {size!r})")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)

    def vector(self, model: str, query: str, encode: Callable[[str], np.ndarray]) -> np.ndarray:
        """The vector of ``query`` under ``model``: the kept one, else ``encode(normalised query)`` (kept,
        read-only)."""
        text = normalise_query(query)
        key = (model, text)
        with self._lock:
            kept = self._vectors.get(key)
            if kept is not None:
                self._vectors.move_to_end(key)
                self.hits += 1
                return kept
            self.misses += 1
        vector = encode(text)
        vector.setflags(write=False)
        if self.size:
            with self._lock:
                self._vectors[key] = vector
                self._vectors.move_to_end(key)
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return vector

    def clear(self) -> None:
        """Forget every kept vector (a model's weights changed in place, tests)."""
        with self._lock:
            self._vectors.clear()
