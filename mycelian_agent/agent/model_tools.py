"""What the model may write, how its replies are checked, and the arguments code owns.

Each model-written tool is one pydantic model: its JSON schema is what the model is bound to (only the fields the
model writes: ``summary`` and ``tags`` of add_entry, ``content`` of put_context) and the same model validates the
reply. Identifiers, verbatim text, time and the idempotency key are set by the agent (docs/ARCHITECTURE.md).
:class:`ToolArgumentWriter` asks a model for one tool's arguments with bounded corrective re-prompts, then falls
back to the extractive model, so a message is never dropped because a model misbehaved.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Annotated, Any, Literal, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..errors import ToolCallError, describe_cause
from ..limits import SUMMARY_MAX_CHARS, SUMMARY_TARGET_CHARS, TAGS_MAX_KEYS, clip_tags, unicode_problem
from .report import InvocationResult, Usage

__all__ = [
    "AddEntryArgs", "PutContextArgs", "MODEL_TOOLS", "tool_schema", "CODE_TAGS", "ToolArgumentWriter", "validate_reply",
    "entry_tags", "direct_call", "idempotency_key", "ToolChoiceMode", "TOOL_CHOICE_MODES", "tool_choice",
    "call_from_text", "read_reply", "TEXT_CALL_NOTE", "transient_model_error", "EntryItem", "AddEntriesArgs",
    "AddEntriesAndContextArgs", "BatchReading", "read_batch_reply",
]

#: How the agent forces the model to call the tool: ``"named"`` sends OpenAI's object form naming the tool
#: (``{"type": "function", "function": {"name": ...}}``); ``"required"`` sends the string ``"required"`` (any tool;
#: exactly one is bound), which llama.cpp's server and other OpenAI-compatible servers that ignore the object form
#: honour; ``"auto"`` lets the model choose (the reply may then carry the call as JSON text, which is parsed).
ToolChoiceMode = Literal["named", "required", "auto"]
TOOL_CHOICE_MODES: tuple[str, ...] = get_args(ToolChoiceMode)

#: The note recorded (``"<tool>: " + TEXT_CALL_NOTE``) for each reply whose call was read from its text.
TEXT_CALL_NOTE = "call read from the reply text (no tool call)"

#: The stop sequence sent in the "required" and "auto" modes (see ToolArgumentWriter._bind).
TEXT_CALL_STOP = "\n\n\n"

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
        candidates.append(text[first:last + 1])
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
    content = reply.content if isinstance(reply.content, str) else "".join(
        part.get("text", "") if isinstance(part, Mapping) else str(part) for part in reply.content or [])
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


def read_reply(tool_name: str, reply: BaseMessage, context_max_chars: int,
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


def read_batch_reply(tool_name: str, reply: BaseMessage, expected: Sequence[int], context_max_chars: int,
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
            reading.problems.append(f"entry {position}" + (f" (item {number})" if number is not None else "")
                                    + f": {what}")
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
                context={"max_chars": context_max_chars}).content
        except ValidationError as exc:
            reading.problems.append("context: " + exc.errors()[0]["msg"].replace("the content", "the document"))
    return reading


def validate_reply(tool_name: str, reply: BaseMessage, context_max_chars: int) -> tuple[dict[str, Any] | None, str | None]:
    """The model-owned arguments of a reply (a tool call or a call written as JSON text), or the problem to tell
    the model."""
    args, problem, _from_text = read_reply(tool_name, reply, context_max_chars)
    return args, problem


_UNREADABLE = re.compile(r"pars|format|tool[ _]?call", re.IGNORECASE)


def unreadable_output(exc: BaseException) -> bool:
    """Whether ``exc`` is a server's HTTP 500 saying it could not parse the model's output into a tool call."""
    return getattr(exc, "status_code", None) == 500 and bool(_UNREADABLE.search(str(exc)))


def entry_tags(model_tags: Mapping[str, str], input_tags: Mapping[str, str], code_tags: Mapping[str, str]) -> dict[str, str]:
    """The tags stored with an entry: code-owned tags win over the input's, the input's over the model's; the
    model's are cut to the room left under the server's key limit."""
    inputs = {k: v for k, v in input_tags.items() if k not in code_tags}
    room = max(0, TAGS_MAX_KEYS - len(code_tags) - len(inputs))
    model = dict(list((k, v) for k, v in model_tags.items() if k not in inputs and k not in code_tags)[:room])
    return {**model, **inputs, **code_tags}


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


class ToolArgumentWriter:
    """Gets one tool's model-owned arguments: the model, bounded corrective re-prompts, then the fallback model.

    Usage, errors and model time are recorded on the invocation's :class:`InvocationResult`.
    """

    def __init__(self, model: BaseChatModel, fallback_model: BaseChatModel, *, max_corrections: int,
                 fallback_on_model_error: bool, context_max_chars: int,
                 tool_choice_mode: ToolChoiceMode = "named", model_attempts: int = 3,
                 model_backoff_s: float = 0.5) -> None:
        tool_choice("add_entry", tool_choice_mode)  # checks the mode
        self.model = model
        self.model_attempts = max(1, model_attempts)
        self.model_backoff_s = model_backoff_s
        self.tool_choice_mode = tool_choice_mode
        self.fallback_model = fallback_model
        self.max_corrections = max_corrections
        self.fallback_on_model_error = fallback_on_model_error
        self.context_max_chars = context_max_chars
        self._bound: dict[tuple[int, str], Any] = {}

    def _bind(self, model: BaseChatModel, tool_name: str) -> Any:
        key = (id(model), tool_name)
        if key not in self._bound:
            # The fallback (extractive) model always gets the named form: it reads the tool name from it.
            mode = self.tool_choice_mode if model is self.model else "named"
            extra: dict[str, Any] = {}
            if mode != "named":
                # Small local models often write the call as text and then run on with blank lines instead of
                # ending the turn (llama.cpp with Qwen2.5-1.5B: hundreds of newlines up to max_tokens). Valid
                # JSON, even inside a document string, never holds three raw newlines in a row.
                extra["stop"] = [TEXT_CALL_STOP]
            self._bound[key] = model.bind_tools([tool_schema(tool_name)], tool_choice=tool_choice(tool_name, mode),
                                                **extra)
        return self._bound[key]

    async def _ask(self, model: BaseChatModel, tool_name: str, messages: list[BaseMessage],
                   report: InvocationResult) -> BaseMessage:
        started = time.perf_counter()
        try:
            return await self._bind(model, tool_name).ainvoke(messages)
        finally:
            report.model_s += time.perf_counter() - started

    async def _ask_retrying(self, tool_name: str, messages: list[BaseMessage], report: InvocationResult) -> BaseMessage:
        """The model's reply; a transient failure (429, 5xx, timeout, connection) is retried with backoff, at most
        ``model_attempts`` attempts in all, each counted in ``usage.model_retries``."""
        for attempt in range(1, self.model_attempts + 1):
            try:
                return await self._ask(self.model, tool_name, messages, report)
            except Exception as exc:  # provider errors come in many types
                if attempt == self.model_attempts or unreadable_output(exc) or not transient_model_error(exc):
                    raise
                report.usage += Usage(model_retries=1)
                report.notes += (f"{tool_name}: model call retried after {describe_cause(exc)}",)
                await asyncio.sleep(self.model_backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    async def write(self, tool_name: str, prompt: list[BaseMessage], report: InvocationResult) -> dict[str, Any]:
        """The validated arguments the model (or, failing it, the fallback model) wrote for ``tool_name``."""
        messages = list(prompt)
        for attempt in range(self.max_corrections + 1):
            try:
                reply = await self._ask_retrying(tool_name, messages, report)
            except Exception as exc:  # provider errors come in many types
                if unreadable_output(exc) and attempt < self.max_corrections:
                    # The server could not turn the model's output into a tool call (llama.cpp: HTTP 500 "output
                    # does not match the expected ... format", e.g. JSON in a code fence): re-prompt, as for a
                    # reply without a call; the output itself never reached us.
                    report.errors += (f"{tool_name}: reply unusable: the server could not read it as a call "
                                      f"({describe_cause(exc)})",)
                    report.usage += Usage(llm_calls=1, corrections=1)
                    messages += [HumanMessage(f"The server could not read your reply as a `{tool_name}` call. Reply "
                                              f'with only the JSON object {{"name": "{tool_name}", "arguments": '
                                              "{...}}, with no code fence and no other text.")]
                    continue
                if not self.fallback_on_model_error:
                    raise ToolCallError(f"the model failed while writing {tool_name}: {describe_cause(exc)}") from exc
                report.errors += (f"model error on {tool_name}: {describe_cause(exc)}",)
                break
            report.usage += Usage.of_reply(reply)
            args, problem, from_text = read_reply(tool_name, reply, self.context_max_chars)
            if from_text:
                report.notes += (f"{tool_name}: {TEXT_CALL_NOTE}" + ("" if problem is None else f" (unusable: {problem})"),)
            if args is not None:
                return args
            report.errors += (f"{tool_name}: reply unusable: {problem}",)
            if attempt == self.max_corrections:
                break
            report.usage += Usage(corrections=1)
            messages += [AIMessage(content=str(reply.content or "(no tool call)")),
                         HumanMessage(f"That reply cannot be used: {problem}. Call the `{tool_name}` tool exactly once, "
                                      "with the arguments its schema asks for: reply with only the JSON object "
                                      f'{{"name": "{tool_name}", "arguments": {{...}}}}.')]
        report.usage += Usage(fallbacks=1)
        reply = await self._ask(self.fallback_model, tool_name, prompt, report)
        args, problem = validate_reply(tool_name, reply, self.context_max_chars)
        if args is None:
            raise ToolCallError(f"neither the model nor the fallback produced a usable {tool_name} call: {problem}")
        return args


    async def write_batch(self, build: Callable[[Sequence[int], bool, str], list[BaseMessage]],
                          items: Sequence[int], report: InvocationResult, *, with_context: bool = False,
                          ) -> tuple[dict[int, dict[str, Any]], str | None]:
        """Summaries and tags of a batch of messages (item number → ``{"summary", "tags"}``) in one model call,
        and, when ``with_context``, the context document written by the same call (None when that part was
        unusable: the caller then asks for it on its own).

        ``build(items, with_context, note)`` makes the prompt for those items (``note``: what was wrong with the
        previous reply, '' at first). Per-item validation: the usable items of a reply are kept; only the others
        are asked for again (bounded by ``max_corrections``), then written by the fallback model.
        """
        missing = list(items)
        done: dict[int, dict[str, Any]] = {}
        context: str | None = None
        note = ""
        for attempt in range(self.max_corrections + 1):
            ask_context = with_context and attempt == 0
            tool_name = "add_entries_and_context" if ask_context else "add_entries"
            try:
                reply = await self._ask(self.model, tool_name, build(missing, ask_context, note), report)
            except Exception as exc:  # provider errors come in many types
                if unreadable_output(exc) and attempt < self.max_corrections:
                    report.errors += (f"{tool_name}: reply unusable: the server could not read it as a call "
                                      f"({describe_cause(exc)})",)
                    report.usage += Usage(llm_calls=1, corrections=1)
                    note = (f"The server could not read your reply as a `{tool_name}` call. Reply with only the "
                            f'JSON object {{"name": "{tool_name}", "arguments": {{...}}}}, with no code fence.')
                    continue
                if not self.fallback_on_model_error:
                    raise ToolCallError(f"the model failed while writing {tool_name}: {describe_cause(exc)}") from exc
                report.errors += (f"model error on {tool_name}: {describe_cause(exc)}",)
                break
            report.usage += Usage.of_reply(reply)
            reading = read_batch_reply(tool_name, reply, missing, self.context_max_chars)
            if reading.from_text:
                report.notes += (f"{tool_name}: {TEXT_CALL_NOTE}",)
            done.update(reading.items)
            if ask_context:
                context = reading.context
            missing = [n for n in missing if n not in done]
            for problem in reading.problems:
                report.errors += (f"{tool_name}: reply unusable: {problem}",)
            if not missing:
                return done, context
            if attempt == self.max_corrections:
                break
            report.usage += Usage(corrections=1)
            note = ("Your previous reply could not be used for the messages below: " + "; ".join(reading.problems)
                    + ". Call `add_entries` once, with one entry (item, summary, tags) for each of them.")
        report.usage += Usage(fallbacks=1)
        reply = await self._ask(self.fallback_model, "add_entries", build(missing, False, ""), report)
        reading = read_batch_reply("add_entries", reply, missing, self.context_max_chars)
        done.update(reading.items)
        left = [n for n in missing if n not in done]
        if left:
            raise ToolCallError(f"neither the model nor the fallback produced a usable add_entries call for item(s) "
                                f"{', '.join(map(str, left))}: {'; '.join(reading.problems)}")
        return done, context
