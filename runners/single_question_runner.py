"""LongMemEval runner: ``python runners/single_question_runner.py DATA.json [...] --out OUT [--qa-model M]``.

One memory per question: its haystack is replayed into memory, the question searched, recall@k scored (and, with
``--qa-model``, answered from the evidence). Re-run the same command to resume. ``mycelian-agent bench longmemeval``
is this command (the ``bench`` group loads it from here); ``--help`` lists the options, BENCHMARKS.md the results.
The runner itself is ``mycelian_bench.longmemeval.SingleQuestionRunner``. Needs ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mycelian_bench.cli.options import CONTEXT
from mycelian_bench.cli.runners import run_runner, runner_options

__all__ = ["longmemeval_command"]


@click.command(
    "longmemeval",
    context_settings=CONTEXT,
    short_help="LongMemEval runner: one memory per question, recall@k, optional QA (resumable).",
)
@runner_options
@click.option(
    "--qa-model",
    envvar="MYCELIAN_QA_MODEL",
    show_envvar=True,
    default=None,
    help="'openai:<model>' answers from the retrieved evidence; none: retrieval-only hypotheses.",
)
def longmemeval_command(files: tuple[Path, ...], qa_model: str | None, **options: Any) -> None:
    """LongMemEval FILES: ingest each question's haystack into a memory of its own, retrieve, answer, score.

    Writes OUT/records.jsonl, OUT/hypotheses.jsonl (for LongMemEval's evaluate_qa.py) and OUT/summary.json.
    Run the same command again to resume; use one OUT per data file.
    """

    def make(kwargs: dict[str, Any]) -> Any:
        from mycelian_bench.longmemeval import SingleQuestionRunner

        return SingleQuestionRunner(**kwargs, qa_model=qa_model)

    run_runner(make, files, options)


if __name__ == "__main__":
    longmemeval_command()
