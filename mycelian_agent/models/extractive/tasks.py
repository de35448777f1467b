"""The extractive model's answers as functions of the task data: the tool arguments (summary and tags, the context
document) it writes for an ``add_entry``, ``add_entries`` or ``put_context`` task (the shapes are in
docs/ARCHITECTURE.md, "Agent ↔ model contract"). Deterministic string work, no LangChain: the chat model
(:mod:`.chat`) and the one-shot write (``agent/oneshot.py``) call them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ...errors import ToolCallError
from .context import DEFAULT_CONTEXT_MAX_CHARS, merge_context
from .text import entry_tags, summarize_message

__all__ = ["OPERATIONS", "add_entries_args", "add_entry_args", "fail", "put_context_args", "require"]


def fail(what: str) -> NoReturn:
    """Raise the contract error ``what`` (a task the agent should never send)."""
    raise ToolCallError(f"extractive model: {what} (see docs/ARCHITECTURE.md, 'Agent ↔ model contract')")


def require(condition: bool, what: str) -> None:
    """:func:`fail` with ``what`` unless ``condition``."""
    if not condition:
        fail(what)


def _list(value: Any, what: str) -> Sequence[Any]:
    """``value`` when it is a list (not a string), else the contract error ``what``."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        fail(what)
    return value


def _check_message(message: Any, where: str) -> Mapping[str, Any]:
    require(isinstance(message, Mapping), f"{where} must be an object with role, content, conversation_time")
    require(isinstance(message.get("role"), str), f"{where}['role'] is missing or not a string")
    require(isinstance(message.get("content"), str), f"{where}['content'] is missing or not a string")
    return message


def add_entry_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``add_entry`` tool arguments (summary and tags) for an ``add_entry`` task payload."""
    message = _check_message(task.get("message"), "mycelian_task['message']")
    recent = task.get("recent") or []
    require(isinstance(recent, Sequence), "mycelian_task['recent'] must be a list of messages")
    recent = [m for m in recent if isinstance(m, Mapping)]
    name = message.get("name")
    require(name is None or isinstance(name, str), "mycelian_task['message']['name'] must be a string when given")
    summary = summarize_message(
        message["content"],
        role=message["role"],
        conversation_time=message.get("conversation_time"),
        recent=recent,
        name=name,
    )
    return {"summary": summary, "tags": entry_tags(message["content"], role=message["role"])}


def put_context_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``put_context`` tool arguments (the context document) for a ``put_context`` task payload."""
    messages = _list(task.get("messages"), "mycelian_task['messages'] is missing")
    for i, message in enumerate(messages):
        _check_message(message, f"mycelian_task['messages'][{i}]")
    previous = task.get("previous_context") or ""
    require(isinstance(previous, str), "mycelian_task['previous_context'] must be a string")
    max_chars = task.get("max_chars", DEFAULT_CONTEXT_MAX_CHARS)
    require(isinstance(max_chars, int) and max_chars > 0, "mycelian_task['max_chars'] must be a positive int")
    return {"content": merge_context(previous, messages, max_chars=max_chars)}


def add_entries_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``add_entries`` tool arguments (one ``{item, summary, tags}`` per item) for an ``add_entries`` task
    payload; with a ``context_task`` (operation ``add_entries_and_context``) also the new context document.

    Each item is summarised exactly as :func:`add_entry_args` would summarise it alone, from the item's own
    ``recent`` messages, so batching changes no summary.
    """
    items = _list(task.get("items"), "mycelian_task['items'] must be a non-empty list")
    require(len(items) > 0, "mycelian_task['items'] must be a non-empty list")
    entries = []
    for i, item in enumerate(items):
        require(
            isinstance(item, Mapping) and isinstance(item.get("item"), int),
            f"mycelian_task['items'][{i}] must be an object with an integer 'item'",
        )
        args = add_entry_args({"message": item.get("message"), "recent": item.get("recent") or []})
        entries.append({"item": item["item"], **args})
    result: dict[str, Any] = {"entries": entries}
    if task.get("context_task") is not None:
        require(isinstance(task["context_task"], Mapping), "mycelian_task['context_task'] must be an object")
        result["context"] = put_context_args(task["context_task"])["content"]
    return result


#: The operations of the agent's tasks (``mycelian_task["operation"]``) and the arguments each answers with.
OPERATIONS = {
    "add_entry": add_entry_args,
    "put_context": put_context_args,
    "add_entries": add_entries_args,
    "add_entries_and_context": add_entries_args,
}
