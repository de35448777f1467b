"""What callers give the agent, checked once at its public edge: the thread id, a message, its tags, the control.

Everything below this module handles a message as a :class:`~mycelian_agent.agent.turn.Turn` that is known to be
valid (a role of :data:`ROLES`, non-empty text the server can store, a normalised time, a checked speaker name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..dates import normalise_time
from ..errors import InputError
from ..limits import clip_tags, name_problem, unicode_problem
from .control import ControlState
from .turn import Turn

if TYPE_CHECKING:
    from langchain_core.messages import ChatMessage

__all__ = [
    "MESSAGE_KEYS",
    "ROLES",
    "check_messages",
    "check_thread",
    "checked_tags",
    "memory_binding",
    "parse_control",
    "to_turn",
]

ROLES = ("user", "assistant")
#: The keys of one message given to :meth:`MycelianMemoryAgent.aaccept_messages` as a mapping.
MESSAGE_KEYS = ("role", "content", "name", "conversation_time", "tags")


def check_thread(thread_id: Any) -> None:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InputError("thread_id must be a non-empty string")
    if problem := unicode_problem(thread_id):
        raise InputError(f"thread_id: {problem}")


def checked_tags(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """Input tags stored with a message's entry, clipped to the server's limits (text that cannot be stored is
    refused)."""
    for key, value in (tags or {}).items():
        if problem := next(filter(None, (unicode_problem(str(key)), unicode_problem(str(value)))), None):
            raise InputError(f"tag {str(key).encode('utf-8', 'backslashreplace').decode()!r}: {problem}")
    return clip_tags(tags or {})


def parse_control(value: ControlState | str) -> ControlState:
    try:
        return ControlState(value)
    except ValueError:
        accepted = ", ".join(c.value for c in ControlState)
        raise InputError(f"unknown control {value!r} (accepted: {accepted})") from None


def to_turn(to_process: Any, conversation_time: str | None, name: Any = None) -> Turn:
    """The message to store, checked once here, at the agent's public edge."""
    role: object
    content: object
    given: object = None
    if isinstance(to_process, Mapping):
        role, content, given = to_process.get("role"), to_process.get("content"), to_process.get("name")
    else:
        # Imported here: a one-shot add passes a mapping and loads no LangChain (a message object means it is loaded).
        from langchain_core.messages import BaseMessage, ChatMessage

        if isinstance(to_process, ChatMessage):
            role, content, given = to_process.role, to_process.content, to_process.name
        elif isinstance(to_process, BaseMessage):
            role = {"human": "user", "ai": "assistant"}.get(to_process.type, to_process.type)
            content, given = to_process.content, to_process.name
        else:
            raise InputError(
                f"to_process must be a ChatMessage or a {{'role', 'content', 'name'?}} mapping, "
                f"got {type(to_process).__name__}"
            )
    if name is not None and given is not None and name != given:
        raise InputError(f"two speaker names for one message: name={name!r} but to_process has {given!r}")
    name = name if name is not None else given
    if not isinstance(role, str) or role not in ROLES:
        raise InputError(f"unknown role {role!r}: a message's role must be one of {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise InputError(f"message content must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InputError("message content is empty: there is nothing to store")
    if problem := unicode_problem(content):
        raise InputError(f"message content: {problem}")
    turn = Turn(role=role, content=content)
    if conversation_time:
        turn["conversation_time"] = conversation_time
    if name is not None:
        if problem := name_problem(name):
            raise InputError(f"invalid name {name!r}: {problem}")
        turn["name"] = name.strip()
    return turn


def memory_binding(memory: Mapping[str, str] | None) -> dict[str, Any]:
    """The state update that binds a thread to ``memory`` (nothing when None)."""
    if memory is None:
        return {}
    missing = [key for key in ("vault_id", "memory_id") if not memory.get(key)]
    if missing:
        raise InputError(f"memory must give {' and '.join(missing)} (got {dict(memory)!r})")
    return {
        "memory": {"vault_id": memory["vault_id"], "memory_id": memory["memory_id"], "user": memory.get("user") or ""}
    }


def check_messages(
    messages: Sequence[ChatMessage | Mapping[str, Any]], conversation_time: str | datetime | None = None
) -> list[tuple[Turn, dict[str, str]]]:
    """Check every message of ``messages`` (see :meth:`MycelianMemoryAgent.aaccept_messages`): ``(turn, tags)``
    each, or raise :class:`InputError` naming the first bad one."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InputError(f"messages must be a list of messages, got {type(messages).__name__}")
    if not messages:
        raise InputError("messages is empty: there is nothing to accept")
    default_time = normalise_time(conversation_time)
    checked = []
    for index, item in enumerate(messages):
        try:
            if isinstance(item, Mapping):
                unknown = [str(key) for key in item if key not in MESSAGE_KEYS]
                if unknown:
                    raise InputError(
                        f"unknown key(s) {', '.join(map(repr, unknown))} (a message has {', '.join(MESSAGE_KEYS)})"
                    )
                when = item.get("conversation_time")
                turn = to_turn(
                    {k: item[k] for k in ("role", "content", "name") if k in item},
                    normalise_time(when) if when is not None else default_time,
                )
                tags = item.get("tags")
                if tags is not None and not isinstance(tags, Mapping):
                    raise InputError(f"tags must be a mapping of string to string, got {type(tags).__name__}")
                checked.append((turn, checked_tags(tags)))
            else:
                checked.append((to_turn(item, default_time), {}))
        except InputError as exc:
            raise InputError(f"messages[{index}]: {exc}; nothing was accepted") from None
    return checked
