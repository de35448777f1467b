"""One invocation's runtime context (:class:`Invocation`) and the thread-state bookkeeping its steps share.

The context travels in LangGraph's runtime context, never in the checkpoint: it holds where the invocation writes and
the report it fills in. The helpers read and update the checkpointed state's totals and messages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import MycelianError
from .report import InvocationResult, ThreadProgress, Usage
from .turn import Turn

__all__ = ["Invocation", "bump_progress", "inherit_time", "plain_turn", "thread_totals"]


@dataclass
class Invocation:
    """The runtime context of one invocation: where it writes and the report it fills in (not checkpointed)."""

    thread_id: str
    vault_id: str
    memory_id: str | None  # None: the agent's own memory, not created yet (see resolve_memory)
    report: InvocationResult
    batch_entries: int = 0  # add_entry calls made by ADD_ENTRIES in this invocation (ADD_ENTRY counts its own)
    incoming: list[tuple[Turn, dict[str, str]]] | None = None  # aaccept_messages: the checked messages to accept
    batch_context: str | None = None  # the context document written by the ADD_ENTRIES call, for PUT_CONTEXT
    tools_in_flight: int = 0  # tool calls of one pass run concurrently: their time is counted once (the union)
    tools_since: float = 0.0
    #: The state changes of the steps done so far, written to the checkpoint only by the invocation's last step.
    staged: dict[str, Any] = field(default_factory=dict)
    digests: tuple[str, ...] = ()  # the messages this invocation takes in (message_digest), in order
    #: Finds (``create=False``) or creates the agent's own memory, for a thread bound to no user's.
    own_memory: Callable[[bool], Awaitable[str | None]] | None = None

    async def resolve_memory(self, *, create: bool) -> str | None:
        """The id of the memory this invocation writes: the agent's own one is found when first needed and
        created by the first write (``create``), so reads leave a database without it unchanged."""
        if self.memory_id is None and self.own_memory is not None:
            self.memory_id = await self.own_memory(create)
        return self.memory_id

    @property
    def ids(self) -> dict[str, str]:
        if self.memory_id is None:  # resolve_memory comes first: a call to no memory is a bug, not a request
            raise MycelianError("memory agent: a tool call before its memory was resolved")
        return {"vault_id": self.vault_id, "memory_id": self.memory_id}


def thread_totals(values: Mapping[str, Any]) -> tuple[ThreadProgress, Usage]:
    """A thread's progress and usage from its state (checkpoints of 0.1 kept both in one ``counters`` dict)."""
    legacy = values.get("counters")
    return (
        ThreadProgress.from_mapping(values.get("progress") or legacy),
        Usage.from_mapping(values.get("usage") or legacy),
    )


def bump_progress(state: Mapping[str, Any], **deltas: int) -> dict[str, int]:
    progress = thread_totals(state)[0]
    return replace(progress, **{k: getattr(progress, k) + v for k, v in deltas.items()}).as_dict()


def inherit_time(state: Mapping[str, Any], run: Invocation) -> dict[str, Any]:
    """A message without a time takes the later of the session's time and the last message's (a state update)."""
    message: Turn = state["message"]
    if message.get("conversation_time"):
        return {}
    known = [t for t in (state.get("session_time"), state.get("last_time")) if t]
    if not known:
        return {}  # no time known at all: the server stamps the entry with its creation time
    inherited = max(known)  # same fixed-width UTC form (normalise_time): the string order is the time order
    run.report.notes += (
        f"message sent without a time: stored with the session's time {inherited} "
        "(the later of the session's start and its last message)",
    )
    return {"message": {**message, "conversation_time": inherited}}


def _clip(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit]


def plain_turn(message: Mapping[str, Any], limit: int | None) -> Turn:
    """The message as a plain Turn (no batch bookkeeping), its content clipped to ``limit``."""
    turn = Turn(role=message["role"], content=_clip(message["content"], limit))
    for key in ("conversation_time", "name"):
        if message.get(key):
            turn[key] = message[key]
    return turn
