"""The memory server over its real transports: stdio (langchain-mcp-adapters), streamable HTTP (with and without a
bearer token), a SIGKILL between writes, and the command line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.cli import main
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.testing import BackgroundSession, call_json, serve_http, server_command
from mycelian_agent.paths import default_db_path

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(10, read=30)) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _text(result) -> str:
    return result[0]["text"] if isinstance(result, list) else result


async def test_stdio_session_through_langchain_mcp_adapters(tmp_path: Path) -> None:
    command, args = server_command(tmp_path / "memory.db")
    client = MultiServerMCPClient({"memory": {"transport": "stdio", "command": command, "args": args}})
    async with client.session("memory") as session:
        tools = {tool.name: tool for tool in await load_mcp_tools(session)}
        assert {"add_entry", "search_memories", "delete_memory"} <= set(tools)
        vault = json.loads(_text(await tools["create_vault"].ainvoke({"title": "stdio"})))
        memory = json.loads(
            _text(
                await tools["create_memory_in_vault"].ainvoke(
                    {"vault_id": vault["vaultId"], "title": "m", "memory_type": "NOTES"}
                )
            )
        )
        ids = dict(vault_id=vault["vaultId"], memory_id=memory["memoryId"])
        for i in range(3):
            entry = json.loads(
                _text(
                    await tools["add_entry"].ainvoke(
                        {
                            **ids,
                            "raw_entry": f"I bought {i} bicycles",
                            "summary": f"bought {i} bicycles",
                            "tags": {"role": "user"},
                            "idempotency_key": f"k{i}",
                        }
                    )
                )
            )
            assert entry["status"] == "stored"
        assert _text(await tools["await_consistency"].ainvoke({"memory_id": memory["memoryId"]})) == "consistent"
        found = json.loads(
            _text(await tools["search_memories"].ainvoke({"memory_id": memory["memoryId"], "query": "bicycles"}))
        )
        assert found["count"] == 3
        bad = {**ids, "raw_entry": "x", "summary": ""}
        call = {"name": "add_entry", "id": "call-1", "type": "tool_call", "args": bad}
        refused = await tools["add_entry"].ainvoke(call)
        assert refused.status == "error" and "summary must not be empty" in _text(refused.content)
    with contextlib.closing(Store.open(tmp_path / "memory.db")) as store:
        assert store.counts()["entries"] == 3


async def test_http_requires_the_bearer_token(tmp_path: Path) -> None:
    server = create_server(tmp_path / "memory.db", token="s3cret")
    async with serve_http(server) as url:
        async with httpx.AsyncClient() as raw:
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": "s3cret"},
                {"Authorization": "Basic s3cret"},
            ):
                response = await raw.post(url, json=INIT, headers={**MCP_HEADERS, **headers})
                assert response.status_code == 401, headers
                assert response.headers["www-authenticate"].startswith("Bearer")
            ok = await raw.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer s3cret"})
            assert ok.status_code == 200
        with pytest.raises(ExceptionGroup) as refused:  # the client cannot even initialise without the token
            async with http_session(url, token="wrong"):
                pass
        assert refused.group_contains(httpx.HTTPStatusError, match="401")
        async with http_session(url, token="s3cret") as session:
            vault = await call_json(session, "create_vault", title="http")
            assert (await call_json(session, "list_vaults")) == [vault]
            result = await session.call_tool("list_entries", {"vault_id": vault["vaultId"], "memory_id": "x"})
            assert result.isError and "memory_id must be a UUID" in result.content[0].text


async def test_http_without_token_shares_one_in_memory_database_across_sessions() -> None:
    async with serve_http(create_server(":memory:")) as url:
        async with http_session(url) as first:
            vault = await call_json(first, "create_vault", title="shared")
        async with http_session(url) as second:
            assert await call_json(second, "list_vaults") == [vault]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read().decode() if proc.stderr else ''}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("server did not start listening")


async def test_sigkill_between_writes_loses_no_acknowledged_write(tmp_path: Path) -> None:
    db, port = tmp_path / "memory.db", _free_port()
    command, args = server_command(db, "--transport", "http", "--port", str(port))
    acknowledged: list[str] = []

    with subprocess.Popen([command, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:

        def sigkill() -> None:  # no shutdown, no checkpoint: the WAL must carry the writes
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

        try:
            await _wait_for_port(port, proc)
            async with contextlib.AsyncExitStack() as stack:
                session = await stack.enter_async_context(http_session(f"http://127.0.0.1:{port}/mcp"))
                stack.callback(sigkill)  # on the way out, before the client closes its session (against a dead server)
                vault = (await call_json(session, "create_vault", title="crash"))["vaultId"]
                memory = (
                    await call_json(session, "create_memory_in_vault", vault_id=vault, title="m", memory_type="NOTES")
                )["memoryId"]
                for i in range(25):
                    entry = await call_json(
                        session,
                        "add_entry",
                        vault_id=vault,
                        memory_id=memory,
                        raw_entry=f"durable write {i}",
                        summary=f"write {i}",
                    )
                    acknowledged.append(entry["entryId"])
                context = await call_json(
                    session, "put_context", vault_id=vault, memory_id=memory, content="acknowledged context"
                )
        finally:
            if proc.poll() is None:  # a failure before the kill: do not leave the server running
                proc.kill()
    assert proc.returncode == -signal.SIGKILL and len(acknowledged) == 25
    bg = await BackgroundSession.start(create_server(db))  # the restart
    try:
        page = await call_json(bg.session, "list_entries", vault_id=vault, memory_id=memory, limit=50)
        assert {e["entryId"] for e in page["entries"]} == set(acknowledged)
        got = await call_json(bg.session, "search_memories", memory_id=memory, query="durable", top_ke=25)
        assert got["count"] == 25 and got["latestContextTimestamp"] == context["timestamp"]
        assert await bg.runner.call(lambda s: s.connection.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"
    finally:
        await bg.aclose()


def test_cli_defaults_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert default_db_path({"XDG_DATA_HOME": "/data"}) == Path("/data/mycelian/memory.db")
    assert default_db_path({}) == Path.home() / ".local/share/mycelian/memory.db"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--transport", "--host", "--port", "--db", "--token", "--sync"))
    assert out.startswith("Usage: mycelian-memory-server [OPTIONS]")
    # mycelian-memory-server is the serve command of the mycelian-agent tree, alone: the same flags.
    import click

    from mycelian_agent.cli import cli
    from mycelian_agent.memory_server.cli import embeddings_group, serve_command

    context = click.Context(cli)
    assert cli.get_command(context, "serve") is serve_command
    assert cli.get_command(context, "embeddings") is embeddings_group


def test_cli_passes_the_embeddings_options_to_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mycelian_agent.errors import ConfigError
    from mycelian_agent.memory_server.server import app

    seen: dict[str, object] = {}

    def refuse(db: str, **options: object) -> None:
        seen.update(options)
        raise ConfigError("stop here")

    monkeypatch.setattr(app, "create_server", refuse)
    monkeypatch.setenv("MYCELIAN_EMBEDDINGS_THREADS", "2")
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings", "--embeddings-model", "MiniLM"]) == 2
    assert "stop here" in capsys.readouterr().err
    assert (seen["embeddings"], seen["embeddings_model"], seen["embeddings_threads"]) == (True, "minilm", 2)
    monkeypatch.undo()
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings", "--embeddings-model", "bogus"]) == 2
    assert "unknown embeddings model 'bogus': use auto or one of e5-small, minilm" in capsys.readouterr().err


def test_cli_reports_an_unusable_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["--db", str(blocker / "memory.db")]) == 2
    assert "cannot open the memory database" in capsys.readouterr().err


def test_importing_the_package_is_light() -> None:
    code = (
        "import sys, mycelian_agent.memory_server as m; "
        "assert m.is_placeholder_context(m.PLACEHOLDER_CONTEXT); "
        "assert not any(n == 'mcp' or n.startswith(('mcp.', 'starlette', 'sqlite3')) for n in sys.modules), "
        "sorted(n for n in sys.modules if n.startswith(('mcp', 'starlette', 'sqlite3')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_embeddings_server_sets_its_encoder_threads_unless_told_otherwise(tmp_path: Path, monkeypatch) -> None:
    from mycelian_agent.memory_server.cli import main
    from mycelian_agent.memory_server.retrieval.dense.threads import OPENMP_SPIN_COUNT
    from mycelian_agent.memory_server.transport import stdio

    names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    seen: list[tuple[str | None, ...]] = []

    async def serve(server: object) -> None:
        seen.append(tuple(os.environ.get(name) for name in names))

    monkeypatch.setattr(stdio, "serve_stdio", serve)

    def clear() -> None:
        for name in names:
            monkeypatch.setenv(name, "unset-at-teardown")  # registers the restore of the variable's absence
            monkeypatch.delenv(name)

    clear()
    assert main(["--db", str(tmp_path / "m.db"), "--no-embeddings"]) == 0
    assert main(["--db", str(tmp_path / "m.db")]) == 0  # hybrid search is the default where a dense model is
    clear()
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings"]) == 0
    clear()
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the user's wait policy is kept, and no spin count overrides it
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings"]) == 0
    clear()
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings"]) == 0
    clear()
    # MiniLM's torch threads sleep at once, as measured for it (nothing is loaded before the first session).
    assert main(["--db", str(tmp_path / "m.db"), "--embeddings", "--embeddings-model", "minilm"]) == 0
    spin = (None, str(OPENMP_SPIN_COUNT))
    assert seen == [(None, None), spin, spin, ("PASSIVE", None), (None, "5"), ("PASSIVE", None)]
