"""Async access to the store: one dedicated thread per database, shared by every MCP session of a server.

All database work of a server runs, in submission order, on one worker thread that owns the SQLite connection.
So the event loop never blocks on SQLite, writes are serialised, a write's future resolves only after its
COMMIT, and a call submitted after a write sees it — which makes ``await_consistency`` a real barrier.
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

from .store import DenseIndex, Store

__all__ = ["StoreHandle", "StoreRunner"]

T = TypeVar("T")


class StoreRunner:
    """A :class:`Store` driven from asyncio through its own single worker thread."""

    def __init__(self, store: Store, executor: ThreadPoolExecutor) -> None:
        self._store = store
        self._executor = executor

    @classmethod
    async def open(
        cls,
        db_path: str | Path,
        *,
        synchronous: str = "NORMAL",
        dense_factory: Callable[[], DenseIndex | None] | None = None,
    ) -> StoreRunner:
        """Open the database on a new worker thread (and build the dense index there, if asked)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mycelian-sqlite")

        def _open() -> Store:
            dense = dense_factory() if dense_factory is not None else None
            return Store.open(db_path, synchronous=synchronous, dense=dense)

        try:
            store = await asyncio.get_running_loop().run_in_executor(executor, _open)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(store, executor)

    async def call(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``method(store, *args, **kwargs)`` (e.g. ``Store.add_entry``) on the worker thread."""
        job = partial(method, self._store, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def close(self) -> None:
        """Close the connection after every queued call, then stop the worker thread."""
        try:
            await self.call(Store.close)
        finally:
            self._executor.shutdown(wait=False)


class StoreHandle:
    """Reference-counted :class:`StoreRunner` for one database: opened by the first holder, closed by the last.

    Each MCP session enters the server lifespan, and streamable HTTP runs one session per client; they all
    share this handle, so they share one connection, one write order and (for ``:memory:``) one database.
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
