"""Resuming threads across processes, and bounded prompts and checkpoints over long threads."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

from mycelian_agent import ControlState, build_agent
from mycelian_agent.models.extractive import ExtractiveChatModel

WRITER = textwrap.dedent("""
    import asyncio, json, sys
    from mycelian_agent import build_agent

    async def main(db, state, start, stop):
        async with build_agent("extractive", db=db, checkpointer="sqlite:" + state, flush_every=4) as invoker:
            controls = []
            for i in range(start, stop):
                r = await invoker.aprocess_conversation_message("user", f"message number {i}", "thread-1")
                controls.append(r.control.name)
            status = await invoker.athread_status("thread-1")
            print(json.dumps({"controls": controls, "messages": status.messages}))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
""")


def run_writer(db, state, start, stop) -> dict:
    out = subprocess.run([sys.executable, "-c", WRITER, str(db), str(state), str(start), str(stop)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thread_resumes_in_a_new_process_with_its_count(tmp_path):
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    first = run_writer(db, state, 1, 7)
    assert first["messages"] == 6
    assert first["controls"][3] == "PROCESS_MESSAGE_AND_FLUSH"
    second = run_writer(db, state, 7, 10)
    assert second["messages"] == 9
    # message 8 of the thread is the second flush, although it is only the 2nd message of this process
    assert second["controls"] == ["PROCESS_MESSAGE", "PROCESS_MESSAGE_AND_FLUSH", "PROCESS_MESSAGE"]


class MeasuringModel(ExtractiveChatModel):
    """The extractive model, recording the size of every prompt it receives."""

    prompt_chars: list = []

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompt_chars.append(sum(len(str(m.content)) for m in messages))
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


def latest_checkpoint_bytes(state_path, thread_id: str) -> int:
    with sqlite3.connect(state_path) as conn:
        row = conn.execute("SELECT length(checkpoint) FROM checkpoints WHERE thread_id = ? "
                           "ORDER BY checkpoint_id DESC LIMIT 1", (thread_id,)).fetchone()
    return row[0]


async def test_prompt_and_checkpoint_size_stay_flat_over_2000_messages(tmp_path):
    model = MeasuringModel()
    model.prompt_chars = []
    state = tmp_path / "state.db"
    sizes: dict[int, int] = {}
    files: dict[int, int] = {}
    prompts: dict[int, list[int]] = {}
    async with build_agent(model, db=tmp_path / "memory.db", checkpointer=f"sqlite:{state}") as invoker:
        await invoker.astart_session("long")
        for n in range(1, 2001):
            before = len(model.prompt_chars)
            role = "user" if n % 2 else "assistant"
            content = f"Message {n}: the user mentioned project Falcon milestone {n % 37} and budget ${n * 3}."
            result = await invoker.aprocess_conversation_message(role, content, "long")
            if result.control is ControlState.PROCESS_MESSAGE:
                prompts.setdefault(n // 100, []).append(model.prompt_chars[before])
            if n in (100, 2000):
                sizes[n] = latest_checkpoint_bytes(state, "long")
                files[n] = state.stat().st_size  # the WAL beside it is bounded by SQLite's auto-checkpoint
    early, late = max(prompts[1]), max(prompts[19])
    assert late <= early * 1.1, (early, late)
    assert sizes[2000] <= sizes[100] * 1.1, sizes
    # old checkpoints are pruned: the file does not grow with the conversation (unpruned: ~30 MB at 2,000)
    assert files[2000] <= max(files[100] * 1.5, 1024 * 1024), files


async def test_pruned_in_memory_checkpoints_keep_the_thread_intact(tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    async with build_agent("extractive", db=tmp_path / "memory.db", checkpointer=saver, flush_every=5) as invoker:
        for n in range(1, 41):
            await invoker.aprocess_conversation_message("user", f"message {n}", "t1")
        assert len(saver.storage["t1"][""]) <= invoker.agent.settings.prune_every
        status = await invoker.athread_status("t1")
        assert status.messages == 40 and status.counters["flushes"] == 8
        assert "message 40" in status.context or status.context
        result = await invoker.aprocess_conversation_message("user", "message 41", "t1")
        assert result.message_index == 41
