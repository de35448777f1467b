"""The dense index: :class:`DenseVectors`, what to embed and when, and the dense side of a search.

Every statement it runs goes through the :class:`~mycelian_agent.memory_server.storage.vectors.EntryVectors` of the
store it is attached to (``storage/sqlite/vectors.py``, ``storage/postgres/vectors.py``); this module holds the
policy: vectors of the entries' summaries, written with the entry or behind it (``writer.py``; nothing but an
explicit :meth:`DenseVectors.settle` waits for those), a memory's matrix cached for the exact scan, the small catch-up
of entries a search finds without a vector (:data:`CATCHUP_LIMIT`; a larger gap is counted in the search's
``pending``), and
on PostgreSQL with pgvector the HNSW path for memories of :data:`HNSW_MIN` vectors or more, with the sample that
gives the typical cosine (``fusion.py``). It is one module because its writing and searching sides share one state:
the cached matrices that writes keep in step, and the writer whose queue a search's catch-up takes entries from.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval import fusion
from mycelian_agent.memory_server.retrieval.dense.encoders import Encode
from mycelian_agent.memory_server.retrieval.dense.query_cache import QUERY_CACHE_SIZE, QueryVectorCache
from mycelian_agent.memory_server.retrieval.dense.writer import SETTLE_TIMEOUT, Connect, VectorWriter
from mycelian_agent.memory_server.retrieval.dense_feedback import IndexSpace, ScanSpace
from mycelian_agent.memory_server.retrieval.fusion import DenseHits
from mycelian_agent.memory_server.retrieval.products import rows_dot
from mycelian_agent.memory_server.storage import entry_vectors
from mycelian_agent.memory_server.storage.vectors import ApproximateIndex, EntryVectors, Row

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BACKFILL_HINT", "CATCHUP_LIMIT", "HNSW_MIN", "DenseVectors"]

#: A search embeds at most this many of its memory's missing entries; more need :meth:`DenseVectors.backfill`.
CATCHUP_LIMIT = 16
#: On PostgreSQL with pgvector, memories of at least this many vectors are searched through the HNSW index; smaller
#: ones by the exact scan, which is exact and costs a few milliseconds there (the index is shared by every memory, so
#: a small memory is a needle that its filtered scan would look long for).
HNSW_MIN = 10_000
#: The command that embeds every entry without a vector at once (named by warnings).
BACKFILL_HINT = "`mycelian-agent embeddings backfill DB`"
_BATCH = 256
_log = logging.getLogger(__name__)

#: A store's connection: ``sqlite3.Connection`` or ``psycopg.Connection`` (rows readable by column name).
Connection = Any


class DenseVectors:
    """A :class:`~mycelian_agent.memory_server.storage.base.DenseIndex` over unit vectors from ``encode``.

    ``encode(texts)`` returns one L2-normalised float32 row per entry text; ``queries(texts)`` the same for search
    queries (default: ``encode``; e5 prefixes the two kinds differently). ``model`` is recorded with every vector;
    vectors of another model are ignored (and replaced by a backfill). The same index serves both backends: a store
    hands it its vector SQL when it opens (:meth:`attach`), and its methods take the store's connection. A memory's
    matrix is cached in memory and kept in step by this process's writes; a count mismatch (another process, a
    delete) reloads it. Safe to share between the store's threads (PostgreSQL runs calls at once).

    With ``write_behind`` (the default), a store that can open connections of its own hands one over with
    :meth:`attach`; from then on vectors are written by a :class:`~.writer.VectorWriter` after each write commits
    (:meth:`entries_written`), encoded by ``behind`` (default: ``encode``; a packaged model's runs on one thread),
    and nothing waits for them but an explicit :meth:`settle`: a search ranks with the vectors present, embeds a
    small gap itself and reports the entries it ranked without a vector (:attr:`DenseHits.pending`). The vectors
    of the last ``query_cache`` distinct queries are kept (:attr:`query_vectors`, ``query_cache.py``; 0: none).
    """

    def __init__(
        self,
        encode: Encode,
        *,
        model: str = "custom",
        write_behind: bool = True,
        queries: Encode | None = None,
        hnsw_min: int = HNSW_MIN,
        behind: Encode | None = None,
        query_cache: int = QUERY_CACHE_SIZE,
    ) -> None:
        import numpy

        self._np = numpy
        self._encode = encode
        self._encode_queries = queries or encode
        self._encode_behind = behind or encode
        self.model = model
        self.write_behind = write_behind
        self._storage: EntryVectors | None = None
        self._writer: VectorWriter | None = None
        self._cache: dict[str, tuple[list[int], Any]] = {}
        self._layouts: dict[str, _Layout] = {}  # memory id -> what searches derive from its cached matrix
        self._counted: dict[str, tuple[Any, int]] = {}  # memory id -> (database version, vectors) when all had one
        self._cache_lock = threading.Lock()
        self._deferred = threading.local()  # the entries of this thread's open batch()
        #: Entries embedded by searches (the small catch-up); tests check it stays 0 for embedded memories.
        self.embedded_at_search = 0
        #: Memories of at least this many vectors use the HNSW index when the database has pgvector.
        self.hnsw_min = hnsw_min
        self._large: dict[str, _LargeMemory] = {}  # memories searched through the HNSW index
        #: Searches answered by the HNSW index, and by the exact scan (tests, benchmarks).
        self.searches = {"hnsw": 0, "scan": 0}
        #: The kept query vectors (``query_cache.py``).
        self.query_vectors = QueryVectorCache(query_cache)
        self._removals = 0  # entries_removed calls so far
        self._removed_at: dict[int, int] = {}  # seq -> the entries_removed call that last replaced or deleted it

    def _vectors(self, texts: Sequence[str], *, behind: bool = False) -> np.ndarray:
        encode = self._encode_behind if behind else self._encode
        return self._np.asarray(encode(list(texts)), dtype=self._np.float32)

    def _query_vector(self, query: str) -> np.ndarray:
        return self.query_vectors.vector(
            self.model, query, lambda text: self._np.asarray(self._encode_queries([text]), dtype=self._np.float32)[0]
        )

    @staticmethod
    def entry_text(summary: str, raw_entry: str) -> str:
        """The text embedded for an entry: its summary, the text written for retrieval (who, when, the gist).

        The raw text stays searchable through the lexical index. Embedding ``summary + raw`` (as before) cost the
        encoder ~1.9x the characters for the same LoCoMo recall: any/all@10 0.778/0.681 with both, 0.789/0.676
        with the summary alone, 0.778/0.679 with the raw text added only where the summary does not quote it.
        """
        del raw_entry  # part of the signature: another index may embed it
        return summary

    def _db(self, conn: Connection) -> EntryVectors:
        # The attached store's vector SQL; on a connection of a store opened without this index, its backend's.
        return self._storage if self._storage is not None else entry_vectors(conn)

    # -- writing ---------------------------------------------------------------------------------------------

    def attach(self, vectors: EntryVectors, connect: Connect | None) -> None:
        """Called by a store when it opens: ``vectors`` is its vector SQL, ``connect()`` gives a connection of the
        writer thread's own (None: the store has none to give, e.g. a ``:memory:`` database). With ``write_behind``,
        start the writer."""
        behind = self.write_behind and connect is not None
        if behind and self._writer is not None and self._writer.alive:
            raise ConfigError(
                "this dense index already writes vectors for another open store; give each store "
                "its own index (dense_factory)"
            )
        self._storage = vectors
        if not behind or connect is None:
            return
        self._writer = VectorWriter(connect, self.embed_entries, self._missing_seqs)
        self._writer.start()

    @property
    def writer(self) -> VectorWriter | None:
        """The background writer while vectors are written behind, else None."""
        return self._writer

    def _behind(self) -> bool:
        # A writer whose thread died (see writer.py) hands the writes back to the inline path.
        return self._writer is not None and self._writer.alive

    def entries_written(self, memory_id: str, seqs: Sequence[int]) -> None:
        """Called by the store after a write commits with the new entries' seqs: queue them for the writer (inline,
        their vectors were written in the transaction)."""
        if seqs and self._writer is not None and self._writer.alive:
            self._writer.submit(memory_id, seqs)

    def entries_removed(self, memory_id: str, seqs: Sequence[int] | None, *, replaced: bool = False) -> None:
        """Called by the store after a write that deleted the memory's entries ``seqs`` (None: the memory was
        deleted) or ``replaced`` their text commits: forget what this process keeps of them (the memory's cached
        matrix, layout, counts and HNSW sample, the writer's queued entries, the kept query vectors); a replaced
        entry is marked, so that a vector the writer encoded from its old text is not stored after the change."""
        with self._cache_lock:
            self._removals += 1
            for seq in seqs if replaced and seqs else ():
                self._removed_at[seq] = self._removals
            self._cache.pop(memory_id, None)
            self._layouts.pop(memory_id, None)
        self._counted.pop(memory_id, None)
        self._large.pop(memory_id, None)
        self.query_vectors.clear()  # a query may have quoted the forgotten text
        if self._writer is not None:
            self._writer.drop(memory_id, seqs)

    def settle(self, memory_id: str | None = None, timeout: float = SETTLE_TIMEOUT) -> bool:
        """Wait until the writer has embedded the entries it holds of ``memory_id`` (None: of every memory), within
        ``timeout`` seconds; False if it could not. Only explicit waits for vectors call it (benchmarks, tests,
        ``await_consistency`` with ``vectors``): writes and searches never wait for vectors."""
        if self._writer is None:
            return True
        if memory_id is None:
            return self._writer.wait_idle(timeout)
        return self._writer.settle(memory_id, timeout)

    def close(self) -> None:
        """Stop the writer after the batch it is embedding, within ``writer.CLOSE_TIMEOUT`` (the entries left are
        embedded at the next start)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def embed_entries(self, connect: Connect, seqs: Sequence[int]) -> int:
        """Embed the entries ``seqs`` (read from the database) and store their vectors; return how many were
        stored. ``connect()`` is entered twice, to read and to write, and no connection is held while the encoder
        runs (Postgres: the pool's connections stay free for searches). A vector is stored only if its entry (seq
        and entry id) is still there when it is written."""
        if not seqs:
            return 0
        read_at = self._removals
        with connect() as conn:
            rows = self._db(conn).entry_texts(conn, seqs)
        if not rows:
            return 0
        vectors = self._encode_rows(rows, behind=True)
        # An entry replaced since its text was read is left out: its new text is queued again.
        with self._cache_lock:
            keep = [i for i, row in enumerate(rows) if self._removed_at.get(int(row["seq"]), 0) <= read_at]
        if not keep:
            return 0
        with connect() as conn:
            stored = self._store_vectors(conn, [rows[i] for i in keep], vectors[keep])
        with self._cache_lock:
            # A replaced entry's vector is written over its old one (same count): drop the memory's cached matrix,
            # which a search may have loaded with the old vector in between.
            for i in keep:
                seq, memory_id = int(rows[i]["seq"]), rows[i]["memory_id"]
                if seq in self._removed_at:
                    if self._removed_at[seq] <= read_at:
                        del self._removed_at[seq]
                    self._cache.pop(memory_id, None)
                    self._layouts.pop(memory_id, None)
        return stored

    def _encode_rows(self, rows: Sequence[Row], *, behind: bool = False) -> np.ndarray:
        return self._vectors([self.entry_text(row["summary"], row["raw_entry"]) for row in rows], behind=behind)

    def _store_vectors(self, conn: Connection, rows: Sequence[Row], vectors: np.ndarray) -> int:
        return self._db(conn).store(conn, self.model, [(int(row["seq"]), row["entry_id"]) for row in rows], vectors)

    def _missing_seqs(self, conn: Connection) -> list[tuple[int, str]]:
        return self._db(conn).unembedded_seqs(conn, self.model)

    def index_entries(self, conn: Connection, items: Sequence[tuple[int, str, str]]) -> None:
        """Embed ``(seq, memory_id, text)`` items in one batch and store their vectors (caller's transaction)."""
        if not items:
            return
        vectors = self._vectors([text for _, _, text in items])
        self._db(conn).insert(conn, self.model, [(seq, memory_id) for seq, memory_id, _ in items], vectors)

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

    def _store_missing(self, conn: Connection, rows: Sequence[Row]) -> None:
        # Each batch encoded first, outside any transaction (SQLite: no write lock held while the encoder runs).
        for start in range(0, len(rows), _BATCH):
            part = rows[start : start + _BATCH]
            if part:
                self._store_vectors(conn, part, self._encode_rows(part))

    def backfill(self, conn: Connection, memory_id: str | None = None) -> int:
        """Embed the entries (of ``memory_id``, or of every memory) that have no vector of this model yet, in
        batches of one transaction each; return how many were embedded."""
        rows = self._db(conn).unembedded(conn, self.model, memory_id)
        if rows:
            _log.info("embedding %d entries without a %s vector", len(rows), self.model)
            self._store_missing(conn, rows)
        return len(rows)

    # -- searching -------------------------------------------------------------------------------------------

    def _catch_up(self, conn: Connection, memory_id: str) -> tuple[int, int]:
        """Embed the memory's entries without a vector when they are few (:data:`CATCHUP_LIMIT`; those the writer
        holds are taken from it); return ``(vectors, pending)``: how many of its entries have a vector, and how many
        do not (the search ranks them by their words alone)."""
        db = self._db(conn)
        version = db.version(conn)  # read before the counts: a write in between shows at the next search
        known = self._counted.get(memory_id)  # (one read or write of a dict: no lock needed)
        if version is not None and known is not None and known[0] == version:
            return known[1], 0
        vectors = db.vector_count(conn, self.model, memory_id)
        gap = db.entry_count(conn, memory_id) - vectors
        if gap <= 0:
            if version is not None:
                self._counted[memory_id] = (version, vectors)
            return vectors, 0
        if gap > CATCHUP_LIMIT:
            return vectors, gap
        rows = db.unembedded(conn, self.model, memory_id, CATCHUP_LIMIT)
        rows = self._claim(rows)
        if rows:
            try:
                self._store_missing(conn, rows)
            except Exception:  # e.g. a text the encoder cannot take: the search goes on with the vectors present
                _log.exception(
                    "could not embed %d entries of memory %s at search time; searching with the %d embedded ones",
                    len(rows),
                    memory_id,
                    vectors,
                )
                self._give_back(memory_id, rows)
            else:
                self.embedded_at_search += len(rows)
        entries = vectors + gap
        vectors = db.vector_count(conn, self.model, memory_id)
        return vectors, max(0, entries - vectors)

    def _claim(self, rows: Sequence[Row]) -> list[Row]:
        """``rows``, which a search embeds itself, taken out of the writer's queue (so it does not encode them
        again). Those it is encoding now are embedded here too: waiting for its batch (up to :data:`~.writer.BATCH`
        texts on one thread) would hold the search for seconds, and a search must find an entry just written by
        its meaning (the second write of the same vector is an upsert)."""
        if self._writer is not None:
            self._writer.claim([int(row["seq"]) for row in rows])
        return list(rows)

    def _give_back(self, memory_id: str, rows: Sequence[Row]) -> None:
        """Entries a search took from the writer but could not embed: the writer's again."""
        if self._writer is not None and self._writer.alive:
            self._writer.submit(memory_id, [int(row["seq"]) for row in rows])

    def _load(self, conn: Connection, memory_id: str, after_seq: int) -> tuple[list[int], np.ndarray]:
        rows = self._db(conn).vectors_after(conn, self.model, memory_id, after_seq)
        return [seq for seq, _ in rows], self._stack([raw for _, raw in rows])

    def _matrix(self, conn: Connection, memory_id: str, count: int) -> tuple[list[int], np.ndarray]:
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
    ) -> tuple[list[int], np.ndarray]:
        """``(seqs, cosines)`` of every embedded entry of ``memory_id`` within the time bounds (others -inf), by the
        exact scan (a small gap of entries without a vector embedded first, as a search does)."""
        return self._scan(conn, memory_id, self._query_vector(query), after, before, self._catch_up(conn, memory_id)[0])

    def hits(
        self,
        connect: Connect,
        memory_id: str,
        query: str,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> DenseHits | None:
        """The dense side of a search for the fusion (``fusion.DenseHits``): the ``k`` entries of ``memory_id``
        nearest to ``query`` within the time bounds and the memory's typical cosine, and how to get the cosines of
        other entries (the lexical candidates, later), and how many of the memory's entries it ranked without a
        vector (``pending``: written behind and not there yet); None when no entry has a vector and none is
        pending. ``connect()`` gives the store's connection (entered again for those cosines if they need the
        database). On PostgreSQL with pgvector, a memory of at least :attr:`hnsw_min` vectors is answered by the
        HNSW index, else by the exact scan. Nothing waits for the writer: a gap of at most :data:`CATCHUP_LIMIT`
        entries is embedded here, a larger one is left to the writer and counted in ``pending``."""
        vector = self._query_vector(query)
        with connect() as conn:
            db = self._db(conn)
            approximate = db.approximate
            if approximate is not None:
                large = self._large.get(memory_id)
                if large is None:
                    count, pending = self._catch_up(conn, memory_id)
                    if count >= self.hnsw_min and approximate.ready(conn, len(vector)):
                        large = self._large[memory_id] = _LargeMemory(db.last_seq(conn, memory_id), count)
                        with self._cache_lock:
                            self._cache.pop(memory_id, None)  # the exact scan's matrix is not needed any more
                            self._layouts.pop(memory_id, None)
                else:
                    pending = self._catch_up_after(conn, memory_id, large)
                    count = large.size
                if large is not None:
                    self.searches["hnsw"] += 1
                    return _pending(
                        self._hnsw_hits(approximate, conn, connect, memory_id, vector, k, after, before, large), pending
                    )
            else:
                count, pending = self._catch_up(conn, memory_id)
            self.searches["scan"] += 1
            # One read of the cache for the scan and its layout: another thread's search, or the writer, may
            # replace the cached matrix in between, and rows of one matrix must not be named by another's seqs.
            seqs, matrix = self._matrix(conn, memory_id, count)
            cosines = self._cosines_in(conn, memory_id, seqs, matrix, vector, after, before)
            layout = self._layout(memory_id, seqs, matrix)
            hits = fusion.scan_hits(layout.seqs, cosines, k, sample=layout.sample)
            if hits is not None:  # the vectors scanned, for the dense feedback (retrieval/dense_feedback.py)
                hits.space = ScanSpace(
                    vector, layout.seqs, layout.matrix, self._np.isfinite(cosines), lambda matrix: layout.mean
                )
            return _pending(hits, pending)

    def _layout(self, memory_id: str, seqs: list[int], matrix: np.ndarray) -> _Layout:
        """What searches derive from the memory's cached ``(seqs, matrix)`` (one entry of the cache), kept until the
        cache holds other objects."""
        with self._cache_lock:
            kept = self._layouts.get(memory_id)
        if kept is not None and kept.matrix is matrix and kept.rows is seqs:
            return kept
        layout = _Layout(seqs, matrix)
        with self._cache_lock:
            self._layouts[memory_id] = layout
        return layout

    def _catch_up_after(self, conn: Connection, memory_id: str, large: _LargeMemory) -> int:
        """The catch-up of a memory searched through the index: only its entries above the last seq checked are
        looked at (counting a 100k-entry memory's entries and vectors at every search costs more than the search),
        and those without a vector are embedded when they are few. Returns the memory's entries still without a
        vector as far as this process knows: those the writer holds, else those left here."""
        rows = self._db(conn).unembedded_after(conn, self.model, memory_id, large.checked)
        left = 0
        if rows:
            missing = [seq for seq, without in rows if without]
            if missing and len(missing) <= CATCHUP_LIMIT:
                texts = self._claim(self._db(conn).entry_texts(conn, missing))
                try:
                    self._store_missing(conn, texts)
                    self.embedded_at_search += len(texts)
                except Exception:
                    _log.exception("could not embed %d entries of memory %s at search time", len(texts), memory_id)
                    self._give_back(memory_id, texts)
            else:
                left = len(missing)
            large.checked = rows[-1][0]
            large.size += len(rows)
        if self._writer is not None and self._writer.alive:
            return self._writer.outstanding(memory_id)
        return left

    def _hnsw_hits(
        self,
        approximate: ApproximateIndex,
        conn: Connection,
        connect: Connect,
        memory_id: str,
        vector: np.ndarray,
        k: int,
        after: str | None,
        before: str | None,
        large: _LargeMemory,
    ) -> DenseHits | None:
        np = self._np
        if large.sample is None or large.size > large.sampled * 1.5:
            rows = approximate.sample(conn, memory_id, self.model, fusion.SAMPLE)
            large.sample = (self._stack([raw for _, raw, _ in rows]), [moment for _, _, moment in rows])
            large.sampled = large.size
        near = approximate.nearest(conn, memory_id, self.model, vector, k, after, before)
        if not near:
            return None
        values = self._cosines(near, vector)
        order = sorted(values, key=lambda seq: (-values[seq], -seq))
        matrix, moments = large.sample
        inside = [
            i
            for i, moment in enumerate(moments)
            if (after is None or moment > after) and (before is None or moment < before)
        ]
        if inside:
            typical = float(np.median(rows_dot(matrix[inside], vector).astype(np.float64)))
        else:  # no sampled entry inside the bounds: the cosines at hand
            typical = float(np.median(list(values.values())))

        def more(seqs: Sequence[int]) -> dict[int, float]:
            # The lexical candidates are inside the bounds already (the lexical search applies them).
            with connect() as again:
                return self._cosines(approximate.vectors_of(again, self.model, seqs), vector)

        def vectors_of(seqs: Sequence[int]) -> dict[int, Any]:  # the dense feedback's (dense_feedback.py)
            with connect() as again:
                rows = approximate.vectors_of(again, self.model, seqs)
            return dict(zip((seq for seq, _ in rows), self._stack([raw for _, raw in rows]), strict=True))

        def nearest_to(moved: Any, count: int) -> list[int]:
            unit = (moved / np.linalg.norm(moved)).astype(np.float32)
            with connect() as again:
                found = self._cosines(
                    approximate.nearest(again, memory_id, self.model, unit, count, after, before), unit
                )
            return sorted(found, key=lambda seq: (-found[seq], -seq))

        centroid = matrix.mean(axis=0) if len(matrix) else np.zeros_like(vector)
        return DenseHits(values, order, typical, more, "hnsw", IndexSpace(vector, centroid, vectors_of, nearest_to))

    def _cosines(self, rows: Sequence[tuple[int, bytes]], vector: np.ndarray) -> dict[int, float]:
        """seq -> cosine with ``vector`` of ``(seq, float32 bytes)`` rows, computed as the exact scan does."""
        if not rows:
            return {}
        cosines = rows_dot(self._stack([raw for _, raw in rows]), vector)
        return {seq: float(cosine) for (seq, _), cosine in zip(rows, cosines, strict=True)}

    def _stack(self, raws: Sequence[bytes]) -> np.ndarray:
        np = self._np
        if not raws:
            return np.zeros((0, 0), dtype=np.float32)
        return np.frombuffer(b"".join(raws), dtype=np.float32).reshape(len(raws), -1)

    def _scan(
        self, conn: Connection, memory_id: str, vector: np.ndarray, after: str | None, before: str | None, count: int
    ) -> tuple[list[int], np.ndarray]:
        seqs, matrix = self._matrix(conn, memory_id, count)
        return seqs, self._cosines_in(conn, memory_id, seqs, matrix, vector, after, before)

    def _cosines_in(
        self,
        conn: Connection,
        memory_id: str,
        seqs: list[int],
        matrix: np.ndarray,
        vector: np.ndarray,
        after: str | None,
        before: str | None,
    ) -> np.ndarray:
        """Cosines of ``matrix``'s rows (entries ``seqs``) with ``vector``; -inf outside the time bounds."""
        np = self._np
        if not seqs:
            return np.zeros(0, dtype=np.float32)
        scores = rows_dot(matrix, vector)
        if after is not None or before is not None:
            allowed = self._db(conn).inside(conn, memory_id, after, before)
            mask = np.fromiter((seq in allowed for seq in seqs), dtype=bool, count=len(seqs))
            scores = np.where(mask, scores, -np.inf)
        return scores


def _pending(hits: DenseHits | None, pending: int) -> DenseHits | None:
    """``hits`` saying that ``pending`` of the memory's entries were ranked without a vector (an empty answer of
    the dense side when no entry had one but some are pending)."""
    if not pending:
        return hits
    if hits is None:
        return DenseHits({}, [], 0.0, pending=pending)
    hits.pending = pending
    return hits


class _Layout:
    """What a search derives from a memory's cached matrix, kept with it (each costs ~0.3-0.5 ms a search at
    10,000 vectors): the rows' seqs as an array, the rows of the memory's sample (``fusion.SAMPLE``, for the
    typical cosine), and the mean row (the dense feedback's centroid, computed when first asked for)."""

    def __init__(self, seqs: list[int], matrix: np.ndarray) -> None:
        import numpy

        if len(seqs) != len(matrix):
            raise ValueError(f"a layout of {len(seqs)} seqs for a matrix of {len(matrix)} rows")
        self.matrix = matrix
        self.rows = seqs  # the cached list (identity: see DenseVectors._layout)
        self.seqs = numpy.asarray(seqs, dtype=numpy.int64)
        self.sample = fusion.sample_order(self.seqs)[: fusion.SAMPLE]
        self._mean: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        if self._mean is None:
            self._mean = self.matrix.mean(axis=0)
        return self._mean


class _LargeMemory:
    """A memory searched through the HNSW index: the last entry seq its catch-up checked, its size as this process
    knows it (entries), and its sample (vectors and moments, for the typical cosine) with the size it was taken at."""

    def __init__(self, checked: int, size: int) -> None:
        self.checked = checked
        self.size = size
        self.sample: tuple[np.ndarray, list[str]] | None = None
        self.sampled = 0
