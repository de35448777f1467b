"""Dense vectors (the ``embeddings`` extra): ingestion rate, and LoCoMo hybrid recall on SQLite vs PostgreSQL.

    mycelian-agent bench embeddings ingest --messages 400
    mycelian-agent bench embeddings parity --locomo ../shared/data/locomo/locomo_dev3.json

``ingest``: the extractive model writes ``--messages`` generated chat messages into a server started with
``--embeddings``, in the same run: one call per message (batch 1) with vectors written inline (inside each entry's
write: the baseline), the same with vectors written behind (a background thread, batches), and in bulk at batch 32
(``add_entries``) written behind. Each row is timed from the first message until the session has ended, which
waits for every vector (``await_consistency``), and checks that every entry has its vector; messages/s and the
ratio to the baseline.
``parity``: the LoCoMo runner with vectors written at ingestion, on a SQLite file and on a fresh database of a
throwaway PostgreSQL cluster (``--pg-url`` to use a server of yours); recall per backend and the differences.
The ``sqlite`` and ``postgres`` folders under ``--out`` are replaced by each run.
``--lexical``: the same without vectors (servers without ``--embeddings``).
Both print JSON and need the embeddings extra (``make embeddings``; ``parity --lexical`` only the postgres extra).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


__all__ = ["ingest_rate", "locomo_parity"]

_METRICS = ("recall_any@1", "recall_any@5", "recall_any@10", "recall_all@10")


#: ``(vector writes, batch size)`` of each row; the first is the baseline.
INGEST_ROWS = (("inline", 1), ("behind", 1), ("behind", 32))


async def _ingest(messages: list[dict[str, str]], writes: str, batch: int, db: Path, server: str,
                  model: str | None = None) -> dict[str, Any]:
    from ..builder import build_agent

    async with build_agent("extractive", server, db=str(db), memory=f"{writes}{batch}", embeddings=writes,
                           embeddings_model=model, batch_size=batch, flush_every=96) as invoker:
        await invoker.astart_session("t", "2024-05-01T10:00:00Z")
        started = time.perf_counter()
        if batch == 1:
            for message in messages:
                await invoker.aprocess_conversation_message(message["role"], message["content"], "t")
        else:
            await invoker.aprocess_conversation_messages("t", messages)
        await invoker.aend_session("t")  # writes what is pending and waits for every vector
        elapsed = time.perf_counter() - started
    return {"writes": writes, "batch": batch, "messages": len(messages), "seconds": round(elapsed, 2),
            "messages_per_s": round(len(messages) / elapsed, 1)}


def _entries_and_vectors(db: Path) -> tuple[int, int]:
    from mycelian_agent.memory_server.storage.sqlite.store import Store

    store = Store.open(db)
    try:
        counts = store.counts()
    finally:
        store.close()
    return counts["entries"], counts["entry_vectors"]


def ingest_rate(count: int = 400, *, server: str = "embedded", work: Path | None = None,
                model: str | None = None) -> list[dict[str, Any]]:
    """Messages/s with embeddings (dense ``model``; None: auto) for each of :data:`INGEST_ROWS`; every row but the
    first carries its ratio to the first. Raises ``RuntimeError`` if an entry was left without its vector."""
    from .bench_server import make_corpus

    messages = [{"role": c["tags"]["role"], "content": c["raw_entry"]} for c in make_corpus(count, seed=11)]
    rows = []
    with tempfile.TemporaryDirectory(dir=work) as directory:
        for writes, batch in INGEST_ROWS:
            db = Path(directory) / f"{writes}{batch}.db"
            row = asyncio.run(_ingest(messages, writes, batch, db, server, model))
            entries, vectors = _entries_and_vectors(db)
            if entries != count or vectors != count:
                raise RuntimeError(f"{writes} batch {batch}: {entries} entries and {vectors} vectors for {count} "
                                   "messages")
            rows.append(row)
    for row in rows[1:]:
        row["vs_baseline"] = round(row["messages_per_s"] / rows[0]["messages_per_s"], 2)
    return rows


def locomo_parity(locomo: Path, out: Path, *, pg_url: str | None = None, limit: int | None = None,
                  workers: int = 3, dense: bool = True) -> dict[str, Any]:
    """LoCoMo recall with vectors written at ingestion (lexical search alone without ``dense``), SQLite vs
    PostgreSQL (``pg_url``: an empty database)."""
    from mycelian_agent.memory_server.storage.postgres.cluster import TemporaryCluster
    from .bench_recall import _with_embeddings
    from .locomo import LoCoMoRunner

    cluster = None if pg_url else TemporaryCluster.start()
    results: dict[str, Any] = {}
    try:
        target = pg_url if cluster is None else cluster.create_database(
            "embeddings_parity" if dense else "lexical_parity")
        for name, db in (("sqlite", None), ("postgres", target)):
            # The runner resumes from the records it finds: a folder left by an earlier run would be reported as
            # this run's recall without a search being made.
            shutil.rmtree(out / name, ignore_errors=True)
            started = time.perf_counter()
            if dense:
                runner = _with_embeddings(LoCoMoRunner)(out=out / name, db=db, limit=limit, workers=workers,
                                                        progress=False)
            else:  # BM25 alone, said explicitly: hybrid search is the server's default
                runner = LoCoMoRunner(out=out / name, db=db, limit=limit, workers=workers, progress=False,
                                      embeddings=False)
            report = runner.run([locomo])
            results[name] = {"seconds": round(time.perf_counter() - started, 1),
                             **{key: table.overall.as_dict() for key, table in report.tables.items()}}
    finally:
        if cluster is not None:
            cluster.stop()
    for key, row in results["sqlite"].items():
        if isinstance(row, dict):
            results.setdefault("difference", {})[key] = {
                m: round(results["postgres"][key][m] - row[m], 3) for m in _METRICS if m in row}
    (out / "parity.json").write_text(json.dumps(results, indent=2))
    return results
