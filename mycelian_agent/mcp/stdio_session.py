"""A session with a memory server spawned over stdio, whose end is seen at once and whose stderr is kept.

The session's read stream is watched (:class:`WatchedStream`): when the server's output ends (it exited), the
session's :class:`~.session_end.SessionEnd` is set, with the server's last words from its log (:class:`ServerLog`)
and, through :func:`watch_spawns`, its exit status.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, TextIO

from anyio.streams.memory import MemoryObjectReceiveStream
from langchain_mcp_adapters.sessions import StdioConnection
from mcp import ClientSession
from mcp.shared.message import SessionMessage

from .session_end import OUTPUT_ENDED, SessionEnd, SpawnedProcess

__all__ = ["ServerLog", "WatchedStream", "stdio_session", "watch_spawns"]

#: What the MCP client reads from a stdio server.
Received = SessionMessage | Exception


class ServerLog:
    """Where a spawned server's stderr goes: a temporary file, so that a server that fails to start or dies is
    reported in the client's one error line (its last words) instead of as lines of its own before it. What the
    server wrote is passed on to this process's stderr when the session closes, unless an error already told it."""

    def __init__(self) -> None:
        # The server writes to the file's descriptor; this process reads the bytes back through ``file.buffer``.
        self.file: TextIO = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.told = False

    def _read_from(self, offset: int | None) -> str:
        """What the server wrote from ``offset`` (None: its last 8 KiB) to the end."""
        self.file.flush()
        raw = self.file.buffer
        size = raw.seek(0, 2)
        raw.seek(max(0, size - 8192) if offset is None else offset)
        return raw.read().decode("utf-8", errors="replace")

    def tail(self, lines: int = 1) -> str:
        """The last ``lines`` non-empty lines the server wrote, joined with " | " ("" if none)."""
        try:
            text = self._read_from(None)
        except (OSError, ValueError):
            return ""
        return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-lines:])

    def close(self) -> None:
        """Pass on what the server wrote (unless an error told it), then drop the file."""
        try:
            if not self.told:
                text = self._read_from(0)
                if text:
                    sys.stderr.write(text)
                    sys.stderr.flush()
        except (OSError, ValueError):
            pass
        finally:
            self.file.close()


#: The server processes spawned by the stdio sessions opened in this context (see :func:`watch_spawns`).
_SPAWNED: ContextVar[list[SpawnedProcess] | None] = ContextVar("mycelian_spawned", default=None)
#: The wrapper :func:`watch_spawns` put in place of the SDK's spawn function (None until it has).
_installed: Callable[..., Awaitable[Any]] | None = None


def watch_spawns() -> None:
    """Let :func:`stdio_session` see the process the MCP SDK spawns (the SDK keeps it to itself), so a server that
    dies is reported with its exit status. Wraps the SDK's spawn function once; a future SDK without it leaves the
    report without the status."""
    global _installed
    from mcp.client import stdio as sdk

    spawn = getattr(sdk, "_create_platform_compatible_process", None)
    if spawn is None or spawn is _installed:
        return

    async def watched(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        spawned = _SPAWNED.get()
        if spawned is not None:
            spawned.append(process)
        return process

    _installed = watched
    sdk._create_platform_compatible_process = watched


class WatchedStream:
    """The read stream of a stdio session that sets ``ended`` when the server's output ends (the process exited):
    the MCP client fails the requests in flight then, but a request sent afterwards would wait for its deadline."""

    def __init__(
        self, stream: MemoryObjectReceiveStream[Received], ended: SessionEnd, log: ServerLog | None = None
    ) -> None:
        self._stream = stream
        self._ended = ended
        self._log = log

    def _end(self) -> None:
        if self._ended.is_set():
            return
        last = self._log.tail(3) if self._log is not None else ""
        self._ended.set(OUTPUT_ENDED + (f"; its last words: {last}" if last else ""))

    async def __aenter__(self) -> WatchedStream:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._end()
        await self._stream.__aexit__(exc_type, exc, traceback)

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> Received:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._end()
            raise

    async def receive(self) -> Received:
        return await self._stream.receive()

    async def aclose(self) -> None:
        self._end()
        await self._stream.aclose()


@asynccontextmanager
async def stdio_session(connection: StdioConnection, ended: SessionEnd, log: ServerLog) -> AsyncIterator[ClientSession]:
    """A session with a server spawned over stdio (as langchain-mcp-adapters opens it), whose end is watched and
    whose stderr goes to ``log``."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=connection["command"], args=list(connection.get("args", [])), env=connection.get("env")
    )
    watch_spawns()
    async with contextlib.AsyncExitStack() as stack:
        token = _SPAWNED.set(ended.processes)  # only while the SDK spawns the server
        try:
            read, write = await stack.enter_async_context(stdio_client(params, errlog=log.file))
        finally:
            _SPAWNED.reset(token)
        watched = WatchedStream(read, ended, log)
        # Third-party boundary: ClientSession is annotated with anyio's concrete memory stream; the wrapper has the
        # same receive interface.
        yield await stack.enter_async_context(ClientSession(watched, write))  # type: ignore[arg-type]
