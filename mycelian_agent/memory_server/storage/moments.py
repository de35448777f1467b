"""An entry's moment in SQL, and a search's time bounds on it, for every backend and query.

An entry's moment is its conversation time, else its creation time (both RFC 3339 UTC text, which sorts as time);
a search's ``after`` and ``before`` bounds are exclusive. The SQL is the same in SQLite and PostgreSQL but for the
parameter mark (``?`` or ``%s``).
"""

from __future__ import annotations

__all__ = ["entry_page", "moment", "time_bounds"]


def moment(alias: str = "t") -> str:
    """The SQL of the moment of the entry row ``alias``."""
    return f"COALESCE({alias}.conversation_time, {alias}.creation_time)"


def time_bounds(after: str | None, before: str | None, *, alias: str = "t", mark: str = "?") -> tuple[str, list[str]]:
    """``(condition, parameters)`` of exclusive bounds on the moment of the entry row ``alias``: the condition is
    empty without bounds, else it starts with `` AND `` (appended to a ``WHERE``); ``mark`` is the dialect's
    parameter mark."""
    where, params = "", list[str]()
    at = moment(alias)
    if after is not None:
        where, params = f"{where} AND {at} > {mark}", [*params, after]
    if before is not None:
        where, params = f"{where} AND {at} < {mark}", [*params, before]
    return where, params


def entry_page(
    memory_id: str, limit: int, before: str | None, after: str | None, *, mark: str = "?"
) -> tuple[str, list[object]]:
    """``(clause, parameters)`` after ``FROM entries`` for a page of ``list_entries``: oldest first after ``after``,
    else newest first (before ``before`` when given); ``mark`` is the dialect's parameter mark."""
    if after is not None:
        return (
            f"WHERE memory_id = {mark} AND creation_time > {mark} ORDER BY creation_time, seq LIMIT {mark}",
            [memory_id, after, limit],
        )
    if before is not None:
        return (
            f"WHERE memory_id = {mark} AND creation_time < {mark} ORDER BY creation_time DESC, seq DESC LIMIT {mark}",
            [memory_id, before, limit],
        )
    return f"WHERE memory_id = {mark} ORDER BY creation_time DESC, seq DESC LIMIT {mark}", [memory_id, limit]
