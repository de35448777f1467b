"""The control states that drive one invocation of the memory agent, and the steps each one runs.

:data:`PLANS` is the agent's whole state machine: an invocation runs the steps of its control in order. Each step
is one pass through the graph's ``tools`` node (a direct call built in code, or a call whose arguments the model
writes), except ``CLOSE_SESSION``, which only updates the thread's state.
"""

from __future__ import annotations

from enum import Enum
from types import MappingProxyType

__all__ = ["ControlState", "Step", "PLANS"]


class ControlState(str, Enum):
    """What one :meth:`MycelianMemoryAgent.ainvoke` call does (its steps: :data:`PLANS`).

    - ``START_SESSION``: read the memory's context and recent entries (no LLM).
    - ``PROCESS_MESSAGE``: store one message as an entry (the model writes summary and tags).
    - ``PROCESS_MESSAGE_AND_FLUSH``: store the message, wait for consistency, write a new context document.
    - ``END_SESSION``: wait for consistency, write a new context document, close the session.
    """

    START_SESSION = "start_session"
    PROCESS_MESSAGE = "process_message"
    PROCESS_MESSAGE_AND_FLUSH = "process_message_and_flush"
    END_SESSION = "end_session"

    @property
    def stores_message(self) -> bool:
        """Whether this control takes a message to store."""
        return Step.ADD_ENTRY in PLANS[self]


class Step(str, Enum):
    """One step of an invocation."""

    READ_MEMORY = "read_memory"  # get_context + list_entries, direct calls in one tools pass
    ADD_ENTRY = "add_entry"  # the model writes summary + tags; once per part of a long message
    AWAIT_CONSISTENCY = "await_consistency"  # direct call: earlier writes are visible to reads
    PUT_CONTEXT = "put_context"  # the model writes the context document (skipped if nothing new since a flush)
    CLOSE_SESSION = "close_session"  # no tool: marks the thread's session closed


PLANS = MappingProxyType({
    ControlState.START_SESSION: (Step.READ_MEMORY,),
    ControlState.PROCESS_MESSAGE: (Step.ADD_ENTRY,),
    ControlState.PROCESS_MESSAGE_AND_FLUSH: (Step.ADD_ENTRY, Step.AWAIT_CONSISTENCY, Step.PUT_CONTEXT),
    ControlState.END_SESSION: (Step.AWAIT_CONSISTENCY, Step.PUT_CONTEXT, Step.CLOSE_SESSION),
})
