"""One message stored without the agent's graph: what a one-shot ``mycelian-agent add`` runs with the extractive model.

``add`` through the agent (:func:`~mycelian_agent.builder.build_agent`, an in-memory checkpointer) sends its message
as message 1 of a new thread: no earlier messages, no context document in the thread's state, and no flush (that
comes with every ``flush_every``-th message; the command's is 6). The agent's one step, ADD_ENTRY, asks the model for
each part's summary and tags and wraps them in the arguments code owns. The extractive model's answer is a function
of the task (:func:`~mycelian_agent.models.extractive.add_entry_args`), so :func:`astore_message` builds the same task
(:func:`~.entries.add_entry_task`), checks the answer as the agent does (:func:`~.entries.check_summary`,
:func:`~.entries.check_tags`), builds the same arguments (:func:`~.entries.entry_args`) and calls ``add_entry``
itself: the same entries, and, as through the agent, no context document, without importing LangChain or LangGraph
or building the graph (most of the command's time). Any other model goes through the agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..dates import normalise_time
from ..errors import ToolCallError
from ..models.extractive import add_entry_args
from .entries import Unusable, add_entry_task, check_summary, check_tags, entry_args, split_parts
from .inputs import check_thread, to_turn
from .settings import AgentSettings
from .turn import Turn

__all__ = ["astore_message", "check_message"]

#: The number of the message in its thread: the first, as ``add`` through the agent gives it.
_FIRST = 1


def check_message(
    role: str, content: str, conversation_time: str | datetime | None = None, *, name: str | None = None
) -> Turn:
    """The message to store, checked as the agent's public edge checks it (:func:`~.inputs.to_turn`): an invalid
    role, text, time or name raises :class:`~mycelian_agent.errors.InputError` naming the problem."""
    return to_turn({"role": role, "content": content}, normalise_time(conversation_time), name)


async def astore_message(
    connection: Any,
    vault_id: str,
    memory_id: str,
    thread_id: str,
    message: Turn,
    *,
    settings: AgentSettings | None = None,
) -> list[str]:
    """Store ``message`` (from :func:`check_message`) in memory ``memory_id`` as the first message of thread
    ``thread_id``, as the agent with the extractive model stores it (see the module docstring); the ids of its
    entries (one per part; none when the server answers without them).

    ``connection`` is an open memory connection (``call`` and ``parameters``: an MCP
    :class:`~mycelian_agent.mcp.MemoryConnection` or an in-process
    :class:`~mycelian_agent.memory_server.server.local.LocalConnection`). A server failure raises
    :class:`~mycelian_agent.errors.MemoryServerError` after the agent's retries of transient failures (the same
    arguments, so the same idempotency key: nothing is stored twice).
    """
    settings = settings or AgentSettings()
    check_thread(thread_id)
    parts = split_parts(message["content"], settings.entry_max_chars)
    idempotency = "idempotency_key" in connection.parameters("add_entry")
    ids = {"vault_id": vault_id, "memory_id": memory_id}
    stored: list[str] = []
    for index, text in enumerate(parts):
        task = add_entry_task(
            message,
            text,
            (),
            "",
            recent_message_chars=settings.recent_message_chars,
            context_chars=settings.entry_context_chars,
        )
        args = entry_args(
            ids, thread_id, message, _FIRST, (index, len(parts)), text, _written(task), {}, idempotency=idempotency
        )
        stored += _entry_ids(await _call(connection, settings, "add_entry", args))
    return stored


async def _call(connection: Any, settings: AgentSettings, name: str, args: Mapping[str, Any]) -> str:
    """``connection.call(name, args)``, a transient failure retried as the agent retries its tool calls."""
    async for attempt in settings.tool_retrying():
        with attempt:
            return str(await connection.call(name, args))
    raise AssertionError("unreachable")  # pragma: no cover - the retrying raises the last failure


def _written(task: Mapping[str, Any]) -> dict[str, Any]:
    """The extractive model's summary and tags for ``task``, checked as the agent checks a model's reply."""
    written = add_entry_args(task)
    try:
        return {"summary": check_summary(written.get("summary")), "tags": check_tags(written.get("tags"))}
    except Unusable as exc:
        raise ToolCallError(f"neither the model nor the fallback produced a usable add_entry call: {exc}") from None


def _entry_ids(answer: str) -> list[str]:
    """The id of the entry an ``add_entry`` answer stored (none from upstream Mycelian, which answers "enqueued")."""
    try:
        stored = json.loads(answer)
    except json.JSONDecodeError:
        return []
    return [stored["entryId"]] if isinstance(stored, Mapping) and stored.get("entryId") else []
