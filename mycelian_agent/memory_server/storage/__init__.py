"""Storage: where entries, contexts and term statistics live, behind one interface and two backends.

- :mod:`.base`: the interface (:class:`MemoryStore`: argument checks, result shapes, the idempotency rule, the
  primitives a backend implements) and its row types; it names no backend.
- :mod:`.sqlite` and :mod:`.postgres`: one package per backend, each with its store, lexical SQL and migrations.
  A new backend is a new package here that subclasses :class:`MemoryStore` and passes ``tests/conformance``.
- :func:`open_store` picks the backend from the target: a ``postgresql://`` (or ``postgres://``) URL, else a SQLite
  path; backends are imported only when opened.
"""

from __future__ import annotations

from collections.abc import Callable

from mycelian_agent.memory_server.storage.base import POSTGRES_SCHEMES, DenseIndex, MemoryStore

__all__ = ["MemoryStore", "is_postgres_url", "open_store"]


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database (a ``postgresql://`` or ``postgres://`` URL)."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


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
