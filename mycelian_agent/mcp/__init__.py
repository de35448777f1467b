"""One persistent MCP session to a memory server, and its tools.

``langchain-mcp-adapters``' ``client.get_tools()`` opens a new session per tool call: over stdio that spawns a
server process every time (~574 ms a call measured, against ~3.5 ms on a persistent session). A
:class:`MemoryConnection` opens one session, keeps it in a task of its own (anyio requires a session to be closed
by the task that opened it) and loads the tools on it once. The tools call through the connection, which puts a
deadline on every call and, over HTTP, replaces a broken session with a new one (python-sdk issue 1577: a request
whose server died is otherwise never answered).

A dead server is seen at once, not after a call's deadline: over stdio the session's read stream is watched (the
server's output ends), over HTTP its transport (a refused or reset connection), and every call waiting on a session
that ended fails then.

The modules: :mod:`.endpoints` (where a server is: stdio spawn, HTTP URL, in-process), :mod:`.connection` (the
session task, reconnection, calls and tools), :mod:`.stdio_session` and :mod:`.http_session` (how each transport's
end is seen), :mod:`.session_end` (the end itself and a server's exit status).
"""

from __future__ import annotations

from .connection import MemoryConnection, call_tool_unchecked
from .endpoints import SessionFactory, embedded_connection, http_connection, in_process_connection

__all__ = [
    "MemoryConnection",
    "SessionFactory",
    "call_tool_unchecked",
    "embedded_connection",
    "http_connection",
    "in_process_connection",
]
