"""LoCoMo: ingest each sample's conversation into a memory of its own, then score evidence retrieval per question.

Per sample (thread id = ``sample_id``, memory title = ``valid_title(sample_id)``): the sessions are replayed in
order with their dates (``speaker_a`` as ``user``, ``speaker_b`` as ``assistant``, as the loader maps them; every
entry carries the turn's ``dia_id`` tag). Then, for each QA question, ``search_memories(question, top_ke)`` and
evidence recall@k from the distinct ``dia_id`` tags of the ranked entries: ``any`` (at least one evidence turn in
the first k) and ``all`` (every one), per category.

Category 5 (adversarial: the question presumes something the conversation does not say; the loader's
``Question.is_abstention``) is scored like the others but reported in a table of its own and kept out of the
overall row, since its "evidence" is the turn the question twists rather than an answer.

With ``sessions=N`` only the first N sessions of each sample are ingested, with the questions whose evidence lies
there (a slice for slow models). With ``qa_model`` each question of categories 1-4 is answered from the recall block
(``invoker.arecall``: what a chat pipeline gets, within ``budget_tokens``) and scored by token F1 against the gold
answer (LoCoMo's own QA metric; indicative, not a leaderboard number).

Outputs in ``out``: ``records.jsonl`` (one line per finished question), ``samples.jsonl`` (one line per fully
ingested sample: ingestion time, messages, model usage) and ``summary.json`` (rebuilt from both after each run).
Re-running skips recorded questions and resumes an interrupted ingestion from the checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from mycelian_agent.conversations.formats import (
    LOCOMO_CATEGORIES,
    Conversation,
    Question,
    iter_messages,
    load_conversations,
    valid_title,
)
from mycelian_agent.conversations.replay import ReplayStats
from mycelian_agent.errors import ConfigError, InputError, make_folder
from mycelian_agent.models.resolve import model_name
from mycelian_bench.longmemeval import answer_question, resolve_qa_model
from mycelian_bench.metrics import RecallRecord, aggregate, recall_at_k, token_f1, unique_in_order
from mycelian_bench.records import append_jsonl, read_jsonl, write_json
from mycelian_bench.runner import (
    BenchmarkReport,
    BenchmarkRunner,
    MemoryHarness,
    ingestion_totals,
    progress_bar,
    report_notes,
    run_pool,
    run_rates,
    usage_by_model,
    usage_totals,
)

__all__ = ["LoCoMoRunner", "category_label", "first_sessions", "load_locomo"]


def load_locomo(paths: Sequence[str | os.PathLike[str]]) -> list[Conversation]:
    """The LoCoMo samples of ``paths`` in file order; other formats and repeated sample ids are an error."""
    samples: list[Conversation] = []
    for path in paths:
        for conversation in load_conversations(path):
            if conversation.kind != "locomo":
                raise InputError(f"{path}: not a LoCoMo file (detected {conversation.kind!r} format)")
            if any(s.conversation_id == conversation.conversation_id for s in samples):
                raise InputError(f"{path}: sample {conversation.conversation_id!r} appears twice in the input")
            samples.append(conversation)
    return samples


def category_label(category: str) -> str:
    """``"2"`` → ``"2 temporal"`` (sorts in category order, reads as a name)."""
    return f"{category} {LOCOMO_CATEGORIES[category]}" if category in LOCOMO_CATEGORIES else category


@dataclass
class LoCoMoRunner(BenchmarkRunner):
    """LoCoMo evidence retrieval, one memory per sample (see the module docstring).

    ``limit``: the first N samples; ``limit_questions``: the first N questions of each sample; ``shard="i/n"``
    splits samples like :func:`~mycelian_agent.conversations.selection.select_items`; ``workers``: samples run
    concurrently.
    """

    limit_questions: int | None = None
    sessions: int | None = None
    qa_model: str | BaseChatModel | None = None
    budget_tokens: int = 1500
    vault: str = "locomo"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.limit_questions is not None and self.limit_questions < 0:
            raise ConfigError(f"limit_questions must be >= 0, got {self.limit_questions}")
        if self.sessions is not None and self.sessions < 1:
            raise ConfigError(f"sessions must be >= 1, got {self.sessions}")

    @property
    def samples_path(self) -> Path:
        return Path(self.out) / "samples.jsonl"

    async def arun(self, paths: Sequence[str | os.PathLike[str]]) -> BenchmarkReport:
        """Ingest the selected samples and score their questions not yet recorded; write and return the report."""
        selected = [first_sessions(c, self.sessions) for c in self._select(load_locomo(paths))]
        qa = resolve_qa_model(self.qa_model, api_key=self.api_key, base_url=self.base_url)
        make_folder(self.out, "--out")
        done = {r.get("question_id") for r in read_jsonl(self.records_path)}
        ingested = {r.get("sample_id") for r in read_jsonl(self.samples_path)}
        work_list = [
            (c, [q for q in c.questions[: self.limit_questions] if q.question_id not in done]) for c in selected
        ]
        pending = [(c, qs) for c, qs in work_list if qs or c.conversation_id not in ingested]
        started = time.perf_counter()
        counts = {"messages": 0, "questions": 0}
        if pending:
            async with self.open_harness(valid_title(pending[0][0].conversation_id)) as harness:
                with progress_bar(self.progress) as progress:
                    messages = progress.add_task("messages", total=sum(c.message_count for c, _ in pending), note="")
                    questions = progress.add_task("questions", total=sum(len(qs) for _, qs in pending), note="")

                    async def work(item: tuple[Conversation, list[Question]]) -> None:
                        conversation, todo = item
                        memory_id, stats = await self._ingest(harness, conversation, ingested, progress, messages)
                        counts["messages"] += stats.messages
                        dia_ids = {m.message.tags.get("dia_id") for m in iter_messages(conversation)}
                        for question in todo:
                            record = await self._question(harness, memory_id, conversation, question, dia_ids, qa)
                            append_jsonl(self.records_path, record)
                            counts["questions"] += 1
                            progress.update(questions, advance=1, note=question.question_id)

                    await run_pool(pending, self.workers, work, lambda item: item[0].conversation_id, self.failures)
        return self.report(this_run=run_rates({"samples": len(pending), "selected": len(selected), **counts}, started))

    async def _ingest(
        self, harness: MemoryHarness, conversation: Conversation, ingested: set[str | None], progress: Any, task: Any
    ) -> tuple[str, ReplayStats]:
        sample_id = conversation.conversation_id
        memory_id, invoker, stats = await harness.replay(conversation, sample_id, progress, task)
        if sample_id not in ingested:
            status = await invoker.athread_status(sample_id)
            append_jsonl(
                self.samples_path,
                {
                    "sample_id": sample_id,
                    "memory_id": memory_id,
                    "sessions": len(conversation.sessions),
                    "ingestion": {
                        "seconds": round(stats.elapsed_s, 3),
                        "messages": stats.messages,
                        "skipped": stats.skipped,
                        "messages_per_s": round(stats.messages_per_s, 2),
                        "entries": status.progress.entries,
                        "contexts": status.progress.flushes,
                        "recovered_errors": stats.errors[:20],
                    },
                    "usage": status.usage.as_dict(),
                    "model": model_name(self.model),
                },
            )
        return memory_id, stats

    async def _question(
        self,
        harness: MemoryHarness,
        memory_id: str,
        conversation: Conversation,
        question: Question,
        dia_ids: set[str | None],
        qa: BaseChatModel | None,
    ) -> dict[str, Any]:
        found, search_s = await harness.search(memory_id, question.question, self.search_k)
        entries = found.get("entries") or []
        answered = None
        if qa is not None and not question.is_abstention:
            started = time.perf_counter()
            recalled, _ = await harness.recall(
                memory_id, question.question, budget_tokens=self.budget_tokens, top_k=self.top_k
            )
            context = recalled.as_prompt()
            hypothesis, usage = await answer_question(qa, question.question, None, context)
            answered = {
                "hypothesis": hypothesis,
                "f1": round(token_f1(hypothesis, question.answer or ""), 4),
                "usage": usage,
                "seconds": round(time.perf_counter() - started, 3),
            }
        retrieved = unique_in_order(t["dia_id"] for e in entries if "dia_id" in (t := e.get("tags") or {}))
        recall: dict[str, bool] = {}
        for k in self.ks:
            found_k = recall_at_k(retrieved, question.evidence, k)
            if found_k is not None:
                recall[f"any@{k}"], recall[f"all@{k}"] = found_k
        return {
            "question_id": question.question_id,
            "sample_id": conversation.conversation_id,
            "category": question.category,
            "category_name": LOCOMO_CATEGORIES.get(question.category, question.category),
            "adversarial": question.is_abstention,
            "question": question.question,
            "answer": question.answer,
            "evidence": list(question.evidence),
            # Evidence ids absent from the conversation (upstream annotation slips) can never be retrieved.
            "evidence_missing": [e for e in question.evidence if e not in dia_ids],
            "retrieved": [
                {"entry_id": e.get("entryId"), "dia_id": (e.get("tags") or {}).get("dia_id"), "score": e.get("score")}
                for e in entries
            ],
            "retrieved_dia_ids": retrieved,
            "recall": recall or None,
            "search_s": round(search_s, 4),
            "qa": answered,
        }

    def report(self, this_run: dict[str, Any] | None = None) -> BenchmarkReport:
        """Rebuild ``summary.json`` from every record in ``out`` and return the report."""
        records = read_jsonl(self.records_path)
        samples = read_jsonl(self.samples_path)

        def recall_records(adversarial: bool) -> list[RecallRecord]:
            return [
                RecallRecord(r["question_id"], category_label(r["category"]), r["retrieved_dia_ids"], r["evidence"])
                for r in records
                if bool(r.get("adversarial")) == adversarial
            ]

        main_name, adversarial_name = "evidence recall, categories 1-4", "adversarial (category 5, reported apart)"
        tables = {main_name: aggregate(recall_records(False), self.ks)}
        if any(r.get("adversarial") for r in records):
            tables[adversarial_name] = aggregate(recall_records(True), self.ks)
        usage = usage_totals(sample["usage"] for sample in samples)
        qa = _qa_summary(records, self.qa_model)
        summary = {
            "benchmark": "locomo",
            "out": str(self.out),
            "samples": len(samples),
            "questions": len(records),
            "failed": dict(self.failures),
            "this_run": this_run or {},
            "model": model_name(self.model),
            "top_k": self.top_k,
            "search_k": self.search_k,
            "shard": self.shard_label,
            "recall": {
                "categories_1_4": tables[main_name].as_dict(),
                "adversarial": tables[adversarial_name].as_dict() if adversarial_name in tables else None,
            },
            "evidence_ids_missing_from_conversation": sum(len(r["evidence_missing"]) for r in records),
            "ingestion": ingestion_totals([s["ingestion"] for s in samples]),
            "usage": usage,
            "search_s_mean": round(sum(r["search_s"] for r in records) / len(records), 4) if records else None,
            "sessions": self.sessions,
            "qa": qa,
            "usage_by_model": usage_by_model(usage, model_name(self.qa_model) if qa else None, qa and qa["usage"]),
        }
        write_json(Path(self.out) / "summary.json", summary)
        return BenchmarkReport(summary, tables, _notes(summary))


def first_sessions(conversation: Conversation, sessions: int | None) -> Conversation:
    """The first ``sessions`` sessions of a sample and the questions whose evidence lies entirely in them (all of
    it when ``sessions`` is None). Questions without evidence ids are dropped from a slice."""
    if sessions is None or sessions >= len(conversation.sessions):
        return conversation
    kept = conversation.sessions[:sessions]
    ids = {m.tags.get("dia_id") for s in kept for m in s.messages}
    questions = tuple(q for q in conversation.questions if q.evidence and set(q.evidence) <= ids)
    return replace(conversation, sessions=kept, questions=questions)


def _qa_summary(records: list[dict[str, Any]], qa_model: Any) -> dict[str, Any] | None:
    """Mean token F1 of the answered questions, overall and per category (None without a QA model)."""
    answered = [r for r in records if r.get("qa")]
    if not answered:
        return None
    by_category: dict[str, list[float]] = {}
    for r in answered:
        by_category.setdefault(category_label(r["category"]), []).append(r["qa"]["f1"])
    usage: dict[str, int] = {}
    for r in answered:
        for key, value in r["qa"]["usage"].items():
            usage[key] = usage.get(key, 0) + value
    return {
        "model": model_name(qa_model),
        "judge": "token F1 against the gold answer (LoCoMo's QA metric)",
        "questions": len(answered),
        "f1_mean": round(sum(r["qa"]["f1"] for r in answered) / len(answered), 4),
        "f1_by_category": {c: round(sum(v) / len(v), 4) for c, v in sorted(by_category.items())},
        "usage": usage,
        "seconds": round(sum(r["qa"]["seconds"] for r in answered), 1),
    }


def _notes(summary: dict[str, Any]) -> list[str]:
    run = summary["this_run"]
    return report_notes(
        summary,
        recorded=f"samples ingested: {summary['samples']}, questions recorded: {summary['questions']}",
        this_run=f"{run.get('questions', 0)} questions, {run.get('messages', 0)} messages stored, ",
        usage=summary["usage"],
        extra=[f"evidence ids not found in the conversation: {summary['evidence_ids_missing_from_conversation']}"]
        + (
            [
                f"QA ({summary['qa']['model']}, {summary['qa']['questions']} questions, judged by "
                f"{summary['qa']['judge']}): mean F1 {summary['qa']['f1_mean']:.3f}; by category "
                f"{summary['qa']['f1_by_category']}"
            ]
            if summary.get("qa")
            else []
        ),
    )
