"""``mycelian-agent bench``: the benchmark suite and the LongMemEval / LoCoMo runners, as click commands.

    mycelian-agent bench recall --quick --data DIR --out OUT     one benchmark of the suite (see BENCHMARKS.md)
    mycelian-agent bench suite [NAME...] --data DIR --out OUT    several in order (all of them by default)
    mycelian-agent bench longmemeval FILE... --out OUT           LongMemEval runner (resumable)
    mycelian-agent bench locomo FILE... --out OUT                LoCoMo runner (resumable)
    mycelian-agent bench qa --data DIR --reader openai:M --out OUT   reader F1 from recall / BM25 / full / none
    mycelian-agent bench scale --out OUT                         search as one database grows to 1M entries

The scripts in ``runners/`` call these commands. Only click is imported here: each command imports its benchmark
when it runs, so ``--help`` and option errors come back at once.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ..errors import MycelianError, make_folder
from .bench_suite import BENCHMARK_NAMES

__all__ = ["BENCHMARK_COMMANDS", "bench", "locomo_command", "longmemeval_command", "qa_command", "scale_command",
           "suite_command"]

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_COUNT = click.IntRange(min=1)


def _levels(_ctx: click.Context, _param: click.Parameter, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"must look like 1,4,16,64, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter(f"must be positive integers, got {text!r}")
    return levels


# (benchmark, parameter declarations, click.option keywords); "data" is shared by the benchmarks that read files.
_OPTIONS: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("data", ("--data",), dict(type=click.Path(file_okay=False, path_type=Path), envvar="MYCELIAN_DATA",
                              show_envvar=True, help="Folder holding locomo/ and longmemeval/ (the evaluation "
                              "data); the per-file options below override it.")),
    ("overhead", ("--messages",), dict(type=_COUNT, help="Messages of the generated conversation (2000; quick 100).")),
    ("overhead", ("--window",), dict(type=_COUNT, help="Messages per reporting window (100; quick 25).")),
    ("overhead", ("--naive-budget",), dict(type=click.FloatRange(min=0), help="Seconds after which the naive run "
                                           "stops at the end of its window (300; quick 30).")),
    ("prompts recall throughput", ("--batch",), dict(type=_COUNT, help="Batched mode: one model call writes N messages (1 = one call "
                                 "per message; prompts, recall, throughput).")),
    ("prompts throughput", ("--flush-every",), dict(type=_COUNT, help="Write the context document every N messages (6; "
                                       "prompts, throughput).")),
    ("prompts", ("--separate-context",), dict(is_flag=True, help="Batched mode: write the context document with "
                                              "a put_context call of its own even when a flush coincides with a "
                                              "batch write.")),
    ("prompts", ("--skip-naive",), dict(is_flag=True, help="Measure ours only (the naive run is the slow one).")),
    ("prompts", ("--lme",), dict(type=_FILE, help="LongMemEval file (default: DATA/longmemeval/longmemeval_s_1q.json).")),
    ("prompts", ("--sessions",), dict(type=_COUNT, help="Only the first N haystack sessions (all; quick 3).")),
    ("recall ablation", ("--locomo",), dict(type=_FILE, multiple=True, help="LoCoMo file; repeat for several "
                                   "(default: DATA/locomo/locomo_dev3.json).")),
    ("recall", ("--longmemeval",), dict(type=_FILE, multiple=True, help="LongMemEval file; repeat for several "
                                        "(default: longmemeval_s_1q.json and longmemeval_oracle_6q.json in "
                                        "DATA/longmemeval; quick: the oracle file).")),
    ("recall ablation", ("--limit",), dict(type=click.IntRange(min=0), help="Only the first N LoCoMo samples (all; quick 1).")),
    ("recall ablation", ("--limit-questions",), dict(type=click.IntRange(min=0),
                                            help="Only the first N questions per sample (all; quick 30).")),
    ("recall ablation", ("--hybrid",), dict(type=click.Choice(["auto", "on", "off"]), help="Also search with dense+BM25 "
                                   "(an --embeddings server): auto = when the embeddings extra is importable "
                                   "(auto; quick off).")),
    ("recall ablation", ("--workers",), dict(type=_COUNT, help="Items ingested concurrently by the runners (3).")),
    ("throughput", ("--levels",), dict(callback=_levels, metavar="N,N,...",
                                       help="Concurrent conversations (1,4,16,64; quick 1,4,16).")),
    ("throughput", ("--conv-messages",), dict(type=_COUNT, help="Messages per conversation (24; quick 6).")),
    ("throughput", ("--latency-ms",), dict(type=click.FloatRange(min=0),
                                           help="Scripted model latency per call in ms (200; quick 100).")),
    ("throughput", ("--extractive-messages",), dict(type=_COUNT, help="Messages of the extractive ingestion run "
                                                    "(400; quick 60).")),
    ("throughput", ("--profile",), dict(is_flag=True, help="Add a pyinstrument breakdown of extractive "
                                        "ingestion (needs pyinstrument).")),
    ("server", ("--entries",), dict(type=_COUNT, help="Entries in the searched memory (10000; quick 2000).")),
    ("server", ("--adds",), dict(type=_COUNT, help="Measured add_entry calls (1000; quick 200).")),
    ("server", ("--searches",), dict(type=_COUNT, help="Measured search_memories calls (300; quick 60).")),
    ("server", ("--warmup",), dict(type=click.IntRange(min=0), help="Unmeasured calls before each measurement "
                                   "(20; quick 10).")),
    ("server", ("--embeddings",), dict(is_flag=True, help="Serve with --embeddings (needs a dense model).")),
    ("recall ablation server", ("--embeddings-model",), dict(
        type=click.Choice(["auto", "e5-small", "minilm"]), envvar="MYCELIAN_EMBEDDINGS_MODEL", show_envvar=True,
        help="Dense model of the hybrid search (auto: the first installed of e5-small, minilm; ablation: auto = "
             "a row for each installed).")),
]
_READS_DATA = {"prompts", "recall", "ablation"}

_SUMMARIES = {
    "overhead": "Per-message framework time and checkpoint size along a long conversation, ours vs naive.",
    "prompts": "Prompt tokens an LLM would receive while ingesting a LongMemEval haystack, ours vs naive.",
    "recall": "Evidence recall@1/5/10 of search_memories per category (LoCoMo, LongMemEval) vs plain BM25.",
    "throughput": "Concurrent conversations over one server and checkpointer; extractive ingestion speed.",
    "server": "Memory-server latency over stdio: add_entry, and search_memories over 10,000 entries.",
    "ablation": "LoCoMo recall@10 per category as each part of retrieval is added (entries, index, context, dense).",
}
_OUTPUTS = ("Writes OUT/<name>.json, OUT/<name>.png (with matplotlib), OUT/summary.json and OUT/report.md; "
            "OUT/work (the databases) is deleted at the end unless --keep-work.")


def _suite_options(names: Sequence[str], func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate ``func`` with the shared suite options and those of ``names``' benchmarks."""
    several = len(names) > 1
    options = [
        click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-out"),
                     show_default=True, help="Output folder."),
        click.option("--quick", is_flag=True, help="Small sizes: each benchmark well under a minute."),
        click.option("--keep-work", is_flag=True, help="Keep OUT/work (the memory and checkpoint databases; "
                     "~0.6 GB at full size)."),
    ]
    for owner, decls, attrs in _OPTIONS:
        wanted = set(owner.split()) & set(names) or (owner == "data" and _READS_DATA & set(names))
        if wanted:
            help_text = (f"[{owner}] {attrs['help']}" if several and owner != "data" and " " not in owner
                         else attrs["help"])
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
        "prompts": {"data": get("lme"), "sessions": get("sessions"), "flush_every": get("flush_every"),
                    "batch_size": get("batch"), "batch_context": False if get("separate_context") else None,
                    "naive": False if get("skip_naive") else None},
        "recall": {"locomo": get("locomo") or None, "longmemeval": get("longmemeval") or None,
                   "limit": get("limit"), "limit_questions": get("limit_questions"), "hybrid": get("hybrid"),
                   "workers": get("workers"), "batch_size": get("batch"),
                   "embeddings_model": get("embeddings_model")},
        "ablation": {"locomo": get("locomo") or None, "limit": get("limit"),
                     "limit_questions": get("limit_questions"), "hybrid": get("hybrid"), "workers": get("workers"),
                     "embeddings_model": get("embeddings_model")},
        "throughput": {"levels": get("levels"), "messages": get("conv_messages"),
                       "latency_s": latency_ms / 1000 if latency_ms is not None else None,
                       "extractive_messages": get("extractive_messages"), "profile": get("profile") or None,
                       "batch_size": get("batch"), "flush_every": get("flush_every")},
        "server": {"entries": get("entries"), "adds": get("adds"), "searches": get("searches"),
                   "warmup": get("warmup"), "embeddings": get("embeddings") or None,
                   "embeddings_model": get("embeddings_model")},
    }


def _run_suite(names: Sequence[str], options: dict[str, Any]) -> None:
    from .bench_suite import run_suite

    logging.basicConfig(level=logging.WARNING)
    try:
        summary = run_suite(names, options["out"], quick=options["quick"], params=_bench_params(options),
                            data=options.get("data"), echo=click.echo, keep_work=options["keep_work"])
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    for name, problem in summary["failed"].items():  # the report went to stdout; each failure also in one line
        click.echo(f"error: {name} failed: {problem}", err=True)
    # sys.exit, not ctx.exit: the main CLI runs click with standalone_mode=False, which swallows ctx.exit codes.
    sys.exit(1 if summary["failed"] else 0)


def _benchmark_command(name: str) -> click.Command:
    def command(**options: Any) -> None:
        _run_suite([name], options)

    command.__doc__ = f"{_SUMMARIES[name]}\n\n{_OUTPUTS}"
    return click.command(name, context_settings=_CONTEXT, short_help=_SUMMARIES[name])(
        _suite_options([name], command))


#: One command per benchmark of the suite, by name.
BENCHMARK_COMMANDS: dict[str, click.Command] = {name: _benchmark_command(name) for name in BENCHMARK_NAMES}


def _suite(names: tuple[str, ...], **options: Any) -> None:
    """Run the benchmarks NAME... in order (default: all of overhead, prompts, recall, throughput, server, ablation).

    Each prints its tables; a benchmark that fails is reported, the others still run, and the exit status is 1.
    Options marked [name] apply to that benchmark only.
    """
    _run_suite(list(names or BENCHMARK_NAMES), options)


_suite.__doc__ += f"\n    {_OUTPUTS}\n"
suite_command = click.command("suite", context_settings=_CONTEXT, short_help="Several benchmarks in order (all by default).")(
    _suite_options(BENCHMARK_NAMES, click.argument("names", nargs=-1, type=click.Choice(BENCHMARK_NAMES),
                                                   metavar="[NAME]...")(_suite)))


# ------------------------------------------------------------------------------------------------ runners


def _parse_shard(_ctx: click.Context, _param: click.Parameter, text: str | None) -> tuple[int, int] | None:
    from . import parse_shard

    try:
        return parse_shard(text)
    except MycelianError as exc:
        raise click.BadParameter(str(exc)) from None


def _runner_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("files", nargs=-1, type=_FILE),
        click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
                     help="Output folder: records.jsonl, summary.json, the memory and checkpoint databases."),
        click.option("--db", default=None, help="SQLite file of the embedded server (default: OUT/memory.db)."),
        click.option("--state", default=None, help="SQLite checkpoint file (default: OUT/state.db)."),
        click.option("--server", envvar="MYCELIAN_SERVER", show_envvar=True, default="embedded", show_default=True,
                     help="'embedded', or a server URL like http://127.0.0.1:11546/mcp."),
        click.option("--token", envvar="MYCELIAN_TOKEN", show_envvar=True, default=None,
                     help="Bearer token of a remote server."),
        click.option("--model", envvar="MYCELIAN_MODEL", show_envvar=True, default="extractive", show_default=True,
                     help="Ingestion model: 'extractive' or 'openai:<model>'."),
        click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True, default=None,
                     help="API key of openai: models."),
        click.option("--base-url", envvar="OPENAI_BASE_URL", show_envvar=True, default=None,
                     help="OpenAI-compatible endpoint."),
        click.option("--tool-choice", "tool_choice_mode", envvar="MYCELIAN_TOOL_CHOICE", show_envvar=True,
                     type=click.Choice(["named", "required", "auto"]), default=None,
                     help="How the ingestion model's tool is forced (required: llama.cpp's server)."),
        click.option("--max-tokens", envvar="MYCELIAN_MAX_TOKENS", show_envvar=True, type=_COUNT, default=None,
                     help="Completion token limit of openai: models."),
        click.option("--model-timeout", envvar="MYCELIAN_MODEL_TIMEOUT", show_envvar=True, default=120.0,
                     show_default=True, type=click.FloatRange(min=0.1),
                     help="Seconds an openai: model call may take before it is retried (then the extractive model "
                     "writes the step); a batch call to a 1.5B model on a CPU needs several minutes."),
        click.option("--vault", default=None, help="Vault title (default: the benchmark's name)."),
        click.option("--flush-every", type=_COUNT, default=6, show_default=True,
                     help="Write the context document every N messages."),
        click.option("--batch", "batch_size", type=_COUNT, default=1, show_default=True,
                     help="Batched mode: one model call writes the entries of N messages (1 = one call per message)."),
        click.option("--top-k", type=click.IntRange(1, 25), default=10, show_default=True,
                     help="Entries retrieved per question (the server's limit is 25)."),
        click.option("--workers", type=_COUNT, default=1, show_default=True,
                     help="Items run concurrently in one process."),
        click.option("--shard", default=None, callback=_parse_shard, metavar="I/N",
                     help="Only the items whose position among the sorted ids is I modulo N (after --limit)."),
        click.option("--limit", type=click.IntRange(min=0), default=None, help="Only the first N items of the input."),
        click.option("--report-only", is_flag=True,
                     help="Run nothing: rebuild the summary from OUT/records.jsonl (e.g. merged shards)."),
        click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the tables."),
        click.option("--no-progress", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _runner_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    keys = ("out", "db", "state", "server", "token", "model", "api_key", "base_url", "tool_choice_mode",
            "max_tokens", "model_timeout", "flush_every", "batch_size", "top_k", "workers", "shard", "limit")
    kwargs = {key: options[key] for key in keys}
    kwargs["progress"] = not options["no_progress"]
    if options["vault"]:
        kwargs["vault"] = options["vault"]
    return kwargs


def _run_runner(make_runner: Callable[[dict[str, Any]], Any], files: tuple[Path, ...], options: dict[str, Any]) -> None:
    """Build the runner, run it (or only rebuild its report), print; exit 1 when an item failed."""
    if not files and not options["report_only"]:
        raise click.UsageError("give at least one data file (or --report-only)")
    try:
        from ..paths import check_store_location

        if options["server"] == "embedded":
            check_store_location(options["db"], "--db", "memory database", "memory.db")
        check_store_location(options["state"], "--state", "checkpoint", "state.db")
        runner = make_runner(_runner_kwargs(options))
        report = runner.report() if options["report_only"] else runner.run(list(files))
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted: run the same command again to resume", err=True)
        sys.exit(130)
    click.echo(json.dumps(report.summary, indent=2) if options["as_json"] else report.format())
    if report.failures:
        sys.exit(1)


@click.command("longmemeval", context_settings=_CONTEXT,
               short_help="LongMemEval runner: one memory per question, recall@k, optional QA (resumable).")
@_runner_options
@click.option("--qa-model", envvar="MYCELIAN_QA_MODEL", show_envvar=True, default=None,
              help="'openai:<model>' answers from the retrieved evidence; none: retrieval-only hypotheses.")
def longmemeval_command(files: tuple[Path, ...], qa_model: str | None, **options: Any) -> None:
    """LongMemEval FILES: ingest each question's haystack into a memory of its own, retrieve, answer, score.

    Writes OUT/records.jsonl, OUT/hypotheses.jsonl (for LongMemEval's evaluate_qa.py) and OUT/summary.json.
    Run the same command again to resume; use one OUT per data file.
    """

    def make(kwargs: dict[str, Any]) -> Any:
        from .longmemeval import SingleQuestionRunner

        return SingleQuestionRunner(**kwargs, qa_model=qa_model)

    _run_runner(make, files, options)


@click.command("locomo", context_settings=_CONTEXT,
               short_help="LoCoMo runner: one memory per sample, evidence recall@k per category (resumable).")
@_runner_options
@click.option("--limit-questions", type=click.IntRange(min=0), default=None,
              help="Only the first N questions of each sample.")
@click.option("--sessions", type=_COUNT, default=None,
              help="Only the first N sessions of each sample, and the questions whose evidence lies there.")
@click.option("--qa-model", envvar="MYCELIAN_QA_MODEL", show_envvar=True, default=None,
              help="'openai:<model>' answers each question (categories 1-4) from the retrieved entries, scored "
                   "by token F1 against the gold answer.")
def locomo_command(files: tuple[Path, ...], limit_questions: int | None, sessions: int | None,
                   qa_model: str | None, **options: Any) -> None:
    """LoCoMo FILES: ingest each sample into a memory of its own, score evidence recall@k per category.

    Writes OUT/records.jsonl, OUT/samples.jsonl and OUT/summary.json; category 5 (adversarial) is reported in
    its own table. Run the same command again to resume.
    """

    def make(kwargs: dict[str, Any]) -> Any:
        from .locomo import LoCoMoRunner

        return LoCoMoRunner(**kwargs, limit_questions=limit_questions, sessions=sessions, qa_model=qa_model)

    _run_runner(make, files, options)


# ------------------------------------------------------------------------------------------------ QA


def _conditions(_ctx: click.Context, _param: click.Parameter, text: str) -> tuple[str, ...]:
    from .bench_common import QA_CONDITIONS  # not bench_qa: it loads LangChain, and options are parsed at once

    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in QA_CONDITIONS]
    if unknown or not names:
        raise click.BadParameter(f"must be some of {','.join(QA_CONDITIONS)}, got {text!r}")
    return names


@click.command("qa", context_settings=_CONTEXT,
               short_help="Reader F1 on LoCoMo from the recall block vs BM25 turns, the full slice, nothing.")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), envvar="MYCELIAN_DATA", show_envvar=True,
              help="Folder holding locomo/ (reads DATA/locomo/locomo_dev3.json).")
@click.option("--locomo", type=_FILE, multiple=True, help="LoCoMo file; repeat for several (overrides --data).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-out/qa"),
              show_default=True, help="Output folder: qa_records.jsonl, qa_summary.json, the memory databases.")
@click.option("--reader", required=True, help="The reader: 'openai:<model>' (any OpenAI-compatible endpoint).")
@click.option("--base-url", envvar="OPENAI_BASE_URL", show_envvar=True, default=None,
              help="OpenAI-compatible endpoint of the reader.")
@click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True, default=None, help="API key of the reader.")
@click.option("--max-tokens", type=_COUNT, default=64, show_default=True, help="Completion token limit per answer.")
@click.option("--model-timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds one answer may take (a 6k-token prompt to a 1.5B model on 2 CPU cores: ~2 minutes).")
@click.option("--questions", type=_COUNT, default=40, show_default=True,
              help="Questions, taken round-robin over the slices and their categories.")
@click.option("--all-questions", is_flag=True, help="Every question of every slice (ignores --questions).")
@click.option("--slice-tokens", type=_COUNT, default=6000, show_default=True,
              help="Size of a slice: consecutive whole sessions of about this many tokens.")
@click.option("--context-tokens", type=_COUNT, default=6000, show_default=True,
              help="The full condition's clip (the reader's context for memory).")
@click.option("--budget-tokens", type=_COUNT, default=1500, show_default=True,
              help="Budget of the recall block (invoker.arecall).")
@click.option("--bm25-k", type=_COUNT, default=10, show_default=True, help="Turns in the BM25 block.")
@click.option("--conditions", default="recall,bm25,full,none", show_default=True, callback=_conditions,
              help="Which conditions to run (comma-separated).")
@click.option("--json", "as_json", is_flag=True, help="Print qa_summary.json instead of the tables.")
@click.option("--quiet", is_flag=True, help="No line per answer on stderr.")
def qa_command(data: Path | None, locomo: tuple[Path, ...], all_questions: bool, as_json: bool, quiet: bool,
               **options: Any) -> None:
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
            raise click.BadParameter(f"{default} does not exist (DIR must hold locomo/locomo_dev3.json)",
                                     param_hint="--data")
        files = [default]
    if all_questions:
        options["questions"] = None
    from .bench_common import have_module

    if "bm25" in options["conditions"] and not have_module("rank_bm25"):
        raise click.ClickException("the bm25 condition needs rank-bm25: pip install 'mycelian-agent[bench]' (or "
                                   "leave it out of --conditions)")
    try:
        make_folder(options["out"], "--out")  # before the reader and the data load
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    from .bench_qa import QABench, print_summary

    try:
        bench_qa = QABench(locomo=files, echo=None if quiet else (lambda line: click.echo(line, err=True)),
                           progress=not quiet, **options)
        summary = bench_qa.run()
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted: run the same command again to resume", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        print_summary(summary)
    if summary["failed"]:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------ growth


def _workers(_ctx: click.Context, _param: click.Parameter, text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"must look like 1,2,4 (or 0: no ingestion), got {text!r}") from None
    if any(c < 0 for c in counts):
        raise click.BadParameter(f"must be positive integers (or 0: no ingestion), got {text!r}")
    return tuple(c for c in counts if c > 0)


@click.command("scale", context_settings=_CONTEXT,
               short_help="Growth: search in small memories as one database grows to 1M entries; SQLite, PostgreSQL.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-out/scale"),
              show_default=True, help="Output folder: scale.json (and work/, the SQLite databases, while it runs).")
@click.option("--backend", type=click.Choice(["sqlite", "postgres", "both"]), default="both", show_default=True,
              help="Which store(s) to grow.")
@click.option("--memories", type=_COUNT, default=1000, show_default=True, help="Memories loaded.")
@click.option("--entries-per-memory", type=_COUNT, default=1000, show_default=True, help="Entries in each.")
@click.option("--checkpoints", default="10000,100000", show_default=True, callback=_levels, metavar="N,N,...",
              help="Total entries at which search is timed (whole memories; the full load is always one).")
@click.option("--big-memory", type=click.IntRange(min=0), default=100_000, show_default=True,
              help="Then one memory of this many entries, searched alone (0: none).")
@click.option("--search-memories", type=_COUNT, default=5, show_default=True,
              help="Small memories searched in turn at each checkpoint (the same ones each time).")
@click.option("--searches", type=_COUNT, default=200, show_default=True, help="Timed searches per measurement.")
@click.option("--warmup", type=click.IntRange(min=0), default=20, show_default=True,
              help="Unmeasured calls before each measurement.")
@click.option("--adds", type=click.IntRange(min=0), default=100, show_default=True,
              help="Timed add_entry calls over stdio at each checkpoint (into a fresh memory).")
@click.option("--workers", default="1,2,4", show_default=True, callback=_workers, metavar="N,N,...",
              help="Replay worker counts of the ingestion run (first = baseline; 0: none).")
@click.option("--conversations", type=_COUNT, default=8, show_default=True, help="Conversations replayed.")
@click.option("--messages", type=click.IntRange(min=2), default=120, show_default=True,
              help="Messages per replayed conversation.")
@click.option("--pg-url", default=None, help="A PostgreSQL server to use (its databases are made and dropped here; "
              "default: a throwaway cluster).")
@click.option("--keep-work", is_flag=True, help="Keep the databases (and a throwaway cluster running).")
@click.option("--json", "as_json", is_flag=True, help="Print scale.json instead of the table.")
def scale_command(backend: str, checkpoints: tuple[int, ...], workers: tuple[int, ...], as_json: bool,
                  **options: Any) -> None:
    """Grow one database to MEMORIES x ENTRIES-PER-MEMORY entries through the store's bulk path (add_entries) and
    time search in small memories at each checkpoint (over stdio and in process), then in one big memory; the
    loading rate, the database's size per entry, and replay ingestion with 1, 2, 4 workers.

    Writes OUT/scale.json and prints one table (BENCHMARKS.md §11). The full size (1.1M entries, both backends)
    takes 35-60 minutes on 2 cores; try --memories 20 --big-memory 10000 first.
    """
    from .bench_common import have_module

    backends = ("sqlite", "postgres") if backend == "both" else (backend,)
    if "postgres" in backends and not have_module("psycopg"):
        raise click.ClickException("--backend postgres needs PostgreSQL's client: pip install "
                                   "'mycelian-agent[postgres]' (or --backend sqlite)")
    try:
        make_folder(options["out"], "--out")
        from .bench_scale import markdown, run_scale

        results = run_scale(options.pop("out"), backends=backends, checkpoints=checkpoints, workers=workers,
                            **options)
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    click.echo(json.dumps(results, indent=2) if as_json else markdown(results))


# ------------------------------------------------------------------------------------------------ the group


class _BenchGroup(click.Group):
    """Commands in the order added (the suite's benchmarks, then the runners), and ``bench NAME NAME ...``
    as a shorthand for ``bench suite NAME NAME ...``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        if len(args) > 1 and args[0] in BENCHMARK_NAMES and args[1] in BENCHMARK_NAMES:
            return "suite", self.commands["suite"], args
        return super().resolve_command(ctx, args)


@click.group("bench", cls=_BenchGroup, context_settings=_CONTEXT)
def bench() -> None:
    """Benchmarks: the suite (overhead, prompts, recall, throughput, server, ablation) and the LongMemEval / LoCoMo runners.

    \b
      mycelian-agent bench recall --quick --data DIR --out OUT        one benchmark of the suite
      mycelian-agent bench prompts recall --data DIR --out OUT        several, in order (= bench suite NAME...)
      mycelian-agent bench suite --quick --data DIR --out OUT         all of them
      mycelian-agent bench longmemeval FILE... --out OUT              a runner (resumable: run it again)
      mycelian-agent bench qa --data DIR --reader openai:M --out OUT  what a reader answers from memory
      mycelian-agent bench scale --memories 20 --out OUT              search as one database grows (SQLite, PostgreSQL)

    DIR is the folder holding locomo/ and longmemeval/ (or set MYCELIAN_DATA). Results and how to read them:
    BENCHMARKS.md.
    """


for _command in (*BENCHMARK_COMMANDS.values(), suite_command, longmemeval_command, locomo_command, qa_command,
                 scale_command):
    bench.add_command(_command)
