"""The memory tools on a database opened in this process, without MCP: the CLI's one-shot commands.

``mycelian-agent list|show|search|export|get|history|delete`` against the embedded database (``--db``, no
``--server``) read or delete, and ``add`` with the extractive model writes one entry (``agent/oneshot.py``); loading
the MCP SDK and LangChain for that took ~1.5 s of the ~2 s each command took. This connection answers the same tool
names with the same JSON shapes by calling :class:`MemoryStore` directly (the tools in ``app.py`` are one store call
each), so those commands start in a few hundred milliseconds. ``replay``, ``update`` and ``add`` with another model go
through the agent and the MCP tools.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from mycelian_agent.errors import InputError, MycelianError
from mycelian_agent.memory_server.retrieval.pipeline import search
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.base import MemoryStore

__all__ = ["LOCAL_TOOLS", "LocalConnection"]

#: Tool name -> the store method (or, for search, retrieval's function of a store) that implements it (same argument
#: names, same result).
LOCAL_TOOLS: Mapping[str, Callable[..., Any]] = {
    "create_vault": MemoryStore.create_vault,
    "list_vaults": MemoryStore.list_vaults,
    "create_memory_in_vault": MemoryStore.create_memory,
    "list_memories": MemoryStore.list_memories,
    "get_memory": MemoryStore.get_memory,
    "list_entries": MemoryStore.list_entries,
    "get_entry": MemoryStore.get_entry,
    "add_entry": MemoryStore.add_entry,
    "list_entry_versions": MemoryStore.list_entry_versions,
    "get_context": MemoryStore.get_context,
    "search_memories": search,
    "delete_entry": MemoryStore.delete_entry,
    "delete_memory": MemoryStore.delete_memory,
}


class LocalConnection:
    """``call``/``call_json``/``aclose`` of :class:`~mycelian_agent.mcp.MemoryConnection` over a store opened here."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    @classmethod
    def open(cls, target: str, *, dense: bool = False) -> LocalConnection:
        """Open the memory database ``target`` (a SQLite path or a ``postgresql://`` URL). ``dense``: search it as
        a server would by default, dense + BM25 when a dense model is installed (the model loads here; vectors a
        search finds missing are written inline, no background writer for a one-shot command)."""
        dense_factory = None
        if dense:
            from mycelian_agent.memory_server.retrieval.dense.index import dense_by_default, load_dense_index

            if dense_by_default():
                dense_factory = partial(load_dense_index, writes="inline")
        return cls(open_store(target, pool_size=1, dense_factory=dense_factory))

    def _run(self, tool: str, arguments: Mapping[str, Any] | None) -> Any:
        method = LOCAL_TOOLS.get(tool)
        if method is None:
            raise InputError(
                f"{tool} is not available on a local database connection (available: {', '.join(LOCAL_TOOLS)})"
            )
        try:
            with self.store.explained():
                return method(self.store, **dict(arguments or {}))
        except MycelianError as exc:  # worded as the MCP client words a tool's error
            raise type(exc)(f"{tool} failed: {exc}") from exc

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run ``tool`` and return its text result (JSON, or the context document for ``get_context``)."""
        result = self._run(tool, arguments)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def parameters(self, name: str) -> set[str]:
        """The parameter names of tool ``name`` (those of the store method behind it)."""
        method = LOCAL_TOOLS.get(name)
        return set(list(inspect.signature(method).parameters)[1:]) if method is not None else set()

    async def call_json(self, tool: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Run ``tool`` and return its result as the JSON value the MCP tool would have answered."""
        return json.loads(await self.call(tool, arguments))

    async def aclose(self) -> None:
        """Close the database."""
        self.store.close()
