"""LoCoMo runner: one memory per sample, ingestion, then evidence recall@k per question category.

    python runners/locomo_runner.py DATA.json --out OUT [--limit N] [--limit-questions N] [--workers N]

Writes OUT/records.jsonl, OUT/samples.jsonl and OUT/summary.json; category 5 (adversarial) is reported in its own
table. Run the same command again to resume. The logic lives in :mod:`mycelian_agent.benchmarks.locomo`.
"""

from __future__ import annotations

import argparse
import os
import sys

from mycelian_agent.benchmarks import add_runner_arguments, run_script, runner_options
from mycelian_agent.benchmarks.locomo import LoCoMoRunner

__all__ = ["LoCoMoRunner", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line options (environment fallbacks are applied in :func:`main`)."""
    parser = argparse.ArgumentParser(description="LoCoMo: ingest each sample, score evidence recall@k.")
    parser.add_argument("data", nargs="*", help="LoCoMo JSON file(s) (e.g. locomo10.json)")
    add_runner_arguments(parser)
    parser.add_argument("--limit-questions", type=int, default=None, help="only the first N questions of each sample")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 0, or 1 when a sample failed or the run could not start."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.data and not args.report_only:
        parser.error("give at least one data file (or --report-only)")
    return run_script(lambda: LoCoMoRunner(**runner_options(args, dict(os.environ)),
                                           limit_questions=args.limit_questions), args)


if __name__ == "__main__":
    sys.exit(main())
