"""The backfill: embed every entry of a memory database that has no vector of the dense model yet, and count those
left (:func:`pending_vectors`, what ``mycelian-agent replay`` says at its end).

A write-behind store embeds entries written without a vector in the background when it opens, and a search embeds
a few itself (``dense_vectors.CATCHUP_LIMIT``); this does all of them at once, before a server starts (a database
filled by a lexical-only writer, a benchmark's copy), on the command line as::

    mycelian-agent embeddings backfill path/to/memory.db
"""

from __future__ import annotations

from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval.dense.loading import dense_by_default, require_dense_index
from mycelian_agent.memory_server.storage import open_store

__all__ = ["backfill_database", "pending_vectors"]


def backfill_database(target: str, name: str | None = encoders.AUTO, *, batch_threads: int = 0) -> int:
    """Embed every entry of the memory database ``target`` (a SQLite path or a ``postgresql://`` URL) that has no
    vector of the model yet; return the count."""
    index = require_dense_index(name, batch_threads=batch_threads, writes="inline")
    # Opened with the index: on PostgreSQL with pgvector, the vectors go to its column too.
    store = open_store(target, dense_factory=lambda: index)
    try:
        with store.explained(), store.maintenance_connection() as conn:
            return index.backfill(conn)
    finally:
        store.close()


def pending_vectors(
    target: str, name: str | None = None, *, embeddings: bool | None = None, backfill: bool = False
) -> tuple[int, int] | None:
    """How far the vectors of the memory database ``target`` are behind its entries, after writes by a server started
    with ``embeddings`` (None: dense when a model is installed) and the model ``name`` (None: auto): ``(vectors
    written now, entries still without one)``; with ``backfill`` the missing ones are embedded first
    (:func:`backfill_database`). None when such a server writes no vectors (``embeddings`` False or no model
    installed, a ``:memory:`` database, a model with no vector name). Counted in SQL: no model is loaded unless
    ``backfill``."""
    if embeddings is False or (embeddings is None and not dense_by_default()):
        return None
    model = encoders.MODEL_NAMES.get(encoders.resolve_model(name))
    if model is None or target == ":memory:":
        return None
    written = backfill_database(target, name) if backfill else 0
    store = open_store(target, pool_size=1)
    try:
        return written, store.vector_status(model).pending
    finally:
        store.close()
