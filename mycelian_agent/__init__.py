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
    "ControlState": "control",
    "AgentState": "state",
    "MycelianMemoryAgent": "agent",
    "AgentSettings": "agent",
    "MycelianAgentInvoker": "invoker",
    "InvocationResult": "results",
    "ThreadStatus": "results",
    "build_agent": "builder",
    "MemoryConnection": "mcp",
    "PromptSet": "prompts",
    "resolve_model": "models",
    "ExtractiveChatModel": "extractive",
    "MycelianError": "errors",
    "ConfigError": "errors",
    "InputError": "errors",
    "PromptError": "errors",
    "MemoryServerError": "errors",
    "ToolCallError": "errors",
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
    from .agent import AgentSettings, MycelianMemoryAgent
    from .builder import build_agent
    from .control import ControlState
    from .errors import ConfigError, InputError, MemoryServerError, MycelianError, PromptError, ToolCallError
    from .extractive import ExtractiveChatModel
    from .invoker import MycelianAgentInvoker
    from .mcp import MemoryConnection
    from .models import resolve_model
    from .prompts import PromptSet
    from .results import InvocationResult, ThreadStatus
    from .state import AgentState
