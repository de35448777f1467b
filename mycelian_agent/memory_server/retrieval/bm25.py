"""The entry score of both backends: BM25 with Lucene's IDF, from the memory's own statistics, computed in Python.

FTS5 (SQLite) and ``tsvector`` (PostgreSQL) only find the candidates (the backend's own ranking, cut at
:data:`CANDIDATES` x the pool); each candidate is then scored here, the same way on both backends:

    score(e) = sum over query stems t of  idf(t) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(e) / avglen))
    idf(t)   = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))

with ``tf`` the weighted count of ``t`` in the entry's fields (``text.analysis.ENTRY_WEIGHTS``: raw_entry 1, summary
1.5, labels 1, dated 0.5, the weighted term frequency of BM25F), ``len(e)`` its token count over the fields, and
``N``, ``n(t)``, ``avglen`` the memory's entries, those containing ``t`` and their mean length
(``term_stats.py``, kept in the database by each write). Lucene's IDF never reaches zero: FTS5's
``ln((N - n + 0.5) / (n + 0.5))``, clamped to 1e-6, gives every word in more than half the entries the same
near-zero weight, so in a 16-entry memory every score read 5e-06 and the order was noise. Statistics per memory
(FTS5's are the whole file's) make a memory's scores independent of the other memories in the database.

Tokens are FTS5's (``text/analysis.py``: the stems, the fields' terms and their weights, shared with the writes that
keep the statistics); the entry cache is the store's (``storage/entry_cache.py``). Both are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from mycelian_agent.memory_server.storage.entry_cache import CACHED_ENTRIES, EntryCache
from mycelian_agent.memory_server.text.analysis import (
    CONVERSATION_TAGS,
    EntryTerms,
    entry_terms,
    query_stems,
    tokens,
)

__all__ = [
    "CACHED_ENTRIES",
    "CANDIDATES",
    "CONVERSATION_TAGS",
    "K1",
    "B",
    "EntryCache",
    "EntryTerms",
    "entry_terms",
    "idf",
    "query_stems",
    "rank",
    "score",
    "tokens",
]

#: BM25's term-frequency saturation and length normalisation (FTS5's and Lucene's defaults).
K1 = 1.2
B = 0.75
#: The backend's own ranking is cut at this many times the pool before the BM25 here re-scores it. A memory with
#: fewer matches than that (every small one) is scored whole. A larger pool lets this BM25 (the memory's own
#: statistics) decide more of the order. Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
CANDIDATES = 2


def idf(entries: int, containing: int) -> float:
    """Lucene's BM25 IDF: positive for every term, ln 2 for a term in half the entries, ~1/(2N) in all of them."""
    containing = min(max(containing, 1), max(entries, 1))
    return math.log(1.0 + (entries - containing + 0.5) / (containing + 0.5))


def score(entry: EntryTerms, weights: Mapping[str, float], average_length: float) -> dict[str, float]:
    """Each query stem's BM25 share in ``entry`` (``weights``: stem -> idf), for the stems it contains."""
    norm = K1 * (1.0 - B + B * entry.length / average_length) if average_length > 0 else K1
    shares = {}
    for term, weight in weights.items():
        tf = entry.frequencies.get(term)
        if tf:
            shares[term] = weight * tf * (K1 + 1.0) / (tf + norm)
    return shares


def rank(
    candidates: Sequence[tuple[int, EntryTerms]],
    stems: Sequence[str],
    entries: int,
    frequencies: Mapping[str, int],
    total_length: int,
) -> list[tuple[int, float, dict[str, float]]]:
    """``(seq, score > 0, shares per stem)`` of the candidates containing a query stem, best first (ties: newer)."""
    weights: dict[str, float] = {}
    for t in stems:  # a stem the query holds twice weighs twice (its query-term frequency, as FTS5 and Lucene sum)
        weights[t] = weights.get(t, 0.0) + idf(entries, frequencies.get(t, 0))
    average = total_length / entries if entries else 0.0
    scored = []
    for seq, entry in candidates:
        shares = score(entry, weights, average)
        if shares:
            scored.append((seq, sum(shares.values()), shares))
    scored.sort(key=lambda hit: (-hit[1], -hit[0]))
    return scored
