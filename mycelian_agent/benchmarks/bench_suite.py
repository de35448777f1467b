"""The benchmark suite: runs the chosen benchmarks, prints their tables, writes JSON, plots and a report.

``run_suite(["overhead", "prompts", "recall", "throughput"], out, quick=False, params={...})`` writes, in
``out``: ``<name>.json`` and ``<name>.png`` per benchmark, ``summary.json`` (machine, targets, timings) and
``report.md`` (every table and note, as printed). ``quick`` uses small sizes (each benchmark well under a minute);
``params`` override the sizes of one benchmark (``{"overhead": {"messages": 500}}``).
"""

from __future__ import annotations

import json
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .bench_common import BenchResult, machine_info, write_result

__all__ = ["BENCHMARK_NAMES", "QUICK", "run_one", "run_suite"]

BENCHMARK_NAMES = ("overhead", "prompts", "recall", "throughput")

#: Sizes of ``--quick`` (the defaults of each run_* function are the full sizes).
QUICK: dict[str, dict[str, Any]] = {
    "overhead": {"messages": 100, "window": 25, "naive_budget_s": 30.0},
    "prompts": {"sessions": 3},
    "recall": {"limit": 1, "limit_questions": 30, "hybrid": "off", "longmemeval_files": ["longmemeval_oracle_6q.json"]},
    "throughput": {"levels": (1, 4, 16), "messages": 6, "latency_s": 0.1, "extractive_messages": 60,
                   "extractive_streams": 4},
}


def _runner(name: str) -> Callable[..., BenchResult]:
    if name == "overhead":
        from .bench_overhead import run_overhead
        return run_overhead
    if name == "prompts":
        from .bench_prompts import run_prompts
        return run_prompts
    if name == "recall":
        from .bench_recall import run_recall
        return run_recall
    if name == "throughput":
        from .bench_throughput import run_throughput
        return run_throughput
    raise ValueError(f"unknown benchmark {name!r}: choose from {', '.join(BENCHMARK_NAMES)}")


def _params(name: str, quick: bool, overrides: dict[str, Any]) -> dict[str, Any]:
    params = dict(QUICK[name]) if quick else {}
    params.update({k: v for k, v in overrides.items() if v is not None})
    files = params.pop("longmemeval_files", None)
    if name == "recall" and files and params.get("longmemeval") is None:
        from .bench_common import default_data_dir

        params["longmemeval"] = [default_data_dir() / "longmemeval" / f for f in files]
    return params


def run_one(name: str, out: Path, *, quick: bool = False, params: dict[str, Any] | None = None) -> BenchResult:
    """Run benchmark ``name`` and write its JSON (and plot) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    result = _runner(name)(out, **_params(name, quick, params or {}))
    result.data["quick"] = quick
    write_result(result, out)
    return result


def run_suite(names: Sequence[str], out: Path, *, quick: bool = False, params: dict[str, dict[str, Any]] | None = None,
              echo: Callable[[str], None] = print, keep_work: bool = False) -> dict[str, Any]:
    """Run ``names`` in order; a benchmark that fails is reported and the others still run.

    The benchmarks' databases go to ``<out>/work`` (the naive overhead run alone writes ~0.5 GB at full size);
    it is deleted at the end unless ``keep_work``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    started = time.perf_counter()
    summary: dict[str, Any] = {"machine": machine, "quick": quick, "benchmarks": {}, "failed": {}}
    header = (f"# mycelian-agent benchmarks{' (quick)' if quick else ''}\n\n"
              f"Python {machine['python']} on {machine['cpus']} CPUs, {machine['memory_gib']} GiB; load average at "
              f"start {machine['load_average']}; commit {machine['commit']}\n")
    report = [header]
    echo(header)
    for name in names:
        try:
            result = run_one(name, out, quick=quick, params=(params or {}).get(name))
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            summary["failed"][name] = f"{type(exc).__name__}: {exc}"
            text = f"## {name}\n\nFAILED: {type(exc).__name__}: {exc}\n\n```\n{traceback.format_exc()}```\n"
        else:
            summary["benchmarks"][name] = {"seconds": round(result.seconds, 2), "json": f"{name}.json",
                                           "plots": result.plots, "targets": [t.as_dict() for t in result.targets]}
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
