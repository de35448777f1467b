"""Connecting a store to a PostgreSQL database: the driver check, each pooled connection's settings, and what is said
once per database (no index by memory, which dense path serves). URLs are shown without their password
(``paths.redact_url``)."""

from __future__ import annotations

import logging
from typing import Any

from mycelian_agent.errors import ConfigError, MemoryServerError, one_line
from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors
from mycelian_agent.memory_server.storage.postgres.migrations import (
    MEMORY_INDEX,
    MEMORY_INDEX_STATEMENTS,
    PENDING_LIST_STATEMENT,
    migrate,
)
from mycelian_agent.paths import redact_url

__all__ = ["INSTALL_HINT", "announce_dense_path", "require_psycopg"]

#: What to install when psycopg is missing.
INSTALL_HINT = "pip install 'mycelian-agent[postgres]'"


def require_psycopg() -> None:
    """Raise :class:`ConfigError` naming the install command unless psycopg 3 and psycopg_pool import."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"a postgresql:// memory database needs psycopg 3 ({exc}): {INSTALL_HINT}") from None


_log = logging.getLogger(__name__)
_said_no_memory_index = False


def _say_no_memory_index() -> None:
    # Once per process: every store opened on such a database would say the same.
    global _said_no_memory_index
    if not _said_no_memory_index:
        _said_no_memory_index = True
        _log.warning(
            "the memory database has no search index by memory (CREATE EXTENSION btree_gin was refused: it needs "
            "the CREATE right on the database): searches read every memory's postings and slow down as the "
            "database grows; as an administrator run CREATE EXTENSION btree_gin; then %s",
            "; ".join(
                [
                    *MEMORY_INDEX_STATEMENTS,
                    *(PENDING_LIST_STATEMENT.format(index) for index in (MEMORY_INDEX, "contexts_memory_tsv")),
                ]
            ),
        )


_said: set[tuple[str, bool]] = set()


def announce_dense_path(url: str, hnsw_min: int) -> str:
    """At a server's start (``--embeddings`` on ``url``): migrate the database and prepare it for pgvector if it can
    be had (``pg_vectors.prepare``), log which dense path serves (once, as a store's open would) and return it in a few
    words for the startup line."""
    require_psycopg()
    import psycopg

    shown = redact_url(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            vectors = pg_vectors.prepare(conn)
    except psycopg.Error as exc:
        raise MemoryServerError(f"cannot prepare the memory database {shown}: {one_line(exc)}") from exc
    _say_dense_path(shown, vectors, hnsw_min)
    if vectors.available:
        return f"dense: pgvector {vectors.version} HNSW for memories of {hnsw_min}+ vectors"
    return "dense: exact scan (no pgvector)"


def _say_dense_path(shown: str, vectors: pg_vectors.Availability, hnsw_min: int | None) -> None:
    """Log which dense path serves the database (once per database and path in a process: sessions reopen it)."""
    if (shown, vectors.available) in _said:
        return
    _said.add((shown, vectors.available))
    if vectors.available:
        _log.info(
            "dense search on %s: pgvector %s, an HNSW index for memories of %s+ vectors (smaller ones: the exact scan)",
            shown,
            vectors.version,
            hnsw_min,
        )
    else:
        _log.warning(
            "dense search on %s: the exact scan in the server process (slow for memories of 100k entries) because %s",
            shown,
            vectors.reason,
        )


def _configure(conn: Any) -> None:
    """Each pooled connection: sequential scans start at the table's first page (PostgreSQL lets a large table's
    scan join one under way, wherever it is), so a statement taking the first N matches with no order
    (``lexical.rank_bounded``) gets the same rows on a sequential scan as on a bitmap scan (both go in the table's
    order), and from one search to the next."""
    conn.execute("SET synchronize_seqscans = off")
