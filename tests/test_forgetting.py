"""A deleted entry is gone from everything, through the real server over stdio on a real SQLite file: search, the
context document, list_entries, its history, ``mycelian-agent export``, and the bytes of the ``.db``, ``-wal`` and
``-shm`` files (secure_delete, the full-text index merged, the WAL checkpointed). The same promises at the storage
level, on both backends, are ``tests/conformance/test_conformance_forgetting.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from test_cli import cli  # noqa: F401  (cli: the fixture)

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.testing import call_json, call_text, server_command

SECRET = "Zorvexine quillibrant marmotage is my grandmother's secret pudding recipe"
OLDER = "Plumbergast vindaloorie is the name of my first sailboat"
# Words of the two texts as they would sit anywhere in the files: the text, its index stems, its vector's entry.
TRACES = [SECRET, OLDER, "zorvexin", "quillibr", "marmotag", "plumbergast", "vindaloori"]


def _files(db: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in db.parent.glob(db.name + "*")}


def _found(db: Path) -> list[tuple[str, str]]:
    """Which traces the database files still hold (case-insensitive, UTF-8)."""
    files = {name: data.lower() for name, data in _files(db).items()}
    return [(name, trace) for name, data in files.items() for trace in TRACES if trace.lower().encode() in data]


def test_a_deleted_entry_leaves_no_byte_in_the_sqlite_files_and_no_trace_in_any_read(tmp_path: Path, cli) -> None:
    db = tmp_path / "memory.db"
    asyncio.run(_write_update_and_delete(db))
    exported = cli("export", "--db", str(db), "--memory", "alice")
    assert exported.returncode == 0, exported.stderr
    assert not any(t.lower() in exported.stdout.lower() for t in TRACES)
    assert _found(db) == []


async def _write_update_and_delete(db: Path) -> None:
    command, args = server_command(db)
    params = StdioServerParameters(command=command, args=args)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        v = (await call_json(s, "create_vault", title="mycelian"))["vaultId"]
        m = (await call_json(s, "create_memory_in_vault", vault_id=v, title="alice", memory_type="NOTES"))["memoryId"]
        ids = {"vault_id": v, "memory_id": m}
        await call_json(
            s,
            "add_entries",
            **ids,
            entries=[
                {"raw_entry": f"I walked the dog on day {i} of the holiday", "summary": f"dog walk {i}"}
                for i in range(30)
            ],
        )
        e = (
            await call_json(
                s, "add_entry", **ids, raw_entry=OLDER, summary="Alice named her first sailboat", idempotency_key="boat"
            )
        )["entryId"]
        await call_json(s, "put_context", **ids, content=f"## Facts\n- Alice said: {OLDER}\n- Alice walks the dog")
        updated = await call_json(s, "update_entry", **ids, entry_id=e, raw_entry=SECRET, summary="Alice's pudding")
        assert updated["contextItemsRemoved"] == 1  # the first snapshot's item quoting the replaced text
        await call_json(s, "put_context", **ids, content=f"## Facts\n- {SECRET}\n- Alice walks the dog")
        assert _found(db), "the test's texts must be in the files before the delete"

        answer = await call_json(s, "delete_entry", **ids, entry_id=e)
        assert answer == {"entryId": e, "status": "deleted", "contextItemsRemoved": 1}
        for query in ("Zorvexine quillibrant pudding recipe", "Plumbergast vindaloorie sailboat"):
            found = await call_json(s, "search_memories", **ids, query=query, top_kc=10, include_raw_entries=True)
            assert all(hit["entryId"] != e for hit in found["entries"])
            assert not any(t.lower() in json.dumps(found).lower() for t in TRACES), found
        context = await call_text(s, "get_context", **ids)
        assert context == "## Facts\n- Alice walks the dog"
        listed = await call_json(s, "list_entries", **ids, limit=50)
        assert e not in [entry["entryId"] for entry in listed["entries"]] and listed["count"] == 30
        with pytest.raises(MemoryServerError, match=f"entry {e} not found"):
            await call_json(s, "list_entry_versions", **ids, entry_id=e)
        # While the server still runs: the delete merged the index and checkpointed the WAL.
        assert _found(db) == []
        # The idempotency key went with the entry: the same key stores a new entry.
        again = await call_json(s, "add_entry", **ids, raw_entry="A new entry", summary="new", idempotency_key="boat")
        assert again["deduplicated"] is False
