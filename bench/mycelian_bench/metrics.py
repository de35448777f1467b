"""Retrieval recall@k over gold evidence ids, and the token F1 of an answer (QA).

Definitions (the same as LongMemEval's retrieval evaluation):

- The retrieved ids are first collapsed to distinct ids in order of first appearance (several entries from the same
  session count once, at the rank of the first), and the top k of those distinct ids are taken.
- ``recall_any@k`` is true when at least one gold id is among them; ``recall_all@k`` when every gold id is.
- A question with no gold ids (e.g. an abstention question) has no recall: :func:`recall_at_k` returns None and
  :func:`aggregate` counts it as ``excluded``, outside every average.
- Averages are over questions (each scored question weighs 1); the overall row pools every category.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RecallRecord",
    "RecallRow",
    "RecallTable",
    "aggregate",
    "answer_tokens",
    "recall_at_k",
    "token_f1",
    "unique_in_order",
]


def unique_in_order(ids: Iterable[str]) -> list[str]:
    """The distinct ids of ``ids`` in order of first appearance."""
    return list(dict.fromkeys(ids))


def recall_at_k(retrieved: Sequence[str], gold: Collection[str], k: int) -> tuple[bool, bool] | None:
    """``(any, all)``: whether at least one / every gold id is among the first ``k`` distinct retrieved ids.

    Returns None when ``gold`` is empty (recall is undefined there). ``k`` must be at least 1.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    gold_set = set(gold)
    if not gold_set:
        return None
    top = set(unique_in_order(retrieved)[:k])
    return bool(top & gold_set), gold_set <= top


@dataclass(frozen=True)
class RecallRecord:
    """One question's retrieval: its category, the retrieved ids in rank order, and the gold ids."""

    question_id: str
    category: str
    retrieved: Sequence[str]
    gold: Collection[str]

    def __post_init__(self) -> None:
        # Freeze the inputs so a record cannot change after it is scored.
        object.__setattr__(self, "retrieved", tuple(self.retrieved))
        object.__setattr__(self, "gold", frozenset(self.gold))


@dataclass(frozen=True)
class RecallRow:
    """Recall of one group of questions: ``count`` scored, ``excluded`` without gold, hit counts per k."""

    category: str
    count: int = 0
    excluded: int = 0
    hits_any: dict[int, int] = field(default_factory=dict, hash=False)
    hits_all: dict[int, int] = field(default_factory=dict, hash=False)

    def recall_any(self, k: int) -> float | None:
        """Fraction of scored questions with recall_any@k; None when no question was scored."""
        return self.hits_any[k] / self.count if self.count else None

    def recall_all(self, k: int) -> float | None:
        """Fraction of scored questions with recall_all@k; None when no question was scored."""
        return self.hits_all[k] / self.count if self.count else None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "excluded": self.excluded}
        for k in self.hits_any:
            out[f"recall_any@{k}"] = self.recall_any(k)
            out[f"recall_all@{k}"] = self.recall_all(k)
        return out


@dataclass(frozen=True)
class RecallTable:
    """Per-category rows (sorted by category) and the overall row, for the same ``ks``."""

    ks: tuple[int, ...]
    categories: dict[str, RecallRow]
    overall: RecallRow

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"ks", "overall": {...}, "categories": {name: {...}}}``."""
        return {
            "ks": list(self.ks),
            "overall": self.overall.as_dict(),
            "categories": {name: row.as_dict() for name, row in self.categories.items()},
        }

    def format(self) -> str:
        """A Markdown table: one line per category, then overall; ``-`` where nothing was scored."""
        head = ["category", "n", "excluded"] + [f"{m}@{k}" for k in self.ks for m in ("any", "all")]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in [*self.categories.values(), self.overall]:
            cells = [row.category, str(row.count), str(row.excluded)]
            for k in self.ks:
                cells += ["-" if v is None else f"{v:.3f}" for v in (row.recall_any(k), row.recall_all(k))]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _row(category: str, records: list[RecallRecord], ks: tuple[int, ...]) -> RecallRow:
    hits_any = dict.fromkeys(ks, 0)
    hits_all = dict.fromkeys(ks, 0)
    count = excluded = 0
    for record in records:
        if not record.gold:
            excluded += 1
            continue
        count += 1
        for k in ks:
            found = recall_at_k(record.retrieved, record.gold, k)
            assert found is not None  # gold is not empty here
            found_any, found_all = found
            hits_any[k] += found_any
            hits_all[k] += found_all
    return RecallRow(category, count, excluded, hits_any, hits_all)


def aggregate(records: Iterable[RecallRecord], ks: Sequence[int] = (1, 5, 10)) -> RecallTable:
    """Recall_any@k and recall_all@k per category and overall (category ``"overall"``), with counts."""
    ks = tuple(dict.fromkeys(ks))
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be one or more integers >= 1, got {ks}")
    records = list(records)
    by_category: dict[str, list[RecallRecord]] = {}
    for record in records:
        by_category.setdefault(record.category, []).append(record)
    categories = {name: _row(name, by_category[name], ks) for name in sorted(by_category)}
    return RecallTable(ks, categories, _row("overall", records, ks))


_ARTICLES = {"a", "an", "the", "and"}


def answer_tokens(text: str) -> list[str]:
    """The words an answer is scored on: lower-cased, punctuation and articles dropped (LoCoMo's normalisation,
    after SQuAD's)."""
    words = re.sub(r"[^\w\s]", " ", str(text).lower().replace(",", "")).split()
    return [w for w in words if w not in _ARTICLES]


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of ``prediction`` against ``gold`` (LoCoMo's QA metric): the harmonic mean of the share of
    predicted words that are in the gold answer and the share of gold words that were predicted."""
    predicted, expected = answer_tokens(prediction), answer_tokens(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)
