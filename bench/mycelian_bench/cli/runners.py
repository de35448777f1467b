"""What the runners' commands share (their options, how a run is reported), and ``bench qa`` (what a reader answers
from memory). The runners' commands themselves are the scripts in ``runners/`` (``single_question_runner.py``:
``bench longmemeval``; ``locomo_runner.py``: ``bench locomo``), loaded by :mod:`.scripts`."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mycelian_agent.errors import MycelianError, make_folder
from mycelian_bench.cli.options import CONTEXT, COUNT, FILE, reported

__all__ = ["qa_command", "run_runner", "runner_options"]


def _parse_shard(_ctx: click.Context, _param: click.Parameter, text: str | None) -> tuple[int, int] | None:
    from mycelian_agent.conversations.selection import parse_shard

    try:
        return parse_shard(text)
    except MycelianError as exc:
        raise click.BadParameter(str(exc)) from None


def runner_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options every runner takes (FILES, --out, the server, the ingestion model, --shard, --limit, ...)."""
    options = [
        click.argument("files", nargs=-1, type=FILE),
        click.option(
            "--out",
            required=True,
            type=click.Path(file_okay=False, path_type=Path),
            help="Output folder: records.jsonl, summary.json, the memory and checkpoint databases.",
        ),
        click.option("--db", default=None, help="SQLite file of the embedded server (default: OUT/memory.db)."),
        click.option("--state", default=None, help="SQLite checkpoint file (default: OUT/state.db)."),
        click.option(
            "--server",
            envvar="MYCELIAN_SERVER",
            show_envvar=True,
            default="embedded",
            show_default=True,
            help="'embedded', or a server URL like http://127.0.0.1:11546/mcp.",
        ),
        click.option(
            "--token", envvar="MYCELIAN_TOKEN", show_envvar=True, default=None, help="Bearer token of a remote server."
        ),
        click.option(
            "--model",
            envvar="MYCELIAN_MODEL",
            show_envvar=True,
            default="extractive",
            show_default=True,
            help="Ingestion model: 'extractive' or 'openai:<model>'.",
        ),
        click.option(
            "--api-key", envvar="OPENAI_API_KEY", show_envvar=True, default=None, help="API key of openai: models."
        ),
        click.option(
            "--base-url", envvar="OPENAI_BASE_URL", show_envvar=True, default=None, help="OpenAI-compatible endpoint."
        ),
        click.option(
            "--tool-choice",
            "tool_choice_mode",
            envvar="MYCELIAN_TOOL_CHOICE",
            show_envvar=True,
            type=click.Choice(["named", "required", "auto"]),
            default=None,
            help="How the ingestion model's tool is forced (required: llama.cpp's server).",
        ),
        click.option(
            "--max-tokens",
            envvar="MYCELIAN_MAX_TOKENS",
            show_envvar=True,
            type=COUNT,
            default=None,
            help="Completion token limit of openai: models.",
        ),
        click.option(
            "--model-timeout",
            envvar="MYCELIAN_MODEL_TIMEOUT",
            show_envvar=True,
            default=120.0,
            show_default=True,
            type=click.FloatRange(min=0.1),
            help="Seconds an openai: model call may take before it is retried (then the extractive model "
            "writes the step); a batch call to a 1.5B model on a CPU needs several minutes.",
        ),
        click.option("--vault", default=None, help="Vault title (default: the benchmark's name)."),
        click.option(
            "--flush-every",
            type=COUNT,
            default=6,
            show_default=True,
            help="Write the context document every N messages.",
        ),
        click.option(
            "--batch",
            "batch_size",
            type=COUNT,
            default=1,
            show_default=True,
            help="Batched mode: one model call writes the entries of N messages (1 = one call per message).",
        ),
        click.option(
            "--prompt-examples/--no-prompt-examples",
            envvar="MYCELIAN_PROMPT_EXAMPLES",
            show_envvar=True,
            default=False,
            show_default=True,
            help="Show the ingestion model the prompts' worked examples (prompts/*_examples.md).",
        ),
        click.option(
            "--top-k",
            type=click.IntRange(1, 25),
            default=10,
            show_default=True,
            help="Entries retrieved per question (the server's limit is 25).",
        ),
        click.option(
            "--workers", type=COUNT, default=1, show_default=True, help="Items run concurrently in one process."
        ),
        click.option(
            "--embeddings/--no-embeddings",
            default=None,
            help="Embedded server: dense + BM25 (the default where a dense model is installed) or BM25 "
            "alone (ingestion several times faster on two cores; BENCHMARKS.md §3).",
        ),
        click.option(
            "--shard",
            default=None,
            callback=_parse_shard,
            metavar="I/N",
            help="Only the items whose position among the sorted ids is I modulo N (after --limit).",
        ),
        click.option("--limit", type=click.IntRange(min=0), default=None, help="Only the first N items of the input."),
        click.option(
            "--report-only",
            is_flag=True,
            help="Run nothing: rebuild the summary from OUT/records.jsonl (e.g. merged shards).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the tables."),
        click.option("--no-progress", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _runner_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "out",
        "db",
        "state",
        "server",
        "token",
        "model",
        "api_key",
        "base_url",
        "tool_choice_mode",
        "max_tokens",
        "model_timeout",
        "flush_every",
        "batch_size",
        "top_k",
        "workers",
        "shard",
        "limit",
        "embeddings",
        "prompt_examples",
    )
    kwargs = {key: options[key] for key in keys}
    kwargs["progress"] = not options["no_progress"]
    if options["vault"]:
        kwargs["vault"] = options["vault"]
    return kwargs


def run_runner(make_runner: Callable[[dict[str, Any]], Any], files: tuple[Path, ...], options: dict[str, Any]) -> None:
    """Build the runner, run it (or only rebuild its report), print; exit 1 when an item failed."""
    if not files and not options["report_only"]:
        raise click.UsageError("give at least one data file (or --report-only)")
    with reported("interrupted: run the same command again to resume"):
        from mycelian_agent.paths import check_store_location

        if options["server"] == "embedded":
            check_store_location(options["db"], "--db", "memory database", "memory.db")
        check_store_location(options["state"], "--state", "checkpoint", "state.db")
        runner = make_runner(_runner_kwargs(options))
        report = runner.report() if options["report_only"] else runner.run(list(files))
    click.echo(json.dumps(report.summary, indent=2) if options["as_json"] else report.format())
    if report.failures:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------ QA


def _conditions(_ctx: click.Context, _param: click.Parameter, text: str) -> tuple[str, ...]:
    # Not from bench_qa: it loads LangChain, and options are parsed at once.
    from mycelian_bench.bench_common import QA_CONDITIONS

    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in QA_CONDITIONS]
    if unknown or not names:
        raise click.BadParameter(f"must be some of {','.join(QA_CONDITIONS)}, got {text!r}")
    return names


@click.command(
    "qa",
    context_settings=CONTEXT,
    short_help="Reader F1 on LoCoMo from the recall block vs BM25 turns, the full slice, nothing.",
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="MYCELIAN_DATA",
    show_envvar=True,
    help="Folder holding locomo/ (reads DATA/locomo/locomo_dev3.json).",
)
@click.option("--locomo", type=FILE, multiple=True, help="LoCoMo file; repeat for several (overrides --data).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out/qa"),
    show_default=True,
    help="Output folder: qa_records.jsonl, qa_summary.json, the memory databases.",
)
@click.option("--reader", required=True, help="The reader: 'openai:<model>' (any OpenAI-compatible endpoint).")
@click.option(
    "--base-url",
    envvar="OPENAI_BASE_URL",
    show_envvar=True,
    default=None,
    help="OpenAI-compatible endpoint of the reader.",
)
@click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True, default=None, help="API key of the reader.")
@click.option("--max-tokens", type=COUNT, default=64, show_default=True, help="Completion token limit per answer.")
@click.option(
    "--model-timeout",
    type=click.FloatRange(min=0.1),
    default=120.0,
    show_default=True,
    help="Seconds one answer may take (a 6k-token prompt to a 1.5B model on 2 CPU cores: ~2 minutes).",
)
@click.option(
    "--questions",
    type=COUNT,
    default=40,
    show_default=True,
    help="Questions, taken round-robin over the slices and their categories.",
)
@click.option("--all-questions", is_flag=True, help="Every question of every slice (ignores --questions).")
@click.option(
    "--slice-tokens",
    type=COUNT,
    default=6000,
    show_default=True,
    help="Size of a slice: consecutive whole sessions of about this many tokens.",
)
@click.option(
    "--context-tokens",
    type=COUNT,
    default=6000,
    show_default=True,
    help="The full condition's clip (the reader's context for memory).",
)
@click.option(
    "--budget-tokens", type=COUNT, default=1500, show_default=True, help="Budget of the recall block (invoker.arecall)."
)
@click.option("--bm25-k", type=COUNT, default=10, show_default=True, help="Turns in the BM25 block.")
@click.option(
    "--conditions",
    default="recall,bm25,full,none",
    show_default=True,
    callback=_conditions,
    help="Which conditions to run (comma-separated).",
)
@click.option("--json", "as_json", is_flag=True, help="Print qa_summary.json instead of the tables.")
@click.option("--quiet", is_flag=True, help="No line per answer on stderr.")
def qa_command(
    data: Path | None, locomo: tuple[Path, ...], all_questions: bool, as_json: bool, quiet: bool, **options: Any
) -> None:
    """Measure what a reader can ANSWER from what memory returns, on LoCoMo slices.

    The same reader answers the same questions with: the memory's recall block (the slice ingested by the
    extractive model into our in-process server, then invoker.arecall), the top BM25 turns, the whole slice, and
    no memory. Scores token F1 and exact match per condition and category, prompt tokens per question and F1 per
    1k prompt tokens. Writes OUT/qa_records.jsonl (resumable: run the same command again), OUT/qa_summary.json.
    """
    logging.basicConfig(level=logging.WARNING)
    files = list(locomo)
    if not files:
        if data is None:
            raise click.UsageError("give --data DIR (the folder holding locomo/) or --locomo FILE")
        default = data / "locomo" / "locomo_dev3.json"
        if not default.is_file():
            raise click.BadParameter(
                f"{default} does not exist (DIR must hold locomo/locomo_dev3.json)", param_hint="--data"
            )
        files = [default]
    if all_questions:
        options["questions"] = None
    with reported("interrupted: run the same command again to resume"):
        make_folder(options["out"], "--out")  # before the reader and the data load
        from mycelian_bench.bench_qa import QABench, print_summary

        bench_qa = QABench(
            locomo=files,
            echo=None if quiet else (lambda line: click.echo(line, err=True)),
            progress=not quiet,
            **options,
        )
        summary = bench_qa.run()
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        print_summary(summary)
    if summary["failed"]:
        sys.exit(1)
