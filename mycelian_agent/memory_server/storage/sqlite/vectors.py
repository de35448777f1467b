"""The entry vectors on SQLite: :class:`~mycelian_agent.memory_server.storage.vectors.SqlVectors` on ``sqlite3``.

Vectors are float32 ``BLOB`` s scored by the exact scan in the server (SQLite has no nearest-neighbour index here).
Writes are serialised by SQLite's one writer, so a vector written from an entry's row needs no lock first: the
``INSERT``'s ``SELECT`` sees whether the entry is still there. A search reads its memory's entry and vector counts
only when the database changed since the last search (:meth:`SqliteVectors.version`: counting 10,000 rows twice
cost ~1 ms of a ~5 ms lexical search).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mycelian_agent.memory_server.storage.vectors import SqlVectors

__all__ = ["SqliteVectors"]


class SqliteVectors(SqlVectors[sqlite3.Connection]):
    """The ``entry_vectors`` SQL of the SQLite backend (rows are ``sqlite3.Row``)."""

    def _execute(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return conn.execute(sql, params)

    def version(self, conn: sqlite3.Connection) -> Hashable:
        """See :meth:`~mycelian_agent.memory_server.storage.vectors.EntryVectors.version`: the rows this connection
        changed (``total_changes``) and SQLite's count of the other connections' commits (``PRAGMA data_version``,
        this process's other connections included), with the connection's identity."""
        return id(conn), conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0]

    def _executemany(self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        conn.executemany(sql, rows)

    @contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        """A write transaction of its own (``BEGIN IMMEDIATE``), unless the caller's is open (then the caller
        commits)."""
        owns = not conn.in_transaction
        if owns:
            conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            if owns:
                conn.execute("COMMIT")
        except BaseException:
            if owns and conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
