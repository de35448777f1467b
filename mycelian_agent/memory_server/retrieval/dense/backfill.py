"""The backfill: embed every entry of a memory database that has no vector of the dense model yet.

A write-behind store embeds entries written without a vector in the background when it opens, and a search embeds
a few itself (``dense_vectors.CATCHUP_LIMIT``); this does all of them at once, before a server starts (a database
filled by a lexical-only writer, a benchmark's copy), on the command line as::

    mycelian-agent embeddings backfill path/to/memory.db
"""

from __future__ import annotations

from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval.dense.loading import require_dense_index
from mycelian_agent.memory_server.storage import open_store

__all__ = ["backfill_database"]


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
