"""What both backends' lexical search shares beyond the time bounds (``moments.py``): the pruning of common terms.

A backend counts how many rows hold each term in its own index (FTS5 match counts, ``tsvector`` counts or the term
statistics) and asks :func:`prune_common` which terms may make rows candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["prune_common"]

T = TypeVar("T")


def prune_common(terms: Sequence[T], rows_with: Callable[[T], int], total: int) -> list[T]:
    """The terms found in fewer than half of ``total`` rows (``rows_with(term)``: how many hold it), or all of
    ``terms`` when every one is that common (or there are fewer than two).

    Such terms add almost nothing to a BM25 score (an IDF near zero), so they need not make rows candidates; they
    only make every row holding them one to score. A backend searches the pruned terms first and falls back to all
    of them when those find too few rows, so the results are the same, only faster.
    """
    if total <= 0 or len(terms) < 2:
        return list(terms)
    kept = [term for term in terms if 2 * rows_with(term) < total]
    return kept or list(terms)
