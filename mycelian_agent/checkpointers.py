"""Checkpointer specs: ``"memory"``, ``"sqlite:PATH"``, ``"postgresql://..."`` or a saver object."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from .errors import ConfigError

__all__ = ["open_checkpointer", "prune_thread"]


@asynccontextmanager
async def open_checkpointer(spec: str | BaseCheckpointSaver | None = "memory") -> AsyncIterator[BaseCheckpointSaver]:
    """Open the checkpointer ``spec`` names for the duration of the context.

    - ``"memory"`` (default): in-process, lost on exit.
    - ``"sqlite:PATH"``: a SQLite file (WAL); a new process resumes every thread from it.
    - ``"postgresql://user:pass@host/db"``: PostgreSQL, with ``pip install 'mycelian-agent[postgres]'``.
    - a ``BaseCheckpointSaver``: used as is (the caller owns it).
    """
    if spec is None or spec == "memory":
        yield InMemorySaver()
    elif isinstance(spec, BaseCheckpointSaver):
        yield spec
    elif isinstance(spec, str) and spec.startswith("sqlite:"):
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = spec[len("sqlite:"):]
        if not path:
            raise ConfigError("sqlite checkpointer needs a path: 'sqlite:PATH' (e.g. sqlite:.mycelian/state.db)")
        if path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            path = str(Path(path).expanduser())
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            await saver.setup()
            # WAL + synchronous=NORMAL: a commit survives a process kill (not a power cut) without an fsync per
            # checkpoint, which would cost more than the rest of an invocation.
            await saver.conn.execute("PRAGMA journal_mode=WAL")
            await saver.conn.execute("PRAGMA synchronous=NORMAL")
            yield saver
    elif isinstance(spec, str) and spec.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError:
            raise ConfigError("the Postgres checkpointer needs: pip install 'mycelian-agent[postgres]'") from None
        async with AsyncPostgresSaver.from_conn_string(spec) as saver:
            await saver.setup()
            yield saver
    else:
        raise ConfigError(f"unknown checkpointer {spec!r}: use 'memory', 'sqlite:PATH' or a postgresql:// URL")


async def prune_thread(saver: Any, thread_id: str) -> bool:
    """Delete every checkpoint of ``thread_id`` but the newest (our graphs use no delta channels, so the newest
    is complete on its own). Returns whether the saver kind is supported (in-memory and SQLite)."""
    if isinstance(saver, InMemorySaver):
        for namespace in saver.storage.get(thread_id, {}).values():
            for checkpoint_id in sorted(namespace)[:-1]:
                del namespace[checkpoint_id]
        return True
    conn = getattr(saver, "conn", None)
    if conn is None or type(saver).__name__ != "AsyncSqliteSaver":
        return False
    async with saver.lock:
        latest = "(SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ?)"
        await conn.execute(f"DELETE FROM writes WHERE thread_id = ? AND checkpoint_id < {latest}", (thread_id, thread_id))
        await conn.execute(f"DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < {latest}", (thread_id, thread_id))
        await conn.commit()
    return True
