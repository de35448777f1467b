"""What the model sees of the memory tools, how its replies are checked, and the arguments code owns.

The model is shown only the fields it writes (``summary`` and ``tags`` of add_entry, ``content`` of put_context);
identifiers, verbatim text, time and the idempotency key are set by the agent (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from langchain_core.messages import BaseMessage

__all__ = ["MODEL_TOOL_SCHEMAS", "CODE_TAGS", "MAX_TAGS", "validate_reply", "idempotency_key"]

#: Tags the agent sets itself; a model's tags with these names are dropped.
CODE_TAGS = ("role", "thread", "msg", "part")
MAX_TAGS = 32
SUMMARY_MAX_CHARS = 2000

#: What the model is shown of each tool: only the fields it writes.
MODEL_TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "add_entry": {
        "type": "function",
        "function": {
            "name": "add_entry",
            "description": "Record the current message as a memory entry. Write only the summary and tags; the "
            "message text, identifiers and time are filled in by the system.",
            "parameters": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "description": "Retrieval-oriented summary, at most 400 chars."},
                    "tags": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Short string tags, e.g. {\"topic\": \"travel, japan\", \"kind\": \"plan\"}.",
                    },
                },
                "required": ["summary", "tags"],
            },
        },
    },
    "put_context": {
        "type": "function",
        "function": {
            "name": "put_context",
            "description": "Save the whole new context document of this memory.",
            "parameters": {
                "type": "object",
                "properties": {"content": {"type": "string", "description": "The whole Markdown document."}},
                "required": ["content"],
            },
        },
    },
}


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
    args = calls[0].get("args") or {}
    if tool_name == "add_entry":
        summary = args.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            return None, "the summary was missing or empty"
        tags = args.get("tags") or {}
        if isinstance(tags, list):
            tags = {"topic": ", ".join(str(t) for t in tags)}
        if not isinstance(tags, Mapping):
            return None, "tags must be an object of string values"
        clean = {str(k)[:64]: str(v)[:512] for k, v in tags.items() if str(k) not in CODE_TAGS and v is not None}
        return {"summary": summary.strip()[:SUMMARY_MAX_CHARS], "tags": clean}, None
    content = args.get("content")
    if not isinstance(content, str) or not content.strip():
        return None, "the content was missing or empty"
    if len(content) > context_max_chars:
        return None, f"the document has {len(content)} characters; the limit is {context_max_chars}"
    return {"content": content}, None


def idempotency_key(thread_id: str, number: int, content: str, part: int, parts: int) -> str:
    # The content hash makes a retried message dedupe while a different message at the same position does not.
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
    thread = thread_id if len(thread_id) <= 120 else hashlib.sha256(thread_id.encode()).hexdigest()[:32]
    return f"{thread}:{number}:{digest}:{part + 1}/{parts}"
