"""mycelian-agent: long-term memory for chat pipelines.

A LangGraph memory agent observes a conversation and writes it, through MCP tools, into a Mycelian-compatible
memory server (an embedded SQLite one ships with the package). Quick start::

    from mycelian_agent import build_agent

    async with build_agent(model="extractive", db="memory.db") as invoker:
        await invoker.astart_session("thread-1")
        await invoker.aprocess_conversation_message("user", "I moved to Denver in March.", "thread-1")
        await invoker.aend_session("thread-1")

Names are imported lazily: ``import mycelian_agent`` loads nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ControlState": "agent.control",
    "AgentState": "agent.state",
    "MycelianMemoryAgent": "agent.graph",
    "AgentSettings": "agent.settings",
    "MycelianAgentInvoker": "agent.invoker",
    "InvocationResult": "agent.report",
    "ThreadStatus": "agent.report",
    "build_agent": "builder",
    "ConnectionSettings": "builder",
    "MemoryConnection": "mcp",
    "MemoryHit": "recall",
    "MemoryReader": "recall",
    "Recall": "recall",
    "MemoryEntry": "recall",
    "EntryPage": "recall",
    "MycelianRetriever": "integrations",
    "MycelianStore": "integrations",
    "make_search_memory_tool": "integrations",
    "make_manage_memory_tool": "integrations",
    "PromptSet": "agent.prompts",
    "resolve_model": "models.resolve",
    "ExtractiveChatModel": "models.extractive",
    "MycelianError": "errors",
    "ConfigError": "errors",
    "InputError": "errors",
    "PromptError": "errors",
    "MemoryServerError": "errors",
    "ToolCallError": "errors",
    "ThreadBusyError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mycelian_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .agent.control import ControlState
    from .agent.graph import MycelianMemoryAgent
    from .agent.invoker import MycelianAgentInvoker
    from .agent.prompts import PromptSet
    from .agent.report import InvocationResult, ThreadStatus
    from .agent.settings import AgentSettings
    from .agent.state import AgentState
    from .builder import ConnectionSettings, build_agent
    from .errors import (
        ConfigError,
        InputError,
        MemoryServerError,
        MycelianError,
        PromptError,
        ThreadBusyError,
        ToolCallError,
    )
    from .integrations import MycelianRetriever, MycelianStore, make_manage_memory_tool, make_search_memory_tool
    from .mcp import MemoryConnection
    from .models.extractive import ExtractiveChatModel
    from .models.resolve import resolve_model
    from .recall import EntryPage, MemoryEntry, MemoryHit, MemoryReader, Recall
