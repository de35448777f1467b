"""Storage: where entries, contexts and term statistics live, behind one interface and two backends.

- :mod:`.base`: the interface (:class:`MemoryStore`: argument checks, result shapes, the idempotency rule, the
  primitives a backend implements) and its row types; it names no backend.
- :mod:`.sqlite` and :mod:`.postgres`: one package per backend, each with its store, lexical SQL and migrations.
  A new backend is a new package here that subclasses :class:`MemoryStore` and passes ``tests/conformance``.
- :func:`open_store` picks the backend from the target: a ``postgresql://`` (or ``postgres://``) URL
  (``paths.is_postgres_url``), else a SQLite path; backends are imported only when opened.
"""

from __future__ import annotations

from collections.abc import Callable

from mycelian_agent.memory_server.storage.base import DenseIndex, MemoryStore
from mycelian_agent.memory_server.storage.vectors import EntryVectors
from mycelian_agent.paths import is_postgres_url

__all__ = ["MemoryStore", "entry_vectors", "open_store"]


def open_store(
    target: str,
    *,
    synchronous: str = "NORMAL",
    dense_factory: Callable[[], DenseIndex | None] | None = None,
    pool_size: int = 4,
) -> MemoryStore:
    """Open the store ``target`` names: a PostgreSQL URL, or a SQLite path (``":memory:"`` allowed)."""
    dense = dense_factory() if dense_factory is not None else None
    if is_postgres_url(target):
        from mycelian_agent.memory_server.storage.postgres.store import PostgresStore

        return PostgresStore.open(target, pool_size=pool_size, dense=dense)
    from mycelian_agent.memory_server.storage.sqlite.store import Store

    return Store.open(target, synchronous=synchronous, dense=dense)


def entry_vectors(conn: object) -> EntryVectors:
    """The vector SQL for a connection of either backend (``sqlite3`` or psycopg), for a dense index used on a
    connection without a store having attached it (a backfill on a store opened without the index). On PostgreSQL
    it writes the ``bytea`` copy only: the pgvector column is filled when a store with the index opens."""
    import sqlite3

    if isinstance(conn, sqlite3.Connection):
        from mycelian_agent.memory_server.storage.sqlite.vectors import SqliteVectors

        return SqliteVectors()
    from mycelian_agent.memory_server.storage.postgres.vectors import PostgresVectors

    return PostgresVectors()
