"""The entry vectors on PostgreSQL (:class:`PostgresVectors`), and pgvector's HNSW index when the extension is there.

Without pgvector a search scores every vector of its memory in the server process (the exact scan of
``retrieval/dense/dense_vectors.py``), which is fine for thousands of entries and slow for a hundred thousand. With
it, ``entry_vectors`` gets a second copy of each vector in a ``vector`` column (``embedding``) and one HNSW index
(cosine) per vector dimension, and the dense side of a search in a large memory asks the index for the query's
nearest entries (``hnsw.iterative_scan``: the index is shared by every memory, the memory is a filter) instead of
scoring every entry; the fusion needs nothing more (``retrieval/fusion.py``: the typical cosine comes from a fixed
sample of the memory).

Why a conditional step and not a numbered migration (``migrations.py``): migrations run the same on every
database, and the extension may be missing (Debian bookworm has no ``postgresql-15-pgvector``), may not be creatable
by the server's role (pgvector is not a trusted extension: ``CREATE EXTENSION vector`` needs a superuser or the
database owner with the extension trusted), or may be installed later. So :func:`prepare` runs after the migrations
at every store open: it creates the extension if it can, adds the column (``IF NOT EXISTS``) and copies vectors
written without it (by a server that ran before pgvector was there), all idempotent, under an advisory lock of its
own. The ``bytea`` copy stays the source of truth: a database moved to a server without pgvector still searches (by
the exact scan), and cosines are computed from it in the server either way, so both paths score alike.

The HNSW index of a dimension ``d`` is a partial expression index, ``(embedding::vector(d)) WHERE vector_dims(embedding)
= d``, created when the first vector of that dimension is written (:func:`ensure_index`), since the dimension is the
model's and a column of one type holds any model's vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mycelian_agent.memory_server.storage.moments import moment, time_bounds
from mycelian_agent.memory_server.storage.postgres.migrations import ADVISORY_LOCK_KEY
from mycelian_agent.memory_server.storage.vectors import SAMPLE_KEY_SQL, SqlVectors

if TYPE_CHECKING:
    import numpy as np
    import psycopg

__all__ = [
    "EF_SEARCH_MIN",
    "HOW_TO_GET",
    "Availability",
    "PostgresVectors",
    "ensure_index",
    "index_name",
    "index_ready",
    "nearest",
    "prepare",
    "sample",
    "vector_literal",
    "vectors_of",
]

#: What to do for the HNSW path when the extension is missing.
HOW_TO_GET = (
    "install pgvector on the database server (Debian/Ubuntu with PGDG: apt-get install "
    "postgresql-<major>-pgvector; or build it: https://github.com/pgvector/pgvector) and restart; the "
    "server then creates it (CREATE EXTENSION vector needs a superuser: else run it once as one)"
)
#: The HNSW search list is at least this long (pgvector's default) and at least 4x the entries asked for.
EF_SEARCH_MIN = 40
# A lock of the dense setup's own, next to the migrations' ("mycelian" + 1): prepare and ensure_index queue on it.
_LOCK = ADVISORY_LOCK_KEY + 1
_FILL_BATCH = 1000
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Availability:
    """Whether the database serves the HNSW path: ``available``, pgvector's ``version``, and ``reason`` (why not,
    and how to get it, when it does not)."""

    available: bool
    version: str | None = None
    reason: str = ""


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form of a float32 row (``repr`` of each value: float4 round-trips exactly)."""
    return "[" + ",".join(map(repr, vector.tolist())) + "]"


def index_name(dimension: int) -> str:
    """The name of the HNSW index over vectors of ``dimension``."""
    return f"entry_vectors_hnsw_{int(dimension)}"


def _one(conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row (the connection's rows may be tuples or dicts), None if no row."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def prepare(conn: Any) -> Availability:
    """Make the database behind ``conn`` (autocommit, migrated) ready for the HNSW path if pgvector can be had:
    create the extension, add the ``embedding`` column, copy vectors written without it and index them. Returns
    what is available (never raises for a missing or refused extension: the exact scan serves then)."""
    import psycopg

    version = _one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    if version is None:
        offered = _one(conn, "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        if offered is None:
            return Availability(False, None, f"the database server has no pgvector extension: {HOW_TO_GET}")
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            detail = " ".join(str(exc).split())
            return Availability(
                False,
                None,
                f"pgvector {offered} is installed on the database server but this role "
                f"cannot create it ({detail}): run CREATE EXTENSION vector once as a superuser",
            )
        version = _one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    column = _one(
        conn,
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'entry_vectors' "
        "AND column_name = 'embedding' AND table_schema = current_schema()",
    )
    if column is None or _one(conn, "SELECT 1 FROM entry_vectors WHERE embedding IS NULL LIMIT 1") is not None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            conn.execute("ALTER TABLE entry_vectors ADD COLUMN IF NOT EXISTS embedding vector")
            # Rows written without the column (before pgvector, or by an older server): found by this index alone.
            conn.execute(
                "CREATE INDEX IF NOT EXISTS entry_vectors_unindexed ON entry_vectors (seq) WHERE embedding IS NULL"
            )
            filled = _fill(conn)
        if filled:
            _log.info("copied %d entry vectors into pgvector's column", filled)
    return Availability(True, str(version))


def _fill(conn: Any) -> int:
    """Copy the ``bytea`` vectors without an ``embedding`` into it and index each dimension met (lock held)."""
    import numpy as np

    filled, dimensions = 0, set()
    while True:
        rows = conn.execute(
            "SELECT seq, vector FROM entry_vectors WHERE embedding IS NULL ORDER BY seq LIMIT %s", (_FILL_BATCH,)
        ).fetchall()
        if not rows:
            break
        values = []
        for row in rows:
            seq, raw = (row["seq"], row["vector"]) if isinstance(row, dict) else row
            vector = np.frombuffer(bytes(raw), dtype=np.float32)
            dimensions.add(len(vector))
            values.append((vector_literal(vector), seq))
        with conn.cursor() as cursor:
            cursor.executemany("UPDATE entry_vectors SET embedding = %s::vector WHERE seq = %s", values)
        filled += len(rows)
    for dimension in sorted(dimensions):
        _create_index(conn, dimension)
    return filled


def _create_index(conn: Any, dimension: int) -> None:
    d = int(dimension)
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {index_name(d)} ON entry_vectors USING hnsw "
        f"((embedding::vector({d})) vector_cosine_ops) WHERE vector_dims(embedding) = {d}"
    )


def ensure_index(conn: Any, dimension: int) -> None:
    """Create the HNSW index of ``dimension`` unless it exists, inside the caller's transaction (which must not yet
    have written to ``entry_vectors``: the lock is taken first, so it cannot wait on ``prepare`` holding the lock)."""
    if index_ready(conn, dimension):
        return
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
    _create_index(conn, dimension)


def index_ready(conn: Any, dimension: int) -> bool:
    """Whether the HNSW index of ``dimension`` exists (committed)."""
    return _one(conn, "SELECT to_regclass(%s) IS NOT NULL", (index_name(dimension),)) is True


def nearest(
    conn: Any,
    memory_id: str,
    model: str,
    query: np.ndarray,
    k: int,
    after: str | None = None,
    before: str | None = None,
    *,
    explain: bool = False,
) -> list[tuple[int, bytes]]:
    """``(seq, float32 bytes)`` of (about) the ``k`` entries of the memory nearest to ``query`` (a unit float32
    row) by the HNSW index, within the time bounds. Approximate: pgvector's iterative scan goes on past the first
    ``ef_search`` candidates until ``k`` rows of this memory are found (or ``hnsw.max_scan_tuples`` is reached).
    With ``explain``, the query plan's lines instead (as ``(0, line)`` pairs: tests, benchmarks)."""
    d = len(query)
    where, params = time_bounds(after, before, alias="e", mark="%s")
    bounded = f" AND EXISTS (SELECT 1 FROM entries e WHERE e.seq = v.seq{where})" if where else ""
    with conn.transaction():
        # enable_sort off: a memory's rows through the (memory_id, model) index and a sort by distance is the
        # exact scan again, in the database; the planner takes it when it underestimates the index.
        conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', "
            "'relaxed_order', true), set_config('enable_sort', 'off', true)",
            (str(max(EF_SEARCH_MIN, 4 * k)),),
        )
        rows = conn.execute(
            f"{'EXPLAIN ' if explain else ''}SELECT v.seq AS seq, v.vector AS vector FROM entry_vectors v "
            f"WHERE v.memory_id = %s AND v.model = %s AND vector_dims(v.embedding) = {d}{bounded} "
            f"ORDER BY v.embedding::vector({d}) <=> %s::vector({d}) LIMIT %s",
            [memory_id, model, *params, vector_literal(query), k],
        ).fetchall()
    if explain:
        return [(0, next(iter(row.values())) if isinstance(row, dict) else row[0]) for row in rows]
    return [(int(row["seq"]), bytes(row["vector"])) for row in rows]


def vectors_of(conn: Any, model: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
    """``(seq, float32 bytes)`` of those of ``seqs`` that have a vector of ``model``."""
    if not seqs:
        return []
    rows = conn.execute(
        "SELECT seq, vector FROM entry_vectors WHERE seq = ANY(%s) AND model = %s", (list(seqs), model)
    ).fetchall()
    return [(int(row["seq"]), bytes(row["vector"])) for row in rows]


def sample(conn: Any, memory_id: str, model: str, size: int) -> list[tuple[int, bytes, str]]:
    """``(seq, float32 bytes, conversation time else creation time)`` of the memory's sample: its first ``size``
    entries with a vector of ``model`` in ``storage.vectors.sample_order`` (the seqs are picked from the entries' index
    first, so only the sample's vectors are read)."""
    key = SAMPLE_KEY_SQL.format("s.seq")
    rows = conn.execute(
        f"SELECT s.seq AS seq, v.vector AS vector, {moment('e')} AS moment FROM "
        f"(SELECT seq FROM entries WHERE memory_id = %s ORDER BY {SAMPLE_KEY_SQL.format('seq')}, seq LIMIT %s) s "
        f"JOIN entry_vectors v ON v.seq = s.seq AND v.model = %s JOIN entries e ON e.seq = s.seq "
        f"ORDER BY {key}, s.seq LIMIT %s",
        (memory_id, 2 * size, model, size),
    ).fetchall()
    return [(int(row["seq"]), bytes(row["vector"]), row["moment"]) for row in rows]


class PostgresVectors(SqlVectors["psycopg.Connection[Any]"]):
    """The ``entry_vectors`` SQL of the PostgreSQL backend (dict rows); with ``pgvector`` (the database has the
    extension and the ``embedding`` column, see :func:`prepare`), vectors are also written to that column, and the
    HNSW index serves as :attr:`approximate`. Thread-safe: the store runs calls at once."""

    def __init__(self, *, pgvector: bool = False) -> None:
        self.pgvector = pgvector
        self._indexed: set[int] = set()  # dimensions whose HNSW index exists

    @property
    def approximate(self) -> PostgresVectors | None:
        """This object's HNSW search (:meth:`ready`, :meth:`nearest`, :meth:`sample`, :meth:`vectors_of`) when the
        database has pgvector, else None."""
        return self if self.pgvector else None

    def _execute(self, conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(sql.replace("?", "%s"), params)

    def _executemany(self, conn: psycopg.Connection[Any], sql: str, rows: Sequence[Sequence[Any]]) -> None:
        conn.cursor().executemany(sql.replace("?", "%s"), rows)

    @contextmanager
    def transaction(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """A transaction (a savepoint inside the caller's)."""
        with conn.transaction():
            yield

    def _columns(self) -> tuple[str, str]:
        return ("vector, embedding", "?, ?::vector") if self.pgvector else super()._columns()

    def _values(self, vector: np.ndarray) -> tuple[Any, ...]:
        return (vector.tobytes(), vector_literal(vector)) if self.pgvector else super()._values(vector)

    def _prepare(self, conn: psycopg.Connection[Any], dimension: int) -> None:
        # Before the transaction writes to entry_vectors: the HNSW index of the dimension exists.
        if self.pgvector and dimension not in self._indexed:
            ensure_index(conn, dimension)
            self._indexed.add(dimension)

    def _still_there(self, conn: psycopg.Connection[Any], seqs: Sequence[int]) -> set[int]:
        # A delete of one of these entries may be in flight; inserting its vector would then fail the foreign key
        # (and the whole batch) when the delete commits. Lock the rows first and keep those still there.
        return {
            int(row["seq"])
            for row in self._execute(
                conn, f"SELECT seq FROM entries WHERE seq IN ({','.join('?' * len(seqs))}) FOR KEY SHARE", list(seqs)
            )
        }

    def ready(self, conn: psycopg.Connection[Any], dimension: int) -> bool:
        """Whether the HNSW index of ``dimension`` exists (:func:`index_ready`; remembered once it does)."""
        if dimension not in self._indexed:
            if not index_ready(conn, dimension):
                return False
            self._indexed.add(dimension)
        return True

    def nearest(
        self,
        conn: psycopg.Connection[Any],
        memory_id: str,
        model: str,
        query: np.ndarray,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> list[tuple[int, bytes]]:
        """See :func:`nearest`."""
        return nearest(conn, memory_id, model, query, k, after, before)

    def sample(
        self, conn: psycopg.Connection[Any], memory_id: str, model: str, size: int
    ) -> list[tuple[int, bytes, str]]:
        """See :func:`sample`."""
        return sample(conn, memory_id, model, size)

    def vectors_of(self, conn: psycopg.Connection[Any], model: str, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """See :func:`vectors_of`."""
        return vectors_of(conn, model, seqs)
