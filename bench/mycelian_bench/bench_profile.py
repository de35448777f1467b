"""Where the agent process's time goes: a sampling profile (pyinstrument) grouped by component.

Each sample's self time is charged to the innermost frame that belongs to a known component; helpers (the
standard library, builtins, pydantic, msgpack) are charged to the component that called them. Samples waiting on
I/O (the event loop's ``epoll.poll``: the server's reply, the SQLite thread) are reported as idle. The profiler
slows the code down, so read the shares, not the absolute milliseconds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["COMPONENTS", "IDLE", "LOOP", "breakdown", "component_of"]

#: (path fragment, component), first match wins; checked from the innermost non-helper frame outwards.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("langgraph/checkpoint/", "checkpointer (serialise + SQLite)"),
    ("/aiosqlite/", "checkpointer (serialise + SQLite)"),
    ("/mcp/", "MCP client (JSON-RPC over stdio)"),
    ("/langchain_mcp_adapters/", "MCP client (JSON-RPC over stdio)"),
    ("/anyio/", "MCP client (JSON-RPC over stdio)"),
    ("mycelian_agent/extractive/", "extractive model"),
    ("langchain_core/language_models/", "langchain chat-model wrapper"),
    ("langchain_core/tools/", "langchain tool wrapper"),
    ("langgraph/prebuilt/", "langgraph ToolNode"),
    ("/langgraph/", "langgraph graph loop (pregel)"),
    ("/langchain_core/", "langchain_core runnables, callbacks, messages"),
    ("/langsmith/", "langchain_core runnables, callbacks, messages"),
    ("mycelian_agent/", "mycelian_agent (state, prompts, invoker)"),
)
_HELPERS = (
    "<built-in>",
    "<frozen",
    "<string>",
    "/pydantic/",
    "/pydantic_core/",
    "/typing_extensions",
    "/ormsgpack/",
    "/uuid_utils/",
    "/jsonpatch",
    "/jsonpointer",
)
_WAITS = ("poll", "select", "control")
IDLE = "idle: awaiting I/O (server reply, SQLite thread)"
LOOP = "asyncio event loop"


def component_of(paths: list[str]) -> str:
    """The component of a stack given innermost-first file paths."""
    for path in paths:
        stdlib = "/python3." in path and "site-packages" not in path
        if stdlib or any(h in path for h in _HELPERS):
            continue
        for fragment, name in COMPONENTS:
            if fragment in path:
                return name
    return LOOP


def breakdown(session: Any) -> Counter:
    """Seconds per component over a pyinstrument session."""
    totals: Counter = Counter()
    root = session.root_frame()
    if root is None:
        return totals
    stack: list[tuple[Any, list[str], str]] = [(root, [], "")]
    while stack:
        frame, outer, parent_function = stack.pop()
        path = frame.file_path or "<built-in>"
        paths = outer if frame.is_synthetic else [path, *outer]
        # Self time sits on synthetic "[self]" children: judge them by the frame they belong to.
        function = parent_function if frame.is_synthetic and frame.function != "[await]" else frame.function
        self_time = frame.time - sum(child.time for child in frame.children)
        if self_time > 0:
            idle = function == "[await]" or function.split(".")[-1] in _WAITS
            totals[IDLE if idle else component_of(paths)] += self_time
        stack.extend((child, paths, function) for child in frame.children)
    return totals
