"""What the model may write, how its replies are checked, and the arguments code owns.

Each model-written tool is one pydantic model: its JSON schema is what the model is bound to (only the fields the
model writes: ``summary`` and ``tags`` of add_entry, ``content`` of put_context) and the same model validates the
reply. Identifiers, verbatim text, time and the idempotency key are set by the agent (docs/ARCHITECTURE.md).
:class:`ToolArgumentWriter` asks a model for one tool's arguments with bounded corrective re-prompts, then falls
back to the extractive model, so a message is never dropped because a model misbehaved.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..errors import ToolCallError, describe_cause
from ..limits import SUMMARY_MAX_CHARS, SUMMARY_TARGET_CHARS, TAGS_MAX_KEYS, clip_tags
from .report import InvocationResult, Usage

__all__ = [
    "AddEntryArgs", "PutContextArgs", "MODEL_TOOLS", "tool_schema", "CODE_TAGS", "ToolArgumentWriter", "validate_reply",
    "entry_tags", "direct_call", "idempotency_key",
]

#: Tags the agent sets itself; a model's tags with these names are dropped.
CODE_TAGS = ("role", "thread", "msg", "part")


def _unusable(message: str) -> PydanticCustomError:
    return PydanticCustomError("unusable", message)


class AddEntryArgs(BaseModel):
    """Record the current message as a memory entry. Write only the summary and tags; the message text,
    identifiers and time are filled in by the system."""

    model_config = ConfigDict(title="add_entry", extra="ignore")

    summary: str = Field(description=f"Retrieval-oriented summary, at most {SUMMARY_TARGET_CHARS} chars.")
    tags: dict[str, str] = Field(
        description='Short string tags, e.g. {"topic": "travel, japan", "kind": "plan"}.')

    @field_validator("summary", mode="before")
    @classmethod
    def _summary(cls, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _unusable("the summary was missing or empty")
        return value.strip()[:SUMMARY_MAX_CHARS]

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if isinstance(value, list):  # small models often write a list of keywords
            value = {"topic": ", ".join(str(t) for t in value)}
        if not isinstance(value, Mapping):
            raise _unusable("tags must be an object of string values")
        return {k: v for k, v in clip_tags(value).items() if k not in CODE_TAGS}


class PutContextArgs(BaseModel):
    """Save the whole new context document of this memory."""

    model_config = ConfigDict(title="put_context", extra="ignore")

    content: str = Field(description="The whole Markdown document.")

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any, info: ValidationInfo) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _unusable("the content was missing or empty")
        limit = (info.context or {}).get("max_chars")
        if limit is not None and len(value) > limit:
            raise _unusable(f"the document has {len(value)} characters; the limit is {limit}")
        return value


#: The tools whose arguments a model writes, by name.
MODEL_TOOLS: dict[str, type[BaseModel]] = {"add_entry": AddEntryArgs, "put_context": PutContextArgs}


@cache
def tool_schema(tool_name: str) -> dict[str, Any]:
    """The OpenAI-format tool the model is bound to for ``tool_name`` (only the fields the model writes)."""
    return convert_to_openai_tool(MODEL_TOOLS[tool_name])


def validate_reply(tool_name: str, reply: BaseMessage, context_max_chars: int) -> tuple[dict[str, Any] | None, str | None]:
    """The model-owned arguments of a reply, or the problem to tell the model."""
    calls = [c for c in getattr(reply, "tool_calls", []) or [] if c.get("name") == tool_name]
    if not calls:
        invalid = getattr(reply, "invalid_tool_calls", []) or []
        if invalid:
            return None, f"the {tool_name} call had invalid arguments ({invalid[0].get('error') or 'not JSON'})"
        others = [c.get("name") for c in getattr(reply, "tool_calls", []) or []]
        return None, (f"it called {', '.join(others)} instead of {tool_name}" if others
                      else f"it contained no {tool_name} tool call")
    try:
        args = MODEL_TOOLS[tool_name].model_validate(calls[0].get("args") or {},
                                                     context={"max_chars": context_max_chars})
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["type"] == "missing":
            return None, f"the {error['loc'][0]} was missing"
        return None, error["msg"]
    return args.model_dump(), None


def entry_tags(model_tags: Mapping[str, str], input_tags: Mapping[str, str], code_tags: Mapping[str, str]) -> dict[str, str]:
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


def idempotency_key(thread_id: str, number: int, content: str, part: int, parts: int) -> str:
    """``<thread>:<message number>:<sha256(content)[:16]>:<part>/<parts>`` (``part`` 0-based)."""
    # The content hash makes a retried message dedupe while a different message at the same position does not.
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
    thread = thread_id if len(thread_id) <= 120 else hashlib.sha256(thread_id.encode()).hexdigest()[:32]
    return f"{thread}:{number}:{digest}:{part + 1}/{parts}"


class ToolArgumentWriter:
    """Gets one tool's model-owned arguments: the model, bounded corrective re-prompts, then the fallback model.

    Usage, errors and model time are recorded on the invocation's :class:`InvocationResult`.
    """

    def __init__(self, model: BaseChatModel, fallback_model: BaseChatModel, *, max_corrections: int,
                 fallback_on_model_error: bool, context_max_chars: int) -> None:
        self.model = model
        self.fallback_model = fallback_model
        self.max_corrections = max_corrections
        self.fallback_on_model_error = fallback_on_model_error
        self.context_max_chars = context_max_chars
        self._bound: dict[tuple[int, str], Any] = {}

    def _bind(self, model: BaseChatModel, tool_name: str) -> Any:
        key = (id(model), tool_name)
        if key not in self._bound:
            self._bound[key] = model.bind_tools([tool_schema(tool_name)], tool_choice=tool_name)
        return self._bound[key]

    async def _ask(self, model: BaseChatModel, tool_name: str, messages: list[BaseMessage],
                   report: InvocationResult) -> BaseMessage:
        started = time.perf_counter()
        try:
            return await self._bind(model, tool_name).ainvoke(messages)
        finally:
            report.model_s += time.perf_counter() - started

    async def write(self, tool_name: str, prompt: list[BaseMessage], report: InvocationResult) -> dict[str, Any]:
        """The validated arguments the model (or, failing it, the fallback model) wrote for ``tool_name``."""
        messages = list(prompt)
        for attempt in range(self.max_corrections + 1):
            try:
                reply = await self._ask(self.model, tool_name, messages, report)
            except Exception as exc:  # provider errors come in many types
                if not self.fallback_on_model_error:
                    raise ToolCallError(f"the model failed while writing {tool_name}: {describe_cause(exc)}") from exc
                report.errors += (f"model error on {tool_name}: {describe_cause(exc)}",)
                break
            report.usage += Usage.of_reply(reply)
            args, problem = validate_reply(tool_name, reply, self.context_max_chars)
            if problem is None:
                return args  # type: ignore[return-value]
            report.errors += (f"{tool_name}: reply unusable: {problem}",)
            if attempt == self.max_corrections:
                break
            report.usage += Usage(corrections=1)
            messages += [AIMessage(content=str(reply.content or "(no tool call)")),
                         HumanMessage(f"That reply cannot be used: {problem}. Call the `{tool_name}` tool exactly once, "
                                      "with the arguments its schema asks for.")]
        report.usage += Usage(fallbacks=1)
        reply = await self._ask(self.fallback_model, tool_name, prompt, report)
        args, problem = validate_reply(tool_name, reply, self.context_max_chars)
        if problem is not None:
            raise ToolCallError(f"neither the model nor the fallback produced a usable {tool_name} call: {problem}")
        return args  # type: ignore[return-value]

