"""The memory tools' parameters: their types (descriptions and ranges show in the tools' JSON schemas) and the
strict check of a call's arguments against them.

FastMCP validates arguments in pydantic's lax mode (``"5"`` becomes ``5``, a JSON string becomes an object) and
ignores unknown arguments; :func:`check_arguments` runs first (``MemoryServer.call_tool``), so a wrong type is an
error that names the argument, never a silent conversion.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from mcp.server.fastmcp.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from mycelian_agent.limits import RAW_ENTRY_MAX_CHARS, SUMMARY_MAX_CHARS, TAGS_MAX_KEYS

__all__ = [
    "Description",
    "EntryId",
    "EntryItem",
    "IdempotencyKey",
    "IfExists",
    "MemoryId",
    "OptionalVaultId",
    "RawEntry",
    "Summary",
    "Tags",
    "Timestamp",
    "Title",
    "VaultId",
    "check_arguments",
]

VaultId = Annotated[str, Field(description="The UUID of the vault")]
MemoryId = Annotated[str, Field(description="The UUID of the memory")]
EntryId = Annotated[str, Field(description="The UUID of the entry")]
Title = Annotated[str, Field(description="1-50 characters: letters, digits and hyphen")]
Description = Annotated[str, Field(description="Optional description (at most 1000 characters)")]
Timestamp = Annotated[str | None, Field(description="RFC 3339 timestamp with a time zone, e.g. 2024-05-01T12:00:00Z")]
OptionalVaultId = Annotated[str | None, Field(description="Optional: the memory's vault UUID, checked if given")]
RawEntry = Annotated[str, Field(description=f"The full text of the entry (1-{RAW_ENTRY_MAX_CHARS} characters)")]
Summary = Annotated[str, Field(description=f"A short retrieval-oriented summary (1-{SUMMARY_MAX_CHARS} characters)")]
Tags = Annotated[
    dict[str, str] | None, Field(description=f"Optional object of string to string (at most {TAGS_MAX_KEYS} keys)")
]
IfExists = Annotated[
    Literal["error", "return"],
    Field(
        description='When the title is taken: "error" (the default, as upstream) or "return" the existing one as '
        "it is (nothing is changed)"
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Field(description="Optional key (<= 200 chars): a retry with the same key and raw_entry is not duplicated"),
]


class EntryItem(TypedDict):
    """One entry of an ``add_entries`` call: ``add_entry``'s fields, without the ids."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    raw_entry: RawEntry
    summary: Summary
    tags: NotRequired[Tags]
    conversation_time: NotRequired[Timestamp]
    idempotency_key: NotRequired[IdempotencyKey]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_arguments(tool: str, model: type[BaseModel], arguments: dict[str, Any]) -> None:
    """Check ``arguments`` of ``tool`` strictly against its argument ``model``: unknown, missing and mistyped
    arguments (``"5"`` for a number) raise :class:`ToolError` naming each one."""
    problems = [f"unknown argument {key!r}" for key in arguments if key not in model.model_fields]
    try:
        model.model_validate(arguments, strict=True)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".") or "arguments"
            if err["type"] == "missing":
                problems.append(f"missing required argument {where!r}")
            else:
                got = err.get("input")
                problems.append(f"argument {where!r}: {err['msg']} (got {type(got).__name__} {_show(got)})")
    if problems:
        expected = ", ".join(model.model_fields)
        raise ToolError(f"invalid arguments for {tool}: {'; '.join(problems)} (parameters: {expected})")
