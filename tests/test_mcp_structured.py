"""MCP for third-party clients (issue 39 item 5), over the real stdio and streamable HTTP servers: every JSON result
is also structured content that its tool's declared output schema accepts and describes; create_vault and
create_memory_in_vault can answer a taken title with the existing vault or memory; and every failure is an MCP error
result, which langchain-mcp-adapters raises (ToolException) and MemoryConnection reports as MemoryServerError naming
the problem."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from mycelian_agent.builder import connect, ensure_memory, ensure_vault
from mycelian_agent.errors import MemoryServerError
from mycelian_agent.mcp import MemoryConnection, http_connection
from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.testing import BackgroundSession, call_json, serve_http, server_command

TRANSPORTS = ["stdio", "http"]
# The stdio server, on a prompts folder when one is given.
_SERVE_STDIO = (
    "import sys, anyio; from mycelian_agent.memory_server import create_server; "
    "from mycelian_agent.memory_server.transport.stdio import serve_stdio; "
    "anyio.run(serve_stdio, create_server(sys.argv[1], prompts_dir=sys.argv[2] or None, embeddings=False))"
)


def _broken_prompts(tmp_path: Path) -> Path:
    """A prompts folder whose files are not UTF-8: get_default_prompts fails with an exception that is none of ours
    (UnicodeDecodeError), as a bug or a disk fault would."""
    folder = tmp_path / "prompts"
    folder.mkdir()
    for name in ("context_prompt", "entry_capture_prompt", "summary_prompt"):
        (folder / f"{name}.md").write_bytes(b"\xff\xfe not UTF-8")
    return folder


@contextlib.asynccontextmanager
async def _served(transport: str, tmp_path: Path, *, broken_prompts: bool = False) -> AsyncIterator[dict[str, Any]]:
    """A real server of ``transport`` on a new SQLite file (stdio: the client spawns it); yields the
    langchain-mcp-adapters connection to it."""
    db, prompts = str(tmp_path / "memory.db"), str(_broken_prompts(tmp_path)) if broken_prompts else ""
    if transport == "stdio":
        yield {"transport": "stdio", "command": sys.executable, "args": ["-c", _SERVE_STDIO, db, prompts]}
        return
    async with serve_http(create_server(db, prompts_dir=prompts or None, embeddings=False)) as url:
        yield {"transport": "streamable_http", "url": url}


@contextlib.asynccontextmanager
async def _session(connection: dict[str, Any]) -> AsyncIterator[ClientSession]:
    """A plain MCP SDK client session (the SDK's call_tool validates structured content against the schema)."""
    if connection["transport"] == "stdio":
        params = StdioServerParameters(command=connection["command"], args=connection["args"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as client,
        streamable_http_client(connection["url"], http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _undeclared(value: Any, schema: dict[str, Any], defs: dict[str, Any], path: str = "$") -> list[str]:
    """The paths of the keys of ``value`` that ``schema`` does not name: a schema that validates a result but leaves
    its fields out would describe nothing."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if isinstance(value, dict) and "properties" in schema:
        missing = [f"{path}.{key}" for key in value if key not in schema["properties"]]
        return missing + [
            p
            for key, item in value.items()
            if key in schema["properties"]
            for p in _undeclared(item, schema["properties"][key], defs, f"{path}.{key}")
        ]
    if isinstance(value, list) and "items" in schema:
        return [p for i, item in enumerate(value) for p in _undeclared(item, schema["items"], defs, f"{path}[{i}]")]
    return []


async def _every_tool(session: ClientSession) -> dict[str, list[CallToolResult]]:
    """Call every tool with arguments that reach each shape of its result (optional fields there and not)."""
    results: dict[str, list[CallToolResult]] = {}

    async def call(name: str, **arguments: Any) -> Any:
        result = await session.call_tool(name, arguments)
        assert not result.isError, (name, result.content)
        results.setdefault(name, []).append(result)
        text = result.content[0].text
        return json.loads(text) if result.structuredContent is not None else text

    vault = await call("create_vault", title="schemas", description="every tool")
    assert await call("create_vault", title="schemas", if_exists="return") == vault
    await call("list_vaults")
    memory = await call("create_memory_in_vault", vault_id=vault["vaultId"], title="m", memory_type="chat")
    ids = {"vault_id": vault["vaultId"], "memory_id": memory["memoryId"]}
    await call("list_memories", vault_id=vault["vaultId"])
    await call("get_memory", **ids)
    first = await call(
        "add_entry",
        **ids,
        raw_entry="Dana: we fly to Lisbon on June 14.",
        summary="Lisbon flight",
        tags={"role": "user"},
        conversation_time="2024-03-01T10:00:00Z",
        idempotency_key="k1",
    )
    await call("add_entry", **ids, raw_entry="No time was given for this one.", summary="no time")
    await call(
        "add_entries",
        **ids,
        entries=[
            {
                "raw_entry": "Marco booked the Lisbon hotel.",
                "summary": "hotel",
                "conversation_time": "2024-03-02T10:00:00Z",
            },
            {"raw_entry": "Dana: we fly to Lisbon on June 14.", "summary": "Lisbon flight", "idempotency_key": "k1"},
        ],
    )
    page = await call("list_entries", **ids, limit=2)
    assert page["next_before"] is not None and page["next_after"] is None
    await call("list_entries", **ids, after="2000-01-01T00:00:00Z")
    await call("get_entry", **ids, entry_id=first["entryId"])
    updated = await call(
        "update_entry",
        **ids,
        entry_id=first["entryId"],
        raw_entry="Dana: we fly to Lisbon on June 21.",
        summary="Lisbon flight moved",
        tags={"role": "user"},
    )
    assert updated["version"] == 2 and updated["status"] == "updated"
    versions = await call("list_entry_versions", **ids, entry_id=first["entryId"])
    assert [v["replacedAt"] is None for v in versions["versions"]] == [False, True]
    await call("put_context", **ids, content="# Facts\n- Dana flies to Lisbon on 2024-06-14")
    assert "Lisbon" in await call("get_context", **ids)
    assert await call("await_consistency", **ids) == "consistent"
    found = await call("search_memories", **ids, query="Lisbon flight", include_raw_entries=True)
    assert found["entries"] and all("rawEntry" in e for e in found["entries"])
    await call("search_memories", **ids, query="Lisbon", top_ke=0)
    prompts = await call("get_default_prompts", memory_type="chat")
    assert set(prompts["templates"]) == {"context_prompt", "entry_capture_prompt", "summary_prompt"}
    await call("delete_entry", **ids, entry_id=first["entryId"])
    await call("delete_memory", **ids)
    return results


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_json_result_is_structured_content_its_output_schema_accepts_and_describes(
    transport: str, tmp_path: Path
) -> None:
    async with _served(transport, tmp_path) as connection, _session(connection) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        results = await _every_tool(session)
    assert set(results) == set(tools)  # every tool the server lists (a new tool is added to _every_tool)
    assert {name for name, tool in tools.items() if tool.outputSchema is None} == {"get_context", "await_consistency"}
    for name, calls in results.items():
        schema = tools[name].outputSchema
        for result in calls:
            assert len(result.content) == 1 and result.content[0].type == "text", name  # as upstream answers
            if schema is None:
                assert result.structuredContent is None
                continue
            value = json.loads(result.content[0].text)
            structured = result.structuredContent
            assert structured == ({"result": value} if isinstance(value, list) else value), name
            jsonschema.validate(structured, schema)
            assert _undeclared(structured, schema, schema.get("$defs", {})) == [], name
    # Optional fields are optional in the schemas (the results above had them and lacked them).
    entry = tools["get_entry"].outputSchema
    assert "conversationTime" in entry["properties"] and "conversationTime" not in entry["required"]


async def test_langchain_mcp_adapters_hand_the_model_the_json_text_and_keep_the_structured_value(
    tmp_path: Path,
) -> None:
    """Through langchain-mcp-adapters over stdio: the model still reads the JSON text; the structured value comes
    as the ToolMessage's artifact."""
    command, args = server_command(tmp_path / "memory.db", "--no-embeddings")
    client = MultiServerMCPClient({"memory": {"transport": "stdio", "command": command, "args": args}})
    async with client.session("memory") as session:
        schemas = {tool.name: tool.outputSchema for tool in (await session.list_tools()).tools}
        tools = {tool.name: tool for tool in await load_mcp_tools(session)}
        message = await tools["get_default_prompts"].ainvoke(
            {"type": "tool_call", "name": "get_default_prompts", "args": {"memory_type": "chat"}, "id": "c1"}
        )
        assert isinstance(message, ToolMessage) and message.status == "success"
        text = message.content[0]["text"] if isinstance(message.content, list) else message.content
        assert json.loads(text) == message.artifact["structured_content"]
        jsonschema.validate(message.artifact["structured_content"], schemas["get_default_prompts"])
        assert set(message.artifact["structured_content"]["templates"]) == {
            "context_prompt",
            "entry_capture_prompt",
            "summary_prompt",
        }
        vaults = await tools["list_vaults"].ainvoke(
            {"type": "tool_call", "name": "list_vaults", "args": {}, "id": "c2"}
        )
        assert vaults.artifact == {"structured_content": {"result": []}}


# -- failures ------------------------------------------------------------------------------------------------

# What each kind of failure looks like: a validation error, a store error (an id that does not exist), and an
# exception that is none of ours; and the words its message must hold.
_MISSING = "00000000-0000-4000-8000-000000000000"
_FAILURES = [
    ("list_entries", {"vault_id": "$V", "memory_id": "$M", "limit": "5"}, "argument 'limit'"),
    ("get_entry", {"vault_id": "$V", "memory_id": "$M", "entry_id": _MISSING}, f"entry {_MISSING} not found"),
    ("create_vault", {"title": "errors", "if_exists": "keep"}, "argument 'if_exists'"),
    ("get_default_prompts", {"memory_type": "chat"}, "UnicodeDecodeError"),
]


def _filled(arguments: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    return {key: ids.get(value, value) if isinstance(value, str) else value for key, value in arguments.items()}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_failure_is_an_mcp_error_that_langchain_raises_and_the_agent_names(
    transport: str, tmp_path: Path
) -> None:
    async with _served(transport, tmp_path, broken_prompts=True) as connection:
        client = MultiServerMCPClient({"memory": connection})
        async with client.session("memory") as session:
            vault = await call_json(session, "create_vault", title="errors")
            memory = await call_json(
                session, "create_memory_in_vault", vault_id=vault["vaultId"], title="m", memory_type="chat"
            )
            ids = {"$V": vault["vaultId"], "$M": memory["memoryId"]}
            raising = {tool.name: tool for tool in await load_mcp_tools(session, handle_tool_errors=False)}
            handled = {tool.name: tool for tool in await load_mcp_tools(session)}
            for name, arguments, words in _FAILURES:
                result = await session.call_tool(name, _filled(arguments, ids))
                assert result.isError and result.structuredContent is None, (name, result)
                assert words in result.content[0].text, (name, result.content[0].text)
                with pytest.raises(ToolException, match=words):
                    await raising[name].ainvoke(_filled(arguments, ids))
                # langchain-mcp-adapters' default: the model gets an error ToolMessage, never a text "result".
                message = await handled[name].ainvoke(
                    {"type": "tool_call", "name": name, "args": _filled(arguments, ids), "id": "e1"}
                )
                assert message.status == "error" and words in message.content[0]["text"], (name, message)
        # The agent's own connection: MemoryServerError naming the tool and the problem.
        memory_connection = MemoryConnection(connection if transport == "stdio" else http_connection(connection["url"]))
        async with memory_connection as agent_side:
            for name, arguments, words in _FAILURES:
                with pytest.raises(MemoryServerError, match=words) as raised:
                    await agent_side.call(name, _filled(arguments, ids))
                assert raised.value.tool == name and str(raised.value).startswith(f"{name} failed: ")


# -- existing titles -----------------------------------------------------------------------------------------


async def test_if_exists_return_answers_the_existing_vault_and_memory_unchanged() -> None:
    bg = await BackgroundSession.start(create_server(":memory:", embeddings=False))
    try:
        session = bg.session
        vault = await call_json(session, "create_vault", title="home", description="first")
        with pytest.raises(MemoryServerError, match="a vault titled 'home' already exists"):  # upstream's default
            await call_json(session, "create_vault", title="home")
        assert await call_json(session, "create_vault", title="home", description="other", if_exists="return") == vault
        assert await call_json(session, "create_vault", title="fresh", if_exists="return") != vault  # created
        v = vault["vaultId"]
        memory = await call_json(
            session, "create_memory_in_vault", vault_id=v, title="dana", memory_type="chat", description="Dana's"
        )
        with pytest.raises(MemoryServerError, match=f"a memory titled 'dana' already exists in vault {v}"):
            await call_json(
                session, "create_memory_in_vault", vault_id=v, title="dana", memory_type="chat", if_exists="error"
            )
        again = await call_json(
            session,
            "create_memory_in_vault",
            vault_id=v,
            title="dana",
            memory_type="NOTES",
            description="other",
            if_exists="return",
        )
        assert again == memory and again["memoryType"] == "chat" and again["description"] == "Dana's"
        assert [m["title"] for m in await call_json(session, "list_memories", vault_id=v)] == ["dana"]
        # A bad title or vault is still an error with "return": nothing to return, nothing created.
        with pytest.raises(MemoryServerError, match="title"):
            await call_json(session, "create_vault", title="no spaces allowed", if_exists="return")
        with pytest.raises(MemoryServerError, match=f"vault {_MISSING} not found"):
            await call_json(
                session,
                "create_memory_in_vault",
                vault_id=_MISSING,
                title="dana",
                memory_type="chat",
                if_exists="return",
            )
    finally:
        await bg.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_concurrent_creates_of_one_title_with_if_exists_return_answer_one_vault_and_memory(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two servers on one database create the same titles at once: the create that loses answers the winner's."""
    db = str(tmp_path / "race.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    connections = [await connect("in-process", db=db).open() for _ in range(2)]
    try:
        for round_ in range(4):
            vaults = await asyncio.gather(
                *(c.call_json("create_vault", {"title": f"v{round_}", "if_exists": "return"}) for c in connections)
            )
            assert vaults[0] == vaults[1]
            memories = await asyncio.gather(
                *(
                    c.call_json(
                        "create_memory_in_vault",
                        {"vault_id": vaults[0]["vaultId"], "title": "m", "memory_type": "chat", "if_exists": "return"},
                    )
                    for c in connections
                )
            )
            assert memories[0] == memories[1]
        assert len(await connections[0].call_json("list_vaults")) == 4
    finally:
        for memory in connections:
            await memory.aclose()


class _Recorded:
    """A connection that records the tools called through it and can hide if_exists (as upstream's server lacks
    it)."""

    def __init__(self, inner: MemoryConnection, *, upstream: bool) -> None:
        self.inner, self.upstream, self.calls = inner, upstream, []

    def parameters(self, name: str) -> set[str]:
        declared = self.inner.parameters(name)
        return declared - {"if_exists"} if self.upstream else declared

    async def call_json(self, name: str, arguments: Any = None) -> Any:
        self.calls.append((name, sorted(arguments or {})))
        return await self.inner.call_json(name, arguments)


@pytest.mark.parametrize("upstream", [False, True])
async def test_ensure_uses_if_exists_only_where_the_server_declares_it(upstream: bool, tmp_path: Path) -> None:
    async with connect("in-process", db=str(tmp_path / "m.db")) as inner:
        memory = _Recorded(inner, upstream=upstream)
        vault_id = await ensure_vault(memory, "home")
        memory_id = await ensure_memory(memory, vault_id, "dana")
        assert await ensure_vault(memory, "home") == vault_id
        assert await ensure_memory(memory, vault_id, "dana") == memory_id
    if upstream:  # find first, create only what is missing, never an argument upstream lacks
        assert [name for name, _ in memory.calls] == [
            "list_vaults",
            "create_vault",
            "list_memories",
            "create_memory_in_vault",
            "list_vaults",
            "list_memories",
        ]
        assert all("if_exists" not in arguments for _, arguments in memory.calls)
    else:  # one call each: the server answers a taken title with what holds it
        assert [name for name, _ in memory.calls] == ["create_vault", "create_memory_in_vault"] * 2
        assert all("if_exists" in arguments for _, arguments in memory.calls)
