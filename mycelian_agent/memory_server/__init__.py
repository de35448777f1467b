"""The embedded Mycelian-compatible MCP memory server on SQLite or PostgreSQL.

Importing this package is cheap (no FastMCP, no SQLite work): the server pieces load on first use.

- :func:`create_server` builds the FastMCP server for a database path or ``postgresql://`` URL (:func:`open_store`
  opens the store itself: :class:`MemoryStore`, SQLite's :class:`Store` or ``storage.postgres.PostgresStore``);
  :func:`create_http_app` wraps it as a
  Starlette app (streamable HTTP at ``/mcp``, optional bearer token); ``mycelian-memory-server`` is the CLI.
- :data:`PLACEHOLDER_CONTEXT` / :func:`is_placeholder_context`: the context a new memory answers, and how clients
  recognise it (ours and upstream's wording).
- :class:`LocalConnection`: the memory tools on a database opened in this process, without MCP (the CLI's one-shot
  commands); :func:`pending_vectors`: how many entries of a database still wait for their dense vector.

This is the package's front: code outside ``memory_server/`` imports these names (and the entry points ``cli`` and
``testing``), never its rooms (``text``, ``storage``, ``retrieval``, ``server``, ``transport``);
``tests/test_architecture.py`` checks it.

In-process use (tests)::

    from mycelian_agent.memory_server import create_server
    from mycelian_agent.memory_server.testing import in_memory_session, call_json

    async with in_memory_session(create_server(":memory:")) as session:   # an initialised mcp.ClientSession
        vault = await call_json(session, "create_vault", title="demo")

Over HTTP: ``uvicorn.run(create_http_app(create_server(path, token=...)), port=11546)``, or
``testing.serve_http(server)`` inside a running event loop. Over stdio: ``testing.server_command(path)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mycelian_agent.placeholder import PLACEHOLDER_CONTEXT, is_placeholder_context

if TYPE_CHECKING:
    from mycelian_agent.memory_server.retrieval.dense.index import pending_vectors
    from mycelian_agent.memory_server.server.app import MemoryServer, create_server
    from mycelian_agent.memory_server.server.local import LocalConnection
    from mycelian_agent.memory_server.storage import open_store
    from mycelian_agent.memory_server.storage.base import MemoryStore
    from mycelian_agent.memory_server.storage.sqlite.store import Store
    from mycelian_agent.memory_server.transport.http_app import create_http_app

__all__ = [
    "PLACEHOLDER_CONTEXT",
    "LocalConnection",
    "MemoryServer",
    "MemoryStore",
    "Store",
    "create_http_app",
    "create_server",
    "is_placeholder_context",
    "open_store",
    "pending_vectors",
]

_LAZY = {
    "create_server": ("server.app", "create_server"),
    "MemoryServer": ("server.app", "MemoryServer"),
    "create_http_app": ("transport.http_app", "create_http_app"),
    "Store": ("storage.sqlite.store", "Store"),
    "MemoryStore": ("storage.base", "MemoryStore"),
    "open_store": ("storage", "open_store"),
    "LocalConnection": ("server.local", "LocalConnection"),
    "pending_vectors": ("retrieval.dense.index", "pending_vectors"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        value = getattr(import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
