"""The control states that drive one invocation of the memory agent."""

from __future__ import annotations

from enum import Enum

__all__ = ["ControlState"]


class ControlState(str, Enum):
    """What one :meth:`MycelianMemoryAgent.invoke` call does.

    - ``START_SESSION``: read the memory's context and recent entries (no LLM).
    - ``PROCESS_MESSAGE``: store one message as an entry (the model writes summary and tags).
    - ``PROCESS_MESSAGE_AND_FLUSH``: store the message, wait for consistency, write a new context document.
    - ``END_SESSION``: wait for consistency, write a new context document.
    """

    START_SESSION = "start_session"
    PROCESS_MESSAGE = "process_message"
    PROCESS_MESSAGE_AND_FLUSH = "process_message_and_flush"
    END_SESSION = "end_session"

    @property
    def stores_message(self) -> bool:
        return self in (ControlState.PROCESS_MESSAGE, ControlState.PROCESS_MESSAGE_AND_FLUSH)

    @property
    def writes_context(self) -> bool:
        return self in (ControlState.PROCESS_MESSAGE_AND_FLUSH, ControlState.END_SESSION)
