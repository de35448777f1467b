"""A PostgreSQL restart mid-replay, on a throwaway cluster of its own (issue 40 item 3): with the memory on
PostgreSQL, a 5 s restart is survived (the pool reconnects, the server's store runner calls again with the same
idempotency keys): nothing lost, nothing doubled, exit 0 and nothing printed; with the checkpoints there too, the
outage ends the replay with one line naming the checkpoint server, and running again resumes. Before: the replay
ended within 3 s (stored 48 of 300) or, checkpoints on PostgreSQL, with 81 lines and two tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

pytestmark = pytest.mark.slow

MESSAGES = 300


def _stored(url: str) -> list[str]:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return [row[0] for row in conn.execute("SELECT raw_entry FROM entries")]
    except psycopg.Error:  # down, or the schema not there yet
        return []


def _replay_through_a_restart(cluster, tmp_path: Path, state: str, outage: float) -> tuple[int, str, str, str]:
    url = cluster.create_database("memory")
    convo = tmp_path / "c.json"
    convo.write_text(
        json.dumps(
            {
                "conversation_id": "c",
                "messages": [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} of c"}
                    for i in range(MESSAGES)
                ],
            }
        ),
        encoding="utf-8",
    )
    command = [
        sys.executable,
        "-m",
        "mycelian_agent.cli",
        "replay",
        str(convo),
        "--db",
        url,
        "--state",
        state,
        "--json",
        "--no-embeddings",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        deadline = time.monotonic() + 120
        while len(_stored(url)) < 20 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run.poll() is None, "the replay ended before the restart"
        cluster.halt()
        time.sleep(outage)
        cluster.resume()
        out, err = run.communicate(timeout=300)
    return run.returncode, out, err, url


def test_a_five_second_restart_of_the_memory_database_is_survived(pg_own_cluster, tmp_path: Path) -> None:
    code, out, err, url = _replay_through_a_restart(pg_own_cluster, tmp_path, str(tmp_path / "state.db"), 5.0)
    assert code == 0 and err == "", err
    assert json.loads(out)["messages"] == MESSAGES
    raws = _stored(url)
    assert len(raws) == MESSAGES and len(set(raws)) == MESSAGES


def test_a_five_second_restart_of_the_checkpoint_server_is_survived_or_one_line_and_the_next_run_resumes(
    pg_own_cluster, tmp_path: Path
) -> None:
    """Checkpoints on PostgreSQL: the replay waits out the restart (its pool hands out a new connection), unless the
    restart cut a save in flight: then it ends with one line naming the checkpoint server, and running again resumes.
    Which of the two happens depends on where the restart falls; either way nothing is lost and nothing doubled."""
    state = pg_own_cluster.create_database("state")
    code, out, err, url = _replay_through_a_restart(pg_own_cluster, tmp_path, state, 5.0)
    assert "Traceback" not in err
    if code == 0:
        assert err == "" and json.loads(out)["messages"] == MESSAGES
    else:
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1, err
        assert lines[0].startswith(f"error: the checkpoint store {state} cannot be reached ("), err
        assert "run again to resume" in lines[0]
        again = subprocess.run(
            [
                sys.executable,
                "-m",
                "mycelian_agent.cli",
                "replay",
                str(tmp_path / "c.json"),
                "--db",
                url,
                "--state",
                state,
                "--json",
                "--no-embeddings",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 0, again.stderr
    raws = _stored(url)
    assert len(raws) == MESSAGES and len(set(raws)) == MESSAGES


class _Count(TypedDict):
    n: int


def _counting_graph() -> StateGraph:
    """A real LangGraph graph of one step that adds one to ``n``."""
    builder = StateGraph(_Count)
    builder.add_node("step", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


async def test_a_process_outlives_a_restart_of_the_checkpoint_server(pg_own_cluster) -> None:
    """A chat pipeline's process keeps its checkpointer across a restart of the checkpoint server: a real LangGraph
    graph saves a thread, the server restarts, and the same process's next invocation reads and saves it again (one
    connection, LangGraph's default, stays broken: every later call failed until the process restarted)."""
    from mycelian_agent.agent.checkpointers import open_checkpointer

    builder = _counting_graph()
    config = {"configurable": {"thread_id": "t1"}}
    async with open_checkpointer(pg_own_cluster.create_database("state")) as saver:
        graph = builder.compile(checkpointer=saver)
        assert (await graph.ainvoke({"n": 1}, config))["n"] == 2
        pg_own_cluster.halt()
        pg_own_cluster.resume()
        assert (await graph.aget_state(config)).values["n"] == 2
        assert (await graph.ainvoke({"n": 5}, config))["n"] == 6


async def test_a_checkpoint_server_that_stays_away_is_one_line_after_the_wait_and_then_comes_back(
    pg_own_cluster,
) -> None:
    """Down for longer than ``reconnect_wait``: the call fails with the one line naming the server
    (:func:`checkpoint_problem`), and once the server is back the same process goes on."""
    from mycelian_agent.agent.checkpointers import checkpoint_problem, open_checkpointer

    builder = _counting_graph()
    config = {"configurable": {"thread_id": "t1"}}
    url = pg_own_cluster.create_database("state")
    async with open_checkpointer(url, reconnect_wait=1.0) as saver:
        graph = builder.compile(checkpointer=saver)
        assert (await graph.ainvoke({"n": 1}, config))["n"] == 2
        pg_own_cluster.halt()
        try:
            with pytest.raises(Exception) as failed:
                await graph.ainvoke({"n": 5}, config)
            problem = checkpoint_problem(failed.value, saver)
            assert problem is not None, repr(failed.value)
            assert str(problem).startswith(f"the checkpoint store {url} cannot be reached ("), str(problem)
        finally:
            pg_own_cluster.resume()
        # The pool reconnects with a growing pause between attempts: the first calls after a long outage may still
        # find no connection within the second they wait.
        for _ in range(30):
            try:
                assert (await graph.ainvoke({"n": 5}, config))["n"] == 6
                break
            except Exception as exc:
                assert checkpoint_problem(exc, saver) is not None, repr(exc)
        else:
            raise AssertionError("the checkpointer did not come back within 30 tries")


async def test_thread_leases_are_taken_again_after_a_restart_and_one_taken_meanwhile_is_refused(
    pg_own_cluster, tmp_path: Path
) -> None:
    """The leases' advisory locks end with the server's session. After a restart the holder takes its leases again
    before it writes (and goes on writing); a thread another process took while the server was down is refused at
    the holder's next write (ThreadBusyError) instead of two writers interleaving its messages."""
    from mycelian_agent import ThreadBusyError, build_agent

    state = pg_own_cluster.create_database("state")
    db = tmp_path / "m.db"
    async with build_agent(server="in-process", db=db, checkpointer=state, reconnect_wait=5.0) as first:
        await first.aprocess_conversation_message("user", "kept across the restart", "kept")
        await first.aprocess_conversation_message("user", "taken while the server was down", "taken")
        pg_own_cluster.halt()
        pg_own_cluster.resume()
        async with build_agent(server="in-process", db=db, checkpointer=state) as second:
            await second.aprocess_conversation_message("user", "the second process took it", "taken")
            await first.aprocess_conversation_message("user", "still the only writer", "kept")
            with pytest.raises(ThreadBusyError, match=r"thread 'taken' is being written by another process \("):
                await first.aprocess_conversation_message("user", "refused", "taken")
            with pytest.raises(ThreadBusyError, match=r"thread 'kept' is being written by another process"):
                await second.aprocess_conversation_message("user", "refused too", "kept")
    async with build_agent(server="in-process", db=db, checkpointer=state) as third:
        assert (await third.athread_status("kept")).messages == 2
        assert (await third.athread_status("taken")).messages == 2
