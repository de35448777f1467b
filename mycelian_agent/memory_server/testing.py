"""Helpers to run the memory server in-process or as a subprocess (for tests, benchmarks and examples).

Nothing here is imported by the server itself.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult

from mycelian_agent.memory_server.server.access import TokenScopes
from mycelian_agent.memory_server.server.app import MemoryServer
from mycelian_agent.memory_server.server.runtime import StoreRunner

from ..errors import MemoryServerError

__all__ = [
    "BackgroundSession",
    "call_json",
    "call_text",
    "in_memory_session",
    "result_text",
    "serve_http",
    "server_command",
]


@asynccontextmanager
async def in_memory_session(server: MemoryServer) -> AsyncIterator[ClientSession]:
    """An initialised MCP client session talking to ``server`` over in-memory streams (no subprocess)."""
    async with create_connected_server_and_client_session(server) as session:
        yield session


class BackgroundSession:
    """An in-memory client session owned by a background task, for pytest fixtures.

    anyio cancel scopes must be exited by the task that entered them, and pytest-asyncio may run a fixture's
    setup and teardown in different tasks; so the session lives in its own task::

        @pytest.fixture
        async def session():
            bg = await BackgroundSession.start(create_server(":memory:"))
            yield bg.session
            await bg.aclose()
    """

    def __init__(self) -> None:
        self.session: ClientSession
        #: The server's store, for checks from the test side (``await bg.runner.call(MemoryStore.counts)``).
        self.runner: StoreRunner
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, server: MemoryServer) -> BackgroundSession:
        """Open the session (the database stays open until :meth:`aclose`)."""
        self = cls()
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()

        async def _run() -> None:
            try:
                async with server.hold() as runner, in_memory_session(server) as session:
                    self.runner = runner
                    ready.set_result(session)
                    await self._done.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        self._task = asyncio.create_task(_run())
        self.session = await ready
        return self

    async def aclose(self) -> None:
        """Close the session and the database."""
        self._done.set()
        if self._task is not None:
            await self._task


@asynccontextmanager
async def serve_http(
    server: MemoryServer, *, token: str | None = None, host: str = "127.0.0.1", tokens: TokenScopes | None = None
) -> AsyncIterator[str]:
    """Serve ``server`` with uvicorn on a free ``host`` port inside this event loop; yield the ``/mcp`` URL.
    ``token``/``tokens`` as for :func:`~mycelian_agent.memory_server.transport.http_app.create_http_app`."""
    import uvicorn

    from mycelian_agent.memory_server.transport.http_app import create_http_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_http_app(server, token=token, tokens=tokens),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    try:
        while not uv.started:
            if task.done():
                task.result()
                raise MemoryServerError("the HTTP server stopped during startup")
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}/mcp"
    finally:
        uv.should_exit = True
        await task
        sock.close()


def server_command(db_path: str | Path, *args: str) -> tuple[str, list[str]]:
    """``(command, args)`` that start ``mycelian-memory-server`` with this Python on ``db_path``."""
    return sys.executable, ["-m", "mycelian_agent.memory_server", "--db", str(db_path), *args]


def result_text(tool: str, result: CallToolResult) -> str:
    """The text of ``tool``'s result; an MCP error result raises :class:`MemoryServerError`."""
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.isError:
        raise MemoryServerError(text, tool=tool)
    return text


async def call_text(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call ``tool`` and return its text; an MCP error result raises :class:`MemoryServerError`. The SDK checks the
    structured content against the tool's output schema, as any MCP client does."""
    return result_text(tool, await session.call_tool(tool, arguments))


async def call_json(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """Call ``tool`` and parse its JSON text; an MCP error result raises :class:`MemoryServerError`."""
    return json.loads(await call_text(session, tool, **arguments))
