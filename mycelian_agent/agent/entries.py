"""One message as the entries that store it: its parts, the ``add_entry`` task a model is given for each part, the
checks of what the model writes, and the arguments code owns (identifiers, verbatim text, time, tags, idempotency
key).

The agent's steps (:mod:`.steps`, through :mod:`.prompts`) and the one-shot write (:mod:`.oneshot`) build entries
here, so both store the same entry for the same message and model. Plain data and string work: no LangChain, no
pydantic (:mod:`.model_tools` wraps :func:`check_summary` and :func:`check_tags` as its validators).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ..limits import SUMMARY_MAX_CHARS, TAG_VALUE_MAX_CHARS, TAGS_MAX_KEYS, clip_tags, split_oversize, unicode_problem
from .turn import Turn

__all__ = [
    "CODE_TAGS",
    "Unusable",
    "add_entry_task",
    "check_summary",
    "check_tags",
    "clip",
    "entry_args",
    "entry_tags",
    "idempotency_key",
    "speaker_tag",
    "split_parts",
    "task_message",
]

#: Tags the agent sets itself; a model's tags with these names are dropped.
CODE_TAGS = ("role", "thread", "msg", "part")


@lru_cache(maxsize=4)
def split_parts(content: str, limit: int) -> tuple[str, ...]:
    """The parts of a message (``split_oversize``), computed once: ADD_ENTRY asks for them at each of its steps (one
    per part), so splitting again each time made a long message cost the square of its size."""
    return tuple(split_oversize(content, limit))


def clip(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out (None: whole)."""
    if limit is None or len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … [{len(text) - limit} more characters]"


def task_message(message: Turn, limit: int | None) -> dict[str, Any]:
    """A message as a task shows it (``role``, ``content`` clipped to ``limit``, ``conversation_time``, ``name``
    when known)."""
    item = {
        "role": message["role"],
        "content": clip(str(message["content"]), limit),
        "conversation_time": message.get("conversation_time"),
    }
    if message.get("name"):
        item["name"] = message["name"]
    return item


def add_entry_task(
    message: Turn,
    content: str,
    recent: Sequence[Turn],
    context: str,
    *,
    recent_message_chars: int | None,
    context_chars: int | None,
) -> dict[str, Any]:
    """The ``add_entry`` task as data (docs/ARCHITECTURE.md, "Agent ↔ model contract"): ``content`` is the text to
    record (the whole message or one part of it), ``recent`` the messages before it, ``context`` the context
    document (its first ``context_chars`` characters: the durable facts matter most here)."""
    return {
        "operation": "add_entry",
        "message": task_message(message, None) | {"content": content},
        "recent": [task_message(m, recent_message_chars) for m in recent],
        "context": clip(context, context_chars),
    }


class Unusable(ValueError):
    """What a model wrote for an entry cannot be stored; the text says why (it is told to the model)."""


def check_summary(value: Any) -> str:
    """The summary a model wrote, stripped and cut to the server's limit; :class:`Unusable` when there is none."""
    if not isinstance(value, str) or not value.strip():
        raise Unusable("the summary was missing or empty")
    if problem := unicode_problem(value):
        raise Unusable(f"the summary has {problem}")
    return value.strip()[:SUMMARY_MAX_CHARS]


def check_tags(value: Any) -> dict[str, str]:
    """The tags a model wrote as the server takes them (a list of keywords becomes a ``topic``; code-owned names
    dropped); :class:`Unusable` when they are not an object or cannot be stored."""
    if value is None:
        return {}
    if isinstance(value, list):  # small models often write a list of keywords
        value = {"topic": ", ".join(str(t) for t in value)}
    if not isinstance(value, Mapping):
        raise Unusable("tags must be an object of string values")
    tags = {k: v for k, v in clip_tags(value).items() if k not in CODE_TAGS and k.strip()}
    if problem := next(filter(None, map(unicode_problem, [*tags, *tags.values()])), None):
        raise Unusable(f"a tag has {problem}")
    return tags


def speaker_tag(message: Mapping[str, Any]) -> dict[str, str]:
    """``{"speaker": name}`` when the message names its speaker: read back as the speaker of a search hit."""
    name = message.get("name")
    return {"speaker": name[:TAG_VALUE_MAX_CHARS]} if name else {}


def entry_tags(
    model_tags: Mapping[str, str], input_tags: Mapping[str, str], code_tags: Mapping[str, str]
) -> dict[str, str]:
    """The tags stored with an entry: code-owned tags win over the input's, the input's over the model's; the
    model's are cut to the room left under the server's key limit."""
    inputs = {k: v for k, v in input_tags.items() if k not in code_tags}
    room = max(0, TAGS_MAX_KEYS - len(code_tags) - len(inputs))
    model = dict([(k, v) for k, v in model_tags.items() if k not in inputs and k not in code_tags][:room])
    return {**model, **inputs, **code_tags}


@lru_cache(maxsize=8)
def _content_digest(content: str) -> str:
    # Cached: each part of a long message carries the hash of the whole message.
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def idempotency_key(thread_id: str, number: int, content: str, part: int, parts: int) -> str:
    """``<thread>:<message number>:<sha256(content)[:16]>:<part>/<parts>`` (``part`` 0-based)."""
    # The content hash makes a retried message dedupe while a different message at the same position does not.
    digest = _content_digest(content)
    thread = thread_id if len(thread_id) <= 120 else hashlib.sha256(thread_id.encode()).hexdigest()[:32]
    return f"{thread}:{number}:{digest}:{part + 1}/{parts}"


def entry_args(
    ids: Mapping[str, str],
    thread_id: str,
    message: Mapping[str, Any],
    number: int,
    part: tuple[int, int],
    text: str,
    written: Mapping[str, Any],
    given_tags: Mapping[str, str],
    *,
    idempotency: bool,
) -> dict[str, Any]:
    """The add_entry arguments of part ``part`` (index, count) of message ``number`` of thread ``thread_id``, in
    the memory ``ids`` names: the model's summary and tags (``written``) around what code owns: identifiers, the
    verbatim ``text``, the time, the caller's and code's tags, the idempotency key (when the server takes one:
    ``idempotency``)."""
    index, count = part
    code_tags = {
        "role": message["role"],
        "thread": thread_id[:TAG_VALUE_MAX_CHARS],
        "msg": str(number),
        **speaker_tag(message),
    }
    if count > 1:
        code_tags["part"] = f"{index + 1}/{count}"
    args: dict[str, Any] = {
        **ids,
        "raw_entry": text,
        "summary": written["summary"],
        "tags": entry_tags(written["tags"], given_tags, code_tags),
    }
    if message.get("conversation_time"):
        args["conversation_time"] = message["conversation_time"]
    if idempotency:
        args["idempotency_key"] = idempotency_key(thread_id, number, message["content"], index, count)
    return args
