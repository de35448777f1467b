"""The checkpointed graph state of the memory agent.

The state is bounded: it holds a window of recent messages, the messages since the last flush (capped), the
current context document and per-thread counters. The conversation itself lives in the memory server; keeping it
in the checkpoint would make every checkpoint store the whole history (see DESIGN.md, decision 5).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, ChatMessage
from langgraph.graph.message import add_messages

__all__ = ["AgentState", "Counters", "Turn", "empty_counters"]


class Turn(TypedDict, total=False):
    """A message as the state keeps it (plain data: cheap to checkpoint): role, content (clipped), time."""

    role: str
    content: str
    conversation_time: str


class Counters(TypedDict):
    """Per-thread totals, kept in the checkpoint so a resumed thread keeps its cadence and accounting."""

    messages: int  # messages stored (the index of the last message of the thread)
    entries: int  # entries written (a long message may take several)
    flushes: int  # context documents written
    sessions_started: int
    sessions_ended: int
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    retries: int
    corrections: int
    fallbacks: int


def empty_counters() -> Counters:
    """Counters of a thread that has done nothing yet."""
    return Counters(
        messages=0, entries=0, flushes=0, sessions_started=0, sessions_ended=0, llm_calls=0,
        prompt_tokens=0, completion_tokens=0, retries=0, corrections=0, fallbacks=0,
    )


class AgentState(TypedDict, total=False):
    """State of one conversation thread.

    Replaced on every invocation: ``control``, ``to_process``, ``conversation_time``, ``message_tags``.
    ``tool_history`` is the tool flow of the current invocation (reset at its start).
    Carried across invocations (bounded): ``window``, ``since_flush``, ``context``, ``session_open``,
    ``counters``. ``run`` is the report of the last invocation. The window and the messages since the last flush
    are plain :class:`Turn` dicts rather than message objects: (de)serialising them is ~20x cheaper.
    """

    control: str  # a ControlState value, stored as its string so checkpoints hold no custom types
    to_process: list[ChatMessage]
    conversation_time: str | None
    message_tags: dict[str, str]
    tool_history: Annotated[list[AnyMessage], add_messages]
    window: list[Turn]
    since_flush: list[Turn]
    context: str
    session_open: bool
    counters: Counters
    run: dict[str, Any]
