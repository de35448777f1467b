"""What the ``mycelian-agent`` commands share: the consoles, the memory-server options (``--db``, ``--server``,
``--token``, ...) and opening a connection, a vault, a memory or a reader of it from them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from ..errors import MycelianError

if TYPE_CHECKING:
    from ..builder import ConnectionSettings

__all__ = [
    "connect",
    "console",
    "err_console",
    "find_vault",
    "memory_reader",
    "open_memory",
    "open_writer",
    "read_options",
    "server_options",
]

console = Console()
err_console = Console(stderr=True)


def server_options(func: Any) -> Any:
    """The options naming the memory server and vault, shared by every command that talks to one."""
    options = [
        click.option(
            "--db",
            envvar="MYCELIAN_DB",
            default=None,
            help="Database of the embedded memory server: a SQLite file or a postgresql://user@host/db URL "
            "(pip install 'mycelian-agent[postgres]') [env MYCELIAN_DB; default $XDG_DATA_HOME/mycelian/memory.db].",
        ),
        click.option(
            "--server",
            envvar="MYCELIAN_SERVER",
            default="embedded",
            show_default=True,
            help="'embedded', or a Mycelian server URL like http://127.0.0.1:11546/mcp [env MYCELIAN_SERVER].",
        ),
        click.option(
            "--token",
            envvar="MYCELIAN_TOKEN",
            default=None,
            help="Bearer token of a remote server [env MYCELIAN_TOKEN].",
        ),
        click.option(
            "--vault", default="mycelian", show_default=True, help="Vault title (created when missing) or id."
        ),
        click.option(
            "--timeout",
            default=60.0,
            show_default=True,
            type=click.FloatRange(min=0.1),
            help="Seconds each memory server call may take before it is retried.",
        ),
        click.option(
            "--reconnect-wait",
            default=30.0,
            show_default=True,
            type=click.FloatRange(min=0),
            help="Seconds to keep trying to reconnect to an HTTP memory server that went away (refused or "
            "dropped connections are seen at once), then fail.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


async def connect(
    db: str | None,
    server: str,
    token: str | None,
    timeout: float = 60.0,
    reconnect_wait: float = 30.0,
    dense: bool = False,
) -> Any:
    """An open connection for the read and edit commands; an embedded database must already exist (a mistyped
    --db is reported, not created). ``dense``: an embedded database is searched as its server would (dense + BM25
    when a dense model is installed)."""
    if server in ("embedded", "in-process"):
        from ..paths import default_db_path, is_postgres_url

        path = Path(db).expanduser() if db else default_db_path(os.environ)
        if path.is_dir():
            raise MycelianError(f"--db {path} is a folder, not a memory database file (e.g. --db {path / 'memory.db'})")
        if str(path) != ":memory:" and not is_postgres_url(str(db or "")) and not path.is_file():
            raise MycelianError(
                f"no memory database at {path}: check --db (or MYCELIAN_DB); `mycelian-agent replay` "
                "or `add` creates one"
            )
        if server == "embedded":  # the store itself, in this process: no MCP SDK or LangChain to load
            from ..memory_server import LocalConnection

            return LocalConnection.open(db if db and is_postgres_url(db) else str(path), dense=dense)
    from ..builder import ConnectionSettings, open_connection

    return await open_connection(
        ConnectionSettings.from_env(
            os.environ, server=server, db=db, token=token, timeout=timeout, reconnect_wait=reconnect_wait
        )
    ).open()


async def open_writer(settings: ConnectionSettings) -> Any:
    """An open connection for a command that writes without the agent (``add`` with the extractive model): the
    embedded database opened in this process (created when missing; no dense model: its new entries' vectors are left
    to the backlog), else the server ``settings`` names, over MCP."""
    if settings.server == "embedded":
        from ..memory_server import LocalConnection

        return LocalConnection.open(settings.prepared_database())
    from ..builder import open_connection

    return await open_connection(settings).open()


async def find_vault(connection: Any, vault: str) -> str:
    """The id of vault ``vault`` (a title or an id); an error listing the vaults when there is none."""
    vaults = await connection.call_json("list_vaults")
    for item in vaults:
        if vault in (item["title"], item["vaultId"]):
            return item["vaultId"]
    known = ", ".join(sorted(v["title"] for v in vaults)) or "none"
    raise MycelianError(f"vault {vault!r} not found (vaults: {known}); check --vault")


async def open_memory(
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    memory: str,
    timeout: float = 60.0,
    reconnect_wait: float = 30.0,
    dense: bool = False,
) -> tuple[Any, str, str]:
    """A connection (as :func:`connect`), the id of ``vault`` and the id of its memory ``memory`` (a title, a user
    id as the invoker takes it, e.g. ``bob@example.com``, or a memory id); an error listing the memories when there
    is none (the connection is then closed)."""
    connection = await connect(db, server, token, timeout, reconnect_wait, dense)
    try:
        vault_id = await find_vault(connection, vault)
        memories = {
            m["title"]: m["memoryId"] for m in await connection.call_json("list_memories", {"vault_id": vault_id})
        }
        if memory not in memories and memory not in memories.values():
            from ..recall import UserDirectory

            found = await UserDirectory(connection, vault_id, create=False).find(memory)
            if found is not None:
                return connection, vault_id, found
            known = ", ".join(sorted(memories)) or "none"
            raise MycelianError(f"memory {memory!r} not found in vault {vault!r} (memories: {known}); check --memory")
        return connection, vault_id, memories.get(memory, memory)
    except BaseException:
        await connection.aclose()
        raise


def read_options(func: Any) -> Any:
    """The QUERY argument and the options of the read commands (``search``, ``recall``)."""
    options: list[Callable[[Any], Any]] = [
        click.argument("query"),
        server_options,
        click.option("--memory", required=True, help="Memory title (a user) or id."),
        click.option("--after", default=None, help="Only entries said after this time (RFC 3339)."),
        click.option("--before", default=None, help="Only entries said before this time (RFC 3339)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        click.option(
            "--words-only", is_flag=True, help="Leave out entries found by meaning alone (no word shared with QUERY)."
        ),
        click.option(
            "--min-score",
            default=None,
            type=click.FloatRange(0.0, 1.0),
            help="Leave out entries whose relevance score (0-1) is below this; above 0.5 an entry holds "
            "words of QUERY.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


async def memory_reader(
    db: str | None, server: str, token: str | None, vault: str, memory: str, timeout: float, reconnect_wait: float
) -> Any:
    """A :class:`~mycelian_agent.recall.MemoryReader` of ``memory`` over the commands' connection (the same
    read code as ``invoker.asearch`` / ``arecall``)."""
    from ..recall import MemoryReader, UserDirectory

    connection, vault_id, memory_id = await open_memory(
        db, server, token, vault, memory, timeout, reconnect_wait, dense=True
    )
    return MemoryReader(
        connection, UserDirectory(connection, vault_id, create=False), default_memory_id=memory_id, default_user=memory
    )
