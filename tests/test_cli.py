"""The `mycelian-agent` command as a user runs it: replay, show, search, resume after a kill, bad files."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "quickstart_conversation.json"


def cli(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mycelian_agent.cli", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def stored_raw_entries(db: Path) -> list[str]:
    """Raw texts stored by the embedded server, read straight from its SQLite file ([] before it exists)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [row[0] for row in conn.execute("SELECT raw_entry FROM entries ORDER BY rowid")]
    except sqlite3.OperationalError:  # the server has not created its schema yet
        return []
    finally:
        conn.close()


def test_replay_show_and_search_the_example(tmp_path):
    db = tmp_path / "memory.db"
    out = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["messages"], summary["entries"], summary["conversations"]) == (16, 16, 1)
    assert summary["contexts"] >= 2 and summary["fallbacks"] == 0
    shown = cli("show", "--db", str(db), "--memory", "quickstart", "--limit", "3")
    assert shown.returncode == 0, shown.stderr
    assert "context document" in shown.stdout and "Sintra" in shown.stdout
    found = cli("search", "hotel in Alfama", "--db", str(db), "--memory", "quickstart", "--json")
    assert found.returncode == 0, found.stderr
    assert "Casa do Limoeiro" in json.loads(found.stdout)["entries"][0]["rawEntry"]


def test_replaying_twice_stores_every_message_once(tmp_path):
    db = tmp_path / "memory.db"
    for _ in range(2):
        assert cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart").returncode == 0
    raws = stored_raw_entries(db)
    assert len(raws) == 16 and len(set(raws)) == 16


@pytest.mark.parametrize(("content", "problem"), [
    ('{"messages": [{"role": "user", "content": "hi"},', "malformed JSON"),
    ('{"messages": [{"role": "robot", "content": "hi"}]}', "messages[0].role: unknown role 'robot'"),
    ('{"messages": [{"role": "user", "content": "   "}]}', "messages[0].content"),
    ('{"chat": []}', "top level"),
])
def test_bad_files_are_refused_with_file_position_and_problem(tmp_path, content, problem):
    good, bad, db = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "memory.db"
    good.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}]}))
    bad.write_text(content)
    out = cli("replay", str(good), str(bad), "--db", str(db))
    assert out.returncode == 1
    assert str(bad) in out.stderr.replace("\n", "") or "bad.json" in out.stderr
    assert problem in out.stderr.replace("\n", " ")
    assert stored_raw_entries(db) == []  # the good file was not half-ingested either


def test_resume_after_a_kill_stores_each_message_exactly_once(tmp_path):
    sessions = [{"session_id": f"s{s}", "conversation_time": f"2024-0{s + 1}-01T10:00:00Z",
                 "messages": [{"role": "user" if i % 2 == 0 else "assistant",
                               "content": f"Session {s} message {i}: note number {s * 1000 + i} about topic {i % 7}."}
                              for i in range(120)]} for s in range(3)]
    data = tmp_path / "conversation.json"
    data.write_text(json.dumps({"conversation_id": "kill-test", "sessions": sessions}))
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    args = [sys.executable, "-m", "mycelian_agent.cli", "replay", str(data), "--db", str(db), "--state", str(state),
            "--flush-every", "5"]
    target = random.Random(7).randint(20, 300)  # kill once this many messages are stored
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if len(stored_raw_entries(db)) >= target:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the replay finished before it could be killed"
    # SIGKILL the whole group, the CLI and the memory server it spawned, as a crash would
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    partial = len(stored_raw_entries(db))
    assert target <= partial < 360
    done = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    raws = stored_raw_entries(db)
    expected = [m["content"] for s in sessions for m in s["messages"]]
    assert sorted(raws) == sorted(expected)  # every message exactly once
    assert summary["skipped"] + summary["messages"] == 360
    assert summary["skipped"] >= partial - 1  # the resumed run did not redo checkpointed work


def test_chat_pipeline_example_stores_both_sides(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "chat_pipeline.py"), "--db", str(tmp_path / "chat.db"),
         "--state", str(tmp_path / "state.db")],
        input="I moved to Denver with my dog Rex.\nWhat do you remember about my dog?\n",
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "I remember" in out.stdout and "Rex" in out.stdout
    assert "4 messages stored" in out.stdout


def test_replay_runner_is_a_module_and_a_script(tmp_path):
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location("replay_conversation", REPO / "runners" / "replay_conversation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stats = asyncio.run(module.replay_files([EXAMPLE], db=tmp_path / "m.db", memory="quickstart"))
    assert (stats.messages, stats.entries) == (16, 16)
    out = subprocess.run([sys.executable, str(REPO / "runners" / "replay_conversation.py"), str(EXAMPLE),
                          "--db", str(tmp_path / "m.db"), "--memory", "quickstart", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deduplicated"] == 16  # the second replay stored nothing twice
