"""What an invoker holds for each thread it writes: one :class:`ThreadState` per thread, in one :class:`Threads`.

A thread's state is its position as last read from its checkpoint and kept in step since (messages taken in,
pending ones and since when, the memory it is bound to), the lock that serialises its calls, the ``max_delay_s``
timer that writes its pending messages, and what an interrupted call of it sent (so that the same messages sent
again are not taken in twice, see :mod:`~mycelian_agent.agent.resends`). A thread whose position is held also holds
its lease (:mod:`~mycelian_agent.agent.leases`); the invoker gives both back for the least recently used idle thread
past a bound, and the thread is read again from its checkpoint when next used.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from .report import InvocationResult, ThreadStatus
from .resends import InterruptedCall

__all__ = ["ThreadState", "Threads"]


@dataclass(eq=False)
class ThreadState:
    """One thread as an invoker holds it. ``taken_in`` is None until the thread's position is read (under its
    lease) from the checkpoint; ``pending``, ``oldest_pending_at`` and ``memory_id`` mean something only then."""

    thread_id: str
    #: Serialises the thread's calls in this invoker (one call at a time: they number its messages).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Calls of the thread in this invoker that run or wait for the lock (a state in use is never dropped).
    callers: int = 0
    #: Messages the thread has taken in (stored and pending); None: its position is not held here.
    taken_in: int | None = None
    #: Messages accepted and not yet written (batched mode), and when (``time.monotonic``) the oldest came.
    pending: int = 0
    oldest_pending_at: float = 0.0
    #: The memory the thread is bound to (a user's), None: the agent's own.
    memory_id: str | None = None
    #: The ``max_delay_s`` timer that writes the pending messages, while one is armed.
    flush_timer: asyncio.TimerHandle | None = None
    #: The thread's last call, when it failed or was cancelled before its report.
    interrupted: InterruptedCall | None = None
    #: The digests of the thread's last messages as its checkpoint held them when its position was read, until
    #: the call that read them has told whether it sends them again (:func:`~.resends.resent`).
    checkpoint_recent: tuple[str, ...] = ()
    #: When the position was last used (a tick of :class:`Threads`): the least recently used is forgotten first.
    last_used: int = 0

    @property
    def held(self) -> bool:
        """Whether the thread's position (and so its lease) is held here."""
        return self.taken_in is not None

    @property
    def idle(self) -> bool:
        """Held, and nothing to lose by forgetting the position: no call, no pending message, no timer."""
        return self.held and not self.callers and not self.pending and self.flush_timer is None

    @property
    def unused(self) -> bool:
        """No call uses it (so its lock is never replaced under a waiting call) and it holds nothing a later call
        needs: no position, no interrupted call, no timer."""
        return not self.callers and not self.held and self.interrupted is None and self.flush_timer is None

    def read(self, status: ThreadStatus) -> int:
        """Take the thread's position from its checkpoint (``status``; its pending messages count from now) and
        return the messages it has taken in."""
        self.taken_in, self.memory_id = status.accepted, status.memory_id
        self.pending, self.oldest_pending_at = status.pending, time.monotonic()
        return status.accepted

    def forget_position(self) -> None:
        """Drop the position (its lease has been given back): the next call reads it again."""
        self.taken_in, self.pending, self.memory_id = None, 0, None

    def note(self, result: InvocationResult) -> None:
        """Keep the position in step with what an invocation of the thread did (its report)."""
        if result.message_index is not None:
            self.taken_in = max(self.taken_in or 0, result.message_index)
        if not (self.pending and result.pending):  # the oldest pending message is now the first one left
            self.oldest_pending_at = time.monotonic()
        self.pending = result.pending

    def overdue(self, max_delay_s: float | None) -> bool:
        """Whether the oldest pending message has waited ``max_delay_s`` or longer."""
        return max_delay_s is not None and self.pending > 0 and time.monotonic() - self.oldest_pending_at >= max_delay_s


class Threads:
    """The states of the threads an invoker meets, by thread id. A state is kept while it matters (a position held,
    an interrupted call, a timer, a call using it) and dropped after its last call otherwise."""

    def __init__(self) -> None:
        self._states: dict[str, ThreadState] = {}
        self._ticks = itertools.count(1)

    def get(self, thread_id: str) -> ThreadState | None:
        """The state of ``thread_id``, if one is kept."""
        return self._states.get(thread_id)

    def __iter__(self) -> Iterator[ThreadState]:
        return iter(list(self._states.values()))

    @asynccontextmanager
    async def calling(self, thread_id: str) -> AsyncIterator[ThreadState]:
        """The state of ``thread_id`` for one call: its lock held for the call's length (calls of one thread run one
        after the other, in the order they came)."""
        state = self._states.get(thread_id)
        if state is None:
            state = self._states[thread_id] = ThreadState(thread_id)
        state.callers += 1
        try:
            async with state.lock:
                yield state
        finally:
            state.callers -= 1
            if state.unused and self._states.get(thread_id) is state:
                del self._states[thread_id]

    def used(self, state: ThreadState) -> None:
        """Note that ``state``'s position was used now."""
        state.last_used = next(self._ticks)

    def held(self) -> int:
        """How many threads' positions (and leases) are held."""
        return sum(1 for state in self._states.values() if state.held)

    def least_recently_used_idle(self) -> ThreadState | None:
        """The idle thread whose position was used longest ago (None: every held thread is busy)."""
        return min((state for state in self._states.values() if state.idle), key=lambda s: s.last_used, default=None)

    def pending(self) -> list[str]:
        """The threads known to have messages accepted and not yet written."""
        return [state.thread_id for state in self._states.values() if state.pending]
