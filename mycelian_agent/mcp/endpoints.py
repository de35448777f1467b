"""Where a memory server is: the connection descriptions :class:`~mycelian_agent.mcp.MemoryConnection` opens.

A description is either a langchain-mcp-adapters ``Connection`` (a stdio spawn of our embedded server, a
streamable-HTTP URL) or a :data:`SessionFactory` that opens a session on a server inside this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager

from langchain_mcp_adapters.sessions import StdioConnection, StreamableHttpConnection
from mcp import ClientSession

from ..errors import ConfigError

__all__ = ["SessionFactory", "embedded_connection", "http_connection", "in_process_connection"]

#: Opens an initialised client session (an in-process server); the alternative to a langchain-mcp-adapters Connection.
SessionFactory = Callable[[], AbstractAsyncContextManager[ClientSession]]


def embedded_connection(
    db: str | None = None, *, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> StdioConnection:
    """A stdio connection that spawns our embedded memory server on SQLite file ``db`` (None: its default)."""
    args = [
        "-m",
        "mycelian_agent.memory_server",
        "--transport",
        "stdio",
        *(["--db", str(db)] if db else []),
        *extra_args,
    ]
    connection = StdioConnection(transport="stdio", command=sys.executable, args=args)
    # The MCP SDK gives a server only a few variables (HOME, PATH, ...): PYTHONPATH is passed on so that the server
    # imports the same package as this process (a source checkout on PYTHONPATH, not another installed copy). This
    # is the child's environment, not configuration read here.
    inherited = {name: os.environ[name] for name in ("PYTHONPATH",) if os.environ.get(name)}
    if env is not None or inherited:
        connection["env"] = {**inherited, **(env or {})}
    return connection


def http_connection(url: str, *, token: str | None = None, timeout: float = 30.0) -> StreamableHttpConnection:
    """A streamable-HTTP connection to a memory server at ``url`` (e.g. ``http://127.0.0.1:11546/mcp``)."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"memory server URL must start with http:// or https://, got {url!r}")
    connection = StreamableHttpConnection(transport="streamable_http", url=url, timeout=timeout)
    if token:
        connection["headers"] = {"Authorization": f"Bearer {token}"}
    return connection


def in_process_connection(
    db: str, *, embeddings: bool | str | None = None, embeddings_model: str | None = None
) -> SessionFactory:
    """Our memory server inside this process on SQLite file ``db``, over in-memory streams: the same tools and
    checks as the embedded stdio server, without a subprocess (notebooks, tests, single-process apps).
    ``embeddings``: None (the server's default: on when a dense model is installed), False, or how vectors are
    written (True or ``"behind"``, ``"inline"``); ``embeddings_model``: the dense model (None: auto)."""

    def open_session() -> AbstractAsyncContextManager[ClientSession]:
        from mcp.shared.memory import create_connected_server_and_client_session

        from ..memory_server import create_server

        writes = embeddings if embeddings in ("behind", "inline") else "behind"
        return create_connected_server_and_client_session(
            create_server(
                db,
                embeddings=None if embeddings is None else bool(embeddings),
                embeddings_writes=writes,
                embeddings_model=embeddings_model,
            )
        )

    return open_session
