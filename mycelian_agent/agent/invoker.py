"""MycelianAgentInvoker: turns chat events into agent invocations.

It counts the messages of each thread, sends message n as PROCESS_MESSAGE_AND_FLUSH when n is a multiple of
``flush_every``, and starts and ends sessions. The counts live in the agent's checkpointed state, so a thread
resumed in a new process keeps its cadence; the invoker caches them per thread and serialises calls per thread.

Times: the ``conversation_time`` given to ``start_session`` is the session's time. A message sent without a
``conversation_time`` is stored with the later of the session's time and the time of the last message stored in the
session (so a late message is never dated before an earlier one); when neither is known (no time given to the
session nor to any of its messages) the entry has no conversation time and the server stamps its creation time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Mapping

from .._sync import run_sync
from .graph import MycelianMemoryAgent
from .control import ControlState
from ..errors import ConfigError
from .report import InvocationResult, ThreadStatus

__all__ = ["MycelianAgentInvoker"]


class MycelianAgentInvoker:
    """The entry point for chat pipelines: ``start_session``, ``process_conversation_message``, ``end_session``.

    Every method has an async twin (``astart_session``, ...); the async ones are the real API, the sync ones are
    thin wrappers for code that runs outside an event loop.
    """

    def __init__(self, agent: MycelianMemoryAgent, flush_every: int = 6) -> None:
        if not isinstance(flush_every, int) or flush_every < 1:
            raise ConfigError(f"flush_every must be a positive integer, got {flush_every!r}")
        self.agent = agent
        self.flush_every = flush_every
        self._counts: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Set by the builder: the memory server connection and context that own this invoker's resources.
        self.connection: Any = None

    def _lock(self, thread_id: str) -> asyncio.Lock:
        return self._locks.setdefault(thread_id, asyncio.Lock())

    async def _count(self, thread_id: str) -> int:
        if thread_id not in self._counts:
            self._counts[thread_id] = (await self.agent.aget_thread(thread_id)).messages
        return self._counts[thread_id]

    async def astart_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Read the memory's context and recent entries into the thread's state; ``conversation_time`` is the
        session's time (messages sent without one take it)."""
        async with self._lock(thread_id):
            return await self.agent.ainvoke(ControlState.START_SESSION, thread_id, conversation_time=conversation_time)

    async def aprocess_conversation_message(
        self,
        role: str,
        content: str,
        thread_id: str,
        conversation_time: str | datetime | None = None,
        *,
        tags: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> InvocationResult:
        """Store one message (``role`` is ``user`` or ``assistant``); every ``flush_every``-th also flushes.

        ``name`` is who spoke ("Caroline"; at most 100 characters, one line): the summary and the prompts name
        them instead of "the user". Without ``conversation_time`` the message takes the session's time (see the
        module docstring). An invalid role, content, time or name raises :class:`InputError` before anything is
        written.
        """
        async with self._lock(thread_id):
            number = await self._count(thread_id) + 1
            control = (ControlState.PROCESS_MESSAGE_AND_FLUSH if number % self.flush_every == 0
                       else ControlState.PROCESS_MESSAGE)
            result = await self.agent.ainvoke(control, thread_id, {"role": role, "content": content},
                                              conversation_time, tags=tags, name=name)
            self._counts[thread_id] = result.message_index or number
            return result

    async def aend_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Wait for consistency and write the session's context document."""
        async with self._lock(thread_id):
            return await self.agent.ainvoke(ControlState.END_SESSION, thread_id, conversation_time=conversation_time)

    async def athread_status(self, thread_id: str) -> ThreadStatus:
        """Position and usage totals of ``thread_id`` (from its checkpoint)."""
        return await self.agent.aget_thread(thread_id)

    def start_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Synchronous :meth:`astart_session`."""
        return run_sync(self.astart_session(thread_id, conversation_time), self.agent._loop)

    def process_conversation_message(self, role: str, content: str, thread_id: str,
                                     conversation_time: str | datetime | None = None, *,
                                     tags: Mapping[str, str] | None = None,
                                     name: str | None = None) -> InvocationResult:
        """Synchronous :meth:`aprocess_conversation_message`."""
        return run_sync(self.aprocess_conversation_message(role, content, thread_id, conversation_time, tags=tags,
                                                           name=name), self.agent._loop)

    def end_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Synchronous :meth:`aend_session`."""
        return run_sync(self.aend_session(thread_id, conversation_time), self.agent._loop)

    def thread_status(self, thread_id: str) -> ThreadStatus:
        """Synchronous :meth:`athread_status`."""
        return run_sync(self.athread_status(thread_id), self.agent._loop)
