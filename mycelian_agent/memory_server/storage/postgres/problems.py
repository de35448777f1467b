"""A PostgreSQL server that cannot be reached, named in one line: the server, the problem, what to do.

A restart or an outage surfaces from psycopg (a connection cut, the pool waiting for one in vain); at the store's
edge :func:`server_problem` turns it into a transient :class:`MemoryServerError`, which the server's store runner
retries for :data:`RECONNECT_WAIT` seconds (the pool reconnects meanwhile) before it answers with that line.
"""

from __future__ import annotations

from mycelian_agent.errors import MemoryServerError

__all__ = ["RECONNECT_WAIT", "server_problem"]

#: Seconds a call waits for its PostgreSQL server to come back (a restart) before failing with the server named.
RECONNECT_WAIT = 30.0


def server_problem(exc: BaseException, shown: str) -> MemoryServerError | None:
    """``exc`` as the one-line, transient error naming the server ``shown`` (a URL without its password) when it
    says the server cannot be reached or the connection was cut; None for any other failure."""
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return None
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return MemoryServerError(
        f"the PostgreSQL server of {shown} cannot be reached ({detail}): check that it is "
        f"running; a call waits up to {RECONNECT_WAIT:.0f} s for it to come back",
        transient=True,
    )
