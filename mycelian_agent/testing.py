"""Test helpers: a scripted tool-calling chat model, for this package's tests and for users' own.

``ScriptedChatModel`` answers each call with the next scripted message (or raises the next scripted exception),
records every prompt it received and the tools it was bound with. langchain-core's fake models have no
``bind_tools`` and ``GenericFakeChatModel`` drops tool calls when streaming; this one does neither.

Example::

    model = ScriptedChatModel(responses=[tool_call_message("add_entry", {"summary": "s", "tags": {}})])
    agent = MycelianMemoryAgent(model=model, ...)
    ...
    assert model.bound_tool_choice == "add_entry"
    assert "Hello" in model.calls[0][-1].content
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

__all__ = [
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "invalid_tool_call_message",
    "text_message",
    "tool_call_message",
]

_call_ids = itertools.count(1)


class ScriptExhaustedError(RuntimeError):
    """A ScriptedChatModel was called more times than it has scripted responses (and cycling is off)."""


def _usage(usage: Mapping[str, int] | tuple[int, int] | None) -> dict[str, int] | None:
    if usage is None:
        return None
    if isinstance(usage, tuple):
        input_tokens, output_tokens = usage
    else:
        input_tokens, output_tokens = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


def tool_call_message(
    name: str,
    args: Mapping[str, Any],
    usage: Mapping[str, int] | tuple[int, int] | None = None,
    *,
    call_id: str | None = None,
    content: str = "",
) -> AIMessage:
    """An AIMessage with one tool call; ``usage`` is ``(input_tokens, output_tokens)`` or a usage dict."""
    call = {"name": name, "args": dict(args), "id": call_id or f"call_scripted_{next(_call_ids)}", "type": "tool_call"}
    return AIMessage(content=content, tool_calls=[call], usage_metadata=_usage(usage))


def text_message(content: str, usage: Mapping[str, int] | tuple[int, int] | None = None) -> AIMessage:
    """An AIMessage with text and no tool call (a model ignoring the forced tool choice)."""
    return AIMessage(content=content, usage_metadata=_usage(usage))


def invalid_tool_call_message(
    name: str, raw_args: str, usage: Mapping[str, int] | tuple[int, int] | None = None
) -> AIMessage:
    """An AIMessage whose tool call arguments are not valid JSON (as langchain reports a malformed call)."""
    invalid = {
        "name": name,
        "args": raw_args,
        "id": f"call_scripted_{next(_call_ids)}",
        "error": "invalid JSON",
        "type": "invalid_tool_call",
    }
    return AIMessage(content="", invalid_tool_calls=[invalid], usage_metadata=_usage(usage))


class ScriptedChatModel(FakeMessagesListChatModel):
    """A chat model that replays ``responses`` in order and records what it was asked.

    - ``responses``: AIMessages to return, or exceptions to raise, one per call.
    - ``cycle``: start over when the script is exhausted (default: raise :class:`ScriptExhaustedError`).
    - ``calls``: every prompt received, as a list of messages per call.
    - ``bound_tools`` / ``bound_tool_choice``: the OpenAI-format tool schemas and tool choice of the latest
      ``bind_tools``; ``bind_history`` keeps all of them. ``bind_tools`` returns the model itself.
    """

    responses: list[Any]  # BaseMessage | BaseException
    cycle: bool = False
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[dict[str, Any]] = Field(default_factory=list)
    bound_tool_choice: Any = None
    bind_history: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def remaining(self) -> int:
        """How many scripted responses have not been used yet."""
        return len(self.responses) - self.i

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> ScriptedChatModel:
        """Record ``tools`` and ``tool_choice`` and return this model (the script decides the answers)."""
        self.bound_tools = [convert_to_openai_tool(tool) for tool in tools]
        self.bound_tool_choice = tool_choice
        self.bind_history.append({"tools": self.bound_tools, "tool_choice": tool_choice, **kwargs})
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls.append(list(messages))
        if self.i >= len(self.responses):
            if not self.cycle or not self.responses:
                raise ScriptExhaustedError(
                    f"ScriptedChatModel: call #{len(self.calls)} but only {len(self.responses)} scripted "
                    "response(s); add more responses or pass cycle=True"
                )
            self.i = 0
        response = self.responses[self.i]
        self.i += 1
        if isinstance(response, BaseException):
            raise response
        # A copy, so that langchain setting the run id on the returned message leaves the script untouched.
        return ChatResult(generations=[ChatGeneration(message=response.model_copy(deep=True))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages, stop, **kwargs)
