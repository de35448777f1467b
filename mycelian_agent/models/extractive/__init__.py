"""The no-network extractive model: a chat model that writes ``add_entry`` / ``put_context`` tool calls by extraction.

It reads the structured task the agent attaches to the last HumanMessage
(``additional_kwargs["mycelian_task"]``, see docs/ARCHITECTURE.md, "Agent ↔ model contract") and answers with the
single tool call an LLM would make. Deterministic, pure string work, no I/O. The arguments it writes are functions
of the task (:func:`add_entry_args`, :func:`put_context_args`, :func:`add_entries_args`, in :mod:`.tasks`), and the
text heuristics are public (:func:`summarize_message`, :func:`entry_tags`, :func:`merge_context`) for tests and reuse.

:class:`ExtractiveChatModel` (:mod:`.chat`) is imported when first asked for: the functions need no LangChain, so a
one-shot ``add`` loads none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..task import TASK_KEY
from .context import CONTEXT_SECTIONS, merge_context
from .tasks import add_entries_args, add_entry_args, put_context_args
from .text import conversation_date, entry_tags, summarize_message, third_person

if TYPE_CHECKING:
    from .chat import ExtractiveChatModel

__all__ = [
    "CONTEXT_SECTIONS",
    "TASK_KEY",
    "ExtractiveChatModel",
    "add_entries_args",
    "add_entry_args",
    "conversation_date",
    "entry_tags",
    "is_extractive",
    "merge_context",
    "put_context_args",
    "summarize_message",
    "third_person",
]


def is_extractive(spec: object) -> bool:
    """Whether the model spec ``spec`` names this model (``"extractive"``, any case and surrounding spaces)."""
    return isinstance(spec, str) and spec.strip().lower() == "extractive"


def __getattr__(name: str) -> Any:
    if name == "ExtractiveChatModel":
        from .chat import ExtractiveChatModel

        return ExtractiveChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
