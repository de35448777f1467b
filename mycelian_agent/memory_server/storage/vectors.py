"""The dense side of storage: the ``entry_vectors`` table behind one small interface, :class:`EntryVectors`.

A dense index (``retrieval/dense``) decides what to embed and when; everything it reads or writes in the database
goes through the :class:`EntryVectors` of the store it is attached to (``DenseIndex.attach``). Vectors are float32
bytes (``BLOB`` / ``bytea``) in ``entry_vectors``, one row per entry and model, and the cosines are computed from
them in the server either way. A backend whose database can find a query's nearest vectors itself (PostgreSQL with
pgvector's HNSW index) offers that as :attr:`EntryVectors.approximate` (:class:`ApproximateIndex`).

:class:`SqlVectors` writes the statements once, with ``?`` marks and column aliases; a backend's subclass
(``sqlite/vectors.py``, ``postgres/vectors.py``) runs them on its connections. The sample of a memory (whose cosines
give its typical cosine, ``retrieval/fusion.py``) is picked by a hash of the entries' seqs that SQL and numpy compute
alike (:data:`SAMPLE_KEY_SQL`, :func:`sample_order`), so a database and the exact scan sample the same entries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from mycelian_agent.memory_server.storage.moments import time_bounds

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SAMPLE_KEY_SQL", "ApproximateIndex", "EntryVectors", "SqlVectors", "VectorStatus", "sample_order"]

#: A backend's connection type.
Conn = TypeVar("Conn")
#: A row of the backend (``sqlite3.Row`` or a dict): by column name.
Row = Mapping[str, Any]

# Knuth's multiplicative hash (2^32 / golden ratio): spreads consecutive seqs over the sample order. Written so that
# SQL (bigint arithmetic, seq < 3.4e9) and numpy compute the same key.
_HASH_MULTIPLIER = 2654435761
_HASH_MODULUS = 1 << 32
#: :func:`sample_order`'s key in SQL, for a bigint seq column ``{0}``.
SAMPLE_KEY_SQL = f"mod({{0}} * {_HASH_MULTIPLIER}, {_HASH_MODULUS})"
_ENTRY_TEXT = "seq, entry_id, memory_id, summary, raw_entry"


@dataclass(frozen=True)
class VectorStatus:
    """How far the vectors of one model are behind the entries (of a database, or of one memory).

    ``entries``: entries stored; ``embedded``: those with a vector of ``model``; ``pending``: those without one
    (written behind and not there yet, or written by a lexical-only server); ``oldest_pending_s``: seconds since the
    oldest of those was stored (its ``creation_time``), None when none is pending."""

    model: str
    entries: int
    embedded: int
    pending: int
    oldest_pending_s: float | None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON object."""
        return asdict(self)


def sample_order(seqs: Any) -> Any:
    """The order (a numpy index array) in which entries with seqs ``seqs`` enter a memory's sample: by a hash of
    the seq, so any subset of a memory samples the same way and SQL (:data:`SAMPLE_KEY_SQL`) agrees."""
    import numpy as np

    keys = (np.asarray(seqs, dtype=np.int64) * _HASH_MULTIPLIER) % _HASH_MODULUS
    return np.lexsort((np.asarray(seqs, dtype=np.int64), keys))


class ApproximateIndex(Protocol):
    """A database's own nearest-neighbour search over the entry vectors (pgvector's HNSW index)."""

    def ready(self, conn: Any, dimension: int) -> bool:
        """Whether vectors of ``dimension`` can be searched through the index (it exists, committed)."""
        ...

    def nearest(
        self,
        conn: Any,
        memory_id: str,
        model: str,
        query: np.ndarray,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> list[tuple[int, bytes]]:
        """``(seq, float32 bytes)`` of (about) the ``k`` entries of the memory nearest to ``query`` (a unit float32
        row) with a vector of ``model``, within the time bounds."""
        ...

    def sample(self, conn: Any, memory_id: str, model: str, size: int) -> list[tuple[int, bytes, str]]:
        """``(seq, float32 bytes, moment)`` of the memory's first ``size`` entries with a vector of ``model`` in
        :func:`sample_order`."""
        ...

    def vectors_of(self, conn: Any, model: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """``(seq, float32 bytes)`` of those of ``seqs`` that have a vector of ``model``."""
        ...


class EntryVectors(Protocol):
    """What a dense index reads and writes in a backend: the entries' texts and their vectors in ``entry_vectors``.

    ``conn`` is a connection of the backend (``sqlite3`` or psycopg 3, rows by column name); entry rows read for
    embedding have the columns ``seq, entry_id, memory_id, summary, raw_entry``; vectors are numpy float32 rows."""

    @property
    def approximate(self) -> ApproximateIndex | None:
        """The database's nearest-neighbour index, None when it has none (the exact scan serves)."""
        ...

    def transaction(self, conn: Any) -> AbstractContextManager[None]:
        """A transaction of its own on ``conn``, unless the caller's is open (then the caller commits)."""
        ...

    def entry_texts(self, conn: Any, seqs: Sequence[int]) -> list[Row]:
        """The entries ``seqs`` (those still there), by seq."""
        ...

    def unembedded(self, conn: Any, model: str, memory_id: str | None = None, limit: int | None = None) -> list[Row]:
        """The entries (of ``memory_id``, or of every memory) without a vector of ``model``, by seq, ``limit`` at
        most."""
        ...

    def unembedded_seqs(self, conn: Any, model: str) -> list[tuple[int, str]]:
        """``(seq, memory_id)`` of every entry without a vector of ``model``, by seq."""
        ...

    def unembedded_after(self, conn: Any, model: str, memory_id: str, after_seq: int) -> list[tuple[int, bool]]:
        """``(seq, without a vector of model)`` of the memory's entries above ``after_seq``, by seq."""
        ...

    def insert(self, conn: Any, model: str, entries: Sequence[tuple[int, str]], vectors: np.ndarray) -> None:
        """Store the vectors of new entries ``(seq, memory_id)`` (one row each), inside the caller's transaction."""
        ...

    def store(self, conn: Any, model: str, entries: Sequence[tuple[int, str]], vectors: np.ndarray) -> int:
        """Store the vectors of entries ``(seq, entry_id)`` (one row each) whose entry (seq and id) is still there,
        in one transaction (the caller's if open); return how many of them have a vector of ``model`` after."""
        ...

    def vector_count(self, conn: Any, model: str, memory_id: str) -> int:
        """How many of the memory's entries have a vector of ``model``."""
        ...

    def entry_count(self, conn: Any, memory_id: str) -> int:
        """How many entries the memory holds."""
        ...

    def version(self, conn: Any) -> Hashable | None:
        """A value equal on two calls with ``conn`` only if no row of the database changed in between (by any
        connection); None when the backend cannot tell cheaply (then a caller must read again what it needs)."""
        ...

    def last_seq(self, conn: Any, memory_id: str) -> int:
        """The memory's largest entry seq (0 when it has none)."""
        ...

    def vectors_after(self, conn: Any, model: str, memory_id: str, after_seq: int) -> list[tuple[int, bytes]]:
        """``(seq, float32 bytes)`` of the memory's vectors of ``model`` above ``after_seq``, by seq."""
        ...

    def inside(self, conn: Any, memory_id: str, after: str | None, before: str | None) -> set[int]:
        """The seqs of the memory's entries within the time bounds (``moments.time_bounds``)."""
        ...

    def status(self, conn: Any, model: str, memory_id: str | None = None) -> VectorStatus:
        """How many entries (of ``memory_id``, or of every memory) have a vector of ``model`` and how many wait."""
        ...


class SqlVectors(ABC, Generic[Conn]):
    """:class:`EntryVectors` in SQL that both backends run: written with ``?`` marks; a subclass runs it on its
    connections (:meth:`_execute`, :meth:`_executemany`, :meth:`transaction`) and may add columns to the vector rows
    (:meth:`_columns`) or work before a write (:meth:`_prepare`, :meth:`_still_there`)."""

    @property
    def approximate(self) -> ApproximateIndex | None:
        """None here: the exact scan serves (see :class:`EntryVectors`)."""
        return None

    def version(self, conn: Conn) -> Hashable | None:
        """None here: see :meth:`EntryVectors.version`."""
        del conn
        return None

    @abstractmethod
    def _execute(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run ``sql`` (``?`` marks) on ``conn``; return the cursor."""

    @abstractmethod
    def _executemany(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` (``?`` marks) once per row of parameters."""

    @abstractmethod
    def transaction(self, conn: Conn) -> AbstractContextManager[None]:
        """See :meth:`EntryVectors.transaction`."""

    def _columns(self) -> tuple[str, str]:
        """The vector columns written besides ``seq, memory_id, model`` and their value marks."""
        return "vector", "?"

    def _values(self, vector: np.ndarray) -> tuple[Any, ...]:
        """The values of :meth:`_columns` for one vector."""
        return (vector.tobytes(),)

    def _prepare(self, conn: Conn, dimension: int) -> None:
        """Before a transaction writes vectors of ``dimension`` (nothing here)."""

    def _still_there(self, conn: Conn, seqs: Sequence[int]) -> set[int] | None:
        """Inside :meth:`store`'s transaction: those of ``seqs`` whose entries it may write vectors for (None: let the
        ``INSERT``'s ``SELECT`` find them, which sees the truth where writes are serialised)."""
        return None

    def _upsert(self, *, from_entry: bool) -> str:
        """The statement writing one vector: parameters ``(seq, memory_id, model, *values)``, or with ``from_entry``
        ``(model, *values, seq, entry_id)``, taking the seq and memory from the entry's row so that a vector is
        stored only while its entry (seq and id) is there."""
        columns, marks = self._columns()
        source = (
            f"SELECT seq, memory_id, ?, {marks} FROM entries WHERE seq = ? AND entry_id = ?"
            if from_entry
            else f"VALUES (?, ?, ?, {marks})"
        )
        update = ", ".join(
            f"{column.strip()} = excluded.{column.strip()}" for column in ("memory_id", "model", *columns.split(","))
        )
        return (
            f"INSERT INTO entry_vectors (seq, memory_id, model, {columns}) {source} "
            f"ON CONFLICT (seq) DO UPDATE SET {update}"
        )

    def entry_texts(self, conn: Conn, seqs: Sequence[int]) -> list[Row]:
        """See :meth:`EntryVectors.entry_texts`."""
        if not seqs:
            return []
        marks = ",".join("?" * len(seqs))
        return list(
            self._execute(
                conn, f"SELECT {_ENTRY_TEXT} FROM entries WHERE seq IN ({marks}) ORDER BY seq", list(seqs)
            ).fetchall()
        )

    def unembedded(self, conn: Conn, model: str, memory_id: str | None = None, limit: int | None = None) -> list[Row]:
        """See :meth:`EntryVectors.unembedded`."""
        where = "" if memory_id is None else "AND e.memory_id = ? "
        params: list[Any] = [model] + ([] if memory_id is None else [memory_id])
        if limit is not None:
            params.append(limit)
        return list(
            self._execute(
                conn,
                "SELECT e.seq AS seq, e.entry_id AS entry_id, e.memory_id AS memory_id, e.summary AS summary, "
                "e.raw_entry AS raw_entry "
                "FROM entries e LEFT JOIN entry_vectors v ON v.seq = e.seq AND v.model = ? "
                f"WHERE v.seq IS NULL {where}ORDER BY e.seq{'' if limit is None else ' LIMIT ?'}",
                params,
            ).fetchall()
        )

    def unembedded_seqs(self, conn: Conn, model: str) -> list[tuple[int, str]]:
        """See :meth:`EntryVectors.unembedded_seqs`."""
        return [
            (int(row["seq"]), row["memory_id"])
            for row in self._execute(
                conn,
                "SELECT e.seq AS seq, e.memory_id AS memory_id FROM entries e LEFT JOIN entry_vectors v "
                "ON v.seq = e.seq AND v.model = ? WHERE v.seq IS NULL ORDER BY e.seq",
                (model,),
            )
        ]

    def unembedded_after(self, conn: Conn, model: str, memory_id: str, after_seq: int) -> list[tuple[int, bool]]:
        """See :meth:`EntryVectors.unembedded_after`."""
        return [
            (int(row["seq"]), bool(row["missing"]))
            for row in self._execute(
                conn,
                "SELECT e.seq AS seq, v.seq IS NULL AS missing FROM entries e "
                "LEFT JOIN entry_vectors v ON v.seq = e.seq AND v.model = ? "
                "WHERE e.memory_id = ? AND e.seq > ? ORDER BY e.seq",
                (model, memory_id, after_seq),
            ).fetchall()
        ]

    def insert(self, conn: Conn, model: str, entries: Sequence[tuple[int, str]], vectors: np.ndarray) -> None:
        """See :meth:`EntryVectors.insert`."""
        if not entries:
            return
        self._prepare(conn, len(vectors[0]))
        self._executemany(
            conn,
            self._upsert(from_entry=False),
            [
                (seq, memory_id, model, *self._values(vector))
                for (seq, memory_id), vector in zip(entries, vectors, strict=True)
            ],
        )

    def store(self, conn: Conn, model: str, entries: Sequence[tuple[int, str]], vectors: np.ndarray) -> int:
        """See :meth:`EntryVectors.store`."""
        if not entries:
            return 0
        with self.transaction(conn):
            kept = self._still_there(conn, [seq for seq, _ in entries])
            pairs = [
                (entry, vector)
                for entry, vector in zip(entries, vectors, strict=True)
                if kept is None or entry[0] in kept
            ]
            if not pairs:
                return 0
            self._prepare(conn, len(pairs[0][1]))
            self._executemany(
                conn,
                self._upsert(from_entry=True),
                [(model, *self._values(vector), seq, entry_id) for (seq, entry_id), vector in pairs],
            )
            stored = {
                int(row["seq"])
                for row in self._execute(
                    conn,
                    f"SELECT seq FROM entry_vectors WHERE model = ? AND seq IN ({','.join('?' * len(pairs))})",
                    [model, *(seq for (seq, _), _ in pairs)],
                )
            }
        return len(stored)

    def vector_count(self, conn: Conn, model: str, memory_id: str) -> int:
        """See :meth:`EntryVectors.vector_count`."""
        return int(
            self._execute(
                conn, "SELECT count(*) AS n FROM entry_vectors WHERE memory_id = ? AND model = ?", (memory_id, model)
            ).fetchone()["n"]
        )

    def entry_count(self, conn: Conn, memory_id: str) -> int:
        """See :meth:`EntryVectors.entry_count`."""
        return int(
            self._execute(conn, "SELECT count(*) AS n FROM entries WHERE memory_id = ?", (memory_id,)).fetchone()["n"]
        )

    def last_seq(self, conn: Conn, memory_id: str) -> int:
        """See :meth:`EntryVectors.last_seq`."""
        return int(
            self._execute(
                conn, "SELECT coalesce(max(seq), 0) AS last FROM entries WHERE memory_id = ?", (memory_id,)
            ).fetchone()["last"]
        )

    def vectors_after(self, conn: Conn, model: str, memory_id: str, after_seq: int) -> list[tuple[int, bytes]]:
        """See :meth:`EntryVectors.vectors_after`."""
        return [
            (int(row["seq"]), bytes(row["vector"]))
            for row in self._execute(
                conn,
                "SELECT seq, vector FROM entry_vectors WHERE memory_id = ? AND model = ? AND seq > ? ORDER BY seq",
                (memory_id, model, after_seq),
            ).fetchall()
        ]

    def status(self, conn: Conn, model: str, memory_id: str | None = None) -> VectorStatus:
        """See :meth:`EntryVectors.status`."""
        memory, extra = ("", []) if memory_id is None else (" AND e.memory_id = ?", [memory_id])
        waiting = self._execute(
            conn,
            "SELECT count(*) AS n, min(e.creation_time) AS oldest FROM entries e LEFT JOIN entry_vectors v "
            f"ON v.seq = e.seq AND v.model = ? WHERE v.seq IS NULL{memory}",
            [model, *extra],
        ).fetchone()
        entries = int(
            self._execute(conn, f"SELECT count(*) AS n FROM entries e WHERE 1 = 1{memory}", extra).fetchone()["n"]
        )
        pending = int(waiting["n"])
        oldest = None
        if pending and waiting["oldest"]:
            stored = datetime.fromisoformat(str(waiting["oldest"]).replace("Z", "+00:00"))
            if stored.tzinfo is None:
                stored = stored.replace(tzinfo=UTC)
            oldest = max(0.0, round((datetime.now(UTC) - stored).total_seconds(), 1))
        return VectorStatus(model, max(entries, pending), max(0, entries - pending), pending, oldest)

    def inside(self, conn: Conn, memory_id: str, after: str | None, before: str | None) -> set[int]:
        """See :meth:`EntryVectors.inside`."""
        where, params = time_bounds(after, before)
        return {
            int(row["seq"])
            for row in self._execute(
                conn, f"SELECT t.seq AS seq FROM entries t WHERE t.memory_id = ?{where}", [memory_id, *params]
            )
        }
