"""Resuming threads across processes, and bounded prompts and checkpoints over long threads.

The memory server runs in-process here (``server="in-process"``: the same server and SQLite file, over in-memory
streams): what these tests watch is the agent's checkpoints and prompts, not the transport, which
test_memory_server_transports.py and test_cli.py cover over stdio and HTTP.
"""

from __future__ import annotations

import contextlib
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

    async def write(db, state, start, stop):
        async with build_agent("extractive", server="in-process", db=db, checkpointer="sqlite:" + str(state),
                               flush_every=4) as invoker:
            controls = []
            for i in range(start, stop):
                r = await invoker.aprocess_conversation_message("user", f"message number {i}", "thread-1")
                controls.append(r.control.name)
            status = await invoker.athread_status("thread-1")
            return {"controls": controls, "messages": status.messages}

    if __name__ == "__main__":
        print(json.dumps(asyncio.run(write(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))))
""")


async def write_here(db, state, start, stop) -> dict:
    """WRITER's ``write`` in this process."""
    namespace: dict = {"__name__": "writer"}
    exec(WRITER, namespace)
    return await namespace["write"](db, state, start, stop)


def write_in_a_new_process(db, state, start, stop) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", WRITER, str(db), str(state), str(start), str(stop)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


async def test_thread_resumes_in_a_new_process_with_its_count(tmp_path):
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    first = await write_here(db, state, 1, 7)
    assert first["messages"] == 6
    assert first["controls"] == ["PROCESS_MESSAGE"] * 3 + ["PROCESS_MESSAGE_AND_FLUSH"] + ["PROCESS_MESSAGE"] * 2
    second = write_in_a_new_process(db, state, 7, 10)  # nothing carries over but the two SQLite files
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
    with contextlib.closing(sqlite3.connect(state_path)) as conn:  # sqlite3's own "with" commits, does not close
        row = conn.execute(
            "SELECT length(checkpoint) FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
    return row[0]


async def test_prompt_and_checkpoint_size_stay_flat_over_1000_messages(tmp_path):
    # Prompt, checkpoint and file sizes reach their plateau within ~200 messages (prompt 5,457 -> 5,496 chars,
    # checkpoint ~8 KB, file 176 KB, the same at 1,000 and 2,000 messages); without the window or the pruning
    # they grow with every message (prune_every=None: an 8.3 MB file at 1,000). The overhead benchmark runs
    # 2,000 messages.
    last = 1000
    model = MeasuringModel()
    model.prompt_chars = []
    state = tmp_path / "state.db"
    sizes: dict[int, int] = {}
    files: dict[int, int] = {}
    prompts: dict[int, list[int]] = {}
    # BM25 alone: the agent's prompts and checkpoints are measured; encoding 1,000 entries would only add ~80 s.
    async with build_agent(
        model, server="in-process", db=tmp_path / "memory.db", checkpointer=f"sqlite:{state}", embeddings=False
    ) as invoker:
        await invoker.astart_session("long")
        for n in range(1, last + 1):
            before = len(model.prompt_chars)
            role = "user" if n % 2 else "assistant"
            content = f"Message {n}: the user mentioned project Falcon milestone {n % 37} and budget ${n * 3}."
            result = await invoker.aprocess_conversation_message(role, content, "long")
            if result.control is ControlState.PROCESS_MESSAGE:
                prompts.setdefault(n // 100, []).append(model.prompt_chars[before])
            if n in (100, last):
                sizes[n] = latest_checkpoint_bytes(state, "long")
                files[n] = state.stat().st_size  # the WAL beside it is recycled at SQLite's auto-checkpoint
    early, late = max(prompts[1]), max(prompts[last // 100 - 1])
    assert late <= early * 1.1, (early, late)
    assert sizes[last] <= sizes[100] * 1.1, sizes
    # old checkpoints are pruned: the file does not grow with the conversation
    assert files[last] <= max(files[100] * 1.5, 1024 * 1024), files


async def test_pruned_in_memory_checkpoints_keep_the_thread_intact(tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    async with build_agent(
        "extractive", server="in-process", db=tmp_path / "memory.db", checkpointer=saver, flush_every=5
    ) as invoker:
        for n in range(1, 41):
            await invoker.aprocess_conversation_message("user", f"message {n}", "t1")
        assert len(saver.storage["t1"][""]) <= invoker.agent.settings.prune_every
        status = await invoker.athread_status("t1")
        assert status.messages == 40 and status.progress.flushes == 8
        # The thread's context is the document of the 8th flush, as stored on the server, and it still carries
        # every message: each flush merged the previous document, which pruning did not lose.
        stored = await invoker.connection.call(
            "get_context", {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
        )
        assert status.context == stored
        timeline = status.context.split("## Timeline\n", 1)[1].splitlines()
        assert timeline == [f"- User: message {n}." for n in range(1, 41)]
        result = await invoker.aprocess_conversation_message("user", "message 41", "t1")
        assert result.message_index == 41


DIES_AFTER_ITS_CHECKPOINT = textwrap.dedent("""
    import asyncio, os, signal, sys
    from mycelian_agent import build_agent

    async def main(db, state, batch, die_at, count):
        async with build_agent(server="in-process", db=db, checkpointer="sqlite:" + state, batch_size=int(batch),
                               embeddings=False) as invoker:
            agent, prune, runs = invoker.agent, invoker.agent._maybe_prune, []

            async def then_die(thread_id):  # runs after the invocation's checkpoint was written
                await prune(thread_id)
                runs.append(thread_id)
                if len(runs) == int(die_at):
                    os.kill(os.getpid(), signal.SIGKILL)  # before the caller hears back

            agent._maybe_prune = then_die
            messages = [{"role": "user", "content": f"message {i}"} for i in range(int(count))]
            if int(batch) == 1:
                for message in messages:
                    await invoker.aprocess_conversation_message(message["role"], message["content"], "t")
            else:
                await invoker.aprocess_conversation_messages("t", messages)

    asyncio.run(main(*sys.argv[1:]))
""")


def _dies_after_its_checkpoint(db, state, batch: int, die_at: int, count: int) -> None:
    run = subprocess.run(
        [sys.executable, "-c", DIES_AFTER_ITS_CHECKPOINT, str(db), str(state), str(batch), str(die_at), str(count)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -9, run.stderr


async def test_a_message_sent_again_to_a_new_process_after_the_first_died_answering_is_stored_once(tmp_path):
    # Issue 40 item 2: the process died after its checkpoint was written and before its caller got the answer;
    # the caller sent the message again to a new process, which numbered it anew (stored twice, 1 of 1).
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    _dies_after_its_checkpoint(db, state, batch=1, die_at=3, count=3)  # messages 0-2 taken in, 2 not answered
    async with build_agent(server="in-process", db=db, checkpointer=f"sqlite:{state}", embeddings=False) as invoker:
        again = await invoker.aprocess_conversation_message("user", "message 2", "t")
        assert again.accepted == () and again.message_index == 3 and "not taken in again" in again.notes[0]
        said_twice = await invoker.aprocess_conversation_message("user", "message 2", "t")  # now on purpose
        assert said_twice.accepted == (4,)
    raws = [row[0] for row in sqlite3.connect(db).execute("SELECT raw_entry FROM entries ORDER BY rowid")]
    assert raws == ["message 0", "message 1", "message 2", "message 2"]


async def test_a_bulk_call_sent_again_to_a_new_process_takes_in_only_what_the_dead_one_did_not(tmp_path):
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    # Two invocations of 10 messages: 1-4 (a batch), 5-6 (to the flush at 6); it dies after the second.
    _dies_after_its_checkpoint(db, state, batch=4, die_at=2, count=10)
    async with build_agent(
        server="in-process", db=db, checkpointer=f"sqlite:{state}", batch_size=4, embeddings=False
    ) as invoker:
        results = await invoker.aprocess_conversation_messages(
            "t", [{"role": "user", "content": f"message {i}"} for i in range(10)]
        )
        assert [n for result in results for n in result.accepted] == [7, 8, 9, 10]
        await invoker.aend_session("t")
        # After a session's end a message like the last one is a new message, not a resend.
        await invoker.aprocess_conversation_message("user", "message 9", "t")
        await invoker.aflush("t")
    raws = [row[0] for row in sqlite3.connect(db).execute("SELECT raw_entry FROM entries ORDER BY rowid")]
    assert sorted(raws) == sorted([f"message {i}" for i in range(10)] + ["message 9"])
