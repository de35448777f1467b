"""What the model may write.

Each model-written tool is one pydantic model: its JSON schema is what the model is bound to (only the fields the
model writes: ``summary`` and ``tags`` of add_entry, ``content`` of put_context) and the same model validates the
reply (read by :mod:`~mycelian_agent.agent.replies`). Identifiers, verbatim text, time and the idempotency key are
set by code (:mod:`~mycelian_agent.agent.entries`; :func:`direct_call` carries them; docs/ARCHITECTURE.md).
:class:`~mycelian_agent.agent.writer.ToolArgumentWriter` asks a model for one tool's arguments.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, Literal, get_args

from langchain_core.messages import AIMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..limits import SUMMARY_TARGET_CHARS, unicode_problem
from .entries import Unusable, check_summary, check_tags

__all__ = [
    "MODEL_TOOLS",
    "TOOL_CHOICE_MODES",
    "AddEntriesAndContextArgs",
    "AddEntriesArgs",
    "AddEntryArgs",
    "EntryItem",
    "PutContextArgs",
    "ToolChoiceMode",
    "direct_call",
    "tool_choice",
    "tool_schema",
]

#: How the agent forces the model to call the tool: ``"named"`` sends OpenAI's object form naming the tool
#: (``{"type": "function", "function": {"name": ...}}``); ``"required"`` sends the string ``"required"`` (any tool;
#: exactly one is bound), which llama.cpp's server and other OpenAI-compatible servers that ignore the object form
#: honour; ``"auto"`` lets the model choose (the reply may then carry the call as JSON text, which is parsed).
ToolChoiceMode = Literal["named", "required", "auto"]
TOOL_CHOICE_MODES: tuple[str, ...] = get_args(ToolChoiceMode)


def _unusable(message: str) -> PydanticCustomError:
    return PydanticCustomError("unusable", message)


def _validator(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` (:mod:`.entries`) as a pydantic validator: its :class:`Unusable` text becomes the error's message."""

    def validate(value: Any) -> Any:
        try:
            return check(value)
        except Unusable as exc:
            raise _unusable(str(exc)) from None

    return validate


_SUMMARY_DESCRIPTION = f"Retrieval-oriented summary, at most {SUMMARY_TARGET_CHARS} chars."
_TAGS_DESCRIPTION = (
    'Short string tags of this message, e.g. {"topic": "<its topic words>", '
    '"kind": "<fact|plan|preference|event|question>"}.'
)
#: The two fields the model writes for each entry, checked alike wherever they appear (one entry or a batch item).
Summary = Annotated[str, BeforeValidator(_validator(check_summary)), Field(description=_SUMMARY_DESCRIPTION)]
Tags = Annotated[dict[str, str], BeforeValidator(_validator(check_tags)), Field(description=_TAGS_DESCRIPTION)]


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
MODEL_TOOLS: dict[str, type[BaseModel]] = {
    "add_entry": AddEntryArgs,
    "put_context": PutContextArgs,
    "add_entries": AddEntriesArgs,
    "add_entries_and_context": AddEntriesAndContextArgs,
}


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


def direct_call(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    """An AIMessage carrying tool calls built in code (executed by the graph's tools node like a model's)."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"}
            for name, args in calls
        ],
    )
