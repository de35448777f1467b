"""How a store words a failure that is a problem of the database itself (a damaged file, a full disk, a database
server that cannot be reached): :class:`ExplainsProblems`, which :class:`~.base.MemoryStore` inherits and each
backend completes (``sqlite/problems.py``, ``postgres/problems.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mycelian_agent.errors import MemoryServerError

__all__ = ["ExplainsProblems"]


class ExplainsProblems:
    """:meth:`problem` (None here: a backend knows its driver's errors) and :meth:`explained`, which raises it."""

    #: Seconds a call whose :meth:`problem` is transient (a database server restarting) is tried again for.
    reconnect_wait = 0.0

    def problem(self, exc: BaseException) -> MemoryServerError | None:
        """A failure of a call as the one-line error naming the database and what to do, when it is a problem of
        the database itself (a damaged file, a full disk; the backend knows its driver's errors); None for any
        other failure. The store's callers raise it instead (:meth:`explained`)."""
        return None

    @contextmanager
    def explained(self) -> Iterator[None]:
        """Raise a failure of the block as :meth:`problem` words it, when it is a problem of the database (the
        server's store runner, the CLI's local connection and the embeddings commands run store calls in it)."""
        try:
            yield
        except Exception as exc:
            problem = self.problem(exc)
            if problem is None:
                raise
            raise problem from exc
