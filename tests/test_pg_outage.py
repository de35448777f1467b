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

import pytest

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
    convo.write_text(json.dumps({"conversation_id": "c", "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} of c"}
        for i in range(MESSAGES)]}), encoding="utf-8")
    command = [sys.executable, "-m", "mycelian_agent.cli", "replay", str(convo), "--db", url, "--state", state,
               "--json", "--no-embeddings"]
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


def test_an_outage_of_the_checkpoint_server_is_one_line_and_the_next_run_resumes(pg_own_cluster,
                                                                                 tmp_path: Path) -> None:
    state = pg_own_cluster.create_database("state")
    code, _, err, url = _replay_through_a_restart(pg_own_cluster, tmp_path, state, 5.0)
    assert code == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: the checkpoint store {state} cannot be reached ("), err
    assert "run again to resume" in lines[0]
    again = subprocess.run([sys.executable, "-m", "mycelian_agent.cli", "replay", str(tmp_path / "c.json"), "--db",
                            url, "--state", state, "--json", "--no-embeddings"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    raws = _stored(url)
    assert len(raws) == MESSAGES and len(set(raws)) == MESSAGES
