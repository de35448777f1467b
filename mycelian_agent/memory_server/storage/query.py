"""What both backends' search SQL shares: the time bounds of a search and the pruning of common terms.

The two dialects differ only in their parameter mark (``?`` for SQLite, ``%s`` for psycopg), so each piece is
written once here and each backend passes its mark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["MOMENT", "prune_common", "time_bounds"]

#: An entry's moment in SQL, for table alias ``{0}``: its conversation time, else its creation time.
MOMENT = "COALESCE({0}.conversation_time, {0}.creation_time)"

T = TypeVar("T")


def time_bounds(after: str | None, before: str | None, *, alias: str = "t", mark: str = "?") -> tuple[str, list[str]]:
    """``(condition, parameters)`` of exclusive bounds on the moment (:data:`MOMENT`) of entries aliased ``alias``:
    ``""`` and no parameters without bounds, else `` AND ... > mark`` and/or `` AND ... < mark`` (``mark``: the
    dialect's parameter mark)."""
    where, params = "", list[str]()
    moment = MOMENT.format(alias)
    if after is not None:
        where, params = f"{where} AND {moment} > {mark}", [*params, after]
    if before is not None:
        where, params = f"{where} AND {moment} < {mark}", [*params, before]
    return where, params


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
