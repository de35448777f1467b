"""The extractive model as a LangChain chat model: it reads the task the agent attaches to the last HumanMessage
(``additional_kwargs["mycelian_task"]``) and answers with the single tool call an LLM would make, its arguments
from :mod:`.tasks`. Deterministic, no network."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from ..task import TASK_KEY
from .tasks import OPERATIONS, fail, require

__all__ = ["ExtractiveChatModel"]


def _tool_names(tools: Sequence[Any]) -> list[str]:
    names = []
    for tool in tools:
        schema = tool if isinstance(tool, Mapping) and "function" in tool else convert_to_openai_tool(tool)
        names.append(schema["function"]["name"])
    return names


def _forced_name(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, str) and tool_choice not in ("auto", "any", "required", "none"):
        return tool_choice
    if isinstance(tool_choice, Mapping):
        return (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    return None


class ExtractiveChatModel(BaseChatModel):
    """A deterministic, no-network chat model that answers the agent's tasks with one extractive tool call.

    Bind a tool (``bind_tools([add_entry_schema], tool_choice="add_entry")``) and invoke with
    ``[SystemMessage, HumanMessage]`` whose HumanMessage carries ``additional_kwargs["mycelian_task"]``.
    """

    @property
    def _llm_type(self) -> str:
        return "extractive"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "extractive"}

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind ``tools`` (OpenAI dicts, BaseTools, pydantic models or functions) and an optional forced choice."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages, kwargs))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        # Pure CPU work well under a millisecond: no need for the default thread-pool hop.
        return self._generate(messages, stop, **kwargs)

    def _answer(self, messages: Sequence[BaseMessage], kwargs: Mapping[str, Any]) -> AIMessage:
        human = next((m for m in reversed(messages) if m.type == "human"), None)
        if human is None:
            fail(f"the prompt has no HumanMessage carrying additional_kwargs[{TASK_KEY!r}]")
        task = human.additional_kwargs.get(TASK_KEY)
        if not isinstance(task, Mapping):
            fail(f"the last HumanMessage has no additional_kwargs[{TASK_KEY!r}] object")
        operation = task.get("operation")
        if not isinstance(operation, str) or operation not in OPERATIONS:
            fail(f"{TASK_KEY}['operation'] must be one of {sorted(OPERATIONS)}, got {operation!r}")

        bound = _tool_names(kwargs.get("tools") or [])
        name = _forced_name(kwargs.get("tool_choice")) or (bound[0] if len(bound) == 1 else operation)
        require(name == operation, f"the bound/forced tool is {name!r} but the task is {operation!r}")
        require(not bound or name in bound, f"the forced tool {name!r} is not among the bound tools {bound}")
        args = OPERATIONS[operation](task)
        digest = hashlib.sha1(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
        return AIMessage(
            content="",
            tool_calls=[{"name": name, "args": args, "id": f"call_extractive_{digest}", "type": "tool_call"}],
            usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
            response_metadata={"model_name": "extractive"},
        )
