"""A session's end, seen at once: what a waiting tool call races against, and a spawned server's exit status.

The stdio side (:mod:`.stdio_session`) sets it when the server's output ends, the HTTP side (:mod:`.http_session`)
when the connection is refused or reset; :class:`~mycelian_agent.mcp.MemoryConnection` fails every call waiting on
the session then, instead of after the call's deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Protocol

import anyio

__all__ = [
    "EXIT_STATUS_WAIT",
    "OUTPUT_ENDED",
    "ServerEnded",
    "SessionEnd",
    "SpawnedProcess",
    "exit_status",
    "peek_exit",
]

OUTPUT_ENDED = "the server process exited (its output ended)"
#: How long a stdio server whose output ended is given to be reaped, so that its exit status can be reported.
EXIT_STATUS_WAIT = 1.0


class SpawnedProcess(Protocol):
    """What is read of a server process the MCP SDK spawned (anyio's ``Process`` or the SDK's fallback)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...


class ServerEnded(ConnectionError):
    """The session ended (the stdio server's output ended, an HTTP request found the server gone) while a call
    waited for its answer, or before it was sent."""


class SessionEnd:
    """Set once a session is over, with why: what a waiting call races against (:meth:`MemoryConnection._watched_call`)
    so it fails at once instead of waiting out its deadline."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason = "the session ended"
        #: stdio: the spawned server (see :func:`.stdio_session.watch_spawns`), for its exit status.
        self.processes: list[SpawnedProcess] = []
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self, reason: str | None = None) -> None:
        if not self.event.is_set():
            if reason:
                self.reason = reason
            self.event.set()
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def wake(self, waiter: asyncio.Future[None]) -> None:
        """Resolve ``waiter`` when the session ends (at once if it has), until :meth:`forget` (no task per call)."""
        if self.event.is_set():
            if not waiter.done():
                waiter.set_result(None)
            return
        self._waiters.add(waiter)

    def forget(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()

    async def explained(self) -> str:
        """The reason, with a spawned server's exit status (waiting up to :data:`EXIT_STATUS_WAIT` for the process
        to be reaped: its output ends a moment before)."""
        if not self.processes or (self.reason != OUTPUT_ENDED and not self.reason.startswith(OUTPUT_ENDED + ";")):
            return self.reason
        process = self.processes[-1]
        code = None
        with anyio.move_on_after(EXIT_STATUS_WAIT):
            while code is None:
                code = peek_exit(process.pid)
                if code is None:
                    if process.returncode is not None:
                        code = process.returncode
                    else:
                        await anyio.sleep(0.02)
        status = exit_status(code)
        return self.reason.replace("exited", f"exited ({status})", 1) if status else self.reason


def peek_exit(pid: int) -> int | None:
    """The exit status of child ``pid`` if it has exited, read without reaping it (``waitid`` with ``WNOWAIT``, so
    asyncio's own waiter still gets it): a negative signal number if it was killed; None while it runs, or where
    ``waitid`` is missing. Read as soon as the output ends because asyncio reports 255 for a child reaped before its
    waiter thread gets to it."""
    if not hasattr(os, "waitid"):
        return None
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


def exit_status(code: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"`` (a negative code is the signal), or "" when unknown."""
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"
