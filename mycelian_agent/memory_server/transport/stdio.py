"""The stdio transport: :func:`serve_stdio` serves one MCP session over stdin/stdout, driven by the event loop.

``mcp``'s default stdio transport reads and writes through ``anyio.wrap_file``: a worker-thread round trip for
every line read, write and flush, which costs more than an ``add_entry`` itself. When stdin and stdout are pipes
or sockets (as when an MCP client spawns the server) they are driven by the event loop directly instead.
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import BinaryIO

from mcp.server.fastmcp import FastMCP
from mcp.server.stdio import stdio_server

__all__ = ["PipeLines", "PipeWriter", "open_stdio_pipes", "serve_stdio"]

# One JSON-RPC message per line; a 64 KiB context can triple when JSON-escaped, so allow far more than that.
_MAX_LINE = 64 * 1024 * 1024


class PipeLines:
    """``async for line in PipeLines(reader)``: decoded lines until end of input (what ``stdio_server`` reads)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class PipeWriter:
    """``await write(text)`` / ``await flush()`` over an asyncio pipe (what ``stdio_server`` writes to)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        """Queue ``text`` (UTF-8) for writing."""
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        """Wait until the pipe has taken the queued bytes (flow control)."""
        await self._writer.drain()


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def open_stdio_pipes(stdin_fd: int = 0, stdout_fd: int = 1) -> tuple[PipeLines, PipeWriter] | None:
    """Event-loop driven reader/writer for the process's stdin/stdout, or None if they are not pipes/sockets."""
    if not (_is_pipe(stdin_fd) and _is_pipe(stdout_fd)):
        return None
    loop = asyncio.get_running_loop()
    # Duplicates, so that closing the transports never closes the process's own fds 0 and 1.
    stdin: BinaryIO = os.fdopen(os.dup(stdin_fd), "rb", buffering=0)
    stdout: BinaryIO = os.fdopen(os.dup(stdout_fd), "wb", buffering=0)
    try:
        reader = asyncio.StreamReader(limit=_MAX_LINE)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout)
    except (OSError, ValueError, NotImplementedError):  # loops without pipe support (e.g. Windows' selector loop)
        # None tells the caller to serve with mcp's own (threaded) stdio transport instead
        stdin.close()
        stdout.close()
        return None
    return PipeLines(reader), PipeWriter(asyncio.StreamWriter(transport, protocol, None, loop))


async def serve_stdio(server: FastMCP) -> None:
    """Serve one session of ``server`` over stdin/stdout (mcp's threaded transport where they are not pipes)."""
    pipes = await open_stdio_pipes()
    if pipes is None:
        await server.run_stdio_async()
        return
    lines, writer = pipes
    # Same as FastMCP.run_stdio_async, with our stdin/stdout (stdio_server accepts them for this purpose).
    async with stdio_server(stdin=lines, stdout=writer) as (read_stream, write_stream):  # type: ignore[arg-type]
        await server._mcp_server.run(read_stream, write_stream, server._mcp_server.create_initialization_options())
