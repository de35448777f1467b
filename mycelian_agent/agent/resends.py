"""Telling a message sent again from a new one, so that it is not taken in twice.

A caller whose call failed, was cancelled or whose process died before it answered sends the same messages again.
Within a process the invoker keeps the failed call (:class:`InterruptedCall`: where the thread stood and what it
sent); across processes the thread's checkpoint keeps the digests of its last messages (``recent``,
:func:`recent_digests`), and the first call of a thread in a new invoker whose first messages are those is their
resend (:func:`resent`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .control import ControlState
from .invocation import Invocation

__all__ = ["RECENT_DIGESTS", "InterruptedCall", "message_digest", "recent_digests", "resent"]

#: Digests of the thread's last messages kept in its checkpoint (16 characters each): a resend from a new process
#: is recognised over at most this many messages.
RECENT_DIGESTS = 32


def message_digest(role: Any, content: Any, name: Any) -> str:
    """What identifies a message sent again (after a failed call, or to a new process): its role, speaker and
    text, hashed (64 bits: it is compared only with the thread's last few messages)."""
    text = "\x00".join(str(part) for part in (role, name or "", content))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def recent_digests(state: Mapping[str, Any], control: ControlState, run: Invocation) -> dict[str, Any]:
    """The state update of ``recent``: the digests of the thread's last messages taken in, the last one being the
    thread's last message, extended by this invocation's; a session's start or end empties it (a message sent
    after it is a new one, whatever it says)."""
    taken = len(run.report.accepted)
    if taken:
        return {"recent": [*(state.get("recent") or []), *run.digests[:taken]][-RECENT_DIGESTS:]}
    if control in (ControlState.START_SESSION, ControlState.END_SESSION) and state.get("recent"):
        return {"recent": []}
    return {}


@dataclass(frozen=True)
class InterruptedCall:
    """A call of a thread that ended without its report (it failed or was cancelled): it may have taken some of its
    messages in before it was interrupted. ``taken_in_before``: the messages the thread had taken in before the call
    (None: the call sent no messages); ``digests``: the call's messages (:func:`message_digest`), in order."""

    taken_in_before: int | None
    digests: tuple[str, ...] = ()


def resent(recent: tuple[str, ...], digests: tuple[str, ...]) -> int:
    """How many of a call's first messages (``digests``) are the thread's last ones (``recent``, the last taken
    in last): the most that match, compared over at most the ``recent`` kept (0: none, the call is new)."""
    # Fewer than RECENT_DIGESTS kept: they are all the messages since the session started, none before them.
    most = len(digests) if len(recent) >= RECENT_DIGESTS else min(len(digests), len(recent))
    for taken in range(most, 0, -1):
        kept = min(taken, len(recent))
        if recent[len(recent) - kept :] == digests[taken - kept : taken]:
            return taken
    return 0
