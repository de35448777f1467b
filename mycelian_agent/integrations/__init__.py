"""LangChain and LangGraph doors onto Mycelian memory.

- :class:`MycelianRetriever` (``integrations.retriever``): a LangChain retriever; each hit is a ``Document``.
- :func:`make_search_memory_tool` (``integrations.tools``): a ``search_memory`` tool for tool-calling agents that
  answers with the recall block.
- :class:`MycelianStore` (``integrations.store``): LangGraph's ``BaseStore`` over the memory server, for
  ``graph.compile(store=...)`` and the tools written for LangGraph's store.

Each takes the invoker ``build_agent`` yields (or its ``invoker.reader``); the user of a call comes from
``config["configurable"]["user_id"]`` where LangGraph passes a config, else from the ``user`` given at construction.
Names are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "MycelianRetriever": "retriever",
    "make_search_memory_tool": "tools",
    "SearchMemoryInput": "tools",
    "MycelianStore": "store",
    "namespace_title": "store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mycelian_agent.integrations' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .retriever import MycelianRetriever
    from .store import MycelianStore, namespace_title
    from .tools import SearchMemoryInput, make_search_memory_tool
