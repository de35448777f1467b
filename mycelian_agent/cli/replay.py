"""``mycelian-agent replay``: conversation files into memory, in this process or in worker processes (shards), with
a progress bar and a summary."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import MycelianError
from ..paths import check_store_location, is_postgres_url
from .common import console, err_console, server_options

if TYPE_CHECKING:  # pragma: no cover
    from ..agent.model_tools import ToolChoiceMode

__all__ = ["checkpointer_spec", "replay"]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@server_options
@click.option(
    "--memory",
    default=None,
    help="Memory title or id for every conversation (default: one memory per conversation, titled after its id).",
)
@click.option(
    "--model",
    envvar="MYCELIAN_MODEL",
    default="extractive",
    show_default=True,
    help="'extractive' (no network) or 'openai:<model>' [env MYCELIAN_MODEL].",
)
@click.option(
    "--api-key", envvar="OPENAI_API_KEY", default=None, help="API key of an openai: model [env OPENAI_API_KEY]."
)
@click.option(
    "--base-url",
    envvar="OPENAI_BASE_URL",
    default=None,
    help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 [env OPENAI_BASE_URL].",
)
@click.option(
    "--tool-choice",
    "tool_choice",
    envvar="MYCELIAN_TOOL_CHOICE",
    default="named",
    show_default=True,
    type=click.Choice(["named", "required", "auto"]),
    help="How the tool call is forced: 'named' (OpenAI's form), 'required' (llama.cpp's server and other "
    "endpoints that ignore the named form), 'auto' [env MYCELIAN_TOOL_CHOICE].",
)
@click.option(
    "--max-tokens",
    envvar="MYCELIAN_MAX_TOKENS",
    default=None,
    type=click.IntRange(min=1),
    help="Completion token limit of an openai: model [env MYCELIAN_MAX_TOKENS].",
)
@click.option(
    "--model-timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds an openai: model call may take; a timeout, HTTP 429 or 5xx is retried, then the "
    "extractive model writes the step.",
)
@click.option(
    "--flush-every",
    default=6,
    show_default=True,
    type=click.IntRange(min=1),
    help="Write the context document every N messages of a conversation.",
)
@click.option(
    "--batch",
    "batch_size",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Batched mode: messages are accepted at once and one model call writes N of them (and the rest "
    "at each flush and session end); 1 = one model call per message.",
)
@click.option(
    "--state",
    default=None,
    help="Checkpoints: a SQLite file or a postgresql:// URL (shared by workers on many hosts); an "
    "interrupted replay resumes from it when run again.",
)
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="Replay only shard I of N (0-based; conversations split by sorted id): run 0/N ... N-1/N on "
    "several processes or hosts against one Postgres --db and --state.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Replay in N worker processes (shards 0/N ... N-1/N of this command's conversations).",
)
@click.option(
    "--thread-wait",
    default=None,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="With --state: wait up to SECONDS for another process writing the same conversation "
    "(default: fail at once, naming it).",
)
@click.option(
    "--embeddings/--no-embeddings",
    default=None,
    help="Embedded server: fuse dense vectors with BM25 (the default where a dense model is installed; "
    "vectors are written behind the entries, and what is left when the replay ends is written by the next "
    "hybrid server or the backfill) or BM25 only (a search must share a word).",
)
@click.option(
    "--wait-vectors",
    is_flag=True,
    help="Embedded server with embeddings: before returning, write the vectors still pending (the "
    "backfill, on every core) instead of leaving them to the next hybrid server.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(
    files: tuple[Path, ...],
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    timeout: float,
    reconnect_wait: float,
    memory: str | None,
    model: str,
    api_key: str | None,
    base_url: str | None,
    tool_choice: str,
    max_tokens: int | None,
    model_timeout: float,
    flush_every: int,
    batch_size: int,
    state: str | None,
    shard: str | None,
    workers: int,
    thread_wait: float | None,
    embeddings: bool | None,
    wait_vectors: bool,
    as_json: bool,
) -> None:
    """Replay conversation FILES into memory and print what was stored.

    Accepted files: {"messages": [...]}, {"sessions": [...]}, LongMemEval records and LoCoMo samples. Every
    file is checked before anything is stored. Re-running is safe: each message is stored exactly once.
    """
    from ..conversations.formats import load_conversations
    from ..conversations.selection import parse_shard

    parsed = parse_shard(shard)
    if parsed is not None and workers > 1:
        raise click.UsageError("--shard and --workers do not combine: use one (--workers N runs shards 0/N..N-1/N)")
    # click.Choice admits only the modes; the cast tells the type checker what click checked.
    options: dict[str, Any] = dict(
        db=db,
        server=server,
        token=token,
        vault=vault,
        memory=memory,
        model=model,
        api_key=api_key,
        base_url=base_url,
        flush_every=flush_every,
        state=state,
        tool_choice=cast("ToolChoiceMode", tool_choice),
        max_tokens=max_tokens,
        batch_size=batch_size,
        timeout=timeout,
        reconnect_wait=reconnect_wait,
        model_timeout=model_timeout,
        thread_wait=thread_wait,
        embeddings=embeddings,
    )
    conversations = [c for path in files for c in load_conversations(path)]
    if server in ("embedded", "in-process"):
        check_store_location(db, "--db", "memory database", "memory.db")
    check_store_location(state, "--state", "checkpoint", "state.db")
    if wait_vectors and (server not in ("embedded", "in-process") or embeddings is False):
        raise click.UsageError(
            "--wait-vectors needs the embedded server (--db) with embeddings: a remote server "
            "writes its own vectors, and --no-embeddings writes none"
        )
    if workers > 1:
        stats = _replay_in_workers([str(p) for p in files], workers, options)
    else:
        conversations = _shard(conversations, parsed)
        total = sum(c.message_count for c in conversations)
        stats = asyncio.run(_replay(conversations, total, **options))
    vectors = _vectors_left(db, server, embeddings, wait_vectors)
    if as_json:
        click.echo(json.dumps({**stats.as_dict(), **({"pending_vectors": vectors[0]} if vectors else {})}, indent=2))
        if vectors and vectors[1]:
            err_console.print(vectors[1], soft_wrap=True)
        return
    table = Table(title="Replay summary", show_header=False)
    usage = stats.usage
    shown = ", ".join(stats.memories[:5]) + (f" and {len(stats.memories) - 5} more" if len(stats.memories) > 5 else "")
    rows = [
        ("conversations", stats.conversations),
        (f"memories (vault {vault})", shown),
        ("messages stored (batched: accepted)", stats.messages),
        ("messages written (batched: incl. accepted earlier)", stats.written),
        ("already stored (resumed)", stats.skipped),
        ("entries written", stats.entries),
        ("deduplicated retries", stats.deduplicated),
        ("context documents written", stats.contexts),
        ("model calls", usage.llm_calls),
        ("prompt / completion tokens", f"{usage.prompt_tokens} / {usage.completion_tokens}"),
        ("corrections / fallbacks", f"{usage.corrections} / {usage.fallbacks}"),
        ("retries: memory server / model", f"{usage.retries} / {usage.model_retries}"),
        *((f"  {name}", row.describe()) for name, row in usage.rows()),
        ("memory server reconnections", stats.reconnects),
        ("elapsed", f"{stats.elapsed_s:.2f} s ({stats.messages_per_s:.0f} messages/s)"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    for error in stats.errors[:10]:
        err_console.print(f"[yellow]recovered:[/] {escape(str(error))}", soft_wrap=True)
    if vectors and vectors[1]:
        console.print(escape(vectors[1]), soft_wrap=True)


def _vectors_left(db: str | None, server: str, embeddings: bool | None, wait: bool) -> tuple[int, str] | None:
    """After a replay into an embedded server with embeddings: ``(entries still without a vector, the closing line
    saying how they get written)``; with ``wait``, they are embedded here first (the backfill). None for a remote
    server or a replay without embeddings (nothing is said). Counted in SQL: no model is loaded unless ``wait``."""
    if server not in ("embedded", "in-process") or embeddings is False:
        return None
    from ..builder import ConnectionSettings
    from ..memory_server import pending_vectors

    target = ConnectionSettings.from_env(os.environ, server=server, db=db).database()
    # The model the spawned server uses: its environment's, else auto (the spawned server reads the same variable).
    counts = pending_vectors(target, os.environ.get("MYCELIAN_EMBEDDINGS_MODEL"), embeddings=embeddings, backfill=wait)
    if counts is None:
        return None
    written, pending = counts
    done = f"wrote {written:,} pending vectors; " if wait else ""
    if not pending:
        return 0, f"{done}every entry has its vector"
    shown = "DB" if is_postgres_url(target) else target  # a URL may carry a password
    return pending, (
        f"{done}{pending:,} entries await vectors: they are written by the next hybrid server that "
        f"opens this database, or now by `mycelian-agent embeddings backfill {shown}`"
    )


def _shard(conversations: list[Any], shard: tuple[int, int] | None) -> list[Any]:
    from ..conversations.selection import select_items

    return select_items(conversations, lambda c: c.conversation_id, shard=shard)


def checkpointer_spec(state: str | Path | None) -> str:
    """The checkpointer of ``--state``: a postgresql:// URL as is, a file as ``sqlite:FILE``, none in memory."""
    if not state:
        return "memory"
    return str(state) if is_postgres_url(str(state)) else f"sqlite:{state}"


async def _replay(
    conversations: list[Any],
    total: int,
    *,
    db: str | None,
    server: str,
    token: str | None,
    vault: str,
    memory: str | None,
    model: str,
    api_key: str | None,
    base_url: str | None,
    flush_every: int,
    state: str | Path | None,
    tool_choice: ToolChoiceMode = "named",
    max_tokens: int | None = None,
    batch_size: int = 1,
    timeout: float | None = 60.0,
    reconnect_wait: float = 30.0,
    model_timeout: float | None = 120.0,
    thread_wait: float | None = None,
    embeddings: bool | None = None,
    quiet: bool = False,
) -> Any:
    from ..agent.invoker import MycelianAgentInvoker
    from ..builder import ConnectionSettings, build_agent, ensure_memory
    from ..conversations.formats import valid_title
    from ..conversations.replay import ReplayStats, replay_conversation

    stats = ReplayStats()
    if not conversations:
        return stats
    checkpointer = checkpointer_spec(state)
    first_memory = memory or valid_title(conversations[0].conversation_id)
    connection = ConnectionSettings.from_env(
        os.environ,
        server=server,
        db=db,
        token=token,
        timeout=timeout,
        reconnect_wait=reconnect_wait,
        embeddings=embeddings,
    )
    async with build_agent(
        model,
        connection=connection,
        vault=vault,
        memory=first_memory,
        checkpointer=checkpointer,
        flush_every=flush_every,
        api_key=api_key,
        base_url=base_url,
        tool_choice_mode=tool_choice,
        max_tokens=max_tokens,
        batch_size=batch_size,
        model_timeout=model_timeout,
        thread_wait=thread_wait,
    ) as invoker:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} msg/s"),
            TimeElapsedColumn(),
            console=err_console,
            transient=False,
            disable=quiet or not err_console.is_terminal,
        ) as progress:
            task = progress.add_task("replaying", total=total, rate="-")
            try:
                for conversation in conversations:
                    target = invoker
                    if memory is None and conversation is not conversations[0]:
                        memory_id = await ensure_memory(
                            invoker.connection, invoker.agent.vault_id, valid_title(conversation.conversation_id)
                        )
                        target = MycelianAgentInvoker(
                            invoker.agent.with_memory(invoker.agent.vault_id, memory_id),
                            flush_every,
                            leases=invoker.leases,
                            thread_wait=invoker.thread_wait,
                        )
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
                err_console.print(
                    f"[red]interrupted[/] after {stored} messages stored this run; "
                    + (
                        "run the same command again to resume."
                        if state
                        else "run again to finish (stored messages are deduplicated; pass --state to skip them)."
                    )
                )
                raise
    return stats


def _replay_worker(files: list[str], shard: tuple[int, int], options: dict[str, Any], results: Any) -> None:
    """One worker process of ``replay --workers``: its shard of the files' conversations, stats to ``results``."""
    from ..conversations.formats import load_conversations

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

    from ..conversations.replay import ReplayStats

    # spawn, not fork: each worker starts clean (no inherited event loop, threads or open connections).
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    started = time.perf_counter()
    processes = [
        context.Process(
            target=_replay_worker, args=(files, (k, workers), options, results), name=f"replay-{k}/{workers}"
        )
        for k in range(workers)
    ]
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
    failed = [
        f"worker {k}/{workers}: " + (reports[k][1] or "" if k in reports else f"exit code {processes[k].exitcode}")
        for k in range(workers)
        if k not in reports or reports[k][1] is not None
    ]
    if failed:
        resume = "run the same command again to resume" if options.get("state") else "run again to finish"
        raise MycelianError("; ".join(failed) + f" ({resume}: stored messages are not stored twice)")
    total = ReplayStats()
    for stats, _ in reports.values():
        for name in (
            "conversations",
            "messages",
            "written",
            "skipped",
            "entries",
            "deduplicated",
            "contexts",
            "sessions",
            "reconnects",
        ):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        total.usage += stats.usage
        total.errors.extend(stats.errors)
        total.memories.extend(m for m in stats.memories if m not in total.memories)
    total.elapsed_s = time.perf_counter() - started
    return total
