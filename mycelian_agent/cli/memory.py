"""The commands on one memory server: ``list``, ``show``, ``search``, ``recall``, ``add``, ``get``, ``update``,
``history``, ``delete``, ``export``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.panel import Panel
from rich.table import Table

from ..errors import MycelianError
from ..paths import check_store_location
from .common import (
    connect,
    console,
    err_console,
    find_vault,
    memory_reader,
    open_memory,
    open_writer,
    read_options,
    server_options,
)

__all__ = ["add", "delete", "export", "get", "history", "list_", "recall", "search", "show", "update"]


@click.command()
@server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 50), help="Newest entries to show.")
def show(
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    limit: int,
) -> None:
    """Show a memory's newest entries and its current context document."""

    async def run() -> None:
        connection, vault_id, memory_id = await open_memory(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            ids = {"vault_id": vault_id, "memory_id": memory_id}
            listed = await connection.call_json("list_entries", {**ids, "limit": limit})
            context = await connection.call("get_context", ids)
        finally:
            await connection.aclose()
        table = Table(title=f"{memory}: newest {len(listed['entries'])} entries", show_lines=False)
        for column in ("time", "role", "summary", "message"):
            table.add_column(column, overflow="fold")
        for entry in reversed(listed["entries"]):
            raw = entry["rawEntry"]
            table.add_row(
                (entry.get("conversationTime") or entry["creationTime"])[:16],
                entry["tags"].get("role", ""),
                entry["summary"],
                raw if len(raw) <= 120 else raw[:117] + "...",
            )
        console.print(table)
        from rich.markdown import Markdown  # markdown-it takes ~0.2 s to import: only `show` needs it

        console.print(Panel(Markdown(context), title="context document"))

    asyncio.run(run())


@click.command()
@read_options
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, 100), help="Entries to return.")
def search(
    query: str,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    after: str | None,
    before: str | None,
    as_json: bool,
    words_only: bool,
    min_score: float | None,
    top_k: int,
) -> None:
    """Search a memory: its entries ranked for QUERY. The score column is each entry's relevance, 0 to 1 (the
    share of QUERY's informative words it holds; at most 0.5 for one found by meaning alone); the match column
    says whether QUERY's words found an entry or only its meaning did (with embeddings, the nearest entries come
    back even when none shares a word)."""

    async def run() -> list[Any]:
        reader = await memory_reader(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            return await reader.asearch(
                query, top_k=top_k, after=after, before=before, by_meaning=not words_only, min_score=min_score
            )
        finally:
            await reader.connection.aclose()

    hits = asyncio.run(run())
    from ..recall.hits import pending_note

    note = pending_note(getattr(hits, "pending_vectors", 0))
    if note:  # on stderr: the JSON on stdout keeps its shape
        err_console.print(f"note: {note}", soft_wrap=True)
    if as_json:
        click.echo(json.dumps([hit.as_dict() for hit in hits], indent=2, ensure_ascii=False))
        return
    if not hits:
        above = f" with a score of at least {min_score:g}" if min_score is not None else ""
        console.print(f"no entry of memory {memory!r} matches {query!r}{above}")
        return
    if all(hit.by_meaning for hit in hits):
        console.print(
            f"no entry of memory {memory!r} shares a word with {query!r}; the nearest by meaning "
            "(they may be unrelated):"
        )
    table = Table(title=f"search: {query}")
    for column in ("score", "match", "time", "speaker", "message"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        table.add_row(f"{hit.score:.2f}", hit.match or "", (hit.time or "")[:16], hit.speaker or "", hit.text)
    console.print(table)


@click.command()
@read_options
@click.option(
    "--budget-tokens",
    default=1500,
    show_default=True,
    type=click.IntRange(min=40),
    help="Size of the block (estimated tokens).",
)
@click.option("--top-k", default=10, show_default=True, type=click.IntRange(1, 100), help="Entries searched.")
def recall(
    query: str,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    after: str | None,
    before: str | None,
    as_json: bool,
    words_only: bool,
    min_score: float | None,
    budget_tokens: int,
    top_k: int,
) -> None:
    """Print the block a chat pipeline would put into its prompt for QUERY: the context document's relevant items
    and the best entries with their neighbouring turns, dated, in time order (``invoker.arecall``)."""

    async def run() -> Any:
        reader = await memory_reader(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            return await reader.arecall(
                query,
                budget_tokens=budget_tokens,
                top_k=top_k,
                after=after,
                before=before,
                by_meaning=not words_only,
                min_score=min_score,
            )
        finally:
            await reader.connection.aclose()

    found = asyncio.run(run())
    click.echo(json.dumps(found.as_dict(), indent=2, ensure_ascii=False) if as_json else found.as_prompt(), nl=False)


@click.command(name="list")
@server_options
def list_(db: str | None, server: str, token: str | None, vault: str, timeout: float, reconnect_wait: float) -> None:
    """List the vaults and their memories (titles and ids); --vault shows one vault."""

    async def run() -> list[tuple[str, str, list[dict[str, Any]]]]:
        from ..recall.names import described_labels, is_encoded

        connection = await connect(db, server, token, timeout, reconnect_wait)
        try:
            vaults = await connection.call_json("list_vaults")
            if vault != "mycelian":  # a vault named: only that one (the default lists them all)
                chosen = await find_vault(connection, vault)
                vaults = [v for v in vaults if v["vaultId"] == chosen]
            listed = [
                (v["title"], v["vaultId"], await connection.call_json("list_memories", {"vault_id": v["vaultId"]}))
                for v in vaults
            ]
            for _, vault_id, memories in listed:  # an encoded title: its user id as given, from its description
                for item in memories:
                    if is_encoded(item["title"]):
                        found = await connection.call_json(
                            "get_memory", {"vault_id": vault_id, "memory_id": item["memoryId"]}
                        )
                        labels = described_labels(str(found.get("description") or ""))
                        item["labels"] = labels
            return listed
        finally:
            await connection.aclose()

    table = Table(title="vaults and memories")
    for column in ("vault", "memory", "user / namespace", "memory id"):
        table.add_column(column, overflow="fold")
    for title, vault_id, memories in asyncio.run(run()):
        table.add_row(f"{title} ({vault_id})", "", "", "")
        for item in memories:
            labels = item.get("labels")
            shown = "" if not labels else labels[0] if len(labels) == 1 else repr(labels)
            table.add_row("", item["title"], shown, item["memoryId"])
    console.print(table)


@click.command()
@click.argument("text")
@server_options
@click.option("--memory", required=True, help="Memory title (created when missing) or id.")
@click.option("--role", default="user", show_default=True, type=click.Choice(["user", "assistant"]))
@click.option("--name", default=None, help="Who spoke (e.g. Caroline).")
@click.option("--time", "when", default=None, help="When it was said (RFC 3339, e.g. 2024-05-01T10:00:00Z).")
@click.option(
    "--model",
    envvar="MYCELIAN_MODEL",
    default="extractive",
    show_default=True,
    help="'extractive' (no network) or 'openai:<model>' [env MYCELIAN_MODEL].",
)
def add(
    text: str,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    role: str,
    name: str | None,
    when: str | None,
    model: str,
) -> None:
    """Store one message TEXT in a memory (summary and tags written by the model) and print the entry.

    With the extractive model the entry is written without the agent (the same entry, a fraction of the time);
    against the embedded database its vector is left to the backlog (written by the next hybrid server that opens
    the database, by a search of the memory, which embeds a few missing vectors itself, or by ``mycelian-agent
    embeddings backfill``): a one-shot command does not load the dense model to store one message."""
    local = server in ("embedded", "in-process")
    if local:
        check_store_location(db, "--db", "memory database", "memory.db")
    from ..builder import ConnectionSettings
    from ..models.extractive import is_extractive

    connection = ConnectionSettings.from_env(
        os.environ,
        server=server,
        db=db,
        token=token,
        timeout=timeout,
        reconnect_wait=reconnect_wait,
        embeddings=False if local else None,
    )
    thread = f"cli-{memory}"  # each add is the first message of this thread, as the agent's in-memory state has it

    async def one_shot() -> list[Any]:
        from ..agent.oneshot import astore_message, check_message
        from ..builder import ensure_memory, ensure_vault, is_uuid
        from ..recall import UserDirectory

        message = check_message(role, text, when, name=name)  # before anything is created
        writer = await open_writer(connection)
        try:
            ids = {"vault_id": await ensure_vault(writer, vault)}
            # --memory is a user as build_agent(memory=...) takes it (any id), or a memory id
            ids["memory_id"] = (
                await ensure_memory(writer, ids["vault_id"], memory)
                if is_uuid(memory)
                else await UserDirectory(writer, ids["vault_id"]).memory_id(memory, create=True)
            )
            stored = await astore_message(writer, ids["vault_id"], ids["memory_id"], thread, message)
            return [await writer.call_json("get_entry", {**ids, "entry_id": e}) for e in stored]
        finally:
            await writer.aclose()

    async def by_agent() -> list[Any]:
        from ..builder import build_agent

        async with build_agent(model, connection=connection, vault=vault, memory=memory) as invoker:
            result = await invoker.aprocess_conversation_message(role, text, thread, when, name=name)
            ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
            return [await invoker.connection.call_json("get_entry", {**ids, "entry_id": e}) for e in result.entry_ids]

    for entry in asyncio.run(one_shot() if is_extractive(model) else by_agent()):
        click.echo(json.dumps(entry, indent=2, ensure_ascii=False))


def _entry_id(entry_id: str) -> str:
    from ..recall.lifecycle import check_entry_id

    return check_entry_id(entry_id)


async def _entry_tool(
    tool: str,
    entry_id: str,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    memory: str,
    timeout: float,
    reconnect_wait: float,
) -> Any:
    """The answer of ``tool`` (``get_entry``, ``list_entry_versions``) on one entry of ``memory``."""
    connection, vault_id, memory_id = await open_memory(db, server, token, vault, memory, timeout, reconnect_wait)
    try:
        return await connection.call_json(tool, {"vault_id": vault_id, "memory_id": memory_id, "entry_id": entry_id})
    finally:
        await connection.aclose()


def _entry_command(name: str, tool: str, summary: str) -> click.Command:
    """A command printing the JSON answer of ``tool`` on one entry (ENTRY_ID) of ``--memory``."""

    @click.command(name=name, help=summary)
    @click.argument("entry_id")
    @server_options
    @click.option("--memory", required=True, help="Memory title or id.")
    def command(
        entry_id: str,
        db: str | None,
        server: str,
        token: str | None,
        vault: str,
        timeout: float,
        reconnect_wait: float,
        memory: str,
    ) -> None:
        found = asyncio.run(
            _entry_tool(tool, _entry_id(entry_id), db, server, token, vault, memory, timeout, reconnect_wait)
        )
        click.echo(json.dumps(found, indent=2, ensure_ascii=False))

    return command


get = _entry_command(
    "get",
    "get_entry",
    "Print one entry of a memory (ENTRY_ID: its id, as search --json, export or add print it) as JSON.",
)
history = _entry_command(
    "history",
    "list_entry_versions",
    "Print every version of one entry (ENTRY_ID), oldest first (the current one last), as JSON.",
)


@click.command()
@click.argument("entry_id")
@click.argument("text")
@server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option(
    "--model",
    envvar="MYCELIAN_MODEL",
    default="extractive",
    show_default=True,
    help="'extractive' (no network) or 'openai:<model>' [env MYCELIAN_MODEL].",
)
def update(
    entry_id: str,
    text: str,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    model: str,
) -> None:
    """Correct one entry: TEXT becomes its new version (same id; summary and tags written by the model, as for
    add). The old version leaves search and recall and stays in `history`. Prints the entry as now stored."""
    entry_id = _entry_id(entry_id)
    # The memory and the entry must exist before a model is loaded (and before build_agent, which would create a
    # missing memory by its first write).
    asyncio.run(_entry_tool("get_entry", entry_id, db, server, token, vault, memory, timeout, reconnect_wait))
    from ..builder import ConnectionSettings, build_agent

    local = server in ("embedded", "in-process")
    connection = ConnectionSettings.from_env(
        os.environ,
        server=server,
        db=db,
        token=token,
        timeout=timeout,
        reconnect_wait=reconnect_wait,
        embeddings=False if local else None,
    )

    async def run() -> Any:
        async with build_agent(model, connection=connection, vault=vault, memory=memory) as invoker:
            await invoker.aupdate(entry_id, text)
            ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
            return await invoker.connection.call_json("get_entry", {**ids, "entry_id": entry_id})

    click.echo(json.dumps(asyncio.run(run()), indent=2, ensure_ascii=False))


@click.command()
@server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option(
    "--entry", "entry_id", default=None, help="Delete only this entry (its id); without it, the whole memory."
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    entry_id: str | None,
    yes: bool,
) -> None:
    """Delete one entry of a memory (--entry), or the whole memory with its entries and context."""
    what = f"entry {entry_id} of memory {memory!r}" if entry_id else f"memory {memory!r} with all its entries"

    async def run() -> Any:
        connection, vault_id, memory_id = await open_memory(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            ids = {"vault_id": vault_id, "memory_id": memory_id}
            if entry_id:  # the entry must exist before anyone is asked to confirm its deletion
                await connection.call_json("get_entry", {**ids, "entry_id": entry_id})
            if not yes:
                if not sys.stdin.isatty():
                    raise MycelianError(f"not deleting {what}: there is no terminal to confirm on; pass --yes")
                click.confirm(f"Delete {what}?", abort=True)
            if entry_id:
                return await connection.call_json("delete_entry", {**ids, "entry_id": entry_id})
            return await connection.call_json("delete_memory", ids)
        finally:
            await connection.aclose()

    click.echo(json.dumps(asyncio.run(run())))


@click.command()
@server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the JSON here (default: standard output).",
)
def export(
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str,
    out: Path | None,
) -> None:
    """Export a memory as JSON: the memory, its context document and every entry, oldest first."""

    async def run() -> dict[str, Any]:
        connection, vault_id, memory_id = await open_memory(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            ids = {"vault_id": vault_id, "memory_id": memory_id}
            entries: list[dict[str, Any]] = []
            page = await connection.call_json("list_entries", {**ids, "limit": 50, "after": "0001-01-01T00:00:00Z"})
            while True:
                entries += page["entries"]
                if not page.get("next_after"):
                    break
                page = await connection.call_json("list_entries", {**ids, "limit": 50, "after": page["next_after"]})
            from ..placeholder import is_placeholder_context

            context = await connection.call("get_context", ids)
            return {
                "vault": {"vaultId": vault_id, "title": vault},
                "memory": await connection.call_json("get_memory", ids),
                "context": "" if is_placeholder_context(context) else context,
                "entries": entries,
            }
        finally:
            await connection.aclose()

    if out is not None and not out.parent.is_dir():
        raise MycelianError(f"cannot write --out {out}: the folder {out.parent} does not exist")
    text = json.dumps(asyncio.run(run()), indent=2, ensure_ascii=False)
    if out is None:
        click.echo(text)
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise MycelianError(f"cannot write --out {out}: {exc.strerror or exc}") from None
    err_console.print(f"exported to {out}")
