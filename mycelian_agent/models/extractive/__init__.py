"""The no-network extractive model: a chat model that writes ``add_entry`` / ``put_context`` tool calls by extraction.

It reads the structured task the agent attaches to the last HumanMessage
(``additional_kwargs["mycelian_task"]``, see docs/ARCHITECTURE.md, "Agent ↔ model contract") and answers with the
single tool call an LLM would make. Deterministic, pure string work, no I/O. The text heuristics are public
(:func:`summarize_message`, :func:`entry_tags`, :func:`merge_context`) for tests and reuse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from ...errors import ToolCallError
from ..task import TASK_KEY
from .context import CONTEXT_SECTIONS, DEFAULT_CONTEXT_MAX_CHARS, merge_context
from .text import conversation_date, entry_tags, summarize_message, third_person

__all__ = [
    "ExtractiveChatModel",
    "TASK_KEY",
    "CONTEXT_SECTIONS",
    "summarize_message",
    "entry_tags",
    "merge_context",
    "add_entry_args",
    "add_entries_args",
    "put_context_args",
    "third_person",
    "conversation_date",
]


# --- the chat model -----------------------------------------------------------------------------------------------
def _fail(what: str) -> NoReturn:
    raise ToolCallError(f"extractive model: {what} (see docs/ARCHITECTURE.md, 'Agent ↔ model contract')")


def _require(condition: bool, what: str) -> None:
    if not condition:
        _fail(what)


def _list(value: Any, what: str) -> Sequence[Any]:
    """``value`` when it is a list (not a string), else the contract error ``what``."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        _fail(what)
    return value


def _check_message(message: Any, where: str) -> Mapping[str, Any]:
    _require(isinstance(message, Mapping), f"{where} must be an object with role, content, conversation_time")
    _require(isinstance(message.get("role"), str), f"{where}['role'] is missing or not a string")
    _require(isinstance(message.get("content"), str), f"{where}['content'] is missing or not a string")
    return message


def add_entry_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``add_entry`` tool arguments (summary and tags) for an ``add_entry`` task payload."""
    message = _check_message(task.get("message"), "mycelian_task['message']")
    recent = task.get("recent") or []
    _require(isinstance(recent, Sequence), "mycelian_task['recent'] must be a list of messages")
    recent = [m for m in recent if isinstance(m, Mapping)]
    name = message.get("name")
    _require(name is None or isinstance(name, str), "mycelian_task['message']['name'] must be a string when given")
    summary = summarize_message(
        message["content"], role=message["role"], conversation_time=message.get("conversation_time"), recent=recent,
        name=name,
    )
    return {"summary": summary, "tags": entry_tags(message["content"], role=message["role"])}


def put_context_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``put_context`` tool arguments (the context document) for a ``put_context`` task payload."""
    messages = _list(task.get("messages"), "mycelian_task['messages'] is missing")
    for i, message in enumerate(messages):
        _check_message(message, f"mycelian_task['messages'][{i}]")
    previous = task.get("previous_context") or ""
    _require(isinstance(previous, str), "mycelian_task['previous_context'] must be a string")
    max_chars = task.get("max_chars", DEFAULT_CONTEXT_MAX_CHARS)
    _require(isinstance(max_chars, int) and max_chars > 0, "mycelian_task['max_chars'] must be a positive int")
    return {"content": merge_context(previous, messages, max_chars=max_chars)}


def add_entries_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The ``add_entries`` tool arguments (one ``{item, summary, tags}`` per item) for an ``add_entries`` task
    payload; with a ``context_task`` (operation ``add_entries_and_context``) also the new context document.

    Each item is summarised exactly as :func:`add_entry_args` would summarise it alone, from the item's own
    ``recent`` messages, so batching changes no summary.
    """
    items = _list(task.get("items"), "mycelian_task['items'] must be a non-empty list")
    _require(len(items) > 0, "mycelian_task['items'] must be a non-empty list")
    entries = []
    for i, item in enumerate(items):
        _require(isinstance(item, Mapping) and isinstance(item.get("item"), int),
                 f"mycelian_task['items'][{i}] must be an object with an integer 'item'")
        args = add_entry_args({"message": item.get("message"), "recent": item.get("recent") or []})
        entries.append({"item": item["item"], **args})
    result: dict[str, Any] = {"entries": entries}
    if task.get("context_task") is not None:
        _require(isinstance(task["context_task"], Mapping), "mycelian_task['context_task'] must be an object")
        result["context"] = put_context_args(task["context_task"])["content"]
    return result


_OPERATIONS = {"add_entry": add_entry_args, "put_context": put_context_args, "add_entries": add_entries_args,
               "add_entries_and_context": add_entries_args}


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
            _fail(f"the prompt has no HumanMessage carrying additional_kwargs[{TASK_KEY!r}]")
        task = human.additional_kwargs.get(TASK_KEY)
        if not isinstance(task, Mapping):
            _fail(f"the last HumanMessage has no additional_kwargs[{TASK_KEY!r}] object")
        operation = task.get("operation")
        if not isinstance(operation, str) or operation not in _OPERATIONS:
            _fail(f"{TASK_KEY}['operation'] must be one of {sorted(_OPERATIONS)}, got {operation!r}")

        bound = _tool_names(kwargs.get("tools") or [])
        name = _forced_name(kwargs.get("tool_choice")) or (bound[0] if len(bound) == 1 else operation)
        _require(name == operation, f"the bound/forced tool is {name!r} but the task is {operation!r}")
        _require(not bound or name in bound, f"the forced tool {name!r} is not among the bound tools {bound}")
        args = _OPERATIONS[operation](task)
        digest = hashlib.sha1(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
        return AIMessage(
            content="",
            tool_calls=[{"name": name, "args": args, "id": f"call_extractive_{digest}", "type": "tool_call"}],
            usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
            response_metadata={"model_name": "extractive"},
        )

