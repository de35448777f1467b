"""Scale-out: SQLite vs PostgreSQL server latency, and replay throughput with 1, 2, 4 worker processes on one Postgres.

    mycelian-agent bench scaleout --out bench-out/scaleout [--entries 10000] [--pg-url URL]

Without ``--pg-url`` a throwaway cluster is started (``pg_config --bindir``; see ``memory_server/pg_cluster.py``)
and removed afterwards. Latency: the same corpus as the ``server`` benchmark (``bench_server.make_corpus``) is
written into one memory through the store, then a stdio server on that database is timed for ``add_entry`` (into
an empty memory) and ``search_memories`` (over the full memory), exactly as ``bench server`` does. Throughput:
``mycelian-agent replay --workers N`` of the same synthetic conversations into a fresh Postgres database (memory and
checkpoints), N = 1, 2, 4, in the same run; reported as messages/s and as the ratio to the 1-worker run.
``--embeddings`` times hybrid search instead (servers with ``--embeddings``; the prefill is embedded by the backfill).
Results go to ``OUT/scaleout.json`` and a Markdown table on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mycelian_bench.bench_server import _measure, _ms, make_corpus

__all__ = ["markdown", "run_scaleout"]


def _new_database(cluster: Any, pg_url: str | None, name: str) -> str:
    """Create database ``name`` on the throwaway ``cluster``, else on the server of ``pg_url``; its URL."""
    if cluster is not None:
        return str(cluster.create_database(name))
    if pg_url is None:
        raise ValueError("a database needs a throwaway cluster or pg_url")
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_url.rsplit("/", 1)[0] + "/" + name


def _prefill(target: str, corpus: list[dict[str, Any]], *, embeddings: bool = False) -> tuple[str, str, float]:
    from mycelian_agent.memory_server.retrieval.dense.index import backfill_database
    from mycelian_agent.memory_server.storage import open_store

    started = time.perf_counter()
    store = open_store(target, pool_size=1)
    try:
        vault = store.create_vault("bench")["vaultId"]
        memory = store.create_memory(vault, "big", "chat")["memoryId"]
        for entry in corpus:
            store.add_entry(vault, memory, **entry)
        for k in range(0, len(corpus), 500):
            store.put_context(vault, memory, "## Facts\n" + "\n".join(f"- {e['summary']}" for e in corpus[k : k + 40]))
    finally:
        store.close()
    if embeddings:  # in batches (the writer above is lexical-only): what an existing database's backfill does
        backfill_database(target)
    return vault, memory, time.perf_counter() - started


def _conversations(directory: Path, count: int, messages: int) -> list[Path]:
    corpus = make_corpus(count * messages, seed=5)
    paths = []
    for c in range(count):
        turns = corpus[c * messages : (c + 1) * messages]
        half = messages // 2
        sessions = [
            {
                "session_id": f"s{s}",
                "conversation_time": f"2024-0{s + 1}-10T10:00:00Z",
                "messages": [
                    {"role": t["tags"]["role"], "content": t["raw_entry"]} for t in turns[s * half : (s + 1) * half]
                ],
            }
            for s in range(2)
        ]
        path = directory / f"conversation-{c}.json"
        path.write_text(json.dumps({"conversation_id": f"scaleout-{c}", "sessions": sessions}))
        paths.append(path)
    return paths


def _replay(
    files: list[Path], url: str, workers: int, *, state: str | None = None, vault: str = "scaleout"
) -> dict[str, Any]:
    """``mycelian-agent replay --workers N`` of ``files`` into ``url`` (checkpoints in ``state``, default the same
    database), timed by wall clock: messages, wall seconds, messages/s. BM25 alone (``--no-embeddings``): the
    store's scaling, comparable with earlier runs; the encoder's cost is measured by ``bench embeddings ingest``."""
    command = [
        sys.executable,
        "-m",
        "mycelian_agent.cli",
        "replay",
        *map(str, files),
        "--db",
        url,
        "--state",
        state or url,
        "--vault",
        vault,
        "--workers",
        str(workers),
        "--no-embeddings",
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"replay --workers {workers} failed: {done.stderr[-2000:]}")
    stats = json.loads(done.stdout)
    return {
        "workers": workers,
        "messages": stats["messages"],
        "wall_s": round(wall, 2),
        "messages_per_s": round(stats["messages"] / wall, 2),
    }


def run_scaleout(
    out: Path,
    *,
    entries: int = 10_000,
    adds: int = 500,
    searches: int = 200,
    warmup: int = 20,
    conversations: int = 8,
    messages: int = 120,
    workers: tuple[int, ...] = (1, 2, 4),
    pg_url: str | None = None,
    embeddings: bool = False,
) -> dict[str, Any]:
    """Run both measurements (see the module docstring) and return the results (also written to OUT)."""
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster

    out.mkdir(parents=True, exist_ok=True)
    cluster = None if pg_url else TemporaryCluster.start()

    def database(name: str) -> str:
        return _new_database(cluster, pg_url, name)

    suffix = str(int(time.time()))
    results: dict[str, Any] = {
        "environment": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "params": {
            "embeddings": embeddings,
            "entries": entries,
            "adds": adds,
            "searches": searches,
            "warmup": warmup,
            "conversations": conversations,
            "messages_per_conversation": messages,
        },
        "latency": {},
        "ingestion": [],
    }
    try:
        corpus = make_corpus(entries)
        sqlite_path = out / "latency.db"
        for suffix_ in ("", "-wal", "-shm"):
            Path(f"{sqlite_path}{suffix_}").unlink(missing_ok=True)
        for backend, target in (("sqlite", str(sqlite_path)), ("postgres", database(f"latency_{suffix}"))):
            vault, big, fill_s = _prefill(target, corpus, embeddings=embeddings)
            add_s, search_s, hits = asyncio.run(
                _measure(target, vault, big, corpus, adds=adds, searches=searches, warmup=warmup, embeddings=embeddings)
            )
            results["latency"][backend] = {
                "prefill_s": round(fill_s, 1),
                "add_entry": _ms(add_s),
                "search_memories": {**_ms(search_s), "queries_with_hits": hits},
            }
        files = _conversations(out, conversations, messages) if workers else []
        for count in workers:
            results["ingestion"].append(_replay(files, database(f"ingest_{count}_{suffix}"), count))
        base = results["ingestion"][0]["messages_per_s"] if workers else 0.0
        for row in results["ingestion"]:
            row["speedup"] = round(row["messages_per_s"] / base, 2)
            row["efficiency"] = round(row["speedup"] / row["workers"], 2)
    finally:
        if cluster is not None:
            cluster.stop()
    (out / "scaleout.json").write_text(json.dumps(results, indent=2))
    return results


def markdown(results: dict[str, Any]) -> str:
    mode = "hybrid (dense + lexical)" if results["params"]["embeddings"] else "lexical"
    lines = [
        f"Latency over one stdio session, {mode} search over {results['params']['entries']:,} entries",
        "",
        "| backend | add_entry p50 ms | add_entry p95 ms | search p50 ms | search p95 ms |",
        "|---|---|---|---|---|",
    ]
    for backend, row in results["latency"].items():
        lines.append(
            f"| {backend} | {row['add_entry']['p50_ms']:.2f} | {row['add_entry']['p95_ms']:.2f} | "
            f"{row['search_memories']['p50_ms']:.2f} | {row['search_memories']['p95_ms']:.2f} |"
        )
    if not results["ingestion"]:
        return "\n".join(lines)
    lines += [
        "",
        "Replay into one Postgres (memory + checkpoints), extractive model",
        "",
        "| workers | messages | wall s | messages/s | vs 1 worker | efficiency |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["ingestion"]:
        lines.append(
            f"| {row['workers']} | {row['messages']} | {row['wall_s']} | {row['messages_per_s']} | "
            f"{row['speedup']}x | {row['efficiency']} |"
        )
    return "\n".join(lines)
