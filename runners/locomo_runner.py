"""LoCoMo runner: ``python runners/locomo_runner.py DATA.json --out OUT [--limit N] [--limit-questions N]``.

One memory per sample: its sessions are replayed into memory, every question searched and evidence recall@k scored
per category (and, with ``--qa-model``, answered and scored by token F1). Re-run the same command to resume.
``mycelian-agent bench locomo`` is this command (the ``bench`` group loads it from here); ``--help`` lists the
options, BENCHMARKS.md the results. The runner itself is ``mycelian_bench.locomo.LoCoMoRunner``. Needs
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mycelian_bench.cli.options import CONTEXT, COUNT
from mycelian_bench.cli.runners import run_runner, runner_options

__all__ = ["locomo_command"]


@click.command(
    "locomo",
    context_settings=CONTEXT,
    short_help="LoCoMo runner: one memory per sample, evidence recall@k per category (resumable).",
)
@runner_options
@click.option(
    "--limit-questions", type=click.IntRange(min=0), default=None, help="Only the first N questions of each sample."
)
@click.option(
    "--sessions",
    type=COUNT,
    default=None,
    help="Only the first N sessions of each sample, and the questions whose evidence lies there.",
)
@click.option(
    "--qa-model",
    envvar="MYCELIAN_QA_MODEL",
    show_envvar=True,
    default=None,
    help="'openai:<model>' answers each question (categories 1-4) from the retrieved entries, scored "
    "by token F1 against the gold answer.",
)
def locomo_command(
    files: tuple[Path, ...], limit_questions: int | None, sessions: int | None, qa_model: str | None, **options: Any
) -> None:
    """LoCoMo FILES: ingest each sample into a memory of its own, score evidence recall@k per category.

    Writes OUT/records.jsonl, OUT/samples.jsonl and OUT/summary.json; category 5 (adversarial) is reported in
    its own table. Run the same command again to resume.
    """

    def make(kwargs: dict[str, Any]) -> Any:
        from mycelian_bench.locomo import LoCoMoRunner

        return LoCoMoRunner(**kwargs, limit_questions=limit_questions, sessions=sessions, qa_model=qa_model)

    run_runner(make, files, options)


if __name__ == "__main__":
    locomo_command()
