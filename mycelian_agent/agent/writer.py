"""ToolArgumentWriter: asks a model for one tool's arguments with bounded corrective re-prompts and retries of
transient failures, then falls back to the extractive model, so a message is never dropped because a model
misbehaved. What the model may write is in :mod:`~mycelian_agent.agent.model_tools`; how a reply is read, in
:mod:`~mycelian_agent.agent.replies`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ..errors import ToolCallError, describe_cause
from ..models.resolve import model_name
from .model_tools import ToolChoiceMode, tool_choice, tool_schema
from .replies import (
    TEXT_CALL_NOTE,
    read_batch_reply,
    read_reply,
    transient_model_error,
    unreadable_output,
    validate_reply,
)
from .report import InvocationResult, Usage

__all__ = ["TEXT_CALL_STOP", "ToolArgumentWriter"]

#: The stop sequence sent in the "required" and "auto" modes (see ToolArgumentWriter._bind).
TEXT_CALL_STOP = "\n\n\n"


class ToolArgumentWriter:
    """Gets one tool's model-owned arguments: the model, bounded corrective re-prompts, then the fallback model.

    Usage, errors and model time are recorded on the invocation's :class:`InvocationResult`, usage under each
    model's name (:func:`~mycelian_agent.models.resolve.model_name`).
    """

    def __init__(
        self,
        model: BaseChatModel,
        fallback_model: BaseChatModel,
        *,
        max_corrections: int,
        fallback_on_model_error: bool,
        context_max_chars: int,
        tool_choice_mode: ToolChoiceMode = "named",
        model_attempts: int = 3,
        model_backoff_s: float = 0.5,
    ) -> None:
        tool_choice("add_entry", tool_choice_mode)  # checks the mode
        self.model = model
        self.model_attempts = max(1, model_attempts)
        self.model_backoff_s = model_backoff_s
        self.tool_choice_mode = tool_choice_mode
        self.fallback_model = fallback_model
        self.model_name = model_name(model)
        self.fallback_name = model_name(fallback_model)
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
            self._bound[key] = model.bind_tools(
                [tool_schema(tool_name)], tool_choice=tool_choice(tool_name, mode), **extra
            )
        return self._bound[key]

    async def _ask(
        self, model: BaseChatModel, tool_name: str, messages: list[BaseMessage], report: InvocationResult
    ) -> BaseMessage:
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
                report.usage += Usage.of(self.model_name, model_retries=1)
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
                if not self._correctable(tool_name, exc, attempt, report):
                    break
                messages += [
                    HumanMessage(
                        f"The server could not read your reply as a `{tool_name}` call. Reply "
                        f'with only the JSON object {{"name": "{tool_name}", "arguments": '
                        "{...}}, with no code fence and no other text."
                    )
                ]
                continue
            report.usage += Usage.of_reply(reply, self.model_name)
            args, problem, from_text = read_reply(tool_name, reply, self.context_max_chars)
            if from_text:
                unusable = "" if problem is None else f" (unusable: {problem})"
                report.notes += (f"{tool_name}: {TEXT_CALL_NOTE}{unusable}",)
            if args is not None:
                return args
            report.errors += (f"{tool_name}: reply unusable: {problem}",)
            if attempt == self.max_corrections:
                break
            report.usage += Usage.of(self.model_name, corrections=1)
            messages += [
                AIMessage(content=str(reply.content or "(no tool call)")),
                HumanMessage(
                    f"That reply cannot be used: {problem}. Call the `{tool_name}` tool exactly once, "
                    "with the arguments its schema asks for: reply with only the JSON object "
                    f'{{"name": "{tool_name}", "arguments": {{...}}}}.'
                ),
            ]
        report.usage += self._fallback_usage(1 if tool_name == "add_entry" else 0)
        reply = await self._ask(self.fallback_model, tool_name, prompt, report)
        args, problem = validate_reply(tool_name, reply, self.context_max_chars)
        if args is None:
            raise ToolCallError(f"neither the model nor the fallback produced a usable {tool_name} call: {problem}")
        return args

    def _fallback_usage(self, entries: int) -> Usage:
        """One step handed to the fallback model, writing ``entries`` entries: counted against the model (a
        fallback) and for the fallback model (a stand-in)."""
        return Usage.of(self.model_name, fallbacks=1, fallback_entries=entries) + Usage.of(
            self.fallback_name, stand_ins=1, stand_in_entries=entries
        )

    def _correctable(self, tool_name: str, exc: Exception, attempt: int, report: InvocationResult) -> bool:
        """Whether the model's failure ``exc`` at ``attempt`` is answered by a re-prompt (True) or by the fallback
        model (False, recorded); raises :class:`ToolCallError` when model errors do not fall back."""
        if unreadable_output(exc) and attempt < self.max_corrections:
            # The server could not turn the model's output into a tool call (llama.cpp: HTTP 500 "output does not
            # match the expected ... format", e.g. JSON in a code fence): re-prompt, as for a reply without a call;
            # the output itself never reached us.
            report.errors += (
                f"{tool_name}: reply unusable: the server could not read it as a call ({describe_cause(exc)})",
            )
            report.usage += Usage.of(self.model_name, llm_calls=1, corrections=1)
            return True
        if not self.fallback_on_model_error:
            raise ToolCallError(f"the model failed while writing {tool_name}: {describe_cause(exc)}") from exc
        report.errors += (f"model error on {tool_name}: {describe_cause(exc)}",)
        return False

    async def write_batch(
        self,
        build: Callable[[Sequence[int], bool, str], list[BaseMessage]],
        items: Sequence[int],
        report: InvocationResult,
        *,
        with_context: bool = False,
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
                if not self._correctable(tool_name, exc, attempt, report):
                    break
                note = (
                    f"The server could not read your reply as a `{tool_name}` call. Reply with only the "
                    f'JSON object {{"name": "{tool_name}", "arguments": {{...}}}}, with no code fence.'
                )
                continue
            report.usage += Usage.of_reply(reply, self.model_name)
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
            report.usage += Usage.of(self.model_name, corrections=1)
            note = (
                "Your previous reply could not be used for the messages below: "
                + "; ".join(reading.problems)
                + ". Call `add_entries` once, with one entry (item, summary, tags) for each of them."
            )
        report.usage += self._fallback_usage(len(missing))
        reply = await self._ask(self.fallback_model, "add_entries", build(missing, False, ""), report)
        reading = read_batch_reply("add_entries", reply, missing, self.context_max_chars)
        done.update(reading.items)
        left = [n for n in missing if n not in done]
        if left:
            raise ToolCallError(
                f"neither the model nor the fallback produced a usable add_entries call for item(s) "
                f"{', '.join(map(str, left))}: {'; '.join(reading.problems)}"
            )
        return done, context
