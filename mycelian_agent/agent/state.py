"""The checkpointed graph state of the memory agent.

The state is bounded: it holds a window of recent messages, the messages since the last flush (capped), the
current context document and the thread's progress and usage totals. The conversation itself lives in the memory
server; keeping it in the checkpoint would make every checkpoint store the whole history (DESIGN.md, decision 5).
Everything here is plain data (dicts, strings, numbers), so checkpoints hold no custom types.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from .turn import PendingTurn, Turn

__all__ = ["AgentState"]


class AgentState(TypedDict, total=False):
    """State of one conversation thread.

    Set by each invocation: ``control``, ``message`` (the one to store, if any), ``message_tags``, ``step`` (the
    index in the control's plan of the step running) and ``tool_history`` (the tool flow of this invocation,
    emptied when it ends). Carried across invocations: ``window`` (last K messages, clipped), ``since_flush``
    (messages since the last context document, capped), ``fresh_since_flush`` (how many of them the server stored
    anew rather than deduplicated: 0 skips the next context write), ``context``, ``session_open``, ``session_time`` (the
    ``conversation_time`` given to START_SESSION, None when none was), ``last_time`` (the time of the last message
    stored or accepted since START_SESSION), ``pending`` (batched mode: messages accepted and not yet written,
    oldest first; at most a batch), ``recent`` (digests of the thread's last messages taken in, the last one
    being its last message, emptied when a session starts or ends: a resend from a new process is recognised by
    them), ``memory`` (the memory the thread is bound to: ``vault_id``, ``memory_id``,
    ``user``; absent: the agent's own), and the totals
    ``progress`` (:class:`~mycelian_agent.agent.report.ThreadProgress` as a dict) and ``usage``
    (:class:`~mycelian_agent.agent.report.Usage` as a dict).
    """

    control: str  # a ControlState value
    message: Turn | None
    message_tags: dict[str, str]
    step: int
    tool_history: Annotated[list[AnyMessage], add_messages]
    window: list[Turn]
    since_flush: list[Turn]
    pending: list[PendingTurn]
    fresh_since_flush: int  # messages since the last context that the server stored anew (not deduplicated)
    context: str
    session_open: bool
    session_time: str | None
    last_time: str | None
    progress: dict[str, int]
    usage: dict[str, Any]  # Usage.as_dict(): the totals and the per-model rows
    memory: dict[str, str]  # the thread's memory when bound to a user: vault_id, memory_id, user
    recent: list[str]  # message_digest of the last RECENT_DIGESTS messages taken in
