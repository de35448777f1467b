"""LongMemEval runner: one memory per question, ingestion, retrieval, optional QA, recall@k.

    python runners/single_question_runner.py DATA.json [DATA2.json ...] --out OUT [--workers N] [--shard i/n]
        [--limit N] [--qa-model openai:gpt-4o-mini] [--model extractive] [--server embedded|URL]

Writes OUT/records.jsonl, OUT/hypotheses.jsonl (for LongMemEval's evaluate_qa.py) and OUT/summary.json. Run the
same command again to resume. The logic lives in :mod:`mycelian_agent.benchmarks.longmemeval`.
"""

from __future__ import annotations

import argparse
import os
import sys

from mycelian_agent.benchmarks import add_runner_arguments, run_script, runner_options
from mycelian_agent.benchmarks.longmemeval import SingleQuestionRunner

__all__ = ["SingleQuestionRunner", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line options (environment fallbacks are applied in :func:`main`)."""
    parser = argparse.ArgumentParser(description="LongMemEval: ingest, retrieve, answer, score recall@k.")
    parser.add_argument("data", nargs="*", help="LongMemEval JSON file(s)")
    add_runner_arguments(parser)
    parser.add_argument("--qa-model", default=None,
                        help="'openai:<model>' answers from the retrieved evidence; none: retrieval-only "
                             "hypotheses [env MYCELIAN_QA_MODEL]")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 0, or 1 when a question failed or the run could not start."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.data and not args.report_only:
        parser.error("give at least one data file (or --report-only)")
    env = dict(os.environ)
    return run_script(lambda: SingleQuestionRunner(**runner_options(args, env),
                                                   qa_model=args.qa_model or env.get("MYCELIAN_QA_MODEL")), args)


if __name__ == "__main__":
    sys.exit(main())
