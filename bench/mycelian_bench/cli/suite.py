"""The suite's commands: ``bench NAME`` for each benchmark of the suite and ``bench suite [NAME]...``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from mycelian_bench.bench_suite import BENCHMARK_NAMES
from mycelian_bench.cli.options import CONTEXT, COUNT, FILE, levels, reported

__all__ = ["BENCHMARK_COMMANDS", "suite_command"]


# (benchmark, parameter declarations, click.option keywords); "data" is shared by the benchmarks that read files.
_OPTIONS: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    (
        "data",
        ("--data",),
        dict(
            type=click.Path(file_okay=False, path_type=Path),
            envvar="MYCELIAN_DATA",
            show_envvar=True,
            help="Folder holding locomo/ and longmemeval/ (the evaluation "
            "data); the per-file options below override it.",
        ),
    ),
    ("overhead", ("--messages",), dict(type=COUNT, help="Messages of the generated conversation (2000; quick 100).")),
    ("overhead", ("--window",), dict(type=COUNT, help="Messages per reporting window (100; quick 25).")),
    (
        "overhead",
        ("--naive-budget",),
        dict(
            type=click.FloatRange(min=0),
            help="Seconds after which the naive run stops at the end of its window (300; quick 30).",
        ),
    ),
    (
        "prompts recall throughput",
        ("--batch",),
        dict(
            type=COUNT,
            help="Batched mode: one model call writes N messages (1 = one call "
            "per message; prompts, recall, throughput).",
        ),
    ),
    (
        "prompts throughput",
        ("--flush-every",),
        dict(type=COUNT, help="Write the context document every N messages (6; prompts, throughput)."),
    ),
    (
        "prompts",
        ("--separate-context",),
        dict(
            is_flag=True,
            help="Batched mode: write the context document with "
            "a put_context call of its own even when a flush coincides with a "
            "batch write.",
        ),
    ),
    ("prompts", ("--skip-naive",), dict(is_flag=True, help="Measure ours only (the naive run is the slow one).")),
    (
        "prompts",
        ("--prompt-examples",),
        dict(is_flag=True, help="Ours with the prompts' worked examples (prompts/*_examples.md)."),
    ),
    (
        "prompts",
        ("--lme",),
        dict(type=FILE, help="LongMemEval file (default: DATA/longmemeval/longmemeval_s_1q.json)."),
    ),
    ("prompts", ("--sessions",), dict(type=COUNT, help="Only the first N haystack sessions (all; quick 3).")),
    (
        "recall ablation",
        ("--locomo",),
        dict(type=FILE, multiple=True, help="LoCoMo file; repeat for several (default: DATA/locomo/locomo_dev3.json)."),
    ),
    (
        "recall",
        ("--longmemeval",),
        dict(
            type=FILE,
            multiple=True,
            help="LongMemEval file; repeat for several "
            "(default: longmemeval_s_1q.json and longmemeval_oracle_6q.json in "
            "DATA/longmemeval; quick: the oracle file).",
        ),
    ),
    (
        "recall ablation",
        ("--limit",),
        dict(type=click.IntRange(min=0), help="Only the first N LoCoMo samples (all; quick 1)."),
    ),
    (
        "recall ablation",
        ("--limit-questions",),
        dict(type=click.IntRange(min=0), help="Only the first N questions per sample (all; quick 30)."),
    ),
    (
        "small",
        ("--suite",),
        dict(
            type=FILE,
            help="Small-memory suite file (default: the one shipped, bench/mycelian_bench/data/small_memories.json).",
        ),
    ),
    (
        "recall ablation small",
        ("--hybrid",),
        dict(
            type=click.Choice(["auto", "on", "off"]),
            help="Also search with dense+BM25 "
            "(an --embeddings server): auto = when the embeddings extra is importable "
            "(auto; quick off).",
        ),
    ),
    ("recall ablation", ("--workers",), dict(type=COUNT, help="Items ingested concurrently by the runners (3).")),
    (
        "throughput",
        ("--levels",),
        dict(callback=levels, metavar="N,N,...", help="Concurrent conversations (1,4,16,64; quick 1,4,16)."),
    ),
    ("throughput", ("--conv-messages",), dict(type=COUNT, help="Messages per conversation (24; quick 6).")),
    (
        "throughput",
        ("--latency-ms",),
        dict(type=click.FloatRange(min=0), help="Scripted model latency per call in ms (200; quick 100)."),
    ),
    (
        "throughput",
        ("--extractive-messages",),
        dict(type=COUNT, help="Messages of the extractive ingestion run (400; quick 60)."),
    ),
    (
        "throughput",
        ("--profile",),
        dict(is_flag=True, help="Add a pyinstrument breakdown of extractive ingestion (needs pyinstrument)."),
    ),
    ("server", ("--entries",), dict(type=COUNT, help="Entries in the searched memory (10000; quick 2000).")),
    ("server", ("--adds",), dict(type=COUNT, help="Measured add_entry calls (1000; quick 200).")),
    ("server", ("--searches",), dict(type=COUNT, help="Measured search_memories calls (300; quick 60).")),
    (
        "server",
        ("--warmup",),
        dict(type=click.IntRange(min=0), help="Unmeasured calls before each measurement (20; quick 10)."),
    ),
    ("server", ("--embeddings",), dict(is_flag=True, help="Serve with --embeddings (needs a dense model).")),
    (
        "recall ablation server",
        ("--embeddings-model",),
        dict(
            type=click.Choice(["auto", "e5-small", "minilm"]),
            envvar="MYCELIAN_EMBEDDINGS_MODEL",
            show_envvar=True,
            help="Dense model of the hybrid search (auto: the first installed of e5-small, minilm; ablation: auto = "
            "a row for each installed).",
        ),
    ),
]
_READS_DATA = {"prompts", "recall", "ablation"}

_SUMMARIES = {
    "overhead": "Per-message framework time and checkpoint size along a long conversation, ours vs naive.",
    "prompts": "Prompt tokens an LLM would receive while ingesting a LongMemEval haystack, ours vs naive.",
    "recall": "Evidence recall@1/5/10 of search_memories per category (LoCoMo, LongMemEval) vs plain BM25.",
    "throughput": "Concurrent conversations over one server and checkpointer; extractive ingestion speed.",
    "server": "Memory-server latency over stdio: add_entry, and search_memories over 10,000 entries.",
    "ablation": "LoCoMo recall@10 per category as each part of retrieval is added (entries, index, context, dense).",
    "small": "First hits on hand-written small memories (paraphrases, updates, echoes, reactions), hybrid vs BM25.",
}
_OUTPUTS = (
    "Writes OUT/<name>.json, OUT/<name>.png (with matplotlib), OUT/summary.json and OUT/report.md; "
    "OUT/work (the databases) is deleted at the end unless --keep-work."
)


def _suite_options(names: Sequence[str], func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``func`` with the shared suite options and those of ``names``' benchmarks."""
    several = len(names) > 1
    options = [
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("bench-out"),
            show_default=True,
            help="Output folder.",
        ),
        click.option("--quick", is_flag=True, help="Small sizes: each benchmark well under a minute."),
        click.option(
            "--keep-work",
            is_flag=True,
            help="Keep OUT/work (the memory and checkpoint databases; ~0.6 GB at full size).",
        ),
    ]
    for owner, decls, attrs in _OPTIONS:
        wanted = set(owner.split()) & set(names) or (owner == "data" and _READS_DATA & set(names))
        if wanted:
            help_text = (
                f"[{owner}] {attrs['help']}" if several and owner != "data" and " " not in owner else attrs["help"]
            )
            options.append(click.option(*decls, **{**attrs, "help": help_text}))
    for option in reversed(options):
        func = option(func)
    return func


def _bench_params(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The suite's per-benchmark ``params`` from the parsed options (None: not given, the benchmark's default)."""
    get = options.get
    latency_ms = get("latency_ms")
    return {
        "overhead": {"messages": get("messages"), "window": get("window"), "naive_budget_s": get("naive_budget")},
        "prompts": {
            "data": get("lme"),
            "sessions": get("sessions"),
            "flush_every": get("flush_every"),
            "batch_size": get("batch"),
            "batch_context": False if get("separate_context") else None,
            "naive": False if get("skip_naive") else None,
            "prompt_examples": True if get("prompt_examples") else None,
        },
        "recall": {
            "locomo": get("locomo") or None,
            "longmemeval": get("longmemeval") or None,
            "limit": get("limit"),
            "limit_questions": get("limit_questions"),
            "hybrid": get("hybrid"),
            "workers": get("workers"),
            "batch_size": get("batch"),
            "embeddings_model": get("embeddings_model"),
        },
        "ablation": {
            "locomo": get("locomo") or None,
            "limit": get("limit"),
            "limit_questions": get("limit_questions"),
            "hybrid": get("hybrid"),
            "workers": get("workers"),
            "embeddings_model": get("embeddings_model"),
        },
        "throughput": {
            "levels": get("levels"),
            "messages": get("conv_messages"),
            "latency_s": latency_ms / 1000 if latency_ms is not None else None,
            "extractive_messages": get("extractive_messages"),
            "profile": get("profile") or None,
            "batch_size": get("batch"),
            "flush_every": get("flush_every"),
        },
        "small": {"suite": get("suite"), "hybrid": get("hybrid")},
        "server": {
            "entries": get("entries"),
            "adds": get("adds"),
            "searches": get("searches"),
            "warmup": get("warmup"),
            "embeddings": get("embeddings") or None,
            "embeddings_model": get("embeddings_model"),
        },
    }


def _run_suite(names: Sequence[str], options: dict[str, Any]) -> None:
    from mycelian_bench.bench_suite import run_suite

    logging.basicConfig(level=logging.WARNING)
    with reported():
        summary = run_suite(
            names,
            options["out"],
            quick=options["quick"],
            params=_bench_params(options),
            data=options.get("data"),
            echo=click.echo,
            keep_work=options["keep_work"],
        )
    for name, problem in summary["failed"].items():  # the report went to stdout; each failure also in one line
        click.echo(f"error: {name} failed: {problem}", err=True)
    # sys.exit, not ctx.exit: the main CLI runs click with standalone_mode=False, which swallows ctx.exit codes.
    sys.exit(1 if summary["failed"] else 0)


def _benchmark_command(name: str) -> click.Command:
    def command(**options: Any) -> None:
        _run_suite([name], options)

    command.__doc__ = f"{_SUMMARIES[name]}\n\n{_OUTPUTS}"
    return click.command(name, context_settings=CONTEXT, short_help=_SUMMARIES[name])(_suite_options([name], command))


#: One command per benchmark of the suite, by name.
BENCHMARK_COMMANDS: dict[str, click.Command] = {name: _benchmark_command(name) for name in BENCHMARK_NAMES}


def _suite(names: tuple[str, ...], **options: Any) -> None:
    """Run the benchmarks NAME... in order (default: all of overhead, prompts, recall, throughput, server, ablation).

    Each prints its tables; a benchmark that fails is reported, the others still run, and the exit status is 1.
    Options marked [name] apply to that benchmark only.
    """
    _run_suite(list(names or BENCHMARK_NAMES), options)


_suite.__doc__ = (_suite.__doc__ or "") + f"\n    {_OUTPUTS}\n"
suite_command = click.command(
    "suite", context_settings=CONTEXT, short_help="Several benchmarks in order (all by default)."
)(
    _suite_options(
        BENCHMARK_NAMES,
        click.argument("names", nargs=-1, type=click.Choice(BENCHMARK_NAMES), metavar="[NAME]...")(_suite),
    )
)
