"""The `mycelian-agent` command as a user runs it: replay, show, search, resume after a kill, bad files.

Most commands run in-process through the console entry point (``mycelian_agent.cli.main``), which is what the
installed script calls: the same argument parsing, exit statuses and output, without paying the interpreter start
and the package imports (~2 s a run) in a new process each time. The embedded memory server is still spawned over
stdio as in real use. The process boundary itself is tested where it is the point: a replay SIGKILLed with its
server, the chat example fed on stdin, and the replay runner run as a script.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mycelian_agent.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "quickstart_conversation.json"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``mycelian-agent ARGS`` in this process; its exit status and captured output."""
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps at the terminal width (80 when not a terminal)
    monkeypatch.delenv("MYCELIAN_EMBEDDINGS_MODEL", raising=False)  # the commands' own default model
    capsys.readouterr()

    def run(*args: str) -> Run:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        out = capsys.readouterr()
        return Run(code, out.out, out.err)

    return run


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


def test_replay_show_and_search_the_example(tmp_path, cli):
    db = tmp_path / "memory.db"
    out = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    counts = {
        key: summary[key]
        for key in (
            "conversations",
            "sessions",
            "messages",
            "entries",
            "contexts",
            "skipped",
            "deduplicated",
            "fallbacks",
            "corrections",
            "retries",
        )
    }
    # two sessions: a context at message 6 and at the end of each session (flush every 6)
    assert counts == {
        "conversations": 1,
        "sessions": 2,
        "messages": 16,
        "entries": 16,
        "contexts": 4,
        "skipped": 0,
        "deduplicated": 0,
        "fallbacks": 0,
        "corrections": 0,
        "retries": 0,
    }
    assert summary["errors"] == []
    shown = cli("show", "--db", str(db), "--memory", "quickstart", "--limit", "3")
    assert shown.returncode == 0, shown.stderr
    assert "quickstart: newest 3 entries" in shown.stdout and "context document" in shown.stdout
    assert "Sintra fits both" in shown.stdout and "Casa do Limoeiro" in shown.stdout  # an entry, the context
    found = cli("search", "hotel in Alfama", "--db", str(db), "--memory", "quickstart", "--json")
    assert found.returncode == 0, found.stderr
    assert "Casa do Limoeiro" in json.loads(found.stdout)[0]["text"]
    assert json.loads(found.stdout)[0]["match"] == "words"
    # No word shared: the nearest entries by meaning, said to be such (hybrid search, the default) ...
    nearest = cli("search", "submarine", "--db", str(db), "--memory", "quickstart")
    assert nearest.returncode == 0, nearest.stderr
    assert "no entry of memory 'quickstart' shares a word with 'submarine'; the nearest by meaning" in nearest.stdout
    assert "meaning" in nearest.stdout.split("search: submarine", 1)[1]  # the table's match column
    # ... or nothing, with --words-only.
    nothing = cli("search", "submarine", "--words-only", "--db", str(db), "--memory", "quickstart")
    assert nothing.returncode == 0 and "no entry of memory 'quickstart' matches 'submarine'" in nothing.stdout
    block = cli(
        "recall", "Where do we stay in Alfama?", "--db", str(db), "--memory", "quickstart", "--budget-tokens", "400"
    )
    assert block.returncode == 0, block.stderr
    assert block.stdout.startswith("Long-term memory relevant to: Where do we stay in Alfama?")
    assert "Dana (user): We also booked the hotel: Casa do Limoeiro in Alfama" in block.stdout
    assert len(block.stdout) <= 400 * 4
    empty = cli("recall", " ", "--db", str(db), "--memory", "quickstart")
    assert empty.returncode == 1 and "query is empty" in empty.stderr
    missing = cli("show", "--db", str(db), "--memory", "nope")
    assert missing.returncode == 1
    assert missing.stderr == (
        "error: memory 'nope' not found in vault 'mycelian' (memories: quickstart); check --memory\n"
    )


def test_replaying_twice_stores_every_message_once(tmp_path, cli):
    db = tmp_path / "memory.db"
    runs = [cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--json") for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    first, second = (json.loads(r.stdout) for r in runs)
    assert (first["messages"], first["deduplicated"]) == (16, 0)
    assert (second["messages"], second["deduplicated"]) == (16, 16)  # without --state: replayed, answered as stored
    raws = stored_raw_entries(db)
    assert len(raws) == 16 and len(set(raws)) == 16
    # The re-run found every message stored, so the context documents already covered them: no new snapshots.
    assert first["contexts"] > 0 and second["contexts"] == 0
    assert context_snapshots(db) == first["contexts"]


def context_snapshots(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT count(*) FROM contexts").fetchone()[0]
    finally:
        conn.close()


SURROGATE = (
    "invalid Unicode: lone surrogate \\u{code} at character {at} (half of a UTF-16 pair, cannot be stored "
    "as UTF-8; fix the text or its \\u escapes)"
)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"messages": [{"role": "user", "content": "hi"},', "line 1 column 49: malformed JSON: Expecting value"),
        (
            '{"messages": [{"role": "robot", "content": "hi"}]}',
            "messages[0].role: unknown role 'robot' (accepted: user, assistant; also human → user, ai → assistant)",
        ),
        (
            '{"messages": [{"role": "user", "content": "   "}]}',
            "messages[0].content: content is empty or whitespace only",
        ),
        (
            '{"chat": []}',
            "top level: unknown format (keys: 'chat'); accepted: 'messages' {messages: [...]}, "
            "'sessions' {sessions: [...]}, 'longmemeval' (records with haystack_sessions), 'locomo' (samples with "
            "conversation)",
        ),
        (
            '{"messages": [{"role": "user", "content": "hi", "tags": {"k": "\\ud83d"}}]}',
            "messages[0].tags.k: " + SURROGATE.format(code="d83d", at=0),
        ),
        (
            '{"messages": [{"role": "user", "content": "hi", "tags": {"\\ud83d": "v"}}]}',
            "messages[0].tags: key '\\\\ud83d': " + SURROGATE.format(code="d83d", at=0),
        ),
        (
            '{"messages": [{"role": "user", "content": "ok \\udc00"}]}',
            "messages[0].content: " + SURROGATE.format(code="dc00", at=3),
        ),
        (
            '{"conversation_id": "c\\ud83d", "messages": [{"role": "user", "content": "hi"}]}',
            "conversation_id: " + SURROGATE.format(code="d83d", at=1),
        ),
        (
            "[" * 100000 + "]" * 100000,
            "line 1 column 65: JSON nested more than 64 levels deep (no accepted format nests that deep)",
        ),
        (
            '{"messages": [{"role": "user", "content": "hi", "n": ' + "7" * 5000 + "}]}",
            "line 1 column 54: number too long to read (more than 4300 digits); write it as a string if it is an id",
        ),
        (
            '{"messages": [{"role": "user", "content": "hi", "tags": {'
            + ", ".join(f'"k{i}": "v"' for i in range(26))
            + "}}]}",
            "messages[0].tags: 26 tags; at most 25 (the server keeps 32 per entry, 7 of them set by the loader "
            "and the agent)",
        ),
    ],
    ids=[
        "malformed-json",
        "unknown-role",
        "blank-content",
        "unknown-format",
        "surrogate-tag-value",
        "surrogate-tag-key",
        "surrogate-content",
        "surrogate-id",
        "deep-nesting",
        "huge-int",
        "too-many-tags",
    ],
)
def test_bad_files_are_refused_with_file_position_and_problem(tmp_path, cli, content, problem):
    good, bad, db = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "memory.db"
    good.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}]}))
    bad.write_text(content)
    out = cli("replay", str(good), str(bad), "--db", str(db))
    assert out.returncode == 1
    assert out.stderr == f"error: {bad}: {problem}\n"  # one line: the file, the position in it, the problem
    assert out.stdout == ""
    assert not db.exists()  # every file is checked before the server starts: the good file was not half-ingested


def test_resume_after_a_kill_stores_each_message_exactly_once(tmp_path, cli):
    sessions = [
        {
            "session_id": f"s{s}",
            "conversation_time": f"2024-0{s + 1}-01T10:00:00Z",
            "messages": [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"Session {s} message {i}: note number {s * 1000 + i} about topic {i % 7}.",
                }
                for i in range(50)
            ],
        }
        for s in range(3)
    ]
    data = tmp_path / "conversation.json"
    data.write_text(json.dumps({"conversation_id": "kill-test", "sessions": sessions}))
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    args = ["replay", str(data), "--db", str(db), "--state", str(state), "--flush-every", "5"]
    total = 3 * 50
    target = random.Random(7).randint(20, 120)  # kill once this many messages are stored (mid-session 2)
    process = subprocess.Popen(
        [sys.executable, "-m", "mycelian_agent.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if len(stored_raw_entries(db)) >= target:
                break
            time.sleep(0.02)
        assert process.poll() is None, f"the replay finished before it could be killed: {process.stderr.read()!r}"
        # SIGKILL the whole group, the CLI and the memory server it spawned, as a crash would
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    partial = len(stored_raw_entries(db))
    assert target <= partial < total
    done = cli(*args, "--json")  # the user runs the same command again
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    raws = stored_raw_entries(db)
    expected = [m["content"] for s in sessions for m in s["messages"]]
    assert sorted(raws) == sorted(expected)  # every message exactly once
    assert summary["skipped"] + summary["messages"] == total
    # The resumed run skips what was checkpointed; at most the one message in flight at the kill (stored, not yet
    # checkpointed) is replayed, and the server answers it from its idempotency key.
    assert partial - 1 <= summary["skipped"] <= partial
    assert summary["deduplicated"] == partial - summary["skipped"]


def test_chat_pipeline_example_stores_both_sides(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "chat_pipeline.py"),
            "--db",
            str(tmp_path / "chat.db"),
            "--state",
            str(tmp_path / "state.db"),
        ],
        input="I moved to Denver with my dog Rex.\nWhat do you remember about my dog?\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "I remember" in out.stdout and "Rex" in out.stdout
    assert "4 messages stored" in out.stdout


def test_replay_runner_script_is_the_replay_command(tmp_path, capsys):
    from mycelian_agent.cli import main

    main(["replay", str(EXAMPLE), "--db", str(tmp_path / "m.db"), "--memory", "quickstart", "--json"])
    assert json.loads(capsys.readouterr().out)["messages"] == 16
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "runners" / "replay_conversation.py"),
            str(EXAMPLE),
            "--db",
            str(tmp_path / "m.db"),
            "--memory",
            "quickstart",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deduplicated"] == 16  # the second replay stored nothing twice


def test_list_add_export_delete_and_errors_that_name_the_cause(tmp_path, cli):
    db = tmp_path / "memory.db"
    typo = tmp_path / "typo" / "typo.db"
    shown = cli("show", "--db", str(typo), "--memory", "quickstart")
    assert shown.returncode == 1 and f"no memory database at {typo}" in shown.stderr
    assert not typo.parent.exists()  # nothing created for a mistyped --db
    replayed = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--json")
    assert json.loads(replayed.stdout)["memories"] == ["quickstart"]  # the summary names the memories written
    added = cli(
        "add",
        "I adopted a cat named Miso.",
        "--db",
        str(db),
        "--memory",
        "quickstart",
        "--time",
        "2024-05-01T10:00:00Z",
        "--name",
        "Ann",
    )
    assert added.returncode == 0, added.stderr
    entry = json.loads(added.stdout)
    assert entry["rawEntry"] == "I adopted a cat named Miso." and entry["conversationTime"].startswith("2024-05-01")
    listed = cli("list", "--db", str(db))
    assert listed.returncode == 0 and "quickstart" in listed.stdout and "mycelian" in listed.stdout
    wrong_vault = cli("show", "--db", str(db), "--vault", "mycelain", "--memory", "quickstart")
    assert wrong_vault.returncode == 1 and "vault 'mycelain' not found (vaults: mycelian)" in wrong_vault.stderr
    out = tmp_path / "export.json"
    assert cli("export", "--db", str(db), "--memory", "quickstart", "--out", str(out)).returncode == 0
    exported = json.loads(out.read_text())
    assert len(exported["entries"]) == 17 and exported["memory"]["title"] == "quickstart" and exported["context"]
    assert sorted(e["rawEntry"] for e in exported["entries"]) == sorted(stored_raw_entries(db))
    gone = cli("delete", "--db", str(db), "--memory", "quickstart", "--entry", entry["entryId"], "--yes")
    assert json.loads(gone.stdout) == {"entryId": entry["entryId"], "status": "deleted", "contextItemsRemoved": 0}
    assert len(stored_raw_entries(db)) == 16
    assert json.loads(cli("delete", "--db", str(db), "--memory", "quickstart", "--yes").stdout)["entries"] == 16
    assert stored_raw_entries(db) == []


def test_get_update_history_and_delete_one_entry(tmp_path, cli):
    db = tmp_path / "memory.db"
    where = ("--db", str(db), "--memory", "pets")
    entry = json.loads(cli("add", "I adopted a cat named Miso.", *where).stdout)
    assert cli("add", "I start at the bakery on Monday.", "--db", str(db), "--memory", "work").returncode == 0
    got = cli("get", entry["entryId"], *where)
    assert got.returncode == 0 and json.loads(got.stdout)["rawEntry"] == "I adopted a cat named Miso."
    assert cli("get", entry["entryId"], *where, "--server", "in-process").stdout == got.stdout  # as over MCP
    updated = cli("update", entry["entryId"], "I adopted two cats, Miso and Tofu.", *where)
    assert updated.returncode == 0, updated.stderr
    now = json.loads(updated.stdout)
    assert (now["entryId"], now["rawEntry"], now["version"]) == (
        entry["entryId"],
        "I adopted two cats, Miso and Tofu.",
        2,
    )
    assert "Tofu" in now["summary"] and now["tags"]["role"] == "user"
    versions = json.loads(cli("history", entry["entryId"], *where).stdout)["versions"]
    assert [(v["version"], v["rawEntry"]) for v in versions] == [
        (1, "I adopted a cat named Miso."),
        (2, "I adopted two cats, Miso and Tofu."),
    ]
    # an entry of another memory, a memory that does not exist, an id that is none: named, nothing created
    other = cli("get", entry["entryId"], "--db", str(db), "--memory", "work")
    assert other.returncode == 1 and f"entry {entry['entryId']} not found" in other.stderr
    missing = cli("update", entry["entryId"], "Hello.", "--db", str(db), "--memory", "garden")
    assert missing.returncode == 1 and "memory 'garden' not found" in missing.stderr
    assert "garden" not in cli("list", "--db", str(db)).stdout
    bad = cli("history", "miso", *where)
    assert bad.returncode == 1 and "entry id 'miso' is not an entry id" in bad.stderr
    gone = cli("delete", *where, "--entry", entry["entryId"], "--yes")
    assert gone.returncode == 0 and json.loads(gone.stdout)["status"] == "deleted"
    assert cli("get", entry["entryId"], *where).returncode == 1


def test_read_commands_read_the_store_directly_with_the_tools_answers(tmp_path, cli):
    """On the embedded database, list/show/search/export call the store in-process (no MCP SDK, no LangChain:
    they start in well under a second) and print exactly what they print over the MCP tools."""
    db = tmp_path / "memory.db"
    assert cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart").returncode == 0
    commands = [
        ("list",),
        ("show", "--memory", "quickstart"),
        ("search", "Lisbon trip", "--memory", "quickstart"),
        ("search", "Lisbon", "--memory", "quickstart", "--json"),
        ("export", "--memory", "quickstart"),
        ("recall", "When is the Lisbon trip?", "--memory", "quickstart"),
    ]
    for command in commands:
        direct = cli(*command, "--db", str(db))
        over_mcp = cli(*command, "--db", str(db), "--server", "in-process")
        assert direct.returncode == over_mcp.returncode == 0, (command, direct.stderr, over_mcp.stderr)
        assert direct.stdout == over_mcp.stdout, command
    bad = cli("delete", "--db", str(db), "--memory", "quickstart", "--entry", "123", "--yes")
    assert bad.returncode == 1 and "failed: entry_id must be a UUID" in bad.stderr
    probe = (
        "import sys; from mycelian_agent.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'langchain_core', 'langgraph'})\n"
        "print('HEAVY', heavy, file=sys.stderr)"
    )
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-c", probe, *command, "--db", str(db)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0 and "HEAVY []" in done.stderr, (command, done.stderr[-2000:])


def test_the_readme_async_snippet_runs_as_written(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    snippet = next(block for block in readme.split("```python\n")[1:] if "async with build_agent" in block)
    script = tmp_path / "snippet.py"
    script.write_text(snippet.split("```")[0], encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(stored_raw_entries(tmp_path / "memory.db")) == 2
    printed = readme.split("It prints:\n```\n", 1)[1].split("```")[0]
    assert printed in done.stdout  # the README shows what the snippet prints


def test_read_and_edit_commands_say_what_is_wrong_in_one_line(tmp_path, cli):
    db = tmp_path / "memory.db"
    assert cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart").returncode == 0
    common = ("--db", str(db), "--memory", "quickstart")
    cases = [
        (
            ("export", *common, "--out", str(tmp_path / "missing" / "x.json")),
            f"error: cannot write --out {tmp_path / 'missing' / 'x.json'}: the folder {tmp_path / 'missing'} does not "
            "exist",
        ),
        (("export", *common, "--out", "/dev/full"), "error: cannot write --out /dev/full: No space left on device"),
        (("delete", "--db", str(db), "--memory", "nope"), "error: memory 'nope' not found in vault 'mycelian'"),
        (
            ("delete", *common),
            "error: not deleting memory 'quickstart' with all its entries: there is no terminal "
            "to confirm on; pass --yes",
        ),
        (("delete", *common, "--entry", "00000000-0000-4000-8000-000000000000"), "not found in memory"),
        (("list", "--db", str(tmp_path)), f"error: --db {tmp_path} is a folder, not a memory database file"),
        (
            ("search", "-5 degrees", *common),
            "No such option '-5'. (if that is text starting with '-', put it after '--': ",
        ),  # the program's name differs in pytest
    ]
    for args, problem in cases:
        run = cli(*args)
        assert run.returncode in (1, 2) and problem in " ".join(run.stderr.split()), (args, run.stderr)
        assert "Traceback" not in run.stderr
    assert len(stored_raw_entries(db)) == 16  # nothing was deleted
    found = cli("search", *common, "--json", "--", "-5 degrees")  # a query, not an option: searched
    assert found.returncode == 0 and {hit["match"] for hit in json.loads(found.stdout)} == {"meaning"}


def test_the_default_database_is_the_same_for_the_embedded_server_and_the_read_commands(tmp_path, cli, monkeypatch):
    # The spawned server gets HOME but not XDG_DATA_HOME from the MCP SDK: it wrote ~/.local/share/... while the read
    # commands looked in $XDG_DATA_HOME ("no memory database").
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MYCELIAN_DB", raising=False)
    assert cli("replay", str(EXAMPLE), "--json").returncode == 0
    assert (tmp_path / "xdg" / "mycelian" / "memory.db").is_file()
    assert not (tmp_path / "home").exists()
    listed = cli("list")
    assert listed.returncode == 0 and "quickstart-lisbon-trip" in listed.stdout
