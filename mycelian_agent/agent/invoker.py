"""MycelianAgentInvoker: turns chat events into agent invocations.

It counts the messages of each thread, sends message n as PROCESS_MESSAGE_AND_FLUSH when n is a multiple of
``flush_every``, and starts and ends sessions. The counts live in the agent's checkpointed state, so a thread
resumed in a new process keeps its cadence; the invoker caches them per thread and serialises calls per thread.

Times: the ``conversation_time`` given to ``start_session`` is the session's time. A message sent without a
``conversation_time`` is stored with the later of the session's time and the time of the last message stored in the
session (so a late message is never dated before an earlier one); when neither is known (no time given to the
session nor to any of its messages) the entry has no conversation time and the server stamps its creation time.

Batched mode (``batch_size > 1``): a message is accepted (kept in the thread's checkpoint, no model call, not yet
searchable) and every ``batch_size``-th pending message, the flush cadence, the session end, :meth:`aflush` or
``max_delay_s`` after the oldest pending message was accepted writes all pending messages with one model call.
:meth:`aprocess_conversation_messages` takes many messages at once: one invocation (one checkpoint write) per
batch instead of one per message, with the same cadence.

It is one module because the per-thread positions, locks and timers and the calls that keep them belong together;
the read, correct and forget calls live beside it (:mod:`~mycelian_agent.agent.lifecycle_calls`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from langchain_core.messages import ChatMessage

from .._sync import run_sync
from .graph import MycelianMemoryAgent
from .resends import Doubt, message_digest, resent
from .leases import ThreadLeases
from .lifecycle_calls import LifecycleCalls
from .control import ControlState
from ..errors import ConfigError, InputError, MycelianError
from .report import InvocationResult, ThreadStatus

if TYPE_CHECKING:  # the read side is plain data and MCP calls: typed here, imported where used
    from ..recall import MemoryHit, MemoryReader, Recall

__all__ = ["MycelianAgentInvoker"]

_log = logging.getLogger(__name__)

#: Threads whose position (and lease) an invoker keeps at most; see :meth:`MycelianAgentInvoker._forget_idle`.
THREADS_HELD = 256


class MycelianAgentInvoker(LifecycleCalls):
    """The entry point for chat pipelines: ``start_session``, ``process_conversation_message``, ``end_session`` to
    write; ``search`` and ``recall`` to read; ``get_all``, ``get``, ``update``, ``history``, ``delete`` and
    ``delete_user`` to read, correct and forget entries one by one (:class:`LifecycleCalls`).

    Many users share one invoker (one server connection): a thread is bound to a user's memory by ``user=`` at
    ``astart_session`` (or its first message), kept in the thread's checkpoint; reads name the user per call.
    Without ``user=`` a thread writes to, and a read reads, the memory the invoker was built with.

    Every method has an async twin (``astart_session``, ...); the async ones are the real API, the sync ones are
    thin wrappers for code that runs outside an event loop.
    """

    def __init__(self, agent: MycelianMemoryAgent, flush_every: int = 6, *, batch_size: int | None = None,
                 max_delay_s: float | None = None, reader: MemoryReader | None = None,
                 leases: ThreadLeases | None = None, thread_wait: float | None = None) -> None:
        if not isinstance(flush_every, int) or flush_every < 1:
            raise ConfigError(f"flush_every must be a positive integer, got {flush_every!r}")
        batch_size = agent.settings.batch_size if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        max_delay_s = agent.settings.max_delay_s if max_delay_s is None else max_delay_s
        if max_delay_s is not None and (isinstance(max_delay_s, bool) or not isinstance(max_delay_s, (int, float))
                                        or not max_delay_s > 0):
            raise ConfigError(f"max_delay_s must be a positive number of seconds or None, got {max_delay_s!r}")
        self.agent = agent
        self.flush_every = flush_every
        self.batch_size = batch_size
        self.max_delay_s = max_delay_s
        self._counts: dict[str, int] = {}  # messages taken in per thread (stored + pending)
        self._pending: dict[str, tuple[int, float]] = {}  # per thread: (pending messages, when the oldest came)
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[Any]] = set()
        #: Problems of background writes (``max_delay_s``); the messages stay pending and are written later.
        self.background_errors: list[str] = []
        #: Set by the builder: the memory server connection and context that own this invoker's resources.
        self.connection: Any = None
        #: The read side (search, recall, the user directory); set by the builder.
        self.reader = reader
        #: One writer per thread: the lease of each thread this invoker writes is taken before its first write
        #: (``thread_wait``: seconds to wait for another process's lease, None: fail at once); see ``leases.py``.
        self.leases = leases if leases is not None else ThreadLeases()
        self.thread_wait = thread_wait
        self._bound: dict[str, str | None] = {}  # per thread: the memory id it is bound to (None: the agent's own)
        self._doubts: dict[str, Doubt] = {}  # per thread: the last call, when it failed or was cancelled
        self._recent: dict[str, tuple[str, ...]] = {}  # per thread read, not yet called: its last messages (resends.py)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this invoker's server session is bound to (where the sync methods run their work)."""
        return self.agent._loop

    def _lock(self, thread_id: str) -> asyncio.Lock:
        return self._locks.setdefault(thread_id, asyncio.Lock())

    async def _settle(self, thread_id: str) -> Doubt | None:
        """After a call of ``thread_id`` that failed or was cancelled: wait for its checkpoint save, read the
        thread's position again (the call may have taken its messages in before it was interrupted) and return
        what the call sent (None when the last call ended normally)."""
        self._recent.pop(thread_id, None)  # a call of this process came first: a later one is not its resend
        doubt = self._doubts.get(thread_id)
        if doubt is None:
            return None
        await self.agent.asettle(thread_id)
        if thread_id in self._counts:
            status = await self.agent.aget_thread(thread_id)
            self._counts[thread_id] = status.accepted
            self._pending[thread_id] = (status.pending, time.monotonic())
            self._bound[thread_id] = status.memory_id
        self._doubts.pop(thread_id, None)
        return doubt

    def _doubt(self, thread_id: str, start: int | None, digests: tuple[str, ...] = ()) -> None:
        """Note that a call of ``thread_id`` ended without its report (failed or cancelled): ``start`` messages
        were taken in before it, ``digests`` are the messages it sent (see :meth:`_taken`)."""
        self._doubts[thread_id] = Doubt(start, digests)

    async def _taken(self, doubt: Doubt | None, thread_id: str, digests: tuple[str, ...]) -> int:
        """How many of ``digests`` (a call's messages, in order) were already taken in: by the last call of the
        thread, when it failed or was cancelled and sent the same messages (its retry), or, for the first call of
        a thread in this invoker, as the thread's last messages (a resend to a new process; see ``resends.py``)."""
        if doubt is not None and doubt.start is not None and doubt.digests == digests:
            return max(0, min(len(digests), await self._count(thread_id) - doubt.start))
        await self._count(thread_id)  # a thread new here: its position and last digests are read now
        return resent(self._recent.pop(thread_id, ()), digests)

    async def _count(self, thread_id: str) -> int:
        if thread_id in self._counts:
            self._counts[thread_id] = self._counts.pop(thread_id)  # most recently used last
        else:
            await self._forget_idle()
            # Before the checkpoint is read: a position read while another process writes is stale at once.
            await self.leases.acquire(thread_id, wait=self.thread_wait)
            status = await self.agent.aget_thread(thread_id)
            self._counts[thread_id] = status.accepted
            self._bound[thread_id] = status.memory_id
            self._pending[thread_id] = (status.pending, time.monotonic())
            self._recent[thread_id] = status.recent
        return self._counts[thread_id]

    async def _forget_idle(self) -> None:
        """Keep at most :data:`THREADS_HELD` threads' positions (and leases): past that, the least recently used
        idle thread (not running, nothing pending) gives its lease back and is read again from its checkpoint when
        it is next used. A service meeting thousands of threads holds a bounded number of leases (on PostgreSQL
        each is a lock of the server's shared lock table)."""
        while len(self._counts) >= THREADS_HELD:
            idle = next((t for t in self._counts if not self._lock(t).locked() and not self._pending.get(t, (0,))[0]
                         and t not in self._timers), None)
            if idle is None:
                return
            async with self._lock(idle):  # free (checked above): taken at once; a caller of that thread waits
                await self.leases.release(idle)
                for cache in (self._counts, self._pending, self._bound):
                    cache.pop(idle, None)

    def _note(self, thread_id: str, result: InvocationResult) -> InvocationResult:
        """Keep the per-thread counts in step with what the invocation did; arm or clear the delay timer."""
        if result.message_index is not None:
            self._counts[thread_id] = max(self._counts.get(thread_id, 0), result.message_index)
        before, since = self._pending.get(thread_id, (0, time.monotonic()))
        now = time.monotonic()
        self._pending[thread_id] = (result.pending, since if before and result.pending else now)
        if not result.pending:
            timer = self._timers.pop(thread_id, None)
            if timer is not None:
                timer.cancel()
        elif self.max_delay_s is not None and thread_id not in self._timers:
            delay = max(0.0, self.max_delay_s - (now - self._pending[thread_id][1]))
            self._timers[thread_id] = asyncio.get_running_loop().call_later(delay, self._flush_later, thread_id)
        return result

    def _flush_later(self, thread_id: str) -> None:
        self._timers.pop(thread_id, None)
        task = asyncio.get_running_loop().create_task(self._background_flush(thread_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _background_flush(self, thread_id: str) -> None:
        try:
            await self.aflush(thread_id)
        except Exception as exc:  # noqa: BLE001 - a background write must not kill the loop; the messages stay pending
            message = f"{thread_id}: writing pending messages after max_delay_s failed: {exc}"
            self.background_errors.append(message)
            _log.warning(message)

    def _reader(self) -> MemoryReader:
        if self.reader is None:
            raise ConfigError("this invoker has no reader: build it with build_agent(...), which connects the read "
                              "side (search, recall, user=) to the memory server")
        return self.reader

    async def _memory_for(self, thread_id: str, user: str | None) -> dict[str, str] | None:
        """The memory binding to send with an invocation of ``thread_id`` for ``user`` (None: keep the thread's).

        A thread keeps the memory it was bound to: naming another user for it, or a user for a thread that already
        wrote to the invoker's own memory, is an :class:`InputError` (a message must never land in another user's
        memory)."""
        if user is None:
            return None
        reader = self._reader()
        memory_id = await reader.users.memory_id(user)
        accepted = await self._count(thread_id)
        bound = self._bound.get(thread_id)
        if bound is None and accepted and memory_id != await reader.default_memory():
            raise InputError(f"thread {thread_id!r} already holds {accepted} messages in the invoker's own memory; "
                             f"it cannot move to user {user!r}: start a new thread for that user")
        if bound is not None and bound != memory_id:
            owner = await reader.users.owner_of(bound)
            if owner is None:  # bound to a memory this server does not hold as a user
                raise InputError(
                    f"thread {thread_id!r} is bound to memory {bound}, which is not a user's memory on this memory "
                    f"server (was its checkpoint store used with another memory database?): use the checkpoint "
                    f"store that goes with this database, or a new thread for user {user!r}")
            raise InputError(f"thread {thread_id!r} belongs to user {owner!r}, not {user!r}: a thread keeps its "
                             "user; start a new thread for this one")
        return {"vault_id": reader.vault_id, "memory_id": memory_id, "user": user}

    def _bind(self, thread_id: str, memory: Mapping[str, str] | None) -> None:
        if memory is not None:
            self._bound[thread_id] = memory["memory_id"]

    def pending_threads(self) -> list[str]:
        """The threads this invoker knows to have messages accepted and not yet written."""
        return [thread for thread, (count, _since) in self._pending.items() if count]

    async def aclaim_thread(self, thread_id: str) -> ThreadStatus:
        """Take ``thread_id``'s lease (waiting up to ``thread_wait`` for another process that writes it) and return
        the thread's position read under it: where a writer resumes. :meth:`athread_status` reads without the
        lease, so a process that waited for the lease after reading it would number the rest anew (duplicates)."""
        async with self._lock(thread_id):
            await self._settle(thread_id)
            await self._count(thread_id)
            self._recent.pop(thread_id, None)  # the caller knows where it stands: what it sends next is new
            return await self.agent.aget_thread(thread_id)

    def claim_thread(self, thread_id: str) -> ThreadStatus:
        """Synchronous :meth:`aclaim_thread`."""
        return run_sync(self.aclaim_thread(thread_id), self.agent._loop)

    async def astart_session(self, thread_id: str, conversation_time: str | datetime | None = None, *,
                             user: str | None = None) -> InvocationResult:
        """Read the memory's context and recent entries into the thread's state; ``conversation_time`` is the
        session's time (messages sent without one take it).

        ``user`` binds the thread to that user's memory (created on first use unless the invoker's user creation
        is off); the binding is kept in the checkpoint, so a resumed thread keeps it. A thread bound to another
        user raises :class:`InputError`."""
        async with self._lock(thread_id):
            await self._settle(thread_id)
            memory = await self._memory_for(thread_id, user)
            try:
                result = await self.agent.ainvoke(ControlState.START_SESSION, thread_id,
                                                  conversation_time=conversation_time, memory=memory)
            except BaseException:
                self._doubt(thread_id, None)
                raise
            self._bind(thread_id, memory)
            return result

    async def aprocess_conversation_message(
        self,
        role: str,
        content: str,
        thread_id: str,
        conversation_time: str | datetime | None = None,
        *,
        tags: Mapping[str, str] | None = None,
        name: str | None = None,
        user: str | None = None,
    ) -> InvocationResult:
        """Store one message (``role`` is ``user`` or ``assistant``); every ``flush_every``-th also flushes.

        ``name`` is who spoke ("Caroline"; at most 100 characters, one line): the summary and the prompts name
        them instead of "the user". Without ``conversation_time`` the message takes the session's time (see the
        module docstring). ``user`` binds a new thread to that user's memory (as :meth:`astart_session` does) or
        checks an existing binding. An invalid role, content, time, name or user raises :class:`InputError` before
        anything is written.
        """
        async with self._lock(thread_id):
            doubt = await self._settle(thread_id)
            memory = await self._memory_for(thread_id, user)
            digests = (message_digest(role, content, name),)
            if await self._taken(doubt, thread_id, digests):
                number = await self._count(thread_id)
                return InvocationResult(
                    control=ControlState.PROCESS_MESSAGE if self.batch_size == 1 else ControlState.ACCEPT_MESSAGE,
                    thread_id=thread_id, message_index=number, pending=self._pending.get(thread_id, (0, 0.0))[0],
                    notes=(f"message {number} was taken in by the call that sent it before (it failed, was "
                           "cancelled or its process ended after that): not taken in again",))
            number = await self._count(thread_id) + 1
            flush = number % self.flush_every == 0
            if self.batch_size == 1:
                control = ControlState.PROCESS_MESSAGE_AND_FLUSH if flush else ControlState.PROCESS_MESSAGE
            else:
                pending, since = self._pending.get(thread_id, (0, time.monotonic()))
                overdue = (self.max_delay_s is not None and pending
                           and time.monotonic() - since >= self.max_delay_s)
                control = (ControlState.ACCEPT_MESSAGE_AND_FLUSH if flush
                           else ControlState.ACCEPT_MESSAGE_AND_WRITE if pending + 1 >= self.batch_size or overdue
                           else ControlState.ACCEPT_MESSAGE)
            try:
                result = await self.agent.ainvoke(control, thread_id, {"role": role, "content": content},
                                                  conversation_time, tags=tags, name=name, memory=memory)
            except BaseException:
                self._doubt(thread_id, number - 1, digests)
                raise
            self._bind(thread_id, memory)
            return self._note(thread_id, result)

    async def aprocess_conversation_messages(
        self,
        thread_id: str,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        conversation_time: str | datetime | None = None,
        *,
        on_result: Callable[[InvocationResult], None] | None = None,
        user: str | None = None,
    ) -> list[InvocationResult]:
        """Store many messages of one thread, in order: the bulk form of :meth:`aprocess_conversation_message`.

        A message is a ChatMessage or a mapping with ``role`` and ``content`` and optionally ``name``,
        ``conversation_time`` (default: ``conversation_time`` here, else the session's) and ``tags``. Every message
        is checked first: a bad one raises :class:`InputError` naming it (``messages[3]: ...``) and nothing is
        accepted. Each message gets the number (and idempotency key) it would get sent alone, and the cadence is
        the same: a flush at every ``flush_every``-th message, a write at every ``batch_size`` pending ones.

        In batched mode the messages are accepted in one invocation per stretch up to the next batch write or
        flush (:meth:`MycelianMemoryAgent.aaccept_messages`: one graph run and one checkpoint write each), not one
        per message; the last stretch may stay pending. With ``batch_size=1`` each message is its own invocation,
        as one call per message would make. Returns the reports of the invocations in order (``on_result`` is
        called with each as it finishes). If an invocation fails, the messages of the earlier ones stay accepted
        (the error says how many); the thread's position (:meth:`athread_status`) tells where to resume.
        ``user`` binds or checks the thread's user, as in :meth:`aprocess_conversation_message`.
        """
        checked = self.agent.check_messages(messages, conversation_time)
        results: list[InvocationResult] = []
        async with self._lock(thread_id):
            doubt = await self._settle(thread_id)
            memory = await self._memory_for(thread_id, user)
            digests = tuple(message_digest(turn["role"], turn["content"], turn.get("name")) for turn, _tags in checked)
            done = skipped = await self._taken(doubt, thread_id, digests)
            start = await self._count(thread_id) - done
            if skipped:
                _log.info("%s: messages %d-%d were taken in by the call that sent them before; not again",
                          thread_id, start + 1, start + skipped)
            try:
                while done < len(checked):
                    number = await self._count(thread_id)
                    if self.batch_size == 1:
                        turn, tags = checked[done]
                        flush = (number + 1) % self.flush_every == 0
                        control = ControlState.PROCESS_MESSAGE_AND_FLUSH if flush else ControlState.PROCESS_MESSAGE
                        result = await self.agent.ainvoke(control, thread_id, turn, turn.get("conversation_time"),
                                                          tags=tags, memory=memory)
                        take = 1
                    else:
                        pending, since = self._pending.get(thread_id, (0, time.monotonic()))
                        to_flush = self.flush_every - number % self.flush_every
                        to_write = max(1, self.batch_size - pending)
                        take = min(to_flush, to_write, len(checked) - done)
                        overdue = (self.max_delay_s is not None and pending
                                   and time.monotonic() - since >= self.max_delay_s)
                        control = (ControlState.ACCEPT_MESSAGE_AND_FLUSH if take == to_flush
                                   else ControlState.ACCEPT_MESSAGE_AND_WRITE if take == to_write or overdue
                                   else ControlState.ACCEPT_MESSAGE)
                        result = await self.agent.aaccept_messages(
                            thread_id, [_as_mapping(*item) for item in checked[done:done + take]], control=control,
                            memory=memory)
                    self._bind(thread_id, memory)
                    memory = None  # bound by the first invocation
                    results.append(self._note(thread_id, result))
                    done += take
                    if on_result is not None:
                        on_result(result)
            except BaseException as exc:
                self._doubt(thread_id, start, digests)
                if done and isinstance(exc, MycelianError):
                    exc.args = (f"{exc.args[0] if exc.args else exc} (messages[{done}] and after were not accepted; "
                                f"the {done} before them were)",)
                raise
        return results

    async def aflush(self, thread_id: str) -> InvocationResult:
        """Write the thread's pending messages now (batched mode): one model call, one entry per message. Nothing
        to write: no model call and no tool call. No context document is written (that is the flush cadence's
        and the session end's)."""
        async with self._lock(thread_id):
            await self._settle(thread_id)
            await self._count(thread_id)
            try:
                result = await self.agent.ainvoke(ControlState.WRITE_PENDING, thread_id)
            except BaseException:
                self._doubt(thread_id, None)
                raise
            return self._note(thread_id, result)

    async def aflush_all(self) -> list[InvocationResult]:
        """:meth:`aflush` every thread this invoker knows to have pending messages (e.g. before shutting down)."""
        return [await self.aflush(thread) for thread in self.pending_threads()]

    def cancel_timers(self) -> None:
        """Stop the ``max_delay_s`` timers (the pending messages stay in the checkpoint, written at the next
        trigger or by :meth:`aflush`)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._background):
            task.cancel()

    async def aend_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Write the pending messages (batched mode), wait for consistency and write the session's context
        document."""
        async with self._lock(thread_id):
            await self._settle(thread_id)
            await self._count(thread_id)
            try:
                result = await self.agent.ainvoke(ControlState.END_SESSION, thread_id,
                                                  conversation_time=conversation_time)
            except BaseException:
                self._doubt(thread_id, None)
                raise
            return self._note(thread_id, result)

    async def asearch(self, query: str, *, user: str | None = None, top_k: int = 10,
                      after: str | datetime | None = None, before: str | datetime | None = None,
                      by_meaning: bool = True, min_score: float | None = None) -> list[MemoryHit]:
        """The ``top_k`` (1-100) entries of ``user``'s memory (None: the invoker's own) best matching ``query``,
        best first, as typed hits (text, speaker, time, score, match ...). ``after`` / ``before`` bound the
        conversation time; ``by_meaning=False`` leaves out hits found by meaning alone; ``min_score`` (0-1) those
        whose relevance score (:attr:`MemoryHit.score`) is below it. See :meth:`MemoryReader.asearch`."""
        return await self._reader().asearch(query, user=user, top_k=top_k, after=after, before=before,
                                            by_meaning=by_meaning, min_score=min_score)

    async def arecall(self, query: str, *, user: str | None = None, budget_tokens: int = 1500, top_k: int = 10,
                      after: str | datetime | None = None, before: str | datetime | None = None,
                      by_meaning: bool = True, min_score: float | None = None) -> Recall:
        """What ``user``'s memory holds for ``query``, for a prompt: the context document's relevant items and the
        best entries with their neighbouring turns, deduplicated, in time order, dated, within ``budget_tokens``;
        ``recall.as_prompt()`` is the text block; ``top_k``, ``by_meaning`` and ``min_score`` as in
        :meth:`asearch`. See :meth:`MemoryReader.arecall`."""
        return await self._reader().arecall(query, user=user, budget_tokens=budget_tokens, top_k=top_k,
                                            after=after, before=before, by_meaning=by_meaning, min_score=min_score)

    async def athread_status(self, thread_id: str) -> ThreadStatus:
        """Position and usage totals of ``thread_id`` (from its checkpoint)."""
        return await self.agent.aget_thread(thread_id)

    def start_session(self, thread_id: str, conversation_time: str | datetime | None = None, *,
                      user: str | None = None) -> InvocationResult:
        """Synchronous :meth:`astart_session`."""
        return run_sync(self.astart_session(thread_id, conversation_time, user=user), self.agent._loop)

    def process_conversation_message(self, role: str, content: str, thread_id: str,
                                     conversation_time: str | datetime | None = None, *,
                                     tags: Mapping[str, str] | None = None,
                                     name: str | None = None, user: str | None = None) -> InvocationResult:
        """Synchronous :meth:`aprocess_conversation_message`."""
        return run_sync(self.aprocess_conversation_message(role, content, thread_id, conversation_time, tags=tags,
                                                           name=name, user=user), self.agent._loop)

    def process_conversation_messages(self, thread_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                                      conversation_time: str | datetime | None = None, *,
                                      on_result: Callable[[InvocationResult], None] | None = None,
                                      user: str | None = None) -> list[InvocationResult]:
        """Synchronous :meth:`aprocess_conversation_messages`."""
        return run_sync(self.aprocess_conversation_messages(thread_id, messages, conversation_time,
                                                            on_result=on_result, user=user), self.agent._loop)

    def end_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Synchronous :meth:`aend_session`."""
        return run_sync(self.aend_session(thread_id, conversation_time), self.agent._loop)

    def flush(self, thread_id: str) -> InvocationResult:
        """Synchronous :meth:`aflush`."""
        return run_sync(self.aflush(thread_id), self.agent._loop)

    def flush_all(self) -> list[InvocationResult]:
        """Synchronous :meth:`aflush_all`."""
        return run_sync(self.aflush_all(), self.agent._loop)

    def search(self, query: str, *, user: str | None = None, top_k: int = 10, after: str | datetime | None = None,
               before: str | datetime | None = None, by_meaning: bool = True,
               min_score: float | None = None) -> list[MemoryHit]:
        """Synchronous :meth:`asearch`."""
        return run_sync(self.asearch(query, user=user, top_k=top_k, after=after, before=before,
                                     by_meaning=by_meaning, min_score=min_score), self.agent._loop)

    def recall(self, query: str, *, user: str | None = None, budget_tokens: int = 1500, top_k: int = 10,
               after: str | datetime | None = None, before: str | datetime | None = None, by_meaning: bool = True,
               min_score: float | None = None) -> Recall:
        """Synchronous :meth:`arecall`."""
        return run_sync(self.arecall(query, user=user, budget_tokens=budget_tokens, top_k=top_k, after=after,
                                     before=before, by_meaning=by_meaning, min_score=min_score), self.agent._loop)

    def thread_status(self, thread_id: str) -> ThreadStatus:
        """Synchronous :meth:`athread_status`."""
        return run_sync(self.athread_status(thread_id), self.agent._loop)


def _as_mapping(turn: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """A checked message (a Turn and its tags) as the mapping :meth:`MycelianMemoryAgent.aaccept_messages` takes."""
    return {**turn, "tags": dict(tags)}
