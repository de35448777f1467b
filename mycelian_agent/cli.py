"""The ``mycelian-agent`` command: replay conversations into memory, add, list, show, search, export and delete,
serve it.

Configuration comes from flags, with environment-variable fallbacks (``MYCELIAN_DB``, ``MYCELIAN_SERVER``,
``MYCELIAN_TOKEN``, ``MYCELIAN_MODEL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``); nothing deeper reads the
environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import MycelianError
from .paths import check_store_location

__all__ = ["checkpointer_spec", "cli", "main"]

console = Console()
err_console = Console(stderr=True)


def _server_options(func: Any) -> Any:
    options = [
        click.option("--db", envvar="MYCELIAN_DB", default=None,
                     help="Database of the embedded memory server: a SQLite file or a postgresql://user@host/db URL "
                     "(pip install 'mycelian-agent[postgres]') [env MYCELIAN_DB; default $XDG_DATA_HOME/mycelian/memory.db]."),
        click.option("--server", envvar="MYCELIAN_SERVER", default="embedded", show_default=True,
                     help="'embedded', or a Mycelian server URL like http://127.0.0.1:11546/mcp [env MYCELIAN_SERVER]."),
        click.option("--token", envvar="MYCELIAN_TOKEN", default=None, help="Bearer token of a remote server [env MYCELIAN_TOKEN]."),
        click.option("--vault", default="mycelian", show_default=True, help="Vault title (created when missing) or id."),
        click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0.1),
                     help="Seconds each memory server call may take before it is retried."),
        click.option("--reconnect-wait", default=30.0, show_default=True, type=click.FloatRange(min=0),
                     help="Seconds to keep trying to reconnect to an HTTP memory server that went away (refused or "
                     "dropped connections are seen at once), then fail."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mycelian-agent")
def cli() -> None:
    """Long-term memory for chat pipelines: a LangGraph memory agent over a Mycelian-compatible MCP server."""


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_server_options
@click.option("--memory", default=None, help="Memory title or id for every conversation "
              "(default: one memory per conversation, titled after its id).")
@click.option("--model", envvar="MYCELIAN_MODEL", default="extractive", show_default=True,
              help="'extractive' (no network) or 'openai:<model>' [env MYCELIAN_MODEL].")
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="API key of an openai: model [env OPENAI_API_KEY].")
@click.option("--base-url", envvar="OPENAI_BASE_URL", default=None,
              help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 [env OPENAI_BASE_URL].")
@click.option("--tool-choice", "tool_choice", envvar="MYCELIAN_TOOL_CHOICE", default="named", show_default=True,
              type=click.Choice(["named", "required", "auto"]),
              help="How the tool call is forced: 'named' (OpenAI's form), 'required' (llama.cpp's server and other "
              "endpoints that ignore the named form), 'auto' [env MYCELIAN_TOOL_CHOICE].")
@click.option("--max-tokens", envvar="MYCELIAN_MAX_TOKENS", default=None, type=click.IntRange(min=1),
              help="Completion token limit of an openai: model [env MYCELIAN_MAX_TOKENS].")
@click.option("--model-timeout", default=120.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds an openai: model call may take; a timeout, HTTP 429 or 5xx is retried, then the "
              "extractive model writes the step.")
@click.option("--flush-every", default=6, show_default=True, type=click.IntRange(min=1),
              help="Write the context document every N messages of a conversation.")
@click.option("--batch", "batch_size", default=1, show_default=True, type=click.IntRange(min=1),
              help="Batched mode: messages are accepted at once and one model call writes N of them (and the rest "
              "at each flush and session end); 1 = one model call per message.")
@click.option("--state", default=None,
              help="Checkpoints: a SQLite file or a postgresql:// URL (shared by workers on many hosts); an "
              "interrupted replay resumes from it when run again.")
@click.option("--shard", default=None, metavar="I/N",
              help="Replay only shard I of N (0-based; conversations split by sorted id): run 0/N ... N-1/N on "
              "several processes or hosts against one Postgres --db and --state.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Replay in N worker processes (shards 0/N ... N-1/N of this command's conversations).")
@click.option("--thread-wait", default=None, type=click.FloatRange(min=0), metavar="SECONDS",
              help="With --state: wait up to SECONDS for another process writing the same conversation "
              "(default: fail at once, naming it).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(files: tuple[Path, ...], db: str | None, server: str, token: str | None, vault: str, timeout: float,
           reconnect_wait: float, memory: str | None, model: str, api_key: str | None, base_url: str | None,
           tool_choice: str, max_tokens: int | None, model_timeout: float, flush_every: int, batch_size: int,
           state: str | None, shard: str | None, workers: int, thread_wait: float | None, as_json: bool) -> None:
    """Replay conversation FILES into memory and print what was stored.

    Accepted files: {"messages": [...]}, {"sessions": [...]}, LongMemEval records and LoCoMo samples. Every
    file is checked before anything is stored. Re-running is safe: each message is stored exactly once.
    """
    from .benchmarks import parse_shard
    from .conversations.formats import load_conversations

    parsed = parse_shard(shard)
    if parsed is not None and workers > 1:
        raise click.UsageError("--shard and --workers do not combine: use one (--workers N runs shards 0/N..N-1/N)")
    options = dict(db=db, server=server, token=token, vault=vault, memory=memory, model=model, api_key=api_key,
                   base_url=base_url, flush_every=flush_every, state=state, tool_choice=tool_choice,
                   max_tokens=max_tokens, batch_size=batch_size, timeout=timeout, reconnect_wait=reconnect_wait,
                   model_timeout=model_timeout, thread_wait=thread_wait)
    conversations = [c for path in files for c in load_conversations(path)]
    if server in ("embedded", "in-process"):
        check_store_location(db, "--db", "memory database", "memory.db")
    check_store_location(state, "--state", "checkpoint", "state.db")
    if workers > 1:
        stats = _replay_in_workers([str(p) for p in files], workers, options)
    else:
        conversations = _shard(conversations, parsed)
        total = sum(c.message_count for c in conversations)
        stats = asyncio.run(_replay(conversations, total, **options))  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps(stats.as_dict(), indent=2))
        return
    table = Table(title="Replay summary", show_header=False)
    usage = stats.usage
    shown = ", ".join(stats.memories[:5]) + (f" and {len(stats.memories) - 5} more" if len(stats.memories) > 5 else "")
    rows = [("conversations", stats.conversations), (f"memories (vault {vault})", shown),
            ("messages stored (batched: accepted)", stats.messages),
            ("messages written (batched: incl. accepted earlier)", stats.written),
            ("already stored (resumed)", stats.skipped), ("entries written", stats.entries),
            ("deduplicated retries", stats.deduplicated), ("context documents written", stats.contexts),
            ("model calls", usage.llm_calls), ("prompt / completion tokens", f"{usage.prompt_tokens} / {usage.completion_tokens}"),
            ("corrections / fallbacks", f"{usage.corrections} / {usage.fallbacks}"),
            ("retries: memory server / model", f"{usage.retries} / {usage.model_retries}"),
            ("memory server reconnections", stats.reconnects),
            ("elapsed", f"{stats.elapsed_s:.2f} s ({stats.messages_per_s:.0f} messages/s)")]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    for error in stats.errors[:10]:
        err_console.print(f"[yellow]recovered:[/] {escape(str(error))}", soft_wrap=True)


def _shard(conversations: list[Any], shard: tuple[int, int] | None) -> list[Any]:
    from .benchmarks import select_items

    return select_items(conversations, lambda c: c.conversation_id, shard=shard)


def checkpointer_spec(state: str | Path | None) -> str:
    """The checkpointer of ``--state``: a postgresql:// URL as is, a file as ``sqlite:FILE``, none in memory."""
    from mycelian_agent.memory_server.storage import is_postgres_url

    if not state:
        return "memory"
    return str(state) if is_postgres_url(str(state)) else f"sqlite:{state}"


async def _replay(conversations: list[Any], total: int, *, db: str | None, server: str, token: str | None, vault: str,
                  memory: str | None, model: str, api_key: str | None, base_url: str | None, flush_every: int,
                  state: str | Path | None, tool_choice: str = "named", max_tokens: int | None = None,
                  batch_size: int = 1, timeout: float | None = 60.0, reconnect_wait: float = 30.0,
                  model_timeout: float | None = 120.0, thread_wait: float | None = None, quiet: bool = False) -> Any:
    from .builder import ConnectionSettings, build_agent, ensure_memory
    from .conversations.formats import valid_title
    from .agent.invoker import MycelianAgentInvoker
    from .conversations.replay import ReplayStats, replay_conversation

    stats = ReplayStats()
    if not conversations:
        return stats
    checkpointer = checkpointer_spec(state)
    first_memory = memory or valid_title(conversations[0].conversation_id)
    connection = ConnectionSettings.from_env(os.environ, server=server, db=db, token=token, timeout=timeout,
                                             reconnect_wait=reconnect_wait)
    async with build_agent(model, connection=connection, vault=vault, memory=first_memory,
                           checkpointer=checkpointer, flush_every=flush_every, api_key=api_key,
                           base_url=base_url, tool_choice_mode=tool_choice,  # type: ignore[arg-type]
                           max_tokens=max_tokens, batch_size=batch_size, model_timeout=model_timeout,
                           thread_wait=thread_wait) as invoker:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[rate]} msg/s"), TimeElapsedColumn(),
                      console=err_console, transient=False,
                      disable=quiet or not err_console.is_terminal) as progress:
            task = progress.add_task("replaying", total=total, rate="-")
            try:
                for conversation in conversations:
                    target = invoker
                    if memory is None and conversation is not conversations[0]:
                        memory_id = await ensure_memory(invoker.connection, invoker.agent.vault_id,
                                                        valid_title(conversation.conversation_id))
                        target = MycelianAgentInvoker(invoker.agent.with_memory(invoker.agent.vault_id, memory_id),
                                                      flush_every, leases=invoker.leases,
                                                      thread_wait=invoker.thread_wait)
                    title = memory or valid_title(conversation.conversation_id)
                    if title not in stats.memories:
                        stats.memories.append(title)
                    before = stats.skipped
                    progress.update(task, description=conversation.conversation_id)

                    def tick(result: Any) -> None:
                        progress.advance(task, len(result.accepted))
                        elapsed = progress.tasks[0].elapsed or 0
                        progress.update(task, rate=f"{stats.messages / elapsed:.0f}" if elapsed else "-")

                    await replay_conversation(target, conversation, stats=stats, on_message=tick)
                    progress.advance(task, stats.skipped - before)
                    stats.reconnects = getattr(invoker.connection, "reconnects", 0)
            except (KeyboardInterrupt, asyncio.CancelledError):
                # The message in flight counts when the server acknowledged its entry before the interruption.
                stored = stats.messages + invoker.agent.unfinished_writes()
                err_console.print(f"[red]interrupted[/] after {stored} messages stored this run; "
                                  + ("run the same command again to resume." if state else
                                     "run again to finish (stored messages are deduplicated; pass --state to skip them)."))
                raise
    return stats


def _replay_worker(files: list[str], shard: tuple[int, int], options: dict[str, Any], results: Any) -> None:
    """One worker process of ``replay --workers``: its shard of the files' conversations, stats to ``results``."""
    from .conversations.formats import load_conversations

    conversations = _shard([c for path in files for c in load_conversations(Path(path))], shard)
    total = sum(c.message_count for c in conversations)
    try:
        stats = asyncio.run(_replay(conversations, total, **options, quiet=True))
    except Exception as exc:  # reported by the parent; a traceback per worker would bury the message
        results.put((shard[0], None, f"{type(exc).__name__}: {exc}"))
        sys.exit(1)
    results.put((shard[0], stats, None))


def _replay_in_workers(files: list[str], workers: int, options: dict[str, Any]) -> Any:
    """Run ``replay`` as ``workers`` processes, shard k/N each; their stats summed (elapsed: the wall time)."""
    import multiprocessing
    import time

    from .conversations.replay import ReplayStats

    # spawn, not fork: each worker starts clean (no inherited event loop, threads or open connections).
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    started = time.perf_counter()
    processes = [context.Process(target=_replay_worker, args=(files, (k, workers), options, results),
                                 name=f"replay-{k}/{workers}") for k in range(workers)]
    for process in processes:
        process.start()
    reports: dict[int, tuple[Any, str | None]] = {}
    try:
        while len(reports) < workers and (any(p.is_alive() for p in processes) or not results.empty()):
            try:
                index, stats, error = results.get(timeout=0.5)
            except Exception:  # queue.Empty: poll the processes again
                continue
            reports[index] = (stats, error)
    finally:
        for process in processes:
            process.join()
        results.close()
    failed = [f"worker {k}/{workers}: " + (reports[k][1] if k in reports else f"exit code {processes[k].exitcode}")
              for k in range(workers) if k not in reports or reports[k][1] is not None]
    if failed:
        resume = "run the same command again to resume" if options.get("state") else "run again to finish"
        raise MycelianError("; ".join(failed) + f" ({resume}: stored messages are not stored twice)")
    total = ReplayStats()
    for stats, _ in reports.values():
        for name in ("conversations", "messages", "written", "skipped", "entries", "deduplicated", "contexts",
                     "sessions", "reconnects"):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        total.usage += stats.usage
        total.errors.extend(stats.errors)
        total.memories.extend(m for m in stats.memories if m not in total.memories)
    total.elapsed_s = time.perf_counter() - started
    return total


async def _connect(db: str | None, server: str, token: str | None, timeout: float = 60.0,
                   reconnect_wait: float = 30.0, dense: bool = False) -> Any:
    """An open connection for the read and edit commands; an embedded database must already exist (a mistyped
    --db is reported, not created). ``dense``: an embedded database is searched as its server would (dense + BM25
    when a dense model is installed)."""
    if server in ("embedded", "in-process"):
        from mycelian_agent.memory_server.storage import is_postgres_url
        from .memory_server.cli import default_db_path

        path = Path(db).expanduser() if db else default_db_path(os.environ)
        if path.is_dir():
            raise MycelianError(f"--db {path} is a folder, not a memory database file (e.g. --db {path / 'memory.db'})")
        if str(path) != ":memory:" and not is_postgres_url(str(db or "")) and not path.is_file():
            raise MycelianError(f"no memory database at {path}: check --db (or MYCELIAN_DB); `mycelian-agent replay` "
                                "or `add` creates one")
        if server == "embedded":  # the store itself, in this process: no MCP SDK or LangChain to load
            from mycelian_agent.memory_server.server.local import LocalConnection

            return LocalConnection.open(db if is_postgres_url(str(db or "")) else str(path),  # type: ignore[arg-type]
                                        dense=dense)
    from .builder import ConnectionSettings, open_connection

    return await open_connection(ConnectionSettings.from_env(os.environ, server=server, db=db, token=token,
                                                             timeout=timeout, reconnect_wait=reconnect_wait)).open()


async def _vault_id(connection: Any, vault: str) -> str:
    """The id of vault ``vault`` (a title or an id); an error listing the vaults when there is none."""
    vaults = await connection.call_json("list_vaults")
    for item in vaults:
        if vault in (item["title"], item["vaultId"]):
            return item["vaultId"]
    known = ", ".join(sorted(v["title"] for v in vaults)) or "none"
    raise MycelianError(f"vault {vault!r} not found (vaults: {known}); check --vault")


async def _open(db: str | None, server: str, token: str | None, vault: str, memory: str, timeout: float = 60.0,
                reconnect_wait: float = 30.0, dense: bool = False) -> tuple[Any, str, str]:
    connection = await _connect(db, server, token, timeout, reconnect_wait, dense)
    try:
        vault_id = await _vault_id(connection, vault)
        memories = {m["title"]: m["memoryId"] for m in await connection.call_json("list_memories", {"vault_id": vault_id})}
        if memory not in memories and memory not in memories.values():
            known = ", ".join(sorted(memories)) or "none"
            raise MycelianError(f"memory {memory!r} not found in vault {vault!r} (memories: {known}); check --memory")
        return connection, vault_id, memories.get(memory, memory)
    except BaseException:
        await connection.aclose()
        raise


@cli.command()
@_server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 50), help="Newest entries to show.")
def show(db: str | None, server: str, token: str | None, vault: str, timeout: float, reconnect_wait: float, memory: str,
         limit: int) -> None:
    """Show a memory's newest entries and its current context document."""

    async def run() -> None:
        connection, vault_id, memory_id = await _open(db, server, token, vault, memory, timeout, reconnect_wait)
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
            table.add_row((entry.get("conversationTime") or entry["creationTime"])[:16], entry["tags"].get("role", ""),
                          entry["summary"], raw if len(raw) <= 120 else raw[:117] + "...")
        console.print(table)
        from rich.markdown import Markdown  # markdown-it takes ~0.2 s to import: only `show` needs it

        console.print(Panel(Markdown(context), title="context document"))

    asyncio.run(run())


def _read_options(func: Any) -> Any:
    options = [
        click.argument("query"),
        _server_options,
        click.option("--memory", required=True, help="Memory title (a user) or id."),
        click.option("--after", default=None, help="Only entries said after this time (RFC 3339)."),
        click.option("--before", default=None, help="Only entries said before this time (RFC 3339)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


async def _reader(db: str | None, server: str, token: str | None, vault: str, memory: str, timeout: float,
                  reconnect_wait: float) -> Any:
    """A :class:`~mycelian_agent.recall.MemoryReader` of ``memory`` over the commands' connection (the same
    read code as ``invoker.asearch`` / ``arecall``)."""
    from .recall import MemoryReader, UserDirectory

    connection, vault_id, memory_id = await _open(db, server, token, vault, memory, timeout, reconnect_wait,
                                                  dense=True)
    return MemoryReader(connection, UserDirectory(connection, vault_id, create=False), default_memory_id=memory_id,
                        default_user=memory)


@cli.command()
@_read_options
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, 25), help="Entries to return.")
def search(query: str, db: str | None, server: str, token: str | None, vault: str, timeout: float,
           reconnect_wait: float, memory: str, after: str | None, before: str | None, as_json: bool,
           top_k: int) -> None:
    """Search a memory: its entries ranked for QUERY."""

    async def run() -> list[Any]:
        reader = await _reader(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            return await reader.asearch(query, top_k=top_k, after=after, before=before)
        finally:
            await reader.connection.aclose()

    hits = asyncio.run(run())
    if as_json:
        click.echo(json.dumps([hit.as_dict() for hit in hits], indent=2, ensure_ascii=False))
        return
    if not hits:
        console.print(f"no entry of memory {memory!r} matches {query!r}")
        return
    table = Table(title=f"search: {query}")
    for column in ("score", "time", "speaker", "message"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        table.add_row(f"{hit.score:.3g}", (hit.time or "")[:16], hit.speaker or "", hit.text)
    console.print(table)


@cli.command()
@_read_options
@click.option("--budget-tokens", default=1500, show_default=True, type=click.IntRange(min=40),
              help="Size of the block (estimated tokens).")
@click.option("--top-k", default=10, show_default=True, type=click.IntRange(1, 25), help="Entries searched.")
def recall(query: str, db: str | None, server: str, token: str | None, vault: str, timeout: float,
           reconnect_wait: float, memory: str, after: str | None, before: str | None, as_json: bool,
           budget_tokens: int, top_k: int) -> None:
    """Print the block a chat pipeline would put into its prompt for QUERY: the context document's relevant items
    and the best entries with their neighbouring turns, dated, in time order (``invoker.arecall``)."""

    async def run() -> Any:
        reader = await _reader(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            return await reader.arecall(query, budget_tokens=budget_tokens, top_k=top_k, after=after, before=before)
        finally:
            await reader.connection.aclose()

    found = asyncio.run(run())
    click.echo(json.dumps(found.as_dict(), indent=2, ensure_ascii=False) if as_json else found.as_prompt(), nl=False)


@cli.command(name="list")
@_server_options
def list_(db: str | None, server: str, token: str | None, vault: str, timeout: float, reconnect_wait: float) -> None:
    """List the vaults and their memories (titles and ids); --vault shows one vault."""

    async def run() -> list[tuple[str, str, list[dict[str, Any]]]]:
        connection = await _connect(db, server, token, timeout, reconnect_wait)
        try:
            vaults = await connection.call_json("list_vaults")
            if vault != "mycelian":  # a vault named: only that one (the default lists them all)
                chosen = await _vault_id(connection, vault)
                vaults = [v for v in vaults if v["vaultId"] == chosen]
            return [(v["title"], v["vaultId"], await connection.call_json("list_memories", {"vault_id": v["vaultId"]}))
                    for v in vaults]
        finally:
            await connection.aclose()

    table = Table(title="vaults and memories")
    for column in ("vault", "memory", "memory id"):
        table.add_column(column, overflow="fold")
    for title, vault_id, memories in asyncio.run(run()):
        table.add_row(f"{title} ({vault_id})", "", "")
        for item in memories:
            table.add_row("", item["title"], item["memoryId"])
    console.print(table)


@cli.command()
@click.argument("text")
@_server_options
@click.option("--memory", required=True, help="Memory title (created when missing) or id.")
@click.option("--role", default="user", show_default=True, type=click.Choice(["user", "assistant"]))
@click.option("--name", default=None, help="Who spoke (e.g. Caroline).")
@click.option("--time", "when", default=None, help="When it was said (RFC 3339, e.g. 2024-05-01T10:00:00Z).")
@click.option("--model", envvar="MYCELIAN_MODEL", default="extractive", show_default=True,
              help="'extractive' (no network) or 'openai:<model>' [env MYCELIAN_MODEL].")
def add(text: str, db: str | None, server: str, token: str | None, vault: str, timeout: float,
        reconnect_wait: float, memory: str, role: str, name: str | None, when: str | None, model: str) -> None:
    """Store one message TEXT in a memory (summary and tags written by the model) and print the entry."""
    if server in ("embedded", "in-process"):
        check_store_location(db, "--db", "memory database", "memory.db")
    from .builder import ConnectionSettings, build_agent

    connection = ConnectionSettings.from_env(os.environ, server=server, db=db, token=token, timeout=timeout,
                                             reconnect_wait=reconnect_wait)

    async def run() -> Any:
        async with build_agent(model, connection=connection, vault=vault, memory=memory) as invoker:
            result = await invoker.aprocess_conversation_message(role, text, f"cli-{memory}", when, name=name)
            ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
            return [await invoker.connection.call_json("get_entry", {**ids, "entry_id": e}) for e in result.entry_ids]

    for entry in asyncio.run(run()):
        click.echo(json.dumps(entry, indent=2, ensure_ascii=False))


@cli.command()
@_server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option("--entry", "entry_id", default=None, help="Delete only this entry (its id); without it, the whole memory.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(db: str | None, server: str, token: str | None, vault: str, timeout: float, reconnect_wait: float,
           memory: str, entry_id: str | None, yes: bool) -> None:
    """Delete one entry of a memory (--entry), or the whole memory with its entries and context."""
    what = f"entry {entry_id} of memory {memory!r}" if entry_id else f"memory {memory!r} with all its entries"

    async def run() -> Any:
        connection, vault_id, memory_id = await _open(db, server, token, vault, memory, timeout, reconnect_wait)
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


@cli.command()
@_server_options
@click.option("--memory", required=True, help="Memory title or id.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JSON here (default: standard output).")
def export(db: str | None, server: str, token: str | None, vault: str, timeout: float, reconnect_wait: float,
           memory: str, out: Path | None) -> None:
    """Export a memory as JSON: the memory, its context document and every entry, oldest first."""

    async def run() -> dict[str, Any]:
        connection, vault_id, memory_id = await _open(db, server, token, vault, memory, timeout, reconnect_wait)
        try:
            ids = {"vault_id": vault_id, "memory_id": memory_id}
            entries: list[dict[str, Any]] = []
            page = await connection.call_json("list_entries", {**ids, "limit": 50, "after": "0001-01-01T00:00:00Z"})
            while True:
                entries += page["entries"]
                if not page.get("next_after"):
                    break
                page = await connection.call_json("list_entries", {**ids, "limit": 50, "after": page["next_after"]})
            from mycelian_agent.memory_server.storage.placeholder import is_placeholder_context

            context = await connection.call("get_context", ids)
            return {"vault": {"vaultId": vault_id, "title": vault},
                    "memory": await connection.call_json("get_memory", ids),
                    "context": "" if is_placeholder_context(context) else context, "entries": entries}
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


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.pass_context
def serve(ctx: click.Context) -> None:
    """Run the embedded memory server (same options as mycelian-memory-server; serve --help lists them)."""
    from .memory_server.cli import main as server_main

    code = server_main(list(ctx.args), prog="mycelian-agent serve")
    if code:
        sys.exit(code)


def _add_bench_commands() -> None:
    # benchmarks.cli imports only click; each bench command imports its benchmark when it runs.
    from .benchmarks.cli import bench

    cli.add_command(bench)


_add_bench_commands()


def _add_local_llm_commands() -> None:
    # models.local_llm.cli imports click and the standard library only.
    from .models.local_llm.cli import local_llm

    cli.add_command(local_llm)


_add_local_llm_commands()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: MycelianError becomes a one-line message and exit status 1."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.NoSuchOption as exc:
        if not exc.option_name.startswith("--"):
            # `search "-5 degrees"`: a query (or a message) that starts with a dash reads as an option.
            command = exc.ctx.command_path if exc.ctx else "mycelian-agent COMMAND"
            exc.message += f" (if that is text starting with '-', put it after '--': {command} [OPTIONS] -- \"TEXT\")"
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except MycelianError as exc:
        # One line however long (a log reader or a pipe gets no wrapping), and the text as it is: "[postgres]" in
        # a message is not markup.
        err_console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
