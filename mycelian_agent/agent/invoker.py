"""MycelianAgentInvoker: turns chat events into agent invocations.

It counts the messages of each thread, sends message n as PROCESS_MESSAGE_AND_FLUSH when n is a multiple of
``flush_every``, and starts and ends sessions. The counts live in the agent's checkpointed state, so a thread
resumed in a new process keeps its cadence; the invoker keeps them per thread (:mod:`~.threads`) and runs the calls
of one thread one at a time.

The walk of one message (:meth:`~MycelianAgentInvoker.aprocess_conversation_message`), top-down:

1. take the thread's state (:class:`~.threads.ThreadState`) and its lock;
2. recover from the thread's last call if it was interrupted (:meth:`~MycelianAgentInvoker._recover`: wait for its
   checkpoint save, read the position again);
3. bind the thread to ``user``'s memory, or check its binding (:meth:`~MycelianAgentInvoker._memory_for`);
4. tell whether the message was taken in already, by an interrupted call or by another process before this one
   (:meth:`~MycelianAgentInvoker._already_taken_in`); the first use of a thread here reads its position from its
   checkpoint under its lease (:meth:`~MycelianAgentInvoker._position`);
5. choose the control from the cadence (:meth:`~MycelianAgentInvoker._cadence`) and run one invocation of the
   agent's graph (:meth:`MycelianMemoryAgent.ainvoke`);
6. keep the position in step with its report and arm or clear the ``max_delay_s`` timer
   (:meth:`~MycelianAgentInvoker._note`); a call that raised is noted as interrupted instead.

Times: the ``conversation_time`` given to ``start_session`` is the session's time. A message sent without a
``conversation_time`` is stored with the later of the session's time and the time of the last message stored in the
session (so a late message is never dated before an earlier one); when neither is known (no time given to the
session nor to any of its messages) the entry has no conversation time and the server stamps its creation time.

Batched mode (``batch_size > 1``): a message is accepted (kept in the thread's checkpoint, no model call, not yet
searchable) and every ``batch_size``-th pending message, the flush cadence, the session end, :meth:`aflush` or
``max_delay_s`` after the oldest pending message was accepted writes all pending messages with one model call.
:meth:`aprocess_conversation_messages` takes many messages at once: one invocation (one checkpoint write) per
batch instead of one per message, with the same cadence.

The read, correct and forget calls live beside it (:mod:`~mycelian_agent.agent.lifecycle_calls`); every sync method
is its async twin run on the agent's loop (:func:`~mycelian_agent._sync.sync_twin`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ChatMessage

from .._sync import sync_twin
from ..errors import ConfigError, InputError, MycelianError
from .control import ControlState
from .graph import MycelianMemoryAgent
from .leases import ThreadLeases
from .lifecycle_calls import LifecycleCalls
from .report import InvocationResult, ThreadStatus
from .resends import InterruptedCall, message_digest, resent
from .threads import Threads, ThreadState

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

    def __init__(
        self,
        agent: MycelianMemoryAgent,
        flush_every: int = 6,
        *,
        batch_size: int | None = None,
        max_delay_s: float | None = None,
        reader: MemoryReader | None = None,
        leases: ThreadLeases | None = None,
        thread_wait: float | None = None,
    ) -> None:
        if isinstance(flush_every, bool) or not isinstance(flush_every, int) or flush_every < 1:
            raise ConfigError(f"flush_every must be a positive integer, got {flush_every!r}")
        # The batch settings given here override the agent's; AgentSettings checks them (one place).
        settings = agent.settings
        batching = replace(
            settings,
            batch_size=settings.batch_size if batch_size is None else batch_size,
            max_delay_s=settings.max_delay_s if max_delay_s is None else max_delay_s,
        )
        self.agent = agent
        self.flush_every = flush_every
        self.batch_size = batching.batch_size
        self.max_delay_s = batching.max_delay_s
        self._threads = Threads()
        self._background_flushes: set[asyncio.Task[None]] = set()  # kept so that a running one is not collected
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
        #: The memories :meth:`adelete_user` deleted, and whose they were: a thread bound to one is refused.
        self._forgotten: dict[str, str] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this invoker's server session is bound to (where the sync methods run their work)."""
        return self.agent.loop

    # -- writing: the protocol's calls ------------------------------------------------------------------------

    async def astart_session(
        self, thread_id: str, conversation_time: str | datetime | None = None, *, user: str | None = None
    ) -> InvocationResult:
        """Read the memory's context and recent entries into the thread's state; ``conversation_time`` is the
        session's time (messages sent without one take it).

        ``user`` binds the thread to that user's memory (created on first use unless the invoker's user creation
        is off); the binding is kept in the checkpoint, so a resumed thread keeps it. A thread bound to another
        user raises :class:`InputError`."""
        async with self._threads.calling(thread_id) as thread:
            await self._recover(thread)
            memory = await self._memory_for(thread, user)
            try:
                result = await self.agent.ainvoke(
                    ControlState.START_SESSION, thread_id, conversation_time=conversation_time, memory=memory
                )
            except BaseException:
                thread.interrupted = InterruptedCall(None)
                raise
            self._bind(thread, memory)
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
        async with self._threads.calling(thread_id) as thread:
            interrupted = await self._recover(thread)
            memory = await self._memory_for(thread, user)
            digests = (message_digest(role, content, name),)
            if await self._already_taken_in(thread, interrupted, digests):
                number = await self._position(thread)
                return InvocationResult(
                    control=ControlState.PROCESS_MESSAGE if self.batch_size == 1 else ControlState.ACCEPT_MESSAGE,
                    thread_id=thread_id,
                    message_index=number,
                    pending=thread.pending,
                    notes=(
                        f"message {number} was taken in by the call that sent it before (it failed, was "
                        "cancelled or its process ended after that): not taken in again",
                    ),
                )
            taken_in = await self._position(thread)
            control, _ = self._cadence(thread, taken_in, 1)
            try:
                result = await self.agent.ainvoke(
                    control,
                    thread_id,
                    {"role": role, "content": content},
                    conversation_time,
                    tags=tags,
                    name=name,
                    memory=memory,
                )
            except BaseException:
                thread.interrupted = InterruptedCall(taken_in, digests)
                raise
            self._bind(thread, memory)
            return self._note(thread, result)

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
        async with self._threads.calling(thread_id) as thread:
            interrupted = await self._recover(thread)
            memory = await self._memory_for(thread, user)
            digests = tuple(message_digest(turn["role"], turn["content"], turn.get("name")) for turn, _tags in checked)
            done = skipped = await self._already_taken_in(thread, interrupted, digests)
            start = await self._position(thread) - done
            if skipped:
                _log.info(
                    "%s: messages %d-%d were taken in by the call that sent them before; not again",
                    thread_id,
                    start + 1,
                    start + skipped,
                )
            try:
                while done < len(checked):
                    control, take = self._cadence(thread, await self._position(thread), len(checked) - done)
                    if self.batch_size == 1:
                        turn, tags = checked[done]
                        result = await self.agent.ainvoke(
                            control, thread_id, turn, turn.get("conversation_time"), tags=tags, memory=memory
                        )
                    else:
                        result = await self.agent.aaccept_messages(
                            thread_id,
                            [_as_mapping(*item) for item in checked[done : done + take]],
                            control=control,
                            memory=memory,
                        )
                    self._bind(thread, memory)
                    memory = None  # bound by the first invocation
                    results.append(self._note(thread, result))
                    done += take
                    if on_result is not None:
                        on_result(result)
            except BaseException as exc:
                thread.interrupted = InterruptedCall(start, digests)
                if done and isinstance(exc, MycelianError):
                    exc.args = (
                        f"{exc.args[0] if exc.args else exc} (messages[{done}] and after were not accepted; "
                        f"the {done} before them were)",
                    )
                raise
        return results

    async def aflush(self, thread_id: str) -> InvocationResult:
        """Write the thread's pending messages now (batched mode): one model call, one entry per message. Nothing
        to write: no model call and no tool call. No context document is written (that is the flush cadence's
        and the session end's)."""
        return await self._write(thread_id, ControlState.WRITE_PENDING)

    async def aflush_all(self) -> list[InvocationResult]:
        """:meth:`aflush` every thread this invoker knows to have pending messages (e.g. before shutting down)."""
        return [await self.aflush(thread) for thread in self.pending_threads()]

    async def aend_session(self, thread_id: str, conversation_time: str | datetime | None = None) -> InvocationResult:
        """Write the pending messages (batched mode), wait for consistency and write the session's context
        document."""
        return await self._write(thread_id, ControlState.END_SESSION, conversation_time)

    async def aclaim_thread(self, thread_id: str) -> ThreadStatus:
        """Take ``thread_id``'s lease (waiting up to ``thread_wait`` for another process that writes it) and return
        the thread's position read under it: where a writer resumes. :meth:`athread_status` reads without the
        lease, so a process that waited for the lease after reading it would number the rest anew (duplicates)."""
        async with self._threads.calling(thread_id) as thread:
            await self._recover(thread)
            await self._position(thread)
            thread.checkpoint_recent = ()  # the caller knows where it stands: what it sends next is new
            return await self.agent.aget_thread(thread_id)

    def pending_threads(self) -> list[str]:
        """The threads this invoker knows to have messages accepted and not yet written."""
        return self._threads.pending()

    def cancel_timers(self) -> None:
        """Stop the ``max_delay_s`` timers (the pending messages stay in the checkpoint, written at the next
        trigger or by :meth:`aflush`)."""
        for thread in self._threads:
            if thread.flush_timer is not None:
                thread.flush_timer.cancel()
                thread.flush_timer = None
        for task in list(self._background_flushes):
            task.cancel()

    # -- reading -----------------------------------------------------------------------------------------------

    async def asearch(
        self,
        query: str,
        *,
        user: str | None = None,
        top_k: int = 10,
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        by_meaning: bool = True,
        min_score: float | None = None,
    ) -> list[MemoryHit]:
        """The ``top_k`` (1-100) entries of ``user``'s memory (None: the invoker's own) best matching ``query``,
        best first, as typed hits (text, speaker, time, score, match ...). ``after`` / ``before`` bound the
        conversation time; ``by_meaning=False`` leaves out hits found by meaning alone; ``min_score`` (0-1) those
        whose relevance score (:attr:`MemoryHit.score`) is below it. See :meth:`MemoryReader.asearch`."""
        return await self._reader().asearch(
            query, user=user, top_k=top_k, after=after, before=before, by_meaning=by_meaning, min_score=min_score
        )

    async def arecall(
        self,
        query: str,
        *,
        user: str | None = None,
        budget_tokens: int = 1500,
        top_k: int = 10,
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        by_meaning: bool = True,
        min_score: float | None = None,
    ) -> Recall:
        """What ``user``'s memory holds for ``query``, for a prompt: the context document's relevant items and the
        best entries with their neighbouring turns, deduplicated, in time order, dated, within ``budget_tokens``;
        ``recall.as_prompt()`` is the text block; ``top_k``, ``by_meaning`` and ``min_score`` as in
        :meth:`asearch`. See :meth:`MemoryReader.arecall`."""
        return await self._reader().arecall(
            query,
            user=user,
            budget_tokens=budget_tokens,
            top_k=top_k,
            after=after,
            before=before,
            by_meaning=by_meaning,
            min_score=min_score,
        )

    async def athread_status(self, thread_id: str) -> ThreadStatus:
        """Position and usage totals of ``thread_id`` (from its checkpoint)."""
        return await self.agent.aget_thread(thread_id)

    start_session = sync_twin(astart_session)
    process_conversation_message = sync_twin(aprocess_conversation_message)
    process_conversation_messages = sync_twin(aprocess_conversation_messages)
    flush = sync_twin(aflush)
    flush_all = sync_twin(aflush_all)
    end_session = sync_twin(aend_session)
    claim_thread = sync_twin(aclaim_thread)
    search = sync_twin(asearch)
    recall = sync_twin(arecall)
    thread_status = sync_twin(athread_status)

    # -- one call of a thread, step by step (the module docstring's walk) ---------------------------------------

    async def _write(
        self, thread_id: str, control: ControlState, conversation_time: str | datetime | None = None
    ) -> InvocationResult:
        """A call that sends no message (write the pending ones, end the session): one invocation of ``control``."""
        async with self._threads.calling(thread_id) as thread:
            await self._recover(thread)
            await self._position(thread)
            try:
                result = await self.agent.ainvoke(control, thread_id, conversation_time=conversation_time)
            except BaseException:
                thread.interrupted = InterruptedCall(None)
                raise
            return self._note(thread, result)

    async def _recover(self, thread: ThreadState) -> InterruptedCall | None:
        """After a call of the thread that failed or was cancelled: wait for its checkpoint save, read the thread's
        position again (the call may have taken its messages in before it was interrupted) and return what the call
        sent (None when the last call ended normally)."""
        thread.checkpoint_recent = ()  # a call of this process came first: a later one is not its resend
        interrupted = thread.interrupted
        if interrupted is None:
            return None
        await self.agent.wait_for_cancelled_save(thread.thread_id)
        if thread.held:
            thread.read(await self.agent.aget_thread(thread.thread_id))
        thread.interrupted = None
        return interrupted

    async def _memory_for(self, thread: ThreadState, user: str | None) -> dict[str, str] | None:
        """The memory binding to send with an invocation of the thread for ``user`` (None: keep the thread's).

        A thread keeps the memory it was bound to: naming another user for it, or a user for a thread that already
        wrote to the invoker's own memory, is an :class:`InputError` (a message must never land in another user's
        memory)."""
        if user is None:
            return None
        reader = self._reader()
        taken_in = await self._position(thread)  # first: a thread of a deleted user is refused before a new memory
        memory_id = await reader.users.memory_id(user)
        bound, thread_id = thread.memory_id, thread.thread_id
        if bound is None and taken_in and memory_id != await reader.default_memory():
            raise InputError(
                f"thread {thread_id!r} already holds {taken_in} messages in the invoker's own memory; "
                f"it cannot move to user {user!r}: start a new thread for that user"
            )
        if bound is not None and bound != memory_id:
            owner = await reader.users.owner_of(bound)
            if owner is None:  # bound to a memory this server does not hold as a user
                raise InputError(
                    f"thread {thread_id!r} is bound to memory {bound}, which is not a user's memory on this memory "
                    f"server (was its checkpoint store used with another memory database?): use the checkpoint "
                    f"store that goes with this database, or a new thread for user {user!r}"
                )
            raise InputError(
                f"thread {thread_id!r} belongs to user {owner!r}, not {user!r}: a thread keeps its "
                "user; start a new thread for this one"
            )
        return {"vault_id": reader.vault_id, "memory_id": memory_id, "user": user}

    async def _already_taken_in(
        self, thread: ThreadState, interrupted: InterruptedCall | None, digests: tuple[str, ...]
    ) -> int:
        """How many of ``digests`` (a call's messages, in order) were already taken in: by the thread's last call,
        when it was interrupted and sent the same messages (this is its retry), or, for the first call of a thread
        in this invoker, as the thread's last messages (a resend to a new process; see ``resends.py``)."""
        if interrupted is not None and interrupted.taken_in_before is not None and interrupted.digests == digests:
            return max(0, min(len(digests), await self._position(thread) - interrupted.taken_in_before))
        await self._position(thread)  # a thread new here: its position and last digests are read now
        recent, thread.checkpoint_recent = thread.checkpoint_recent, ()
        return resent(recent, digests)

    async def _position(self, thread: ThreadState) -> int:
        """The messages the thread has taken in; read from its checkpoint, under its lease, at its first use here."""
        taken_in = thread.taken_in
        if taken_in is None:
            await self._forget_idle()
            # Before the checkpoint is read: a position read while another process writes is stale at once.
            await self.leases.acquire(thread.thread_id, wait=self.thread_wait)
            status = await self.agent.aget_thread(thread.thread_id)
            taken_in = thread.read(status)
            thread.checkpoint_recent = status.recent
        self._threads.used(thread)
        if thread.memory_id in self._forgotten:
            raise InputError(
                f"thread {thread.thread_id!r} belongs to user {self._forgotten[thread.memory_id]!r}, whose memory was "
                "deleted (adelete_user): nothing more can be written to it; start a new thread (a new thread of "
                "that user gives them a new memory)"
            )
        return taken_in

    async def _forget_idle(self) -> None:
        """Keep at most :data:`THREADS_HELD` threads' positions (and leases): past that, the least recently used
        idle thread (no call, nothing pending) gives its lease back and is read again from its checkpoint when it
        is next used. A service meeting thousands of threads holds a bounded number of leases (on PostgreSQL each
        is a lock of the server's shared lock table)."""
        while self._threads.held() >= THREADS_HELD:
            idle = self._threads.least_recently_used_idle()
            if idle is None:
                return
            async with self._threads.calling(idle.thread_id):  # no call holds it (idle): taken at once
                await self.leases.release(idle.thread_id)
                idle.forget_position()

    def _cadence(self, thread: ThreadState, taken_in: int, left: int) -> tuple[ControlState, int]:
        """The control of the thread's next invocation, which has ``left`` messages to send and ``taken_in`` taken in
        before, and how many of them it sends: one at a time, each ``flush_every``-th flushing; in batched mode up
        to the next flush or batch write (a write when ``batch_size`` are pending or the oldest is overdue)."""
        flush_in = self.flush_every - taken_in % self.flush_every  # messages up to and including the next flush
        if self.batch_size == 1:
            return (ControlState.PROCESS_MESSAGE_AND_FLUSH if flush_in == 1 else ControlState.PROCESS_MESSAGE), 1
        write_in = max(1, self.batch_size - thread.pending)
        take = min(flush_in, write_in, left)
        control = (
            ControlState.ACCEPT_MESSAGE_AND_FLUSH
            if take == flush_in
            else ControlState.ACCEPT_MESSAGE_AND_WRITE
            if take == write_in or thread.overdue(self.max_delay_s)
            else ControlState.ACCEPT_MESSAGE
        )
        return control, take

    def _bind(self, thread: ThreadState, memory: Mapping[str, str] | None) -> None:
        if memory is not None:
            thread.memory_id = memory["memory_id"]

    def _note(self, thread: ThreadState, result: InvocationResult) -> InvocationResult:
        """Keep the thread's position in step with what the invocation did; arm or clear the delay timer."""
        thread.note(result)
        if not result.pending:
            if thread.flush_timer is not None:
                thread.flush_timer.cancel()
                thread.flush_timer = None
        elif self.max_delay_s is not None and thread.flush_timer is None:
            delay = max(0.0, self.max_delay_s - (time.monotonic() - thread.oldest_pending_at))
            thread.flush_timer = asyncio.get_running_loop().call_later(delay, self._flush_later, thread)
        return result

    def _flush_later(self, thread: ThreadState) -> None:
        thread.flush_timer = None
        task = asyncio.get_running_loop().create_task(self._background_flush(thread.thread_id))
        self._background_flushes.add(task)
        task.add_done_callback(self._background_flushes.discard)

    async def _background_flush(self, thread_id: str) -> None:
        try:
            await self.aflush(thread_id)
        except Exception as exc:
            message = f"{thread_id}: writing pending messages after max_delay_s failed: {exc}"
            self.background_errors.append(message)
            _log.warning(message)

    def _reader(self) -> MemoryReader:
        if self.reader is None:
            raise ConfigError(
                "this invoker has no reader: build it with build_agent(...), which connects the read "
                "side (search, recall, user=) to the memory server"
            )
        return self.reader


def _as_mapping(turn: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """A checked message (a Turn and its tags) as the mapping :meth:`MycelianMemoryAgent.aaccept_messages` takes."""
    return {**turn, "tags": dict(tags)}
