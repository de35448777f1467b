"""What ``bench qa`` reports: scores per condition and category over the questions answered under every condition,
as ``qa_summary.json`` holds them, as Markdown and as terminal tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mycelian_bench.bench_common import QA_CONDITIONS
from mycelian_bench.locomo import category_label

__all__ = ["markdown_tables", "print_summary", "summarize"]


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _row(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    prompt = _mean([r["prompt_tokens"] for r in records])
    f1 = _mean([r["f1"] for r in records])
    sources = sorted({r["prompt_tokens_source"] for r in records})
    return {
        "n": len(records),
        "f1": f1,
        "em": _mean([float(r["em"]) for r in records]),
        "prompt_tokens": round(prompt, 1) if prompt is not None else None,
        "prompt_tokens_source": "+".join(sources) or None,
        "block_tokens": _mean([r["block_tokens"] for r in records]),
        "f1_per_1k_prompt_tokens": round(1000 * f1 / prompt, 4) if f1 is not None and prompt else None,
        "evidence_shown": _mean([float(r["evidence_shown"]) for r in records]),
        "seconds": _mean([r["seconds"] for r in records]),
    }


def summarize(records: Sequence[dict[str, Any]], conditions: Sequence[str] = QA_CONDITIONS) -> dict[str, Any]:
    """Scores per condition and per category over the questions answered under every one of ``conditions``
    (``paired``), the records held per condition, and the target: recall F1 >= full F1 at <= 20% of its prompt
    tokens (None unless both ran)."""
    by_condition: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in conditions}
    for record in records:
        if record["condition"] in by_condition:
            by_condition[record["condition"]][record["question_id"]] = record
    paired = set.intersection(*(set(held) for held in by_condition.values())) if by_condition else set()
    rows = {c: _row([held[q] for q in sorted(paired)]) for c, held in by_condition.items()}
    categories: dict[str, dict[str, Any]] = {}
    for label in sorted({category_label(by_condition[conditions[0]][q]["category"]) for q in paired}):
        categories[label] = {
            c: _row([r for q in sorted(paired) if category_label((r := held[q])["category"]) == label])
            for c, held in by_condition.items()
        }
    target = None
    recall, full = rows.get("recall"), rows.get("full")
    if recall and full and recall["n"]:
        share = recall["prompt_tokens"] / full["prompt_tokens"] if full["prompt_tokens"] else None
        target = {
            "goal": "recall F1 >= full F1 at <= 20% of full's prompt tokens",
            "recall_f1": recall["f1"],
            "full_f1": full["f1"],
            "prompt_token_share": round(share, 4) if share is not None else None,
            "f1_met": recall["f1"] >= full["f1"],
            "tokens_met": share is not None and share <= 0.2,
        }
        target["met"] = target["f1_met"] and target["tokens_met"]
    return {
        "questions_paired": len(paired),
        "records": {c: len(h) for c, h in by_condition.items()},
        "conditions": rows,
        "categories": categories,
        "target": target,
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _tables(summary: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    head = [
        "condition",
        "n",
        "F1",
        "EM",
        "prompt tokens/q",
        "block tokens/q",
        "F1 per 1k prompt tokens",
        "evidence shown",
        "s/answer",
    ]
    rows = [
        [
            name,
            str(row["n"]),
            _fmt(row["f1"]),
            _fmt(row["em"]),
            _fmt(row["prompt_tokens"], 0) + (" (est.)" if row["prompt_tokens_source"] == "estimate" else ""),
            _fmt(row["block_tokens"], 0),
            _fmt(row["f1_per_1k_prompt_tokens"]),
            _fmt(row["evidence_shown"], 2),
            _fmt(row["seconds"], 1),
        ]
        for name, row in summary["conditions"].items()
    ]
    conditions = list(summary["conditions"])
    cat_head = ["category", "n", *(f"{c} F1" for c in conditions)]
    cat_rows = [
        [label, str(next(iter(cells.values()))["n"]), *(_fmt(cells[c]["f1"]) for c in conditions)]
        for label, cells in summary["categories"].items()
    ]
    return head, rows, cat_head, cat_rows


def _target_line(summary: dict[str, Any]) -> str | None:
    target = summary.get("target")
    if not target:
        return None
    return (
        f"target ({target['goal']}): recall F1 {_fmt(target['recall_f1'])} vs full {_fmt(target['full_f1'])}, "
        f"prompt tokens {_fmt((target['prompt_token_share'] or 0) * 100, 1)}% of full -> "
        + ("MET" if target["met"] else "MISSED")
    )


def markdown_tables(summary: dict[str, Any]) -> str:
    """The condition and category tables as Markdown, then the target line."""
    head, rows, cat_head, cat_rows = _tables(summary)

    def table(h: list[str], r: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(h) + " |", "|" + "---|" * len(h), *("| " + " | ".join(x) + " |" for x in r)]

    lines = [*table(head, rows), "", *table(cat_head, cat_rows)]
    target = _target_line(summary)
    return "\n".join(lines + (["", target] if target else []))


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """Print the condition and category tables (rich), the target and any failures."""
    from rich.console import Console
    from rich.table import Table

    from mycelian_agent.agent.report import ModelUsage

    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file: rich's default 80 columns would fold the table
            console = Console(width=140)
    head, rows, cat_head, cat_rows = _tables(summary)
    for title, h, r in (
        (
            f"QA: {summary['reader']}, {summary['questions_paired']} questions answered under every condition",
            head,
            rows,
        ),
        ("F1 per category", cat_head, cat_rows),
    ):
        table = Table(title=title, title_justify="left")
        for index, name in enumerate(h):
            table.add_column(name, justify="left" if index == 0 else "right")
        for row in r:
            table.add_row(*row)
        console.print(table)
    target = _target_line(summary)
    if target:
        console.print(target)
    for name, row in (summary.get("usage_by_model") or {}).items():
        console.print(f"model usage: {name}: {ModelUsage.from_mapping(row).describe()}")
    if summary.get("failed"):
        console.print(
            f"FAILED ({len(summary['failed'])}; run the same command again to retry): "
            + "; ".join(f"{k}: {v}" for k, v in list(summary["failed"].items())[:5])
        )
