"""``bench scores``: how the 0-1 relevance of ``search_memories`` falls on LoCoMo (``bench_scores.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mycelian_bench.cli.options import CONTEXT, COUNT, FILE
from mycelian_bench.cli.stores import _run_and_print

__all__ = ["scores_command"]


@click.command(
    "scores",
    context_settings=CONTEXT,
    short_help="LoCoMo: the 0-1 scores of evidence hits vs other hits, and what a min_score keeps.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-out/scores"),
    show_default=True,
    help="Output folder (OUT/work holds the ingested memory).",
)
@click.option("--locomo", type=FILE, multiple=True, required=True, help="LoCoMo file; repeat for several.")
@click.option(
    "--hybrid",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Embed the entries and search with dense + BM25 (auto: when a dense model is installed).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N samples.")
@click.option("--workers", type=COUNT, default=3, show_default=True, help="Samples ingested concurrently.")
@click.option("--json", "as_json", is_flag=True, help="Print every search's hits as JSON instead of the tables.")
def scores_command(as_json: bool, **options: Any) -> None:
    """Ingest the LoCoMo file(s), search each question (top 10) in its own memory and in the next conversation's
    (which cannot answer it), and print how the scores of evidence hits, other hits and top hits fall, what each
    min_score keeps, and the share of evidence per score band (BENCHMARKS.md §3, "Issue 38")."""
    _run_and_print("bench_scores", "run_scores", options.pop("out"), as_json, **options)
