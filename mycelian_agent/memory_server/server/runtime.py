"""Async access to the store: dedicated threads per database, shared by every MCP session of a server.

SQLite: all database work of a server runs, in submission order, on one worker thread that owns the connection.
So the event loop never blocks on SQLite, writes are serialised, a write's future resolves only after its
COMMIT, and a call submitted after a write sees it — which makes ``await_consistency`` a real barrier.

PostgreSQL: calls run on ``store.concurrency`` threads, each borrowing a connection of the store's pool; a call
made through :meth:`StoreRunner.barrier` first waits for every call submitted before it, so ``await_consistency``
stays a barrier.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.base import DenseIndex, MemoryStore

__all__ = ["StoreHandle", "StoreRunner"]

T = TypeVar("T")


class StoreRunner:
    """A :class:`MemoryStore` driven from asyncio through its own worker thread(s)."""

    def __init__(self, store: MemoryStore, executor: ThreadPoolExecutor) -> None:
        self._store = store
        self._executor = executor
        self._pending: set[asyncio.Future[Any]] = set()

    @classmethod
    async def open(
        cls,
        db_path: str | Path,
        *,
        synchronous: str = "NORMAL",
        dense_factory: Callable[[], DenseIndex | None] | None = None,
    ) -> StoreRunner:
        """Open the database on a new worker thread (and build the dense index there, if asked)."""
        opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mycelian-store")

        def _open() -> MemoryStore:
            return open_store(str(db_path), synchronous=synchronous, dense_factory=dense_factory)

        try:
            store = await asyncio.get_running_loop().run_in_executor(opener, _open)
        except BaseException:
            opener.shutdown(wait=False)
            raise
        if store.concurrency == 1:
            return cls(store, opener)  # the thread that opened a SQLite connection keeps using it
        opener.shutdown(wait=False)
        return cls(store, ThreadPoolExecutor(max_workers=store.concurrency, thread_name_prefix="mycelian-store"))

    async def call(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``method(store, *args, **kwargs)`` (e.g. ``MemoryStore.add_entry``) on a worker thread."""
        job = partial(method, self._store, *args, **kwargs)
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + self._store.reconnect_wait, 0.25
        while True:
            future = loop.run_in_executor(self._executor, job)
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)
            try:
                with self._store.explained():  # a damaged file, a full disk, a server gone: one line naming it
                    return await future
            except MemoryServerError as problem:
                # A server restarting: the same call again on a new connection (add_entry's idempotency key keeps
                # a write whose answer was lost from being stored twice), until the store's reconnect wait is over.
                if not problem.transient or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def barrier(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Like :meth:`call`, after every call submitted before this one has finished (``await_consistency``)."""
        earlier = list(self._pending)
        if earlier:
            await asyncio.wait(earlier)
        return await self.call(method, *args, **kwargs)

    async def wait_for_vectors(self, memory_id: str | None, timeout: float) -> bool:
        """:meth:`MemoryStore.wait_for_vectors` on a thread of its own: the wait holds none of the store's worker
        threads (on SQLite the only one), so other calls go on meanwhile."""
        return await anyio.to_thread.run_sync(partial(self._store.wait_for_vectors, memory_id, timeout))

    async def close(self) -> None:
        """Close the connection(s) after every queued call, then stop the worker threads."""
        try:
            await self.barrier(MemoryStore.close)
        finally:
            self._executor.shutdown(wait=False)


class StoreHandle:
    """Reference-counted :class:`StoreRunner` for one database: opened by the first holder, closed by the last.

    Each MCP session enters the server lifespan, and streamable HTTP runs one session per client; they all
    share this handle, so they share one store (SQLite: one connection and one write order; PostgreSQL: one
    connection pool) and, for ``:memory:``, one database.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        synchronous: str = "NORMAL",
        dense_factory: Callable[[], DenseIndex | None] | None = None,
    ) -> None:
        self.db_path = db_path
        self.synchronous = synchronous
        self._dense_factory = dense_factory
        self._runner: StoreRunner | None = None
        self._holders = 0
        self._lock: asyncio.Lock | None = None

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[StoreRunner]:
        """Keep the database open for the duration of the ``async with`` block and yield its runner."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._runner is None:
                self._runner = await StoreRunner.open(
                    self.db_path, synchronous=self.synchronous, dense_factory=self._dense_factory
                )
            self._holders += 1
            runner = self._runner
        try:
            yield runner
        finally:
            # Sessions end by cancellation (in-memory and HTTP transports): shield so the close still runs.
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    self._holders -= 1
                    if self._holders == 0 and self._runner is not None:
                        self._runner = None
                        await runner.close()
