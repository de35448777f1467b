"""Scores a person can read (issue 38, item 6): how the 0-1 relevance of ``search_memories`` falls on LoCoMo.

The LoCoMo file(s) are ingested lexically by the normal runner, then (with a dense model installed and ``hybrid``
not ``off``) every entry is embedded up front, as a server started with ``--embeddings`` would hold them. Each
question is then searched in process (``retrieval.rank_entries``, top 10, the ranking the server returns) twice:
in its own conversation's memory, where LoCoMo marks the evidence turns, and in the next conversation's memory,
which cannot answer it (other people, other events): the hits a threshold should drop. For every hit the parts of
``retrieval/relevance.py`` are kept (its own word evidence, what it borrows from a neighbour, its meaning evidence
before the ceiling), so the tables can compare choices the module did not make (no neighbour share, other
ceilings) on the same searches.

Tables: the shown score of evidence hits against other hits and of the top hit per kind of question, what a
``min_score`` keeps, and the share of evidence among hits per shown-score band (word-found hits apart from hits
found by meaning alone).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mycelian_agent.memory_server.retrieval import relevance
from mycelian_agent.memory_server.retrieval.pipeline import rank_entries
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.words import query_terms
from mycelian_bench.bench_common import embeddings_available, md_table
from mycelian_bench.locomo import LoCoMoRunner, load_locomo
from mycelian_bench.records import read_jsonl

__all__ = ["THRESHOLDS", "markdown", "run_scores", "shown"]

#: The ``min_score`` values the threshold table tries.
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
_ANSWERABLE = ("1", "2", "3", "4")


def shown(
    hits: Sequence[dict[str, Any]], *, ceiling: float = relevance.MEANING_CEILING, borrow: bool = True
) -> list[float]:
    """The scores ``search_memories`` would show for ``hits`` (each with ``own``, ``borrowed``, ``meaning``
    before the ceiling), with ``ceiling`` and with or without the neighbour share."""
    return relevance.non_increasing(
        max(hit["own"], hit["borrowed"] if borrow else 0.0, ceiling * hit["meaning"]) for hit in hits
    )


def _search(store: Store, memory_id: str, question: str, evidence: set[str] | None) -> list[dict[str, Any]]:
    """The top 10 hits of ``question`` with their relevance parts and whether each is an evidence turn."""
    terms = query_terms(question)
    seen = relevance.DenseSeen(store)
    ranked = rank_entries(seen.view, memory_id, question, terms, 10)
    seqs = [found.row["seq"] for found in ranked]
    if not seqs:
        return []
    weights = relevance.stem_weights(store, memory_id, terms)
    links, around = store.neighbourhood(memory_id, seqs)
    steps = {link[0]: link for link in (*links, *around.values())}
    near = {n for link in steps.values() for n in (link[1], link[2]) if n is not None}
    entries = store.entry_terms(memory_id, sorted(set(seqs) | set(steps) | near))
    own = {seq: relevance.word_evidence(weights, terms_of.frequencies) for seq, terms_of in entries.items()}
    dense = seen.dense
    cosines: dict[int, float] = {}
    if dense is not None:
        cosines = {seq: dense.cosines[seq] for seq in seqs if seq in dense.cosines}
        missing = [seq for seq in seqs if seq not in cosines]
        if missing and dense.more is not None:
            cosines.update(dense.more(missing))
    hits = []
    for found in ranked:
        seq = found.row["seq"]
        meaning = relevance.meaning_evidence(cosines.get(seq), dense.typical, 1.0) if dense is not None else 0.0
        dia = json.loads(found.row["tags"]).get("dia_id")
        hits.append(
            {
                "own": own.get(seq, 0.0),
                "borrowed": relevance.borrowed(seq, steps, own),
                "meaning": meaning,
                "match": found.match,
                "evidence": evidence is not None and dia in evidence,
            }
        )
    return hits


def run_scores(
    out: Path, *, locomo: Sequence[str | Path], hybrid: str = "auto", workers: int = 3, limit: int | None = None
) -> dict[str, Any]:
    """Ingest ``locomo``, search every question in its own and in another memory, and summarise the scores."""
    started = time.perf_counter()
    work = out / "work" / "scores"
    shutil.rmtree(work, ignore_errors=True)
    paths = [Path(p) for p in locomo]
    LoCoMoRunner(out=work, limit=limit, limit_questions=0, workers=workers, progress=False, embeddings=False).run(paths)
    conversations = load_locomo(paths)[:limit]
    memory_of = {s["sample_id"]: s["memory_id"] for s in read_jsonl(work / "samples.jsonl")}
    dense = None
    if hybrid == "on" or (hybrid == "auto" and embeddings_available()):
        from mycelian_agent.memory_server.retrieval.dense.encoders import AUTO, resolve_model
        from mycelian_agent.memory_server.retrieval.dense.index import require_dense_index

        dense = require_dense_index(resolve_model(AUTO), writes="inline")
    store = Store.open(work / "memory.db", dense=dense)
    searches: list[dict[str, Any]] = []
    try:
        if dense is not None:
            dense.backfill(store.connection)  # embedded up front, as written with --embeddings
        for i, conversation in enumerate(conversations):
            other = conversations[(i + 1) % len(conversations)].conversation_id
            for question in conversation.questions:
                for where, sample in (("own", conversation.conversation_id), ("other", other)):
                    if where == "other" and other == conversation.conversation_id:
                        continue
                    evidence = set(question.evidence) if where == "own" else None
                    searches.append(
                        {
                            "question": question.question_id,
                            "category": question.category,
                            "where": where,
                            "hits": _search(store, memory_of[sample], question.question, evidence),
                        }
                    )
    finally:
        store.close()
    return {
        "params": {"locomo": [str(p) for p in paths], "hybrid": dense is not None, "limit": limit},
        "seconds": round(time.perf_counter() - started, 1),
        "searches": searches,
    }


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _summary(searches: Sequence[dict[str, Any]], **options: Any) -> tuple[list[Any], list[list[Any]]]:
    answerable = [s for s in searches if s["where"] == "own" and s["category"] in _ANSWERABLE]
    adversarial = [s for s in searches if s["where"] == "own" and s["category"] == "5"]
    elsewhere = [s for s in searches if s["where"] == "other" and s["category"] in _ANSWERABLE]
    evidence: list[float] = []
    others: list[float] = []
    first: list[float] = []
    tops: dict[str, list[float]] = {}
    per_question: list[list[float]] = []
    for search in answerable:
        scores = shown(search["hits"], **options)
        marks = [hit["evidence"] for hit in search["hits"]]
        evidence += [score for score, mark in zip(scores, marks) if mark]
        others += [score for score, mark in zip(scores, marks) if not mark]
        first += [score for score, mark in zip(scores, marks) if mark][:1]
        per_question.append([score for score, mark in zip(scores, marks) if mark])
    for name, group in (("answerable", answerable), ("adversarial", adversarial), ("elsewhere", elsewhere)):
        tops[name] = [scores[0] for scores in (shown(s["hits"], **options) for s in group) if scores]
    row = [
        _median(first),
        _median(evidence),
        _median(others),
        _median(tops["answerable"]),
        _median(tops["adversarial"]),
        _median(tops["elsewhere"]),
    ]
    kept = []
    for threshold in THRESHOLDS:
        kept.append(
            [
                threshold,
                f"{sum(s >= threshold for s in evidence) / max(len(evidence), 1):.2f}",
                f"{sum(s >= threshold for s in others) / max(len(others), 1):.2f}",
                f"{sum(any(s >= threshold for s in q) for q in per_question) / max(len(per_question), 1):.2f}",
                f"{sum(s >= threshold for s in tops['elsewhere']) / max(len(tops['elsewhere']), 1):.2f}",
            ]
        )
    return row, kept


def markdown(results: dict[str, Any]) -> str:
    """The tables of :func:`run_scores`' results."""
    searches = results["searches"]
    variants: list[tuple[str, dict[str, Any]]] = [
        ("as shipped (neighbour share, ceiling 0.5)", {}),
        ("own words only (no neighbour share)", {"borrow": False}),
        ("meaning ceiling 0.25", {"ceiling": 0.25}),
        ("meaning ceiling 1.0", {"ceiling": 1.0}),
    ]
    rows, kept_table = [], []
    for name, options in variants:
        row, kept = _summary(searches, **options)
        rows.append([name, *row])
        if not options:
            kept_table = kept
    parts = [
        "### Median shown score (LoCoMo, top 10 per question)",
        "",
        md_table(
            [
                "relevance",
                "first evidence hit",
                "evidence hits",
                "other hits",
                "top hit, answerable",
                "top hit, adversarial",
                "top hit, another conversation's memory",
            ],
            rows,
        ),
        "",
        "### What a min_score keeps (as shipped)",
        "",
        md_table(
            [
                "min_score",
                "evidence hits",
                "other hits",
                "questions keeping an evidence hit",
                "another memory's questions keeping a hit",
            ],
            kept_table,
        ),
        "",
    ]
    bands: dict[tuple[str, int], list[int]] = {}
    for search in searches:
        if search["where"] != "own" or search["category"] not in _ANSWERABLE:
            continue
        for hit, score in zip(search["hits"], shown(search["hits"])):
            key = (hit["match"], min(int(score * 10), 9))
            count = bands.setdefault(key, [0, 0])
            count[0] += 1
            count[1] += hit["evidence"]

    def cell(match: str, band: int) -> str:
        n, e = bands.get((match, band), (0, 0))
        return f"{n} / {e / n:.3f}" if n else "0"

    parts += [
        "### Evidence share per shown-score band (hits / share that are evidence)",
        "",
        md_table(
            ["score", "found by words", "found by meaning alone"],
            [[f"{b / 10:.1f}-{(b + 1) / 10:.1f}", cell("words", b), cell("meaning", b)] for b in range(10)],
        ),
        "",
    ]
    parts.append(f"- {len(searches)} searches, {results['seconds']} s; dense side: {results['params']['hybrid']}")
    return "\n".join(parts) + "\n"
