"""Checkpoints on PostgreSQL that outlive a restart of the server: LangGraph's saver over a checked pool, with a
session of its own for the thread leases (``leases.py``).

LangGraph's ``AsyncPostgresSaver.from_conn_string`` holds one connection: once the server restarts, every later
call of the process fails. Here a pool lends connections it checks first, so the process goes on once the server is
back (a call waits up to ``reconnect_wait`` seconds for it). The leases' advisory locks live on one connection that
is not the pool's: a restart ends that session and frees its locks, so before a checkpoint read or write of a
thread whose lease this process holds the session is checked (one round trip) when the pool has made a connection
since the last check (as it does after a restart) or the last check is :data:`LEASE_RECHECK_S` old; after a restart
every held lease is taken again, and one that another process took meanwhile fails the invocation with
``ThreadBusyError`` instead of two writers interleaving.

Imported only when a ``postgresql://`` checkpointer is opened (it needs the ``postgres`` extra).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, OperationalError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

__all__ = ["LEASE_RECHECK_S", "PooledPostgresSaver", "open_pooled_saver"]

#: Connections of the pool: a thread's invocation holds one while it reads or saves a checkpoint.
POOL_SIZE = 4
#: Seconds after which a held lease's session is checked again even when the pool made no new connection (a chat
#: thread idle across a restart is checked at its next message; a replay's back-to-back calls are not).
LEASE_RECHECK_S = 5.0
# Advisory lock serialising LangGraph's checkpoint schema setup across processes ("lgsetup" in ASCII).
_SETUP_LOCK = 0x6C67736574757000


async def _connect(url: str, **settings: Any) -> AsyncConnection[dict[str, Any]]:
    # LangGraph's own settings for its saver's connections (AsyncPostgresSaver.from_conn_string).
    return await AsyncConnection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row, **settings)


class _Made:
    """A pool's ``configure`` callback that counts the connections it makes."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, conn: AsyncConnection[Any]) -> None:
        self.count += 1


class PooledPostgresSaver(AsyncPostgresSaver):
    """LangGraph's PostgreSQL saver over a checked pool, with a separate session for advisory locks
    (:meth:`lease_session`) and a hook the leases set to run before each checkpoint read or write of a thread."""

    def __init__(self, pool: AsyncConnectionPool, url: str, reconnect_wait: float, made: _Made) -> None:
        super().__init__(pool)  # type: ignore[arg-type]
        self._url = url
        self._reconnect_wait = reconnect_wait
        self._session: AsyncConnection[dict[str, Any]] | None = None
        #: Called with the thread id before each checkpoint read or write (set by the thread leases).
        self.check_lease: Callable[[str], Awaitable[None]] | None = None
        self._made = made

    @property
    def connections_made(self) -> int:
        """Connections the pool has made: a new one after the first means one was lost (or aged out)."""
        return self._made.count

    async def lease_session(self, *, renew: bool = False) -> AsyncConnection[dict[str, Any]]:
        """The connection the thread leases' advisory locks live on (opened on first use; ``renew``: a new one,
        after the old session ended, waiting up to ``reconnect_wait`` seconds for a server that restarts)."""
        if renew and self._session is not None:
            await self._session.close()
            self._session = None
        if self._session is None:
            name = f"mycelian-agent pid {os.getpid()} on {socket.gethostname()}"[:63]  # how a blocked process names us
            deadline = asyncio.get_running_loop().time() + (self._reconnect_wait if renew else 0.0)
            pause = 0.1
            while self._session is None:
                try:
                    self._session = await _connect(self._url, application_name=name)
                except OperationalError:
                    if asyncio.get_running_loop().time() + pause > deadline:
                        raise
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 2.0)
        return self._session

    async def aclose_session(self) -> None:
        """Close the leases' session (its locks are released with it)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await self._check_lease(config)
        return await super().aget_tuple(config)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await self._check_lease(config)
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._check_lease(config)
        await super().aput_writes(config, writes, task_id, task_path)

    async def _check_lease(self, config: RunnableConfig) -> None:
        thread_id = config.get("configurable", {}).get("thread_id")
        if self.check_lease is not None and thread_id is not None:
            await self.check_lease(str(thread_id))


@asynccontextmanager
async def open_pooled_saver(url: str, reconnect_wait: float) -> AsyncIterator[PooledPostgresSaver]:
    """A :class:`PooledPostgresSaver` on ``url`` with LangGraph's tables set up; psycopg's ``OperationalError``
    (or ``PoolTimeout``) when the server cannot be reached."""
    async with await _connect(url) as conn:
        # LangGraph's setup() is not safe to run from several processes at once (CREATE TABLE IF NOT EXISTS and its
        # version rows race): N workers starting together take turns on an advisory lock. Polled with
        # pg_try_advisory_lock, never waited for inside a statement: setup() runs CREATE INDEX CONCURRENTLY, which
        # waits for every open transaction, a blocked lock wait included (a deadlock).
        while True:
            row = await (await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_SETUP_LOCK,))).fetchone()
            if row is not None and row["got"]:
                break
            await asyncio.sleep(0.05)
        try:
            await AsyncPostgresSaver(conn).setup()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
    made = _Made()
    pool = AsyncConnectionPool(
        url,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        min_size=1,
        max_size=POOL_SIZE,
        open=False,
        timeout=max(reconnect_wait, 0.1),
        check=AsyncConnectionPool.check_connection,
        configure=made,
        name="mycelian-checkpoints",
    )
    saver = PooledPostgresSaver(pool, url, reconnect_wait, made)
    try:
        await pool.open(wait=True, timeout=max(reconnect_wait, 5.0))
        try:
            yield saver
        finally:
            await saver.aclose_session()
    finally:
        await pool.close()
