"""A message as the agent handles it (:class:`Turn`) and a message accepted but not yet written (:class:`PendingTurn`).

Plain data in a module of its own: the checkpointed state (:mod:`.state`, which LangGraph reads) holds them, and so do
the checks at the agent's edge and the one-shot write (:mod:`.oneshot`), which import no LangGraph.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["PendingTurn", "Turn"]


class Turn(TypedDict, total=False):
    """A message as the agent handles it: role, content, time (RFC 3339 UTC, when known), speaker name (optional).

    ``role`` is ``user`` or ``assistant`` (``system`` for the window's note of earlier entries); ``name`` is who
    spoke in that role ("Caroline"), when the input says.
    """

    role: str
    content: str
    conversation_time: str
    name: str


class PendingTurn(Turn, total=False):
    """A message accepted in batched mode and not yet written: the turn (its time already resolved), its number in
    the thread (which fixes its idempotency key), its input tags, and when it was accepted (``time.time()``)."""

    number: int
    tags: dict[str, str]
    accepted_at: float
