"""LangChain and LangGraph doors onto Mycelian memory.

- :class:`MycelianRetriever` (``integrations.retriever``): a LangChain retriever; each hit is a ``Document``.
- :func:`make_search_memory_tool` (``integrations.tools``): a ``search_memory`` tool for tool-calling agents that
  answers with the recall block; :func:`make_manage_memory_tool` a ``manage_memory`` tool that creates, updates
  and deletes the user's memory items.
- :class:`MycelianStore` (``integrations.store``): LangGraph's ``BaseStore`` over the memory server, for
  ``graph.compile(store=...)`` and the tools written for LangGraph's store.

Each takes the invoker ``build_agent`` yields (or its ``invoker.reader``); the user of a call comes from
``config["configurable"]["user_id"]`` where LangGraph passes a config, else from the ``user`` given at construction.
Importing this package loads LangChain and LangGraph (the root package's names stay lazy).
"""

from __future__ import annotations

from .retriever import MycelianRetriever
from .store import MycelianStore, namespace_title
from .tools import ManageMemoryInput, SearchMemoryInput, make_manage_memory_tool, make_search_memory_tool

__all__ = [
    "ManageMemoryInput",
    "MycelianRetriever",
    "MycelianStore",
    "SearchMemoryInput",
    "make_manage_memory_tool",
    "make_search_memory_tool",
    "namespace_title",
]
