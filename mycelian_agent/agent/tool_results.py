"""Reading the memory server's answers: the results of the last tools pass, their text, the entries they stored,
and a tool call's failure as a :class:`~mycelian_agent.errors.MemoryServerError` (transient or not)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool

from ..errors import MemoryServerError, MycelianError, describe_cause, is_transient_text
from .invocation import Invocation

__all__ = ["count_results", "declared_params", "execute_checked", "last_results", "record_stored", "tool_text"]


def declared_params(tool: BaseTool) -> set[str]:
    """The parameter names ``tool`` declares (its JSON schema's properties)."""
    schema = getattr(tool, "args_schema", None) or {}
    return set(schema.get("properties", {})) if isinstance(schema, Mapping) else set()


async def execute_checked(name: str, request: Any, execute: Any) -> Any:
    try:
        result = await execute(request)
    except MycelianError:
        raise
    except Exception as exc:  # transport failures come in many types
        raise MemoryServerError(f"{name} failed: {describe_cause(exc)}", tool=name, transient=True) from exc
    if isinstance(result, ToolMessage) and result.status == "error":
        text = tool_text(result)
        raise MemoryServerError(f"{name} failed: {text}", tool=name, transient=is_transient_text(text))
    return result


def last_results(history: Sequence[BaseMessage]) -> list[ToolMessage]:
    """The tool results of the last tools pass (those after the last AIMessage)."""
    results: list[ToolMessage] = []
    for message in reversed(history):
        if not isinstance(message, ToolMessage):
            break
        results.append(message)
    return results[::-1]


def count_results(history: Sequence[BaseMessage], tool: str) -> int:
    return sum(1 for m in history if isinstance(m, ToolMessage) and m.name == tool)


def tool_text(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") if isinstance(block, dict) else str(block) for block in content)


def record_stored(results: list[ToolMessage], run: Invocation) -> int:
    """Entry ids and deduplicated writes of add_entry and add_entries results, into the report; the number of
    entries the results stand for."""
    count = 0
    for result in results:
        try:
            answer = json.loads(tool_text(result))
        except json.JSONDecodeError:
            count += 1
            continue  # upstream answers "enqueued": no entry id to report
        stored = answer.get("entries") if result.name == "add_entries" and isinstance(answer, Mapping) else [answer]
        if not isinstance(stored, list):
            raise MemoryServerError("add_entries returned a result without its list of entries", tool="add_entries")
        for entry in stored:
            count += 1
            if isinstance(entry, Mapping):
                if entry.get("entryId"):
                    run.report.entry_ids += (entry["entryId"],)
                run.report.deduplicated += bool(entry.get("deduplicated"))
    return count
