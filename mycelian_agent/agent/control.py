"""The control states that drive one invocation of the memory agent, and the steps each one runs.

:data:`PLANS` is the agent's whole state machine: an invocation runs the steps of its control in order. Each step
is one pass through the graph's ``tools`` node (a direct call built in code, or a call whose arguments the model
writes), except ``ACCEPT`` and ``CLOSE_SESSION``, which only update the thread's state. A step with nothing to do
(``ADD_ENTRIES`` with no pending message, ``PUT_CONTEXT`` with nothing new since a flush) is skipped.

Batched mode (``AgentSettings.batch_size > 1``, chosen by the invoker) uses the ``ACCEPT_MESSAGE*`` controls and
``WRITE_PENDING``: a message is accepted into the thread's checkpointed ``pending`` list, and ``ADD_ENTRIES`` writes
every pending message with one model call (one ``add_entry`` per message, all in one tools pass).
"""

from __future__ import annotations

from enum import Enum
from types import MappingProxyType

__all__ = ["PLANS", "ControlState", "Step"]


class ControlState(str, Enum):
    """What one :meth:`MycelianMemoryAgent.ainvoke` call does (its steps: :data:`PLANS`).

    - ``START_SESSION``: read the memory's context and recent entries (no LLM).
    - ``PROCESS_MESSAGE``: store one message as an entry (the model writes summary and tags).
    - ``PROCESS_MESSAGE_AND_FLUSH``: store the message, wait for consistency, write a new context document.
    - ``END_SESSION``: write pending messages, wait for consistency, write a new context document, close the session.
    - ``ACCEPT_MESSAGE``: (batched) keep the message in the thread's checkpoint; nothing is written (no LLM).
    - ``ACCEPT_MESSAGE_AND_WRITE``: (batched) accept it, then write every pending message with one model call.
    - ``ACCEPT_MESSAGE_AND_FLUSH``: (batched) accept, write the pending messages, write a new context document.
    - ``WRITE_PENDING``: (batched) write the pending messages now (``invoker.aflush``).
    """

    START_SESSION = "start_session"
    PROCESS_MESSAGE = "process_message"
    PROCESS_MESSAGE_AND_FLUSH = "process_message_and_flush"
    END_SESSION = "end_session"
    ACCEPT_MESSAGE = "accept_message"
    ACCEPT_MESSAGE_AND_WRITE = "accept_message_and_write"
    ACCEPT_MESSAGE_AND_FLUSH = "accept_message_and_flush"
    WRITE_PENDING = "write_pending"

    @property
    def stores_message(self) -> bool:
        """Whether this control takes a message to store (or to accept)."""
        return Step.ADD_ENTRY in PLANS[self] or Step.ACCEPT in PLANS[self]

    @property
    def flushes(self) -> bool:
        """Whether this control writes a context document."""
        return Step.PUT_CONTEXT in PLANS[self]


class Step(str, Enum):
    """One step of an invocation."""

    READ_MEMORY = "read_memory"  # get_context + list_entries, direct calls in one tools pass
    ACCEPT = "accept"  # no tool: the message joins the thread's pending list (checkpointed)
    ADD_ENTRIES = "add_entries"  # one model call writes summary + tags of every pending message; one add_entry each
    ADD_ENTRY = "add_entry"  # the model writes summary + tags; once per part of a long message
    AWAIT_CONSISTENCY = "await_consistency"  # direct call: earlier writes are visible to reads
    PUT_CONTEXT = "put_context"  # the model writes the context document (skipped if nothing new since a flush)
    CLOSE_SESSION = "close_session"  # no tool: marks the thread's session closed


PLANS = MappingProxyType(
    {
        ControlState.START_SESSION: (Step.READ_MEMORY,),
        # ADD_ENTRIES first: messages accepted earlier (batched mode) are written before this one, keeping the order.
        ControlState.PROCESS_MESSAGE: (Step.ADD_ENTRIES, Step.ADD_ENTRY),
        ControlState.PROCESS_MESSAGE_AND_FLUSH: (
            Step.ADD_ENTRIES,
            Step.ADD_ENTRY,
            Step.AWAIT_CONSISTENCY,
            Step.PUT_CONTEXT,
        ),
        ControlState.END_SESSION: (Step.ADD_ENTRIES, Step.AWAIT_CONSISTENCY, Step.PUT_CONTEXT, Step.CLOSE_SESSION),
        ControlState.ACCEPT_MESSAGE: (Step.ACCEPT,),
        ControlState.ACCEPT_MESSAGE_AND_WRITE: (Step.ACCEPT, Step.ADD_ENTRIES),
        ControlState.ACCEPT_MESSAGE_AND_FLUSH: (
            Step.ACCEPT,
            Step.ADD_ENTRIES,
            Step.AWAIT_CONSISTENCY,
            Step.PUT_CONTEXT,
        ),
        ControlState.WRITE_PENDING: (Step.ADD_ENTRIES,),
    }
)
