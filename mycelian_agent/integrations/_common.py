"""What the integrations share: the reader and event loop behind an invoker, and the user of a call."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..recall import MemoryReader, check_user

__all__ = ["config_user", "memory_parts"]


def memory_parts(
    memory: Any, loop: asyncio.AbstractEventLoop | None = None
) -> tuple[MemoryReader, asyncio.AbstractEventLoop | None]:
    """``(reader, loop)`` of ``memory``: an invoker from ``build_agent`` (its reader and the loop its MCP session is
    bound to, which the sync methods run on) or a :class:`MemoryReader` (then ``loop``, if any)."""
    if isinstance(memory, MemoryReader):
        return memory, loop
    reader = getattr(memory, "reader", None)
    if isinstance(reader, MemoryReader):
        return reader, loop or getattr(memory, "loop", None)
    if hasattr(memory, "agent"):
        raise ConfigError(
            "this invoker has no reader: build it with build_agent(...), which connects the read side "
            "(search, recall, users) to the memory server"
        )
    raise ConfigError(f"expected the invoker build_agent(...) yields or a MemoryReader, got {type(memory).__name__}")


def config_user(config: Mapping[str, Any] | None, default: str | None) -> str | None:
    """The user of a call: ``config["configurable"]["user_id"]`` (LangGraph / LangMem style) when given, else
    ``default``; checked to name a memory (:func:`~mycelian_agent.recall.check_user`)."""
    configurable = (config or {}).get("configurable") or {}
    user = configurable.get("user_id") if isinstance(configurable, Mapping) else None
    user = default if user is None else user
    return None if user is None else check_user(user)
