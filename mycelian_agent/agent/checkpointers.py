"""Checkpointer specs: ``"memory"``, ``"sqlite:PATH"``, ``"postgresql://..."`` or a saver object."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from ..errors import ConfigError, MycelianError, make_parent_folder, one_line
from ..paths import is_postgres_url, redact_url

__all__ = ["checkpoint_problem", "open_checkpointer", "prune_thread"]

_SQLITE_BUSY_S = 30.0


async def _while_locked(step: Callable[[], Awaitable[Any]]) -> None:
    """Run ``step``, again while SQLite says the database is locked (up to the busy timeout). Switching a new file
    to WAL needs the file to itself and fails at once, without the busy handler, while another process opening the
    same new state file holds it: two replays started together sharing one --state met it."""
    import sqlite3

    deadline = asyncio.get_running_loop().time() + _SQLITE_BUSY_S
    delay = 0.05
    while True:
        try:
            await step()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or asyncio.get_running_loop().time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


@asynccontextmanager
async def open_checkpointer(
    spec: str | BaseCheckpointSaver | None = "memory", *, reconnect_wait: float = 30.0
) -> AsyncIterator[BaseCheckpointSaver]:
    """Open the checkpointer ``spec`` names for the duration of the context.

    - ``"memory"`` (default): in-process, lost on exit.
    - ``"sqlite:PATH"``: a SQLite file (WAL); a new process resumes every thread from it.
    - ``"postgresql://user:pass@host/db"``: PostgreSQL, with ``pip install 'mycelian-agent[postgres]'``; a call
      waits up to ``reconnect_wait`` seconds for a server that restarts.
    - a ``BaseCheckpointSaver``: used as is (the caller owns it).
    """
    if spec is None or spec == "memory":
        yield InMemorySaver()
    elif isinstance(spec, BaseCheckpointSaver):
        yield spec
    elif isinstance(spec, str) and spec.startswith("sqlite:"):
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = spec[len("sqlite:") :]
        if not path:
            raise ConfigError("sqlite checkpointer needs a path: 'sqlite:PATH' (e.g. sqlite:.mycelian/state.db)")
        if path != ":memory:":
            path = str(Path(path).expanduser())
            if Path(path).is_dir():
                raise ConfigError(
                    f"checkpoint store {path} is a folder, not a SQLite file (e.g. {Path(path) / 'state.db'})"
                )
            make_parent_folder(path, "checkpoint store")
        import sqlite3

        import aiosqlite

        async with AsyncExitStack() as stack:
            try:
                # A 30 s busy timeout (sqlite3's default is 5 s): processes opening one new state file together take
                # turns on its schema, and a loaded machine can hold a write lock longer than 5 s.
                conn = await stack.enter_async_context(aiosqlite.connect(path, timeout=_SQLITE_BUSY_S))
                saver = AsyncSqliteSaver(conn)
                # WAL + synchronous=NORMAL: a commit survives a process kill (not a power cut) without an fsync per
                # checkpoint, which would cost more than the rest of an invocation.
                await _while_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                await conn.execute("PRAGMA synchronous=NORMAL")
                await _while_locked(saver.setup)
            except sqlite3.Error as exc:
                raise ConfigError(f"cannot open the checkpoint store {path}: {exc}") from None
            yield saver
    elif is_postgres_url(spec):
        async with _open_postgres(spec, reconnect_wait) as pg_saver:
            yield pg_saver
    else:
        raise ConfigError(f"unknown checkpointer {spec!r}: use 'memory', 'sqlite:PATH' or a postgresql:// URL")


@asynccontextmanager
async def _open_postgres(url: str, reconnect_wait: float) -> AsyncIterator[BaseCheckpointSaver]:
    """LangGraph's PostgreSQL saver over a checked pool (``pg_checkpoints.py``): a process outlives a restart of the
    server; an invocation cut mid-save fails with one line (:func:`checkpoint_problem`)."""
    try:
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout

        from .pg_checkpoints import open_pooled_saver
    except ImportError:
        raise ConfigError("the Postgres checkpointer needs: pip install 'mycelian-agent[postgres]'") from None
    async with AsyncExitStack() as stack:
        try:
            saver = await stack.enter_async_context(open_pooled_saver(url, reconnect_wait))
        except (OperationalError, PoolTimeout) as exc:
            raise ConfigError(
                f"cannot open the Postgres checkpointer {redact_url(url)}: {one_line(exc)} "
                "(check that PostgreSQL is running and the URL)"
            ) from exc
        yield saver


async def prune_thread(saver: Any, thread_id: str) -> bool:
    """Delete every checkpoint of ``thread_id`` except the newest of each namespace.

    The memory agent's state is complete in its newest checkpoint (it uses no delta channels), so older ones only
    make the store grow with every message. Supported: ``InMemorySaver``, ``AsyncSqliteSaver`` and
    ``AsyncPostgresSaver``; returns False (and does nothing) for other savers.
    """
    if isinstance(saver, InMemorySaver):
        _prune_in_memory(saver, thread_id)
        return True
    if any(kind.__name__ == "AsyncPostgresSaver" for kind in type(saver).__mro__):  # ours is a subclass
        await _prune_postgres(saver, thread_id)
        return True
    if type(saver).__name__ != "AsyncSqliteSaver":
        return False
    newest = (
        "(SELECT MAX(checkpoint_id) FROM checkpoints AS newer WHERE newer.thread_id = {t}.thread_id "
        "AND newer.checkpoint_ns = {t}.checkpoint_ns)"
    )
    async with saver.lock:
        await saver.conn.execute(
            f"DELETE FROM writes WHERE thread_id = ? AND checkpoint_id < {newest.format(t='writes')}", (thread_id,)
        )
        await saver.conn.execute(
            f"DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < {newest.format(t='checkpoints')}",
            (thread_id,),
        )
        await saver.conn.commit()
    return True


def _prune_in_memory(saver: InMemorySaver, thread_id: str) -> None:
    namespaces = saver.storage.get(thread_id, {})
    keep_versions: set[tuple[str, str, str, Any]] = set()
    for namespace, checkpoints in namespaces.items():
        if not checkpoints:
            continue
        newest = max(checkpoints)
        for checkpoint_id in [c for c in checkpoints if c != newest]:
            del checkpoints[checkpoint_id]
            for key in [k for k in saver.writes if k[:3] == (thread_id, namespace, checkpoint_id)]:
                del saver.writes[key]
        checkpoint = saver.serde.loads_typed(checkpoints[newest][0])
        keep_versions.update(
            (thread_id, namespace, channel, version) for channel, version in checkpoint["channel_versions"].items()
        )
    for blob_key in [k for k in saver.blobs if k[0] == thread_id and k not in keep_versions]:
        del saver.blobs[blob_key]


_PG_NEWEST = (
    "(SELECT max(n.checkpoint_id) FROM checkpoints n WHERE n.thread_id = {t}.thread_id "
    "AND n.checkpoint_ns = {t}.checkpoint_ns)"
)
_PG_PRUNE = (
    f"DELETE FROM checkpoint_writes w WHERE w.thread_id = %(t)s AND w.checkpoint_id < {_PG_NEWEST.format(t='w')}",
    f"DELETE FROM checkpoints c WHERE c.thread_id = %(t)s AND c.checkpoint_id < {_PG_NEWEST.format(t='c')}",
    # Blobs are shared between checkpoints by (channel, version): keep those the remaining checkpoints name.
    "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %(t)s AND NOT EXISTS (SELECT 1 FROM checkpoints c "
    "WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns "
    "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
)


async def _prune_postgres(saver: Any, thread_id: str) -> None:
    # One transaction: a concurrent reader sees the thread before or after, never half pruned.
    conn = saver.conn
    async with saver.lock:
        if callable(getattr(conn, "connection", None)):  # a psycopg AsyncConnectionPool
            async with conn.connection() as pooled, pooled.transaction():
                for statement in _PG_PRUNE:
                    await pooled.execute(statement, {"t": thread_id})
        else:
            async with conn.transaction():
                for statement in _PG_PRUNE:
                    await conn.execute(statement, {"t": thread_id})


def checkpoint_problem(exc: BaseException, saver: Any) -> MycelianError | None:
    """``exc`` as one line naming the checkpoint store when it says the store's PostgreSQL server cannot be reached
    (stopped, restarted: the connection in use is cut, or the pool found none within its wait); None for any other
    failure."""
    kind = type(exc)
    if (kind.__name__, kind.__module__.split(".")[0]) not in {
        ("OperationalError", "psycopg"),
        ("PoolTimeout", "psycopg_pool"),
    }:
        return None
    return MycelianError(
        f"the checkpoint store {_server_of(saver)} cannot be reached ({' '.join(str(exc).split())}): "
        "what was taken in before is kept; run again to resume once the server is back"
    )


def _server_of(saver: Any) -> str:
    """``postgresql://user@host:port/dbname`` of the saver's connection or pool (never a password)."""
    conn = getattr(saver, "conn", None)
    try:
        if isinstance(conninfo := getattr(conn, "conninfo", None), str):  # a pool
            from psycopg.conninfo import conninfo_to_dict

            parts = conninfo_to_dict(conninfo)
            user, host, port, dbname = (parts.get(k, "") for k in ("user", "host", "port", "dbname"))
        else:
            info = conn.info  # type: ignore[union-attr]
            user, host, port, dbname = info.user, info.host, info.port, info.dbname
    except Exception:
        return "PostgreSQL"
    return f"postgresql://{user}@{host}:{port or 5432}/{dbname}"
