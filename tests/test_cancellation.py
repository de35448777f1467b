"""Cancellation at any await (a web request timing out) leaves memory and checkpoint consistent.

The real memory server (in-process and embedded over stdio, on a SQLite file), a real SQLite checkpointer and the
scripted model. ``cancel_harness`` cancels a call at its N-th await for N = 1, 2, ... until the call finishes
first, sends the same message again at once, and checks after each trial that the memory holds every message
exactly once and that the checkpoint counts them (see its docstring; ``python tests/cancel_harness.py`` prints
the whole matrix for both servers).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cancel_harness import SCENARIOS, Clock, ToolModel, counting_tasks, run_scenario
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from mycelian_agent import AgentSettings, build_agent
from mycelian_agent.builder import connect

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}

# Every await of every scenario in-process costs about 6 minutes here; the default run takes every step of the
# short calls and every 3rd-7th step of the long ones (the offsets differ, so the steps skipped differ per scenario).
STRIDES = {"process": 1, "process+flush": 2, "parts": 7, "batched": 1, "batched+flush": 3, "bulk": 5, "bulk batched": 5}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STRIDES))
async def test_a_call_cancelled_at_any_await_and_sent_again_stores_each_message_once(name, tmp_path):
    outcome = await run_scenario(BY_NAME[name], "in-process", tmp_path, stride=STRIDES[name])
    assert outcome.cancelled and outcome.completed, outcome
    assert not outcome.problems, "\n".join(outcome.problems[:10])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["process+flush", "batched+flush"])
async def test_over_stdio_too(name, tmp_path):
    outcome = await run_scenario(BY_NAME[name], "embedded", tmp_path, stride=5)
    assert outcome.cancelled and outcome.completed, outcome
    assert not outcome.problems, "\n".join(outcome.problems[:10])


async def test_the_session_survives_calls_cancelled_at_every_step(tmp_path):
    # mcp 1.30: a request cancelled in the yield between its answer's arrival and its delivery closed the answer's
    # stream under the client's receive loop, which then ended and closed the session for every later call.
    loop = asyncio.get_running_loop()
    clock = Clock()
    counting_tasks(loop, clock)
    try:
        async with connect("in-process", db=tmp_path / "m.db") as memory:
            for step in range(1, 40):
                call = asyncio.ensure_future(memory.call_json("list_vaults"))
                clock.arm(call, step)
                await asyncio.wait([call])
                clock.disarm()
                assert await memory.call_json("list_vaults") == []
    finally:
        loop.set_task_factory(None)


async def _checkpoint(state: Path, thread: str) -> dict:
    async with AsyncSqliteSaver.from_conn_string(str(state)) as saver:
        found = await saver.aget_tuple({"configurable": {"thread_id": thread}})
    return found.checkpoint["channel_values"] if found else {}


async def test_what_langgraph_saves_when_a_run_is_cancelled_keeps_the_threads_position(tmp_path):
    # LangGraph (durability "exit") saves the state of the last finished step when a run is cancelled: here the
    # message is stored and the context is being written. That checkpoint holds the run's input and tool flow, but
    # the position, window and context are the thread's before the run, so the message keeps its number.
    started, release = asyncio.Event(), asyncio.Event()

    class SlowContext(ToolModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            if self.tool == "put_context":
                started.set()
                await release.wait()
            return await super()._agenerate(messages, stop, **kwargs)

    state = tmp_path / "state.db"
    async with build_agent(
        SlowContext(),
        server="in-process",
        db=tmp_path / "m.db",
        checkpointer=f"sqlite:{state}",
        flush_every=2,
        settings=AgentSettings(prune_every=None),
    ) as invoker:
        await invoker.aprocess_conversation_message("user", "first message", "t")
        before = await _checkpoint(state, "t")
        call = asyncio.ensure_future(invoker.aprocess_conversation_message("user", "second message", "t"))
        await asyncio.wait_for(started.wait(), 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        saved = await _checkpoint(state, "t")
        assert saved["message"]["content"] == "second message" and saved["tool_history"]  # the run's input and flow
        for key in ("progress", "window", "since_flush", "context", "fresh_since_flush"):
            assert saved.get(key) == before.get(key), key
        release.set()
        again = await invoker.aprocess_conversation_message("user", "second message", "t")
        assert again.message_index == 2 and again.deduplicated == 1 and again.context_written
        assert (await invoker.athread_status("t")).messages == 2


async def test_a_call_cancelled_after_its_checkpoint_was_written_is_not_taken_in_twice(tmp_path, monkeypatch):
    # Cancelled at the very end (the thread's position already moved on): the same message sent again is
    # recognised as the retry it is; a different message is a new one.
    async with build_agent(
        ToolModel(),
        server="in-process",
        db=tmp_path / "m.db",
        checkpointer=f"sqlite:{tmp_path / 'state.db'}",
        flush_every=100,
    ) as invoker:
        agent = invoker.agent
        finished = asyncio.Event()
        prune = agent._maybe_prune

        async def cancelled_after_the_write(thread_id):
            await prune(thread_id)
            finished.set()
            await asyncio.Event().wait()  # the caller gives up here

        monkeypatch.setattr(agent, "_maybe_prune", cancelled_after_the_write)
        call = asyncio.ensure_future(invoker.aprocess_conversation_message("user", "hello", "t"))
        await asyncio.wait_for(finished.wait(), 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        monkeypatch.setattr(agent, "_maybe_prune", prune)
        assert (await invoker.athread_status("t")).messages == 1
        again = await invoker.aprocess_conversation_message("user", "hello", "t")
        assert again.accepted == () and "not taken in again" in again.notes[0]
        assert (await invoker.athread_status("t")).messages == 1
        nxt = await invoker.aprocess_conversation_message("user", "hello", "t")  # said twice on purpose
        assert nxt.message_index == 2
        listed = await invoker.connection.call_json(
            "list_entries", {"vault_id": agent.vault_id, "memory_id": agent.memory_id, "limit": 10}
        )
        assert sorted(e["tags"]["msg"] for e in listed["entries"]) == ["1", "2"]
