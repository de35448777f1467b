"""Benchmarks of mycelian-agent: the suite behind ``mycelian-agent bench`` and the LongMemEval / LoCoMo runners.

A project of its own beside the product (``bench/`` in the repository, installed from a clone by
``pip install -e '.[bench]'``; not in the mycelian-agent wheel). It imports the product; the product never imports it
(``mycelian-agent bench`` loads :mod:`.cli` when it runs).

Where things are:

- :mod:`.cli` — the ``mycelian-agent bench`` commands (one per benchmark and runner).
- :mod:`.bench_suite` — runs the suite's benchmarks (``bench_<name>.py`` each) and writes their report;
  :mod:`.bench_common` — what those benchmarks share (results, tables, plots, percentiles, generated chat).
- :mod:`.runner` — what the runners share (memory harness, options, worker pool, report);
  :mod:`.records` — the output files (which items a run takes: ``mycelian_agent.conversations.selection``);
  :mod:`.metrics` — recall@k, F1.
- :mod:`.locomo`, :mod:`.longmemeval` — the two runners; :mod:`.bench_qa` — what a reader answers from memory
  (:mod:`.qa_slices` the slices it asks about, :mod:`.qa_report` its tables).

Names are loaded when first used: ``import mycelian_bench`` loads nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mycelian_bench.locomo import LoCoMoRunner
    from mycelian_bench.longmemeval import SingleQuestionRunner
    from mycelian_bench.records import append_jsonl, read_jsonl, write_json
    from mycelian_bench.runner import BenchmarkReport, BenchmarkRunner, MemoryHarness, report_notes, run_pool

__all__ = [
    "BenchmarkReport",
    "BenchmarkRunner",
    "LoCoMoRunner",
    "MemoryHarness",
    "SingleQuestionRunner",
    "append_jsonl",
    "read_jsonl",
    "report_notes",
    "run_pool",
    "write_json",
]

_HOMES = {
    "LoCoMoRunner": "locomo",
    "SingleQuestionRunner": "longmemeval",
    "append_jsonl": "records",
    "read_jsonl": "records",
    "write_json": "records",
    "BenchmarkReport": "runner",
    "BenchmarkRunner": "runner",
    "MemoryHarness": "runner",
    "report_notes": "runner",
    "run_pool": "runner",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
