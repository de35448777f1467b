"""The HTTP server's exposure: no unauthenticated non-loopback bind, Host/Origin checks on every bind, searches
confined to the vault they name (the access model is in docs/ARCHITECTURE.md, "Access model")."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_faults import _free_port, _stop, _wait_for_port

from mycelian_agent.builder import connect
from mycelian_agent.memory_server import create_server
from mycelian_agent.memory_server.cli import main as server_main
from mycelian_agent.memory_server.testing import serve_http, server_command

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_a_non_loopback_bind_without_a_token_is_refused(host: str, tmp_path: Path, capsys) -> None:
    db = tmp_path / "m.db"
    assert server_main(["--transport", "http", "--host", host, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"refusing to serve on {host} without a token" in err and "--token" in err and "--insecure" in err
    assert not db.exists()


def test_serve_help_lists_the_server_options_and_serve_passes_the_exit_status(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "mycelian_agent.cli", "serve"]
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and all(
        f in helped.stdout for f in ("--transport", "--token", "--insecure", "--allowed-host", "--host", "--db")
    )
    refused = subprocess.run(
        [*run, "--transport", "http", "--host", "0.0.0.0", "--db", str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "refusing to serve" in refused.stderr


def test_host_and_origin_are_checked_on_a_wildcard_bind(tmp_path: Path) -> None:
    port, log = _free_port(), tmp_path / "server.log"
    command, args = server_command(
        tmp_path / "m.db",
        "--transport",
        "http",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--token",
        "s3cret",
        "--allowed-host",
        "memory.example.org",
    )
    with log.open("ab") as stderr:
        server = subprocess.Popen([command, *args], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_for_port(port, server)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "Authorization": "Bearer s3cret"}

        def post(**headers: str) -> int:
            return httpx.post(url, json=INIT, headers={**auth, **headers}, timeout=10).status_code

        assert post() == 200
        assert post(Host=f"localhost:{port}") == 200
        assert post(Host=f"{socket.gethostname()}:{port}") == 200  # this machine's name: bound to all of them
        assert post(Host="memory.example.org") == 200  # --allowed-host
        assert post(Host=f"evil.example:{port}") == 421  # DNS rebinding: a foreign name pointing at us
        assert post(Origin="http://evil.example") == 403  # a foreign web page's request
        assert post(Origin=f"http://127.0.0.1:{port}") == 200
        assert httpx.post(url, json=INIT, headers=HEADERS, timeout=10).status_code == 401  # no token
    finally:
        _stop(server)


async def test_a_search_over_http_is_confined_to_the_vault_it_names() -> None:
    async with serve_http(create_server(":memory:")) as url, connect(url, timeout=10) as memory:
        ids = {}
        for owner in ("alice", "bob"):
            vault = (await memory.call_json("create_vault", {"title": owner}))["vaultId"]
            mem = (
                await memory.call_json(
                    "create_memory_in_vault", {"vault_id": vault, "title": "notes", "memory_type": "NOTES"}
                )
            )["memoryId"]
            await memory.call_json(
                "add_entry",
                {"vault_id": vault, "memory_id": mem, "raw_entry": f"{owner} secret", "summary": f"{owner} secret"},
            )
            ids[owner] = (vault, mem)
        (alice_vault, alice_memory), (bob_vault, bob_memory) = ids["alice"], ids["bob"]
        found = await memory.call_json(
            "search_memories", {"vault_id": alice_vault, "memory_id": alice_memory, "query": "secret"}
        )
        assert [e["summary"] for e in found["entries"]] == ["alice secret"]
        with pytest.raises(Exception, match="needs vault_id"):  # upstream's form, without the vault
            await memory.call_json("search_memories", {"memory_id": bob_memory, "query": "secret"})
        with pytest.raises(Exception, match="not found in vault"):  # bob's memory through alice's vault
            await memory.call_json(
                "search_memories", {"vault_id": alice_vault, "memory_id": bob_memory, "query": "secret"}
            )
        for tool, args in (
            ("list_entries", {}),
            ("get_context", {}),
            ("add_entry", {"raw_entry": "x", "summary": "x"}),
            ("put_context", {"content": "x"}),
        ):
            with pytest.raises(Exception, match="not found in vault"):
                await memory.call_json(tool, {"vault_id": alice_vault, "memory_id": bob_memory, **args})
        assert json.dumps(await memory.call_json("list_entries", {"vault_id": bob_vault, "memory_id": bob_memory}))


async def test_a_wrong_token_is_reported_as_an_invalid_token() -> None:
    from mycelian_agent import MemoryServerError

    async with serve_http(create_server(":memory:"), token="right") as url:
        for token in ("wrong", None):
            with pytest.raises(MemoryServerError, match="^invalid token: .*Check --token") as info:
                async with connect(url, token=token, timeout=10):
                    pass
            assert "mozilla" not in str(info.value) and not info.value.transient
        async with connect(url, token="right", timeout=10) as memory:
            assert await memory.call_json("list_vaults") == []


def test_the_server_reports_its_own_version() -> None:
    from importlib.metadata import version

    options = create_server(":memory:")._mcp_server.create_initialization_options()
    assert (options.server_name, options.server_version) == ("mycelian-memory", version("mycelian-agent"))


ALICE, BOB, ADMIN = "alice-token-0123456789", "bob-token-0123456789ab", "admin-token-0123456789"


async def test_a_limited_token_sees_and_changes_only_its_own_vaults() -> None:
    tokens = {ALICE: frozenset({"alice"}), BOB: frozenset({"bob", "shared"})}
    async with (
        serve_http(create_server(":memory:"), token=ADMIN, tokens=tokens) as url,
        connect(url, token=ALICE, timeout=10) as alice,
        connect(url, token=BOB, timeout=10) as bob,
        connect(url, token=ADMIN, timeout=10) as admin,
    ):
        ids = {}
        for memory, owner in ((alice, "alice"), (bob, "bob"), (bob, "shared")):
            vault = (await memory.call_json("create_vault", {"title": owner}))["vaultId"]
            mem = (
                await memory.call_json(
                    "create_memory_in_vault", {"vault_id": vault, "title": "notes", "memory_type": "NOTES"}
                )
            )["memoryId"]
            await memory.call_json(
                "add_entry",
                {"vault_id": vault, "memory_id": mem, "raw_entry": f"{owner} secret", "summary": f"{owner} secret"},
            )
            ids[owner] = {"vault_id": vault, "memory_id": mem}
        with pytest.raises(Exception, match="may not create vault 'bob2': it is limited to the vaults alice"):
            await alice.call_json("create_vault", {"title": "bob2"})
        assert [v["title"] for v in await alice.call_json("list_vaults")] == ["alice"]
        assert [v["title"] for v in await bob.call_json("list_vaults")] == ["bob", "shared"]
        assert [v["title"] for v in await admin.call_json("list_vaults")] == ["alice", "bob", "shared"]
        # Bob's vault through Alice's token: exactly as a vault that does not exist, for every tool.
        for tool, args in (
            ("list_memories", {}),
            ("list_entries", {}),
            ("get_context", {}),
            ("search_memories", {"query": "secret"}),
            ("put_context", {"content": "x"}),
            ("add_entry", {"raw_entry": "x", "summary": "x"}),
            ("delete_memory", {}),
            ("await_consistency", {}),
        ):
            arguments = {**ids["bob"], **args}
            if tool == "list_memories":
                arguments.pop("memory_id")
            with pytest.raises(Exception, match=f"vault {ids['bob']['vault_id']} not found"):
                await alice.call_json(tool, arguments)
        with pytest.raises(Exception, match="await_consistency needs vault_id with this token"):
            await alice.call_json("await_consistency", {"memory_id": ids["bob"]["memory_id"]})
        found = await alice.call_json("search_memories", {**ids["alice"], "query": "secret"})
        assert [e["summary"] for e in found["entries"]] == ["alice secret"]
        assert (await admin.call_json("list_entries", ids["bob"]))["entries"][0]["summary"] == "bob secret"


def test_tokens_files_are_checked_with_the_file_and_the_problem(tmp_path: Path, capsys) -> None:
    from mycelian_agent.errors import ConfigError
    from mycelian_agent.memory_server.server.access import load_tokens_file

    path = tmp_path / "tokens.json"
    for content, problem in (
        ("{", "not JSON"),
        ('{"tokens": {}}', "at least one token"),
        ('{"tokens": {"short": "*"}}', "at least 16 characters"),
        (f'{{"tokens": {{"{ALICE}": []}}}}', "non-empty list of vault titles"),
        (f'{{"tokens": {{"{ALICE}": ["no spaces"]}}}}', "vault title must be 1-50 characters"),
    ):
        path.write_text(content)
        with pytest.raises(ConfigError, match=problem) as info:
            load_tokens_file(path)
        assert str(path) in str(info.value) and ALICE not in str(info.value)  # a token is never printed whole
    path.write_text(json.dumps({"tokens": {ALICE: ["alice"], ADMIN: "*"}}))
    assert load_tokens_file(path) == {ALICE: frozenset({"alice"}), ADMIN: None}
    assert server_main(["--transport", "http", "--tokens-file", str(tmp_path / "none.json")]) == 2
    assert "cannot read the tokens file" in capsys.readouterr().err
