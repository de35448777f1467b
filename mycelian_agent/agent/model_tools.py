"""What the model may write, and the arguments code owns.

Each model-written tool is one pydantic model: its JSON schema is what the model is bound to (only the fields the
model writes: ``summary`` and ``tags`` of add_entry, ``content`` of put_context) and the same model validates the
reply (read by :mod:`~mycelian_agent.agent.replies`). Identifiers, verbatim text, time and the idempotency key are
set by the agent (:func:`entry_tags`, :func:`idempotency_key`, :func:`direct_call`; docs/ARCHITECTURE.md).
:class:`~mycelian_agent.agent.writer.ToolArgumentWriter` asks a model for one tool's arguments.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Annotated, Any, Literal, get_args

from langchain_core.messages import AIMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..limits import SUMMARY_MAX_CHARS, SUMMARY_TARGET_CHARS, TAGS_MAX_KEYS, clip_tags, unicode_problem

__all__ = [
    "AddEntryArgs", "PutContextArgs", "MODEL_TOOLS", "tool_schema", "CODE_TAGS", "entry_tags", "direct_call",
    "idempotency_key", "ToolChoiceMode", "TOOL_CHOICE_MODES", "tool_choice", "EntryItem", "AddEntriesArgs",
    "AddEntriesAndContextArgs",
]

#: How the agent forces the model to call the tool: ``"named"`` sends OpenAI's object form naming the tool
#: (``{"type": "function", "function": {"name": ...}}``); ``"required"`` sends the string ``"required"`` (any tool;
#: exactly one is bound), which llama.cpp's server and other OpenAI-compatible servers that ignore the object form
#: honour; ``"auto"`` lets the model choose (the reply may then carry the call as JSON text, which is parsed).
ToolChoiceMode = Literal["named", "required", "auto"]
TOOL_CHOICE_MODES: tuple[str, ...] = get_args(ToolChoiceMode)


#: Tags the agent sets itself; a model's tags with these names are dropped.
CODE_TAGS = ("role", "thread", "msg", "part")


def _unusable(message: str) -> PydanticCustomError:
    return PydanticCustomError("unusable", message)


def _check_summary(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _unusable("the summary was missing or empty")
    if problem := unicode_problem(value):
        raise _unusable(f"the summary has {problem}")
    return value.strip()[:SUMMARY_MAX_CHARS]


def _check_tags(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):  # small models often write a list of keywords
        value = {"topic": ", ".join(str(t) for t in value)}
    if not isinstance(value, Mapping):
        raise _unusable("tags must be an object of string values")
    tags = {k: v for k, v in clip_tags(value).items() if k not in CODE_TAGS and k.strip()}
    if problem := next(filter(None, map(unicode_problem, [*tags, *tags.values()])), None):
        raise _unusable(f"a tag has {problem}")
    return tags


_SUMMARY_DESCRIPTION = f"Retrieval-oriented summary, at most {SUMMARY_TARGET_CHARS} chars."
_TAGS_DESCRIPTION = ('Short string tags of this message, e.g. {"topic": "<its topic words>", '
                     '"kind": "<fact|plan|preference|event|question>"}.')
#: The two fields the model writes for each entry, checked alike wherever they appear (one entry or a batch item).
Summary = Annotated[str, BeforeValidator(_check_summary), Field(description=_SUMMARY_DESCRIPTION)]
Tags = Annotated[dict[str, str], BeforeValidator(_check_tags), Field(description=_TAGS_DESCRIPTION)]


class AddEntryArgs(BaseModel):
    """Record the current message as a memory entry. Write only the summary and tags; the message text,
    identifiers and time are filled in by the system."""

    model_config = ConfigDict(title="add_entry", extra="ignore")

    summary: Summary
    tags: Tags


class EntryItem(BaseModel):
    """The summary and tags of one message of a batch, keyed by its item number."""

    model_config = ConfigDict(title="entry", extra="ignore")

    item: int = Field(description='The number of the message, as in <message item="...">.')
    summary: Summary
    tags: Tags

    @field_validator("item", mode="before")
    @classmethod
    def _item(cls, value: Any) -> int:
        if isinstance(value, str) and value.strip().isdigit():  # "3" is a common way to write 3
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise _unusable("the item number was missing or not an integer")
        return value


class AddEntriesArgs(BaseModel):
    """Record each message of the batch as a memory entry: one object per message, with its item number. Write
    only summaries and tags; message texts, identifiers and times are filled in by the system."""

    model_config = ConfigDict(title="add_entries", extra="ignore")

    entries: list[EntryItem] = Field(description="One object per message to record, every item number once.")


class AddEntriesAndContextArgs(BaseModel):
    """Record each message of the batch as a memory entry (one object per message, with its item number), and
    save the whole new context document. Message texts, identifiers and times are filled in by the system."""

    model_config = ConfigDict(title="add_entries_and_context", extra="ignore")

    entries: list[EntryItem] = Field(description="One object per message to record, every item number once.")
    context: str = Field(description="The whole new context document (Markdown).")


class PutContextArgs(BaseModel):
    """Save the whole new context document of this memory."""

    model_config = ConfigDict(title="put_context", extra="ignore")

    content: str = Field(description="The whole Markdown document.")

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any, info: ValidationInfo) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _unusable("the content was missing or empty")
        if problem := unicode_problem(value):
            raise _unusable(f"the document has {problem}")
        limit = (info.context or {}).get("max_chars")
        if limit is not None and len(value) > limit:
            raise _unusable(f"the document has {len(value)} characters; the limit is {limit}")
        return value


#: The tools whose arguments a model writes, by name.
MODEL_TOOLS: dict[str, type[BaseModel]] = {"add_entry": AddEntryArgs, "put_context": PutContextArgs,
                                           "add_entries": AddEntriesArgs,
                                           "add_entries_and_context": AddEntriesAndContextArgs}


@cache
def tool_schema(tool_name: str) -> dict[str, Any]:
    """The OpenAI-format tool the model is bound to for ``tool_name`` (only the fields the model writes)."""
    return convert_to_openai_tool(MODEL_TOOLS[tool_name])


def tool_choice(tool_name: str, mode: ToolChoiceMode | str) -> str:
    """The ``tool_choice`` to bind for ``mode`` (langchain maps a tool name to OpenAI's named object form)."""
    if mode == "named":
        return tool_name
    if mode in ("required", "auto"):
        return mode
    raise ValueError(f"tool_choice_mode must be one of {', '.join(TOOL_CHOICE_MODES)}; got {mode!r}")


def entry_tags(model_tags: Mapping[str, str], input_tags: Mapping[str, str],
               code_tags: Mapping[str, str]) -> dict[str, str]:
    """The tags stored with an entry: code-owned tags win over the input's, the input's over the model's; the
    model's are cut to the room left under the server's key limit."""
    inputs = {k: v for k, v in input_tags.items() if k not in code_tags}
    room = max(0, TAGS_MAX_KEYS - len(code_tags) - len(inputs))
    model = dict(list((k, v) for k, v in model_tags.items() if k not in inputs and k not in code_tags)[:room])
    return {**model, **inputs, **code_tags}


def direct_call(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    """An AIMessage carrying tool calls built in code (executed by the graph's tools node like a model's)."""
    return AIMessage(content="", tool_calls=[
        {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"}
        for name, args in calls
    ])


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


