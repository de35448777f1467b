"""Read calls that survive a blip: a transient failure (a lost HTTP session, a timeout, a busy database) is retried.

Reads change nothing, so trying one again is always safe; ``MemoryConnection`` opens a new session for the next
call after a lost one (waiting up to its ``reconnect_wait`` for an HTTP server that restarts). Anything else, and
a failure that outlasts the attempts, is raised as it came, naming the tool and the server's message.
"""

from __future__ import annotations

from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..errors import is_transient

__all__ = ["READ_ATTEMPTS", "read_call"]

#: Attempts of one read call (the first included).
READ_ATTEMPTS = 3


async def read_call(connection: Any, name: str, arguments: dict[str, Any], *, parse: bool = True) -> Any:
    """``connection.call_json(name, arguments)`` (``parse=False``: ``call``, the text), retried when transient."""
    method = connection.call_json if parse else connection.call
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(READ_ATTEMPTS),
        retry=retry_if_exception(is_transient),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        reraise=True,
    ):
        with attempt:
            return await method(name, arguments)
    raise AssertionError("unreachable")  # pragma: no cover - reraise=True ends the loop with the last error
