"""The benchmark suite: overhead, prompt cost, recall and throughput.

    python runners/bench.py [overhead] [prompts] [recall] [throughput] --out OUT [--quick]

With no names, all four run. Each prints its tables and writes OUT/<name>.json and OUT/<name>.png (the plots need
matplotlib: ``pip install 'mycelian-agent[bench]'``; without it they are skipped with a note), then
OUT/summary.json and OUT/report.md. ``--quick`` uses small sizes: each benchmark finishes well under a minute.
Data files default to ``../shared/data`` beside the repository. See BENCHMARKS.md for results and what they mean.
The logic lives in ``mycelian_agent.benchmarks.bench_*``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mycelian_agent.benchmarks.bench_suite import BENCHMARK_NAMES, run_suite

__all__ = ["build_parser", "main"]


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels must look like 1,4,16,64, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"levels must be positive integers, got {text!r}")
    return levels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="mycelian-agent benchmark suite (see BENCHMARKS.md).")
    parser.add_argument("benchmarks", nargs="*", metavar="NAME",
                        help=f"benchmarks to run, in order: {', '.join(BENCHMARK_NAMES)} (default: all)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder (default: bench-out)")
    parser.add_argument("--quick", action="store_true", help="small sizes: each benchmark well under a minute")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep OUT/work (the memory and checkpoint databases; ~0.6 GB at full size)")
    over = parser.add_argument_group("overhead")
    over.add_argument("--messages", type=int, help="messages of the generated conversation (2000; quick 100)")
    over.add_argument("--window", type=int, help="messages per reporting window (100; quick 25)")
    over.add_argument("--naive-budget", type=float, dest="naive_budget_s",
                      help="seconds after which the naive run stops at the end of its window (300; quick 30)")
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--lme", type=Path, help="LongMemEval file (default: <data>/longmemeval/longmemeval_s_1q.json)")
    prompts.add_argument("--sessions", type=int, help="only the first N haystack sessions (all; quick 3)")
    recall = parser.add_argument_group("recall")
    recall.add_argument("--locomo", type=Path, nargs="+", help="LoCoMo file(s) (default: <data>/locomo/locomo_dev3.json)")
    recall.add_argument("--longmemeval", type=Path, nargs="+",
                        help="LongMemEval file(s) (default: longmemeval_s_1q.json and longmemeval_oracle_6q.json)")
    recall.add_argument("--limit", type=int, help="only the first N LoCoMo samples (all; quick 1)")
    recall.add_argument("--limit-questions", type=int, help="only the first N questions per sample (all; quick 30)")
    recall.add_argument("--hybrid", choices=("auto", "on", "off"),
                        help="also search with dense+BM25 (--embeddings server): auto = when the embeddings extra is "
                             "importable (auto; quick off)")
    recall.add_argument("--workers", type=int, help="items ingested concurrently by the runners (3)")
    through = parser.add_argument_group("throughput")
    through.add_argument("--levels", type=_levels, help="concurrent conversations (1,4,16,64; quick 1,4,16)")
    through.add_argument("--conv-messages", type=int, help="messages per conversation (24; quick 6)")
    through.add_argument("--latency-ms", type=float, help="scripted model latency per call in ms (200; quick 100)")
    through.add_argument("--extractive-messages", type=int, help="messages of the extractive ingestion run (400; quick 60)")
    through.add_argument("--profile", action="store_true",
                         help="add a pyinstrument breakdown of extractive ingestion (needs pyinstrument)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks; 0 when all ran (targets missed are reported, not failures), 1 otherwise."""
    parser = build_parser()
    args = parser.parse_args(argv)
    names = args.benchmarks or list(BENCHMARK_NAMES)
    unknown = [n for n in names if n not in BENCHMARK_NAMES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}: choose from {', '.join(BENCHMARK_NAMES)}")
    logging.basicConfig(level=logging.WARNING)
    params = {
        "overhead": {"messages": args.messages, "window": args.window, "naive_budget_s": args.naive_budget_s},
        "prompts": {"data": args.lme, "sessions": args.sessions},
        "recall": {"locomo": args.locomo, "longmemeval": args.longmemeval, "limit": args.limit,
                   "limit_questions": args.limit_questions, "hybrid": args.hybrid, "workers": args.workers},
        "throughput": {"levels": args.levels, "messages": args.conv_messages,
                       "latency_s": args.latency_ms / 1000 if args.latency_ms is not None else None,
                       "extractive_messages": args.extractive_messages, "profile": args.profile or None},
    }
    try:
        summary = run_suite(names, args.out, quick=args.quick, params=params, keep_work=args.keep_work)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
