"""`mycelian-agent add` with the extractive model writes without the agent (agent/oneshot.py): the same entries and
context as the agent writes for the same messages, through the real server, and without loading LangChain or
LangGraph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_cli import cli  # noqa: F401  (cli: the fixture)

from mycelian_agent.builder import build_agent
from mycelian_agent.limits import RAW_ENTRY_MAX_CHARS

LONG = " ".join(
    f"Sentence {i} of my travel diary: we walked along the river in Porto and ate grilled sardines." for i in range(130)
)
#: (memory, role, name, time, text): roles, names, times (and none), a relative date, a message long enough to be
#: stored as parts, the same message twice (deduplicated by its idempotency key), a second memory.
MESSAGES = [
    ("u", "user", "Caroline", "2024-05-01T10:00:00Z", "I moved to Lisbon yesterday; my sister Ana lives in Porto."),
    ("u", "assistant", None, "2024-05-01T10:00:05+02:00", "Lovely! Is the flat near the river?"),
    ("u", "user", None, None, "I work as a nurse on night shifts — ça va, it's fine."),
    ("u", "user", "Caroline", "2024-05-02T09:30:00Z", LONG),
    ("u", "user", "Caroline", "2024-05-01T10:00:00Z", "I moved to Lisbon yesterday; my sister Ana lives in Porto."),
    ("w", "assistant", "Bot", "2024-06-01T08:00:00Z", "Your dentist appointment is next Friday at 9."),
]


def _stored(path: Path, cli: Any) -> dict[str, Any]:
    """What each memory of ``path`` holds: its context document and entries, without ids and creation times."""
    memories = {}
    for memory in sorted({m[0] for m in MESSAGES}):
        exported = json.loads(cli("export", "--db", str(path), "--memory", memory).stdout)
        entries = [
            {
                k: v
                for k, v in e.items()
                if k not in ("entryId", "memoryId", "vaultId", "creationTime")
                and not (k == "conversationTime" and v == e["creationTime"])
            }
            for e in exported["entries"]
        ]
        memories[memory] = {"context": exported["context"], "entries": entries}
    return memories


def _add_by_agent(db: Path, memory: str, role: str, name: str | None, when: str | None, text: str) -> None:
    """What `add` did before: the agent over the real MCP server, a new in-memory thread each time."""
    with build_agent("extractive", server="in-process", db=db, memory=memory, embeddings=False) as invoker:
        invoker.process_conversation_message(role, text, f"cli-{memory}", when, name=name)


def test_one_shot_add_stores_what_the_agent_stores(tmp_path, cli):
    assert len(LONG) > RAW_ENTRY_MAX_CHARS  # stored as parts
    agent_db, local_db, mcp_db = tmp_path / "agent.db", tmp_path / "local.db", tmp_path / "mcp.db"
    for memory, role, name, when, text in MESSAGES:
        _add_by_agent(agent_db, memory, role, name, when, text)
        options = [
            "--memory",
            memory,
            "--role",
            role,
            *(["--name", name] if name else []),
            *(["--time", when] if when else []),
        ]
        for extra in (["--db", str(local_db)], ["--db", str(mcp_db), "--server", "in-process"]):
            added = cli("add", text, *extra, *options)
            assert added.returncode == 0, added.stderr
            assert text.startswith(json.loads(added.stdout.split("\n}\n")[0] + "}")["rawEntry"])
    by_agent = _stored(agent_db, cli)
    assert len(by_agent["u"]["entries"]) == 3 + -(-len(LONG) // RAW_ENTRY_MAX_CHARS)  # the repeat was deduplicated
    assert any("(2024-04-30)" in e["summary"] for e in by_agent["u"]["entries"])  # "yesterday", dated
    assert _stored(local_db, cli) == by_agent  # in process (the embedded database)
    assert _stored(mcp_db, cli) == by_agent  # over MCP


def test_bad_input_is_refused_by_name_and_stores_nothing(tmp_path, cli):
    db = tmp_path / "m.db"
    bad_time = cli("add", "hello", "--db", str(db), "--memory", "u", "--time", "last tuesday")
    assert bad_time.returncode == 1 and "last tuesday" in bad_time.stderr
    bad_name = cli("add", "hello", "--db", str(db), "--memory", "u", "--name", "Ann\nBob")
    assert bad_name.returncode == 1 and "invalid name" in bad_name.stderr
    empty = cli("add", "   ", "--db", str(db), "--memory", "u")
    assert empty.returncode == 1 and "message content is empty" in empty.stderr
    assert not db.exists()  # checked before the database was opened


def test_one_shot_add_loads_no_langchain_nor_langgraph(tmp_path):
    script = (
        "import json, sys\n"
        "from mycelian_agent.cli import main\n"
        f"main(['add', 'I adopted a cat named Miso.', '--db', {str(tmp_path / 'm.db')!r}, '--memory', 'u'])\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core', 'langsmith', "
        "'langchain_mcp_adapters', 'mcp'})\n"
        "print(json.dumps(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *printed, loaded = done.stdout.strip().splitlines()
    assert json.loads("\n".join(printed))["rawEntry"] == "I adopted a cat named Miso."
    assert json.loads(loaded) == []
