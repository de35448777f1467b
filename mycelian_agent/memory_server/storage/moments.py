"""An entry's moment in SQL, and a search's time bounds on it, for every backend and query.

An entry's moment is its conversation time, else its creation time (both RFC 3339 UTC text, which sorts as time);
a search's ``after`` and ``before`` bounds are exclusive. The SQL is the same in SQLite and PostgreSQL but for the
parameter mark (``?`` or ``%s``).
"""

from __future__ import annotations

__all__ = ["moment", "time_bounds"]


def moment(alias: str = "t") -> str:
    """The SQL of the moment of the entry row ``alias``."""
    return f"COALESCE({alias}.conversation_time, {alias}.creation_time)"


def time_bounds(after: str | None, before: str | None, *, alias: str = "t",
                mark: str = "?") -> tuple[str, list[str]]:
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
