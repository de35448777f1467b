"""One writer per thread: a second process writing a thread in use fails at once naming the holder (or waits);
a holder that died is taken over; two replays of one file sharing one --state never store a message twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_cli import stored_raw_entries

from mycelian_agent import ThreadBusyError, build_agent

HOLDER = textwrap.dedent("""
    import asyncio, sys
    from mycelian_agent import build_agent

    async def main(db, state, thread):
        async with build_agent(server="in-process", db=db, checkpointer=f"sqlite:{state}", memory="c") as invoker:
            await invoker.aprocess_conversation_message("user", "held", thread)
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # until the test closes our stdin (or kills us)

    asyncio.run(main(*sys.argv[1:4]))
""")


def _conversation(path: Path, cid: str, count: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "conversation_id": cid,
                "messages": [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} of {cid}"}
                    for i in range(count)
                ],
            }
        ),
        encoding="utf-8",
    )
    return path


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mycelian_agent.cli", "replay", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


@contextmanager
def _hold(tmp_path: Path, thread: str) -> Iterator[subprocess.Popen[str]]:
    """A process that wrote ``thread`` (one message) and holds its lease until its stdin closes; killed at exit."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER, encoding="utf-8")
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "holder.db"), str(tmp_path / "st.db"), thread],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout.readline().strip() == "ready"
            yield holder
        finally:
            if holder.poll() is None:
                holder.kill()


def test_a_second_writer_of_a_thread_fails_at_once_naming_the_holder_and_a_dead_holder_is_taken_over(
    tmp_path: Path,
) -> None:
    convo = _conversation(tmp_path / "c1.json", "c1", 6)
    with _hold(tmp_path, "c1") as holder:
        started = time.monotonic()
        busy = _replay(str(convo), "--db", str(tmp_path / "m.db"), "--state", str(tmp_path / "st.db"))
        assert busy.returncode == 1 and time.monotonic() - started < 30
        assert f"thread 'c1' is being written by another process (process {holder.pid} on " in busy.stderr
        assert "--thread-wait" in busy.stderr and "Traceback" not in busy.stderr
        assert stored_raw_entries(tmp_path / "m.db") == []  # nothing was written
        holder.send_signal(signal.SIGKILL)  # dies holding the lease: the next writer takes it over
        holder.wait(timeout=30)
    done = _replay(str(convo), "--db", str(tmp_path / "m.db"), "--state", str(tmp_path / "st.db"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == 6 - 1  # the holder's one message took position 1 of the thread


def test_a_second_writer_waits_when_asked(tmp_path: Path) -> None:
    convo = _conversation(tmp_path / "c2.json", "c2", 4)
    with (
        _hold(tmp_path, "c2") as holder,
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mycelian_agent.cli",
                "replay",
                str(convo),
                "--db",
                str(tmp_path / "m.db"),
                "--state",
                str(tmp_path / "st.db"),
                "--thread-wait",
                "60",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as waiting,
    ):
        try:
            time.sleep(1.5)
            assert waiting.poll() is None  # still waiting for the lease
            holder.stdin.close()  # the holder finishes and gives the lease back
            assert holder.wait(timeout=60) == 0
            out, err = waiting.communicate(timeout=120)
            assert waiting.returncode == 0, err
            assert json.loads(out)["messages"] == 4 - 1
        finally:
            if waiting.poll() is None:
                waiting.kill()


@pytest.mark.slow
def test_two_replays_of_one_file_sharing_a_state_store_each_message_once(tmp_path: Path) -> None:
    """The issue's reproduction: both replays started at once; one fails at once or finds the other finished."""
    convo = _conversation(tmp_path / "c3.json", "c3", 150)
    for attempt in range(2):
        db, state = tmp_path / f"m{attempt}.db", tmp_path / f"st{attempt}.db"
        runs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mycelian_agent.cli",
                    "replay",
                    str(convo),
                    "--db",
                    str(db),
                    "--state",
                    str(state),
                    "--json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outcomes = [(run.communicate(timeout=300), run.returncode) for run in runs]
        outcomes = [(code, streams) for streams, code in outcomes]
        failed = [err for code, (_, err) in outcomes if code != 0]
        assert all("is being written by another process" in err for err in failed), "\n---\n".join(failed)
        assert len(failed) <= 1
        raws = stored_raw_entries(db)
        assert len(raws) == 150 and len(set(raws)) == 150, f"attempt {attempt}: {len(raws)} entries"
        again = _replay(str(convo), "--db", str(db), "--state", str(state), "--json")
        assert again.returncode == 0, again.stderr  # the state is sound: a third run resumes (nothing to do)
        assert json.loads(again.stdout)["messages"] == 0


async def test_postgres_threads_have_one_writer(pg_url: str, tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db", checkpointer=pg_url) as first:
        await first.aprocess_conversation_message("user", "first writer", "shared-thread")
        async with build_agent(server="in-process", db=tmp_path / "m.db", checkpointer=pg_url) as second:
            with pytest.raises(
                ThreadBusyError,
                match=rf"thread 'shared-thread' is being written by another "
                rf"process \(mycelian-agent pid {os.getpid()} on ",
            ):
                await second.aprocess_conversation_message("user", "second writer", "shared-thread")
            await second.aprocess_conversation_message("user", "another thread is free", "other-thread")
    async with build_agent(server="in-process", db=tmp_path / "m.db", checkpointer=pg_url) as third:
        await third.aprocess_conversation_message("user", "after the first closed", "shared-thread")
        assert (await third.athread_status("shared-thread")).messages == 2


async def test_an_invoker_keeps_a_bounded_number_of_thread_leases(tmp_path: Path, monkeypatch) -> None:
    import sqlite3

    from mycelian_agent.agent import invoker as invoker_module

    monkeypatch.setattr(invoker_module, "THREADS_HELD", 4)
    state = tmp_path / "st.db"
    async with build_agent(server="in-process", db=tmp_path / "m.db", checkpointer=f"sqlite:{state}") as invoker:
        for index in range(10):
            await invoker.aprocess_conversation_message("user", f"hello {index}", f"t{index}")
        with sqlite3.connect(state) as conn:
            held = [row[0] for row in conn.execute("SELECT thread_id FROM mycelian_thread_leases ORDER BY thread_id")]
        assert held == ["t6", "t7", "t8", "t9"]  # the least recently used gave theirs back
        # A thread forgotten is read again from its checkpoint: its numbering goes on, nothing is stored twice.
        await invoker.aprocess_conversation_message("user", "hello again", "t0")
        assert (await invoker.athread_status("t0")).messages == 2
        assert len(await invoker.asearch("hello", top_k=25)) == 11


@pytest.mark.slow
def test_a_replay_that_waits_for_the_thread_resumes_where_the_other_stopped(tmp_path: Path) -> None:
    """Issue 40 item 1: with --thread-wait, the second replay (started while the first writes) read the thread's
    position before it held the lease and numbered the rest anew (76 of 150 stored twice). It reads it under the
    lease now: every message once, and the second run finds nothing left to do."""
    convo = _conversation(tmp_path / "c4.json", "c4", 400)  # long enough for the second to start meanwhile
    db, state = tmp_path / "m.db", tmp_path / "st.db"
    command = [
        sys.executable,
        "-m",
        "mycelian_agent.cli",
        "replay",
        str(convo),
        "--db",
        str(db),
        "--state",
        str(state),
        "--thread-wait",
        "120",
        "--json",
        "--no-embeddings",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as first:
        deadline = time.monotonic() + 120
        while not stored_raw_entries(db) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as second:
            outcomes = [(run.communicate(timeout=300), run.returncode) for run in (first, second)]
    for (out, err), code in outcomes:
        assert code == 0, err
    counts = [json.loads(out)["messages"] for (out, _), _ in outcomes]
    raws = stored_raw_entries(db)
    assert len(raws) == 400 and len(set(raws)) == 400, f"{len(raws)} entries, {len(raws) - len(set(raws))} twice"
    assert sum(counts) == 400, counts
