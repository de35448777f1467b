"""How a model's reply is read: its tool call, or failing that a call written as JSON text, checked by the pydantic
model of its tool (:data:`~mycelian_agent.agent.model_tools.MODEL_TOOLS`); a batch reply item by item; and which
model failures a retry may cure."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import ValidationError

from .model_tools import MODEL_TOOLS, EntryItem, PutContextArgs

__all__ = [
    "TEXT_CALL_NOTE",
    "BatchReading",
    "call_from_text",
    "read_batch_reply",
    "read_reply",
    "transient_model_error",
    "unreadable_output",
    "validate_reply",
]

#: The note recorded (``"<tool>: " + TEXT_CALL_NOTE``) for each reply whose call was read from its text.
TEXT_CALL_NOTE = "call read from the reply text (no tool call)"

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)

_TAGS = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

_WRAPPER_ARGS = ("arguments", "parameters", "args")


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``: the whole text, a fenced block, ``<tool_call>`` tags, or the span from the
    first ``{`` to the last ``}``."""
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    candidates += [m.group(1).strip() for m in _TAGS.finditer(text)]
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    decoder = json.JSONDecoder()
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            value, _end = decoder.raw_decode(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def call_from_text(tool_name: str, text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments of a ``tool_name`` call written as JSON text, or the problem (``(None, None)``: no JSON at all).

    Accepted: ``{"name": ..., "arguments"|"parameters": {...}}`` (bare, in a ```json fence or ``<tool_call>`` tags,
    arguments possibly a JSON string), ``{"function": {...}}``, or just the arguments object.
    """
    value = _json_object(text)
    if value is None:
        return None, None
    if isinstance(value.get("function"), Mapping):
        value = dict(value["function"])
    if "name" in value and any(key in value for key in _WRAPPER_ARGS):
        if value["name"] != tool_name:
            return None, f"it called {value['name']} instead of {tool_name}"
        args = next(value[key] for key in _WRAPPER_ARGS if key in value)
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None, f"the {tool_name} arguments were not JSON"
        if not isinstance(args, Mapping):
            return None, f"the {tool_name} arguments were not an object"
        return dict(args), None
    if set(value) & set(MODEL_TOOLS[tool_name].model_fields):
        return value, None
    return None, None


def _reply_call(tool_name: str, reply: BaseMessage) -> tuple[Any, str | None, bool]:
    """``(arguments, problem, from_text)``: the unchecked arguments of the reply's ``tool_name`` call (a tool call,
    or failing that a call written as JSON text, ``from_text=True``), or None and the problem to tell the model."""
    calls = [c for c in getattr(reply, "tool_calls", []) or [] if c.get("name") == tool_name]
    if calls:
        return calls[0].get("args") or {}, None, False
    content = (
        reply.content
        if isinstance(reply.content, str)
        else "".join(part.get("text", "") if isinstance(part, Mapping) else str(part) for part in reply.content or [])
    )
    others = [c.get("name") for c in getattr(reply, "tool_calls", []) or []]
    parsed, text_problem = call_from_text(tool_name, content) if content.strip() and not others else (None, None)
    if parsed is not None:
        return parsed, None, True
    invalid = getattr(reply, "invalid_tool_calls", []) or []
    if invalid:
        return None, f"the {tool_name} call had invalid arguments ({invalid[0].get('error') or 'not JSON'})", False
    if others:
        return None, f"it called {', '.join(map(str, others))} instead of {tool_name}", False
    return None, text_problem or f"it contained no {tool_name} tool call", False


def read_reply(
    tool_name: str,
    reply: BaseMessage,
    context_max_chars: int,
) -> tuple[dict[str, Any] | None, str | None, bool]:
    """``(arguments, problem, from_text)``: the model-owned arguments of a reply (a tool call, or failing that a
    call written as JSON text, ``from_text=True``), or the problem to tell the model."""
    raw, problem, from_text = _reply_call(tool_name, reply)
    if raw is None:
        return None, problem, False
    try:
        args = MODEL_TOOLS[tool_name].model_validate(raw, context={"max_chars": context_max_chars})
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["type"] == "missing":
            return None, f"the {error['loc'][0]} was missing", from_text
        return None, error["msg"], from_text
    return args.model_dump(), None, from_text


@dataclass
class BatchReading:
    """What one reply to a batch prompt gave: the usable items (item number → ``{"summary", "tags"}``), the
    context document when one was asked for and is usable, and the problems of everything else."""

    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    context: str | None = None
    problems: list[str] = field(default_factory=list)
    from_text: bool = False


def read_batch_reply(
    tool_name: str,
    reply: BaseMessage,
    expected: Sequence[int],
    context_max_chars: int,
) -> BatchReading:
    """Read a reply to an ``add_entries[_and_context]`` prompt item by item: a bad item (missing summary, unknown
    item number, ...) is a problem of its own and leaves the others usable."""
    reading = BatchReading()
    raw, problem, reading.from_text = _reply_call(tool_name, reply)
    if raw is None:
        reading.problems.append(problem or f"it contained no {tool_name} tool call")
        return reading
    entries = raw.get("entries") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list):
        reading.problems.append("the entries list was missing" if entries is None else "entries must be a list")
        entries = []
    wanted = set(expected)
    for position, value in enumerate(entries, 1):
        try:
            item = EntryItem.model_validate(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            what = f"the {error['loc'][0]} was missing" if error["type"] == "missing" and error["loc"] else error["msg"]
            number = value.get("item") if isinstance(value, Mapping) else None
            reading.problems.append(
                f"entry {position}" + (f" (item {number})" if number is not None else "") + f": {what}"
            )
            continue
        if item.item not in wanted:
            reading.problems.append(f"entry {position}: item {item.item} is not a message of this batch")
        elif item.item not in reading.items:
            reading.items[item.item] = {"summary": item.summary, "tags": item.tags}
    absent = [n for n in expected if n not in reading.items]
    if absent and entries:
        reading.problems.append("no usable entry for item(s) " + ", ".join(map(str, absent)))
    if "context" in MODEL_TOOLS[tool_name].model_fields:
        try:
            reading.context = PutContextArgs.model_validate(
                {"content": raw.get("context") if isinstance(raw, Mapping) else None},
                context={"max_chars": context_max_chars},
            ).content
        except ValidationError as exc:
            reading.problems.append("context: " + exc.errors()[0]["msg"].replace("the content", "the document"))
    return reading


def validate_reply(
    tool_name: str, reply: BaseMessage, context_max_chars: int
) -> tuple[dict[str, Any] | None, str | None]:
    """The model-owned arguments of a reply (a tool call or a call written as JSON text), or the problem to tell
    the model."""
    args, problem, _from_text = read_reply(tool_name, reply, context_max_chars)
    return args, problem


_UNREADABLE = re.compile(r"pars|format|tool[ _]?call", re.IGNORECASE)


def unreadable_output(exc: BaseException) -> bool:
    """Whether ``exc`` is a server's HTTP 500 saying it could not parse the model's output into a tool call."""
    return getattr(exc, "status_code", None) == 500 and bool(_UNREADABLE.search(str(exc)))


def transient_model_error(exc: BaseException) -> bool:
    """Whether a model call's failure is one a retry may cure: HTTP 408/409/429 or 5xx, a timeout, a lost
    connection (openai's RateLimitError, InternalServerError, APITimeoutError, APIConnectionError and the like)."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int):
        return status in (408, 409, 429) or status >= 500
    if isinstance(exc, (TimeoutError, ConnectionError, asyncio.TimeoutError)):
        return True
    name = type(exc).__name__
    return any(word in name for word in ("Timeout", "Connection", "RateLimit", "ServiceUnavailable"))
