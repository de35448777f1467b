"""The memory server's tools through a real MCP client session (in-memory transport): happy paths and refusals.
What the storage behind the tools promises (writes, idempotency, deletion, paging, search order, time bounds, any text
as a query) is tested on every backend by tests/conformance.

Every test using ``world`` runs twice: on SQLite and on PostgreSQL (the ``memory_db`` fixture, conftest.py).

Every refusal must be an MCP error result naming the problem and must leave the database byte-for-byte as it was.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest

from mycelian_agent.memory_server import PLACEHOLDER_CONTEXT, create_server, is_placeholder_context
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.memory_server.testing import BackgroundSession, call_json, call_text
from mycelian_agent.prompt_files import PROMPT_NAMES, read_prompt

UNKNOWN = "00000000-0000-4000-8000-000000000000"


@dataclass
class World:
    """A vault with a memory holding one entry, and a second vault with its own memory."""

    bg: BackgroundSession
    V: str
    M: str
    E: str
    OV: str
    OM: str
    OE: str

    @property
    def session(self):
        return self.bg.session

    def fill(self, args: dict[str, Any]) -> dict[str, Any]:
        return {k: getattr(self, v[1:]) if isinstance(v, str) and v.startswith("$") else v for k, v in args.items()}

    async def snapshot(self) -> dict[str, Any]:
        return await self.bg.runner.call(MemoryStore.snapshot)


@pytest.fixture
async def world(memory_db: str) -> World:
    bg = await BackgroundSession.start(create_server(memory_db))
    s = bg.session
    v = (await call_json(s, "create_vault", title="home", description="main vault"))["vaultId"]
    m = (await call_json(s, "create_memory_in_vault", vault_id=v, title="chat-1", memory_type="NOTES"))["memoryId"]
    e = await call_json(s, "add_entry", vault_id=v, memory_id=m, raw_entry="I adopted a cat", summary="cat")
    ov = (await call_json(s, "create_vault", title="other"))["vaultId"]
    om = (await call_json(s, "create_memory_in_vault", vault_id=ov, title="chat-2", memory_type="NOTES"))["memoryId"]
    oe = await call_json(s, "add_entry", vault_id=ov, memory_id=om, raw_entry="secret of other", summary="other")
    for vault, memory in ((v, m), (ov, om)):  # vectors are written behind: a snapshot taken before would change
        assert await call_text(s, "await_consistency", vault_id=vault, memory_id=memory, vectors=True) == "consistent"
    yield World(bg, v, m, e["entryId"], ov, om, oe["entryId"])
    await bg.aclose()


async def test_tool_surface_matches_reference(world: World) -> None:
    tools = {t.name: t.inputSchema for t in (await world.session.list_tools()).tools}
    required = {
        "create_vault": ["title"],
        "list_vaults": [],
        "create_memory_in_vault": ["vault_id", "title", "memory_type"],
        "list_memories": ["vault_id"],
        "get_memory": ["vault_id", "memory_id"],
        "add_entry": ["vault_id", "memory_id", "raw_entry", "summary"],
        "add_entries": ["vault_id", "memory_id", "entries"],
        "list_entries": ["vault_id", "memory_id"],
        "get_entry": ["vault_id", "memory_id", "entry_id"],
        "update_entry": ["vault_id", "memory_id", "entry_id", "raw_entry", "summary"],
        "list_entry_versions": ["vault_id", "memory_id", "entry_id"],
        "put_context": ["vault_id", "memory_id", "content"],
        "get_context": ["vault_id", "memory_id"],
        "await_consistency": ["memory_id"],
        "search_memories": ["memory_id", "query"],
        "get_default_prompts": ["memory_type"],
        "delete_entry": ["vault_id", "memory_id", "entry_id"],
        "delete_memory": ["vault_id", "memory_id"],
    }
    assert set(tools) == set(required)
    for name, params in required.items():
        assert sorted(tools[name].get("required", [])) == sorted(params), name
    props = tools["search_memories"]["properties"]
    assert (props["top_ke"]["default"], props["top_ke"]["minimum"], props["top_ke"]["maximum"]) == (5, 0, 25)
    assert (props["top_kc"]["default"], props["top_kc"]["minimum"], props["top_kc"]["maximum"]) == (2, 1, 10)
    assert props["include_raw_entries"]["default"] is False
    assert tools["list_entries"]["properties"]["limit"]["default"] == 25
    assert set(tools["add_entry"]["properties"]) >= {"tags", "conversation_time", "idempotency_key"}


async def test_happy_path_every_tool(world: World) -> None:
    s, V, M = world.session, world.V, world.M
    vaults = [{"vaultId": V, "title": "home"}, {"vaultId": world.OV, "title": "other"}]
    assert await call_json(s, "list_vaults") == vaults
    assert await call_json(s, "list_memories", vault_id=V) == [{"memoryId": M, "title": "chat-1"}]
    memory = await call_json(s, "get_memory", vault_id=V, memory_id=M)
    assert set(memory) == {"memoryId", "vaultId", "title", "description", "memoryType", "creationTime"}
    assert (memory["memoryType"], memory["vaultId"]) == ("NOTES", V)

    entry = await call_json(
        s,
        "add_entry",
        vault_id=V,
        memory_id=M,
        raw_entry="Moved to Denver",
        summary="The user moved to Denver.",
        tags={"role": "user", "topic": "move"},
        conversation_time="2024-03-05T10:00:00+01:00",
    )
    assert entry["status"] == "stored" and entry["deduplicated"] is False
    assert entry["conversationTime"] == "2024-03-05T09:00:00.000000Z"
    assert entry["tags"] == {"role": "user", "topic": "move"}
    stored = await call_json(s, "get_entry", vault_id=V, memory_id=M, entry_id=entry["entryId"])
    assert stored == {k: v for k, v in entry.items() if k not in ("status", "deduplicated")}
    assert set(stored) == {
        "entryId",
        "memoryId",
        "vaultId",
        "creationTime",
        "conversationTime",
        "rawEntry",
        "summary",
        "tags",
        "version",
    }
    first = await call_json(s, "get_entry", vault_id=V, memory_id=M, entry_id=world.E)
    assert "conversationTime" not in first

    page = await call_json(s, "list_entries", vault_id=V, memory_id=M)
    assert [e["entryId"] for e in page["entries"]] == [entry["entryId"], world.E]
    assert (page["count"], page["applied_limit"], page["next_before"], page["next_after"]) == (2, 25, None, None)

    assert await call_text(s, "get_context", vault_id=V, memory_id=M) == PLACEHOLDER_CONTEXT
    put = await call_json(s, "put_context", vault_id=V, memory_id=M, content="## Facts\n- lives in Denver")
    assert put["status"] == "stored" and put["chars"] == len("## Facts\n- lives in Denver") and put["memoryId"] == M
    assert await call_text(s, "get_context", vault_id=V, memory_id=M) == "## Facts\n- lives in Denver"
    assert await call_text(s, "await_consistency", memory_id=M) == "consistent"
    assert await call_text(s, "await_consistency", memory_id=M, vault_id=V) == "consistent"

    found = await call_json(s, "search_memories", memory_id=M, query="Where does the user live? Denver")
    # The entry that shares the query's words first; the memory's other entry, where a dense model is installed
    # (hybrid search, the default), after it, marked as found by meaning alone.
    assert [(e["entryId"], e["match"]) for e in found["entries"]][0] == (entry["entryId"], "words")
    assert [e["match"] for e in found["entries"][1:]] in ([], ["meaning"])
    assert "rawEntry" not in found["entries"][0]
    assert found["latestContext"] == "## Facts\n- lives in Denver"
    assert found["latestContextTimestamp"] == put["timestamp"]
    assert found["contexts"][0]["context"] == "## Facts\n- lives in Denver" and found["contexts"][0]["score"] > 0

    prompts = await call_json(s, "get_default_prompts", memory_type="chat")
    assert set(prompts) == {"version", "context_summary_rules", "templates"}
    assert prompts["templates"] == {name: read_prompt(name) for name in PROMPT_NAMES}

    assert await call_json(s, "delete_entry", vault_id=V, memory_id=M, entry_id=entry["entryId"]) == {
        "entryId": entry["entryId"],
        "status": "deleted",
        "contextItemsRemoved": 0,
    }
    assert await call_json(s, "delete_memory", vault_id=V, memory_id=M) == {
        "memoryId": M,
        "status": "deleted",
        "entries": 1,
    }
    assert await call_json(s, "list_memories", vault_id=V) == []


LONG = "x" * 9001
# (tool, arguments with $-references into World, a fragment the error message must contain)
REFUSALS = [
    ("create_vault", {}, "missing required argument 'title'"),
    ("create_vault", {"title": 7}, "'title'"),
    ("create_vault", {"title": ""}, "title must be 1-50"),
    ("create_vault", {"title": "a" * 51}, "title must be 1-50"),
    ("create_vault", {"title": "bad title!"}, "title must be 1-50"),
    ("create_vault", {"title": "x'); DROP TABLE vaults;--"}, "title must be 1-50"),
    ("create_vault", {"title": 'NEAR("a" "b")'}, "title must be 1-50"),
    ("create_vault", {"title": "home"}, "already exists"),
    ("create_vault", {"title": "trailing\n"}, "title must be 1-50"),
    ("create_vault", {"title": "fine", "description": "d" * 1001}, "description is too long"),
    ("create_vault", {"title": "fine", "description": 3}, "'description'"),
    ("create_vault", {"title": "fine", "titel": "x"}, "unknown argument 'titel'"),
    ("list_vaults", {"vault_id": "$V"}, "unknown argument 'vault_id'"),
    ("create_memory_in_vault", {"title": "m", "memory_type": "N"}, "missing required argument 'vault_id'"),
    ("create_memory_in_vault", {"vault_id": "$V", "memory_type": "N"}, "missing required argument 'title'"),
    ("create_memory_in_vault", {"vault_id": "$V", "title": "m"}, "missing required argument 'memory_type'"),
    ("create_memory_in_vault", {"vault_id": "$V", "title": "chat-1", "memory_type": "N"}, "already exists"),
    ("create_memory_in_vault", {"vault_id": UNKNOWN, "title": "m", "memory_type": "N"}, f"vault {UNKNOWN} not found"),
    ("create_memory_in_vault", {"vault_id": "nope", "title": "m", "memory_type": "N"}, "vault_id must be a UUID"),
    ("create_memory_in_vault", {"vault_id": "$V", "title": "m", "memory_type": 1}, "'memory_type'"),
    ("create_memory_in_vault", {"vault_id": "$V", "title": "m", "memory_type": "a b"}, "memory_type must be"),
    ("create_memory_in_vault", {"vault_id": "$V", "title": "m;--", "memory_type": "N"}, "title must be 1-50"),
    ("list_memories", {}, "missing required argument 'vault_id'"),
    ("list_memories", {"vault_id": "1 OR 1=1"}, "vault_id must be a UUID"),
    ("list_memories", {"vault_id": UNKNOWN}, "not found"),
    ("get_memory", {"vault_id": "$V"}, "missing required argument 'memory_id'"),
    ("get_memory", {"memory_id": "$M"}, "missing required argument 'vault_id'"),
    ("get_memory", {"vault_id": "$V", "memory_id": "$OM"}, "memory $OM not found in vault $V"),
    ("get_memory", {"vault_id": "$V", "memory_id": UNKNOWN}, f"memory {UNKNOWN} not found in vault $V"),
    ("get_memory", {"vault_id": "$V", "memory_id": UNKNOWN + "\n"}, "memory_id must be a UUID"),
    ("add_entry", {"memory_id": "$M", "raw_entry": "r", "summary": "s"}, "missing required argument 'vault_id'"),
    ("add_entry", {"vault_id": "$V", "raw_entry": "r", "summary": "s"}, "missing required argument 'memory_id'"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "summary": "s"}, "missing required argument 'raw_entry'"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r"}, "missing required argument 'summary'"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": "", "summary": "s"}, "raw_entry must not be"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": " \n", "summary": "s"}, "raw_entry must not"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": LONG, "summary": "s"}, "raw_entry is too long"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": 12, "summary": "s"}, "'raw_entry'"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": " "}, "summary must not be"),
    ("add_entry", {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s" * 2001}, "summary is too"),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "tags": '{"a": "b"}'},
        "'tags'",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "tags": {"a": 1}},
        "'tags.a'",
    ),
    (
        "add_entry",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "raw_entry": "r",
            "summary": "s",
            "tags": {f"k{i}": "v" for i in range(33)},
        },
        "tags has 33 keys",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "tags": {"k" * 65: "v"}},
        "too long",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "tags": {"k": "v" * 513}},
        "tags['k'] is too long",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "conversation_time": "yesterday"},
        "conversation_time must be an RFC 3339",
    ),
    (
        "add_entry",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "raw_entry": "r",
            "summary": "s",
            "conversation_time": "2024-01-01T10:00:00",
        },
        "conversation_time must be an RFC 3339",
    ),
    (
        "add_entry",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "raw_entry": "r",
            "summary": "s",
            "conversation_time": "2024-02-30T10:00:00Z",
        },
        "conversation_time is not a valid",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "conversation_time": 1700000000},
        "'conversation_time'",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$M", "raw_entry": "r", "summary": "s", "idempotency_key": "k" * 201},
        "idempotency_key must be 1-200",
    ),
    (
        "add_entry",
        {"vault_id": "$V", "memory_id": "$OM", "raw_entry": "r", "summary": "s"},
        "memory $OM not found in vault $V",
    ),
    ("add_entry", {"vault_id": "$V", "memory_id": UNKNOWN, "raw_entry": "r", "summary": "s"}, "not found"),
    ("add_entries", {"vault_id": "$V", "memory_id": "$M", "entries": []}, "entries must hold 1 to 100 entries (got 0)"),
    (
        "add_entries",
        {"vault_id": "$V", "memory_id": "$M", "entries": [{"raw_entry": "r", "summary": "s"}] * 101},
        "entries must hold 1 to 100 entries (got 101)",
    ),
    ("add_entries", {"vault_id": "$V", "memory_id": "$M", "entries": "r"}, "argument 'entries'"),
    (
        "add_entries",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "entries": [{"raw_entry": "r", "summary": "s"}, {"raw_entry": "r", "summary": " "}],
        },
        "entries[1]: summary must not be empty",
    ),
    (
        "add_entries",
        {"vault_id": "$V", "memory_id": "$M", "entries": [{"raw_entry": "r", "summary": "s", "x": "1"}]},
        "argument 'entries[0].x'",
    ),
    (
        "add_entries",
        {"vault_id": "$V", "memory_id": "$M", "entries": [{"raw_entry": "r"}]},
        "missing required argument 'entries[0].summary'",
    ),
    (
        "add_entries",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "entries": [
                {"raw_entry": "r", "summary": "s"},
                {"raw_entry": "r", "summary": "s"},
                {"raw_entry": "r", "summary": "s", "conversation_time": "yesterday"},
            ],
        },
        "entries[2]: conversation_time must be an RFC 3339",
    ),
    (
        "add_entries",
        {"vault_id": "$V", "memory_id": "$M", "entries": [{"raw_entry": "r" * 9001, "summary": "s"}]},
        "entries[0]: raw_entry is too long",
    ),
    (
        "add_entries",
        {"vault_id": "$V", "memory_id": "$OM", "entries": [{"raw_entry": "r", "summary": "s"}]},
        "memory $OM not found in vault $V",
    ),
    # the first item is inserted, then the second's key conflicts with it: the transaction stores neither
    (
        "add_entries",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "entries": [
                {"raw_entry": "one", "summary": "s", "idempotency_key": "k"},
                {"raw_entry": "two", "summary": "s", "idempotency_key": "k"},
            ],
        },
        "entries[1]: idempotency_key 'k' conflicts",
    ),
    ("list_entries", {"vault_id": "$V"}, "missing required argument 'memory_id'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": "5"}, "argument 'limit'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": 0}, "argument 'limit'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": 51}, "argument 'limit'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": 2.5}, "argument 'limit'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": True}, "argument 'limit'"),
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "before": "last week"}, "before must be an RFC 3339"),
    (
        "list_entries",
        {"vault_id": "$V", "memory_id": "$M", "before": "2024-01-01T00:00:00Z", "after": "2023-01-01T00:00:00Z"},
        "mutually exclusive",
    ),
    ("list_entries", {"vault_id": "$OV", "memory_id": "$M"}, "memory $M not found in vault $OV"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$M"}, "missing required argument 'entry_id'"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": UNKNOWN}, f"entry {UNKNOWN} not found"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": "$OE"}, "entry $OE not found in memory $M"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$OM", "entry_id": "$OE"}, "memory $OM not found in vault $V"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": "'; --"}, "entry_id must be a UUID"),
    ("put_context", {"vault_id": "$V", "memory_id": "$M"}, "missing required argument 'content'"),
    ("put_context", {"vault_id": "$V", "memory_id": "$M", "content": ""}, "content must not be empty"),
    ("put_context", {"vault_id": "$V", "memory_id": "$M", "content": "c" * 65537}, "content is too long"),
    ("put_context", {"vault_id": "$V", "memory_id": "$M", "content": ["a"]}, "'content'"),
    ("put_context", {"vault_id": "$OV", "memory_id": "$M", "content": "c"}, "memory $M not found in vault $OV"),
    ("get_context", {"memory_id": "$M"}, "missing required argument 'vault_id'"),
    ("get_context", {"vault_id": "$V", "memory_id": "$OM"}, "memory $OM not found in vault $V"),
    ("await_consistency", {}, "missing required argument 'memory_id'"),
    ("await_consistency", {"memory_id": UNKNOWN}, f"memory {UNKNOWN} not found"),
    ("await_consistency", {"memory_id": "abc"}, "memory_id must be a UUID"),
    ("await_consistency", {"memory_id": "$OM", "vault_id": "$V"}, "memory $OM not found in vault $V"),
    ("search_memories", {"memory_id": "$M"}, "missing required argument 'query'"),
    ("search_memories", {"query": "cat"}, "missing required argument 'memory_id'"),
    ("search_memories", {"memory_id": "$M", "query": ""}, "query must not be empty"),
    ("search_memories", {"memory_id": "$M", "query": "q" * 2001}, "query is too long"),
    ("search_memories", {"memory_id": "$M", "query": "cat", "top_ke": 26}, "argument 'top_ke'"),
    ("search_memories", {"memory_id": "$M", "query": "cat", "top_ke": -1}, "argument 'top_ke'"),
    ("search_memories", {"memory_id": "$M", "query": "cat", "top_ke": "5"}, "argument 'top_ke'"),
    ("search_memories", {"memory_id": "$M", "query": "cat", "top_kc": 0}, "argument 'top_kc'"),
    ("search_memories", {"memory_id": "$M", "query": "cat", "top_kc": 11}, "argument 'top_kc'"),
    (
        "search_memories",
        {"memory_id": "$M", "query": "cat", "include_raw_entries": "true"},
        "argument 'include_raw_entries'",
    ),
    (
        "search_memories",
        {"memory_id": "$M", "query": "cat", "include_raw_entries": 1},
        "argument 'include_raw_entries'",
    ),
    ("search_memories", {"memory_id": "$M", "query": "cat", "after": "2024-13-01T00:00:00Z"}, "after is not a valid"),
    ("search_memories", {"memory_id": "$OM", "query": "secret", "vault_id": "$V"}, "memory $OM not found in vault $V"),
    ("search_memories", {"memory_id": UNKNOWN, "query": "cat"}, "not found"),
    ("get_default_prompts", {}, "missing required argument 'memory_type'"),
    ("get_default_prompts", {"memory_type": "code"}, "supported memory types are chat"),
    ("get_default_prompts", {"memory_type": 5}, "'memory_type'"),
    ("delete_entry", {"vault_id": "$V", "memory_id": "$M"}, "missing required argument 'entry_id'"),
    ("delete_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": UNKNOWN}, f"entry {UNKNOWN} not found"),
    ("delete_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": "$OE"}, "entry $OE not found in memory $M"),
    ("delete_entry", {"vault_id": "$V", "memory_id": "$OM", "entry_id": "$OE"}, "memory $OM not found in vault $V"),
    (
        "update_entry",
        {"vault_id": "$V", "memory_id": "$M", "entry_id": "$E", "raw_entry": "r"},
        "missing required argument 'summary'",
    ),
    (
        "update_entry",
        {"vault_id": "$V", "memory_id": "$M", "entry_id": "$OE", "raw_entry": "r", "summary": "s"},
        "entry $OE not found in memory $M",
    ),
    (
        "update_entry",
        {"vault_id": "$V", "memory_id": "$M", "entry_id": "$E", "raw_entry": " ", "summary": "s"},
        "raw_entry",
    ),
    (
        "update_entry",
        {
            "vault_id": "$V",
            "memory_id": "$M",
            "entry_id": "$E",
            "raw_entry": "r",
            "summary": "s",
            "idempotency_key": "k",
        },
        "unknown argument 'idempotency_key'",
    ),
    ("list_entry_versions", {"vault_id": "$V", "memory_id": "$M", "entry_id": UNKNOWN}, f"entry {UNKNOWN} not found"),
    (
        "list_entry_versions",
        {"vault_id": "$V", "memory_id": "$OM", "entry_id": "$OE"},
        "memory $OM not found in vault $V",
    ),
    ("delete_memory", {"vault_id": "$V"}, "missing required argument 'memory_id'"),
    ("delete_memory", {"vault_id": "$V", "memory_id": "$OM"}, "memory $OM not found in vault $V"),
    ("delete_memory", {"vault_id": UNKNOWN, "memory_id": "$M"}, f"vault {UNKNOWN} not found"),
]


@pytest.mark.parametrize(("tool", "arguments", "fragment"), REFUSALS, ids=lambda v: v if isinstance(v, str) else "")
async def test_refusal_is_an_error_and_changes_nothing(world: World, tool: str, arguments: dict, fragment: str) -> None:
    before = await world.snapshot()
    result = await world.session.call_tool(tool, world.fill(arguments))
    assert result.isError, result
    text = result.content[0].text
    for name in ("OM", "OV", "OE", "M", "V"):  # longest first: "$OM" contains "M"
        fragment = fragment.replace(f"${name}", getattr(world, name))
    assert fragment in text, text
    assert await world.snapshot() == before


async def test_an_entry_is_updated_under_its_id_and_its_history_is_listed(world: World) -> None:
    s, V, M, E = world.session, world.V, world.M, world.E
    updated = await call_json(
        s,
        "update_entry",
        vault_id=V,
        memory_id=M,
        entry_id=E,
        raw_entry="I adopted a dog",
        summary="dog",
        tags={"speaker": "Ann"},
    )
    assert (updated["entryId"], updated["version"], updated["status"]) == (E, 2, "updated")
    assert (await call_json(s, "get_entry", vault_id=V, memory_id=M, entry_id=E))["rawEntry"] == "I adopted a dog"
    found = await call_json(s, "search_memories", memory_id=M, query="cat", vault_id=V, include_raw_entries=True)
    assert [hit["match"] for hit in found["entries"]] in ([], ["meaning"])  # (a dense index finds a dog near a cat)
    assert all(hit["rawEntry"] == "I adopted a dog" for hit in found["entries"])
    history = await call_json(s, "list_entry_versions", vault_id=V, memory_id=M, entry_id=E)
    assert [(h["version"], h["rawEntry"], h["replacedAt"] is None) for h in history["versions"]] == [
        (1, "I adopted a cat", False),
        (2, "I adopted a dog", True),
    ]
    assert history["count"] == 2 and history["entryId"] == E


async def test_reads_of_unknown_vaults_memories_and_entries_create_nothing(world: World) -> None:
    """Issue 39: no read tool creates a vault or memory (or anything else), whatever ids it is given."""
    s, V, M, E = world.session, world.V, world.M, world.E
    for memory in (M, world.OM):  # (a search embeds a small gap of vectors itself: none left to embed)
        assert await call_text(s, "await_consistency", memory_id=memory, vectors=True) == "consistent"
    before = await world.snapshot()
    reads = [
        ("list_memories", {"vault_id": UNKNOWN}),
        ("get_memory", {"vault_id": V, "memory_id": UNKNOWN}),
        ("list_entries", {"vault_id": V, "memory_id": UNKNOWN}),
        ("get_entry", {"vault_id": V, "memory_id": M, "entry_id": UNKNOWN}),
        ("get_entry", {"vault_id": UNKNOWN, "memory_id": M, "entry_id": E}),
        ("get_context", {"vault_id": V, "memory_id": UNKNOWN}),
        ("list_entry_versions", {"vault_id": V, "memory_id": M, "entry_id": UNKNOWN}),
        ("search_memories", {"memory_id": UNKNOWN, "query": "cat"}),
        ("search_memories", {"memory_id": M, "query": "cat", "vault_id": UNKNOWN}),
        ("await_consistency", {"memory_id": UNKNOWN}),
    ]
    for tool, arguments in reads:
        result = await s.call_tool(tool, arguments)
        assert result.isError and "not found" in result.content[0].text, (tool, result)
    await call_json(s, "search_memories", memory_id=M, query="nobody", vault_id=V)  # a search that finds nothing
    assert await call_json(s, "list_vaults") == [
        {"vaultId": V, "title": "home"},
        {"vaultId": world.OV, "title": "other"},
    ]
    assert await world.snapshot() == before


async def test_await_consistency_is_a_barrier_for_concurrent_writes(world: World) -> None:
    s, V, M = world.session, world.V, world.M
    writes = [
        s.call_tool("add_entry", {"vault_id": V, "memory_id": M, "raw_entry": f"w{i}", "summary": "w"})
        for i in range(20)
    ]
    results = await asyncio.gather(*writes)
    assert not any(r.isError for r in results)
    assert await call_text(s, "await_consistency", memory_id=M) == "consistent"
    page = await call_json(s, "list_entries", vault_id=V, memory_id=M, limit=50)
    assert page["count"] == 21


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PLACEHOLDER_CONTEXT, True),
        ("", True),
        ("   ", True),
        (None, True),
        ("This is the default context. Nothing has been recorded yet.", True),
        ("Placeholder context for a new memory", True),
        ("NO CONTEXT YET", True),
        ("## Facts\n- lives in Denver", False),
        ("## Facts\n- uses a placeholder name in tests\n" + "- fact\n" * 100, False),
    ],
)
def test_is_placeholder_context(text: str | None, expected: bool) -> None:
    assert is_placeholder_context(text) is expected


async def test_get_default_prompts_is_case_insensitive_and_json(world: World) -> None:
    text = await call_text(world.session, "get_default_prompts", memory_type="CHAT")
    assert set(json.loads(text)["templates"]) == set(PROMPT_NAMES)
