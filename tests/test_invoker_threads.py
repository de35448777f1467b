"""The invoker's per-thread state (``agent/threads.py``): one object per thread, kept while it matters, and a lock
that is never replaced under a call waiting for it (two calls of one thread must never run at once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mycelian_agent import build_agent
from mycelian_agent.agent.control import ControlState
from mycelian_agent.agent.report import InvocationResult, ThreadProgress, ThreadStatus
from mycelian_agent.agent.resends import InterruptedCall
from mycelian_agent.agent.threads import Threads


def _status(thread_id: str, accepted: int, pending: int = 0) -> ThreadStatus:
    return ThreadStatus(thread_id=thread_id, progress=ThreadProgress(messages=accepted - pending), pending=pending)


async def test_a_state_holding_nothing_is_dropped_after_its_last_call_and_one_holding_something_is_kept() -> None:
    threads = Threads()
    async with threads.calling("quiet") as quiet:
        assert threads.get("quiet") is quiet and quiet.callers == 1
    assert threads.get("quiet") is None  # no position, no interrupted call, no timer: nothing to keep
    async with threads.calling("read") as read:
        assert read.read(_status("read", 3, pending=1)) == 3
    async with threads.calling("failed") as failed:
        failed.interrupted = InterruptedCall(None)
    assert threads.get("read") is read and threads.get("failed") is failed
    assert (threads.held(), threads.pending()) == (1, ["read"])


async def test_a_state_waited_for_keeps_its_lock_when_its_position_is_forgotten() -> None:
    threads = Threads()
    async with threads.calling("t") as state:
        state.read(_status("t", 1))
    order: list[str] = []

    async def forget() -> None:
        async with threads.calling("t") as held:
            order.append("forget")
            await asyncio.sleep(0.01)  # another call of the thread comes meanwhile and waits
            held.forget_position()

    async def call() -> None:
        await asyncio.sleep(0)
        async with threads.calling("t") as waited:
            order.append("call")
            assert waited is state and not waited.held  # the same lock; the position is read again

    await asyncio.gather(forget(), call())
    assert order == ["forget", "call"] and threads.get("t") is None


async def test_the_least_recently_used_idle_thread_is_forgotten_first() -> None:
    threads = Threads()
    for thread_id, pending in (("a", 0), ("b", 0), ("c", 2)):
        async with threads.calling(thread_id) as state:
            state.read(_status(thread_id, 2, pending))
            threads.used(state)
    a = threads.get("a")
    assert a is not None
    threads.used(a)  # a used again: b is now the oldest idle one (c has pending messages)
    assert [s.thread_id for s in threads if s.idle] == ["a", "b"]
    assert getattr(threads.least_recently_used_idle(), "thread_id", None) == "b"


async def test_a_state_keeps_its_oldest_pending_time_while_messages_stay_pending() -> None:
    threads = Threads()
    async with threads.calling("t") as state:
        state.read(_status("t", 0))
        accepted = InvocationResult(control=ControlState.ACCEPT_MESSAGE, thread_id="t", message_index=1, pending=1)
        state.note(accepted)
        first = state.oldest_pending_at
        await asyncio.sleep(0.01)
        state.note(InvocationResult(control=ControlState.ACCEPT_MESSAGE, thread_id="t", message_index=2, pending=2))
        assert (state.taken_in, state.pending, state.oldest_pending_at) == (2, 2, first)
        assert state.overdue(0.005) and not state.overdue(None)
        state.note(InvocationResult(control=ControlState.WRITE_PENDING, thread_id="t", pending=0))
        assert (state.taken_in, state.pending) == (2, 0) and state.oldest_pending_at > first


async def test_an_invoker_keeps_no_state_for_a_thread_whose_session_only_started(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await invoker.astart_session("s1", "2024-05-01T10:00:00Z")
        await invoker.aprocess_conversation_message("user", "hello", "s2")
        assert invoker._threads.get("s1") is None
        held = invoker._threads.get("s2")
        assert held is not None and held.taken_in == 1
