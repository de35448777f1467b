"""Recall: evidence recall@k of ``search_memories`` per category, against a plain BM25 baseline over raw turns.

The LoCoMo and LongMemEval runners of this package ingest the data (extractive model, embedded server) and score
recall from ``search_memories`` with each question (their own recall computation, unchanged). In the same run:

- **BM25 baseline**: BM25 Okapi (``rank_bm25.BM25Okapi``'s formula, :class:`OkapiBM25`) over the raw turns of
  the same conversation (lower-cased ``\\w+`` tokens, nothing else), queried with the question; its top
  ``search_k`` turns are scored exactly like the memory's top ``search_k`` entries (the same distinct-id rule, the
  same date bound for LongMemEval). On LongMemEval both rankings are extended until they hold k distinct sessions
  (LongMemEval's rule): the memory's by paging ``search_memories`` (``offset``), BM25's by ranking every turn.
- **hybrid** (when the ``embeddings`` extra is importable): the same memories searched by a server started with
  ``--embeddings`` (dense MiniLM vectors fused with BM25). It reuses the lexical run's memory database (a copy),
  so entries are identical and only the search differs.

Per data set and level (LoCoMo evidence turns; LongMemEval sessions and ``has_answer`` turns) and per category it
prints recall_any/recall_all @1/5/10 for the three, and lists every category where the memory's recall@10 is
below BM25's.
"""

from __future__ import annotations

import math
import re
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mycelian_bench.bench_common import (
    BenchResult,
    Target,
    embeddings_available,
    md_table,
    save_plot,
)
from mycelian_bench.locomo import LoCoMoRunner, category_label, load_locomo
from mycelian_bench.longmemeval import SingleQuestionRunner, load_longmemeval, search_bound
from mycelian_bench.metrics import RecallRecord, RecallTable, aggregate, unique_in_order

__all__ = ["OkapiBM25", "bm25_ranker", "run_recall", "tokenize"]

KS = (1, 5, 10)
_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens: the plain tokenisation of the BM25 baseline."""
    return _TOKEN.findall(text.lower())


class OkapiBM25:
    """BM25 Okapi over tokenised ``corpus`` as ``rank_bm25.BM25Okapi`` computes it (k1=1.5, b=0.75, an idf below
    zero raised to ``epsilon`` x the mean idf), written out so the baseline needs no package outside the base install;
    ``tests/test_bench.py`` checks it against ``rank_bm25`` where that is installed."""

    def __init__(
        self, corpus: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25
    ) -> None:
        self.k1, self.b = k1, b
        self.doc_freqs = [Counter(doc) for doc in corpus]
        self.doc_len = [len(doc) for doc in corpus]
        self.avgdl = sum(self.doc_len) / len(corpus)
        documents: Counter[str] = Counter()
        for frequencies in self.doc_freqs:
            documents.update(frequencies.keys())
        # The same operations in the same order as rank_bm25, so scores (and the ties they break) are identical.
        self.idf = {word: math.log(len(corpus) - n + 0.5) - math.log(n + 0.5) for word, n in documents.items()}
        total = 0.0
        for idf in self.idf.values():  # a plain loop: sum() of floats is compensated from Python 3.12 on
            total += idf
        floor = epsilon * (total / len(self.idf)) if self.idf else 0.0
        for word, idf in self.idf.items():
            if idf < 0:
                self.idf[word] = floor

    def get_scores(self, query: Sequence[str]) -> list[float]:
        """The score of every document for ``query`` (a token repeated in the query counts again)."""
        k1, b, avgdl = self.k1, self.b, self.avgdl
        scores = [0.0] * len(self.doc_len)
        for token in query:
            idf = self.idf.get(token) or 0
            for i, (frequencies, length) in enumerate(zip(self.doc_freqs, self.doc_len)):
                tf = frequencies.get(token) or 0
                scores[i] += idf * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl)))
        return scores


def bm25_ranker(texts: Sequence[str]) -> tuple[OkapiBM25, str]:
    """A BM25 Okapi index over ``texts`` (:class:`OkapiBM25`; ``.get_scores(tokens)``) and its name for the
    report."""
    return OkapiBM25([tokenize(t) for t in texts]), "BM25 Okapi (rank_bm25's formula)"


def _top(index: Any, ids: Sequence[str], query: str, k: int) -> list[str]:
    scores = list(index.get_scores(tokenize(query)))
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
    return [ids[i] for i in order[:k]]


def _with_embeddings(runner_cls: type, model: str | None = None) -> type:
    """A runner subclass whose harness talks to a server started with ``--embeddings`` (on ``model``; None:
    auto)."""
    from contextlib import asynccontextmanager

    from mycelian_bench.runner import MemoryHarness

    class Hybrid(runner_cls):
        @asynccontextmanager
        async def open_harness(self, first_title: str) -> Any:
            from mycelian_agent.builder import build_agent

            Path(self.out).mkdir(parents=True, exist_ok=True)
            async with build_agent(
                self.model,
                self.server,
                db=self.db_path,
                vault=self.vault,
                memory=first_title,
                checkpointer=f"sqlite:{self.state_path}",
                flush_every=self.flush_every,
                embeddings=True,
                embeddings_model=model,
                batch_size=self.batch_size,
            ) as invoker:
                yield MemoryHarness(invoker, self.flush_every)

    Hybrid.__name__ = f"Hybrid{runner_cls.__name__}"
    return Hybrid


def _copy_ingested(source: Path, target: Path, extra: Sequence[str] = ()) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("memory.db", "memory.db-wal", "memory.db-shm", "state.db", "state.db-wal", "state.db-shm", *extra):
        if (source / name).exists():
            shutil.copy2(source / name, target / name)


def _embed_copy(target: Path, model: str | None = None) -> None:
    """Embed the copied (lexically ingested) entries up front, as an explicit backfill: the hybrid server embeds
    new entries when they are written and never the whole memory at search time."""
    from mycelian_agent.memory_server.retrieval.dense.index import backfill_database

    if (target / "memory.db").exists():
        backfill_database(str(target / "memory.db"), model)


# ------------------------------------------------------------------------------------------------ data sets


def _locomo(
    paths: list[Path],
    work: Path,
    limit: int | None,
    limit_questions: int | None,
    workers: int,
    hybrid: bool,
    batch_size: int = 1,
    model: str | None = None,
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "limit": limit,
        "limit_questions": limit_questions,
        "workers": workers,
        "progress": False,
        "batch_size": batch_size,
    }
    lexical_dir = work / "locomo" / "memory"
    shutil.rmtree(lexical_dir, ignore_errors=True)
    lexical = LoCoMoRunner(out=lexical_dir, embeddings=False, **base).run(paths)
    main, adversarial = "evidence recall, categories 1-4", "adversarial (category 5, reported apart)"
    tables = {"memory": dict(lexical.tables)}
    search_k = lexical.summary["search_k"]
    records: dict[str, list[RecallRecord]] = {main: [], adversarial: []}
    implementation = ""
    for sample in load_locomo(paths)[:limit]:
        pairs = [(m.content, m.tags.get("dia_id", "")) for s in sample.sessions for m in s.messages]
        index, implementation = bm25_ranker([text for text, _ in pairs])
        ids = [dia for _, dia in pairs]
        for question in sample.questions[:limit_questions]:
            retrieved = unique_in_order(_top(index, ids, question.question, search_k))
            name = adversarial if question.is_abstention else main
            records[name].append(
                RecallRecord(question.question_id, category_label(question.category), retrieved, question.evidence)
            )
    tables["bm25"] = {name: aggregate(recs, KS) for name, recs in records.items() if recs}
    if hybrid:
        hybrid_dir = work / "locomo" / "hybrid"
        _copy_ingested(lexical_dir, hybrid_dir, ["samples.jsonl"])
        _embed_copy(hybrid_dir, model)
        tables["hybrid"] = dict(_with_embeddings(LoCoMoRunner, model)(out=hybrid_dir, **base).run(paths).tables)
    return {"tables": tables, "summary": lexical.summary, "bm25": implementation}


def _longmemeval(
    path: Path, work: Path, workers: int, hybrid: bool, batch_size: int = 1, model: str | None = None
) -> dict[str, Any]:
    lexical_dir = work / "longmemeval" / path.stem / "memory"
    shutil.rmtree(lexical_dir, ignore_errors=True)
    lexical = SingleQuestionRunner(
        out=lexical_dir, workers=workers, progress=False, batch_size=batch_size, embeddings=False
    ).run([path])
    session_name, turn_name = "session recall (answer_session_ids)", "turn recall (has_answer turns)"
    tables = {"memory": dict(lexical.tables)}
    sessions: list[RecallRecord] = []
    turns: list[RecallRecord] = []
    implementation = ""
    for conversation in load_longmemeval([path]):
        question = conversation.questions[0]
        before = search_bound(question.question_date)
        pairs = [
            (m.content, s.session_id, m.tags.get("turn", ""))
            for s in conversation.sessions
            if not (before and s.conversation_time and s.conversation_time >= before)
            for m in s.messages
        ]
        index, implementation = bm25_ranker([text for text, _, _ in pairs])
        # Every turn ranked: LongMemEval's rule extends the ranking until it holds k distinct sessions.
        top = _top(index, [f"{sid}\x00{turn}" for _, sid, turn in pairs], question.question, len(pairs))
        found_sessions = unique_in_order(item.split("\x00")[0] for item in top)
        found_turns = unique_in_order(item.replace("\x00", ":") for item in top)
        abstain = question.is_abstention
        sessions.append(
            RecallRecord(question.question_id, question.category, found_sessions, () if abstain else question.evidence)
        )
        turns.append(
            RecallRecord(
                question.question_id, question.category, found_turns, () if abstain else question.evidence_turns
            )
        )
    tables["bm25"] = {session_name: aggregate(sessions, KS), turn_name: aggregate(turns, KS)}
    if hybrid:
        hybrid_dir = work / "longmemeval" / path.stem / "hybrid"
        _copy_ingested(lexical_dir, hybrid_dir)
        _embed_copy(hybrid_dir, model)
        tables["hybrid"] = dict(
            _with_embeddings(SingleQuestionRunner, model)(
                out=hybrid_dir, workers=workers, progress=False, batch_size=batch_size
            )
            .run([path])
            .tables
        )
    return {"tables": tables, "summary": lexical.summary, "bm25": implementation}


# ------------------------------------------------------------------------------------------------ reporting


def _model_id(name: str | None) -> str:
    """The dense model key a server started with ``--embeddings-model name`` uses (auto resolved here: the same
    interpreter)."""
    from mycelian_agent.memory_server.retrieval.dense.encoders import resolve_model

    return resolve_model(name)


def _cell(table: RecallTable | None, category: str, metric: str) -> str:
    if table is None:
        return "-"
    row = table.overall if category == "overall" else table.categories.get(category)
    if row is None or not row.count:
        return "-"
    values = [getattr(row, f"recall_{metric}")(k) for k in KS]
    return " / ".join(f"{v:.2f}" for v in values)


#: What each method's columns are called in the tables (the JSON keeps the short keys): "memory" is the server
#: started with ``--no-embeddings``, since hybrid search became the default its own column.
METHOD_NAMES = {"memory": "memory BM25 alone", "bm25": "plain BM25", "hybrid": "memory hybrid (default)"}


def _categories(table: RecallTable) -> list[str]:
    """The categories to show: those scored, then "overall" when it pools more than one."""
    scored = [name for name, row in table.categories.items() if row.count]
    return scored + (["overall"] if len(scored) > 1 else [])


def _compare(dataset: str, level: str, tables: dict[str, dict[str, RecallTable]]) -> tuple[str, list[dict[str, Any]]]:
    """The table of ``level`` comparing the methods (``level`` is in both the memory's and BM25's tables), and
    where a method's recall@10 is below BM25's."""
    methods = [m for m in ("memory", "bm25", "hybrid") if level in tables.get(m, {})]
    memory, bm25 = tables["memory"][level], tables["bm25"][level]
    rows: list[list[Any]] = []
    below: list[dict[str, Any]] = []
    for category in _categories(memory):
        row = memory.overall if category == "overall" else memory.categories[category]
        if not row.count:
            continue
        cells = [category, row.count]
        for metric in ("any", "all"):
            cells += [_cell(tables[m].get(level), category, metric) for m in methods]
        rows.append(cells)
        for method in [m for m in methods if m != "bm25"]:
            mine = tables[method][level]
            mine_row = mine.overall if category == "overall" else mine.categories.get(category)
            base_row = bm25.overall if category == "overall" else bm25.categories.get(category)
            if mine_row is None or base_row is None or not mine_row.count:
                continue
            for metric in ("any", "all"):
                ours = getattr(mine_row, f"recall_{metric}")(10)
                theirs = getattr(base_row, f"recall_{metric}")(10)
                if ours + 1e-9 < theirs:
                    below.append(
                        {
                            "dataset": dataset,
                            "level": level,
                            "category": category,
                            "method": method,
                            "metric": f"recall_{metric}@10",
                            "value": ours,
                            "bm25": theirs,
                            "questions": mine_row.count,
                        }
                    )
    shown = [METHOD_NAMES[m] for m in methods]
    headers = ["category", "n"] + [f"{m} any@1/5/10" for m in shown] + [f"{m} all@1/5/10" for m in shown]
    return md_table(headers, rows), below


def run_recall(
    out: Path,
    *,
    locomo: Sequence[str | Path],
    longmemeval: Sequence[str | Path],
    limit: int | None = None,
    limit_questions: int | None = None,
    workers: int = 3,
    hybrid: str = "auto",
    batch_size: int = 1,
    embeddings_model: str | None = None,
) -> BenchResult:
    """Memory search vs BM25 (and hybrid) recall on LoCoMo and LongMemEval files. ``hybrid``: auto|on|off, on
    ``embeddings_model`` (None: auto); ``batch_size`` > 1 ingests in batched mode."""
    started = time.perf_counter()
    locomo_paths = [Path(p) for p in locomo]
    lme_paths = [Path(p) for p in longmemeval]
    available = embeddings_available()
    use_hybrid = hybrid == "on" or (hybrid == "auto" and available)
    notes = []
    if hybrid == "on" and not available:
        notes.append("hybrid requested but the embeddings extra is not importable: the server falls back to BM25")
    elif not use_hybrid:
        notes.append(
            "hybrid dense+BM25 search not run: "
            + (
                "--hybrid off"
                if hybrid == "off"
                else "the embeddings extra is not importable here (pip install 'mycelian-agent[embeddings]')"
            )
        )
    work = out / "work" / "recall"
    datasets: dict[str, Any] = {}
    if locomo_paths:
        datasets["locomo"] = _locomo(
            locomo_paths, work, limit, limit_questions, workers, use_hybrid, batch_size, embeddings_model
        )
    for path in lme_paths:
        datasets[f"longmemeval/{path.stem}"] = _longmemeval(
            path, work, workers, use_hybrid, batch_size, embeddings_model
        )
    result = BenchResult(
        "recall",
        {
            "params": {
                "locomo": [str(p) for p in locomo_paths],
                "longmemeval": [str(p) for p in lme_paths],
                "limit": limit,
                "limit_questions": limit_questions,
                "ks": list(KS),
                "hybrid": use_hybrid,
                "model": "extractive",
                "embeddings_model": _model_id(embeddings_model) if use_hybrid else None,
                "batch_size": batch_size,
            }
        },
    )
    below_all: list[dict[str, Any]] = []
    json_tables: dict[str, Any] = {}
    plot_rows: list[tuple[str, dict[str, float | None]]] = []
    for dataset, info in datasets.items():
        json_tables[dataset] = {
            m: {lvl: t.as_dict() for lvl, t in levels.items()} for m, levels in info["tables"].items()
        }
        run = info["summary"]["this_run"]
        json_tables[dataset]["ingestion"] = {
            **info["summary"]["ingestion"],
            "wall_s": run.get("wall_s"),
            "messages_per_s": run.get("messages_per_s"),
        }
        for level in info["tables"]["memory"]:
            if level not in info["tables"]["bm25"]:
                continue
            table, below = _compare(dataset, level, info["tables"])
            if table.count("\n") < 2:  # no category scored at this level (e.g. no has_answer flags)
                continue
            result.tables.append((f"{dataset}: {level} — recall_any and recall_all at k = 1 / 5 / 10", table))
            below_all += below
            memory_table = info["tables"]["memory"][level]
            for category in _categories(memory_table):
                row = memory_table.overall if category == "overall" else memory_table.categories[category]
                if not row.count:
                    continue
                values = {}
                for method in ("memory", "bm25", "hybrid"):
                    t = info["tables"].get(method, {}).get(level)
                    r = None if t is None else (t.overall if category == "overall" else t.categories.get(category))
                    values[method] = r.recall_any(10) if r is not None and r.count else None
                plot_rows.append((f"{dataset.split('/')[-1][:18]} {level.split(' ')[0]}: {category}", values))
        rate = run.get("messages_per_s")
        notes.append(
            f"{dataset}: BM25 baseline = {info['bm25']}; ingested {run.get('messages', 0)} messages in "
            f"{run.get('wall_s', 0):.1f} s wall with {workers} workers, questions included"
            + (f" ({rate:.1f} messages/s)" if rate else "")
        )
    result.data["tables"] = json_tables
    result.data["below_bm25"] = below_all
    memory_below = [b for b in below_all if b["method"] == "memory"]
    hybrid_below = [b for b in below_all if b["method"] == "hybrid"]
    for b in below_all:
        notes.append(
            f"BELOW BM25: {b['method']} {b['dataset']} / {b['level']} / {b['category']}: {b['metric']} "
            f"{b['value']:.3f} < BM25 {b['bm25']:.3f} (n={b['questions']})"
        )
    result.targets.append(
        Target(
            "recall vs BM25",
            "memory search recall@10 (any and all) >= BM25 over raw turns on every category",
            "below on "
            + (
                ", ".join(f"{b['dataset']}/{b['category']} {b['metric']}" for b in memory_below)
                if memory_below
                else "no category"
            ),
            met=not memory_below,
            why="listed in the notes (BELOW BM25)",
        )
    )
    if use_hybrid:
        result.targets.append(
            Target(
                "hybrid recall vs BM25",
                "hybrid recall@10 (any and all) >= BM25 on every category",
                "below on "
                + (
                    ", ".join(f"{b['dataset']}/{b['category']} {b['metric']}" for b in hybrid_below)
                    if hybrid_below
                    else "no category"
                ),
                met=not hybrid_below,
                why="listed in the notes (BELOW BM25)",
            )
        )
    result.notes += notes
    result.notes.append(
        "cells are recall at k = 1 / 5 / 10 over distinct evidence ids (LoCoMo dia_ids; LongMemEval "
        "sessions or session:turn); 'n' = questions scored; LongMemEval abstention questions and "
        "files without has_answer flags have no recall at that level"
    )
    bars = [(label, values) for label, values in plot_rows if values]

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        width = 0.27
        for i, (method, color) in enumerate((("memory", "tab:blue"), ("bm25", "tab:gray"), ("hybrid", "tab:green"))):
            xs = [j + (i - 1) * width for j in range(len(bars))]
            ys = [values.get(method) if values.get(method) is not None else 0 for _, values in bars]
            if any(values.get(method) is not None for _, values in bars):
                ax.bar(xs, ys, width, color=color, label=method)
        ax.set_xticks(range(len(bars)), [label for label, _ in bars], rotation=60, ha="right", fontsize=7)
        ax.set(title="recall_any@10 by category", ylabel="recall_any@10", ylim=(0, 1.05))

    save_plot(result, out, draw, size=(max(8.0, 0.55 * len(bars) + 3), 5.5), ncols=1, grid="y")
    result.seconds = time.perf_counter() - started
    return result
