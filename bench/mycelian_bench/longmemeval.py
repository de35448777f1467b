"""LongMemEval: ingest each question's haystack into a memory of its own, retrieve, optionally answer, score recall.

Per question (thread id = question id, memory title = ``valid_title(question_id)``):

1. every haystack session is replayed in order with its date as conversation time (start, messages, end), through
   :func:`~mycelian_agent.conversations.replay.replay_conversation`, which resumes from the thread's checkpoint;
2. ``search_memories(question, top_ke, include_raw_entries, before=...)``: the bound is the end of the question's
   day (:func:`search_bound`), which keeps later days out. Not the question's minute: LongMemEval's times of day
   are not ordered with the question (``gpt4_2c50253f``'s evidence session is dated 21:48 on the question's day,
   the question 10:45), and its own retrieval evaluation ranks every haystack session;
3. the QA context is what a chat pipeline gets: ``invoker.arecall``'s block (the context document's items that
   bear on the question, the best entries with their neighbouring turns, dated, oldest first, within
   ``budget_tokens``; searched with the same bound); a QA model answers from it, or, without one, the hypothesis is
   that block marked ``[retrieval only: no QA model configured]``;
4. recall: session level against ``answer_session_ids`` and turn level against the ``has_answer`` turns (entries
   carry ``session_id`` / ``turn`` tags; the parts of a long message count as one turn), with
   :mod:`mycelian_bench.metrics` — recall@k looks at the first k *distinct* sessions (turns) among the
   retrieved entries, LongMemEval's turn→session rule; the ranking is paged (``offset``) until it holds k distinct
   sessions, as LongMemEval extends it. Abstention questions (``_abs``) are kept but excluded from recall,
   as LongMemEval's retrieval evaluation does; the oracle files have no ``has_answer`` flags, so no turn recall.

Outputs in ``out``: ``records.jsonl`` (one line per finished question), ``hypotheses.jsonl``
(``{"question_id", "hypothesis"}`` lines, the format LongMemEval's ``evaluate_qa.py`` reads) and ``summary.json``,
both rebuilt from every record after each run. Use a separate ``out`` (hence memory and checkpoint files) per data
file: question ids repeat across LongMemEval variants.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from mycelian_agent.conversations.formats import Conversation, load_conversations, valid_title
from mycelian_agent.errors import ConfigError, InputError, make_folder
from mycelian_agent.models.resolve import model_name, resolve_model
from mycelian_bench.metrics import RecallRecord, aggregate, recall_at_k, unique_in_order
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

__all__ = [
    "QA_SYSTEM_PROMPT",
    "RETRIEVAL_ONLY_MARK",
    "SingleQuestionRunner",
    "answer_question",
    "load_longmemeval",
    "resolve_qa_model",
    "retrieved_positions",
    "search_bound",
]

RETRIEVAL_ONLY_MARK = "[retrieval only: no QA model configured]"

QA_SYSTEM_PROMPT = """You answer a question about a user's past conversations with an AI assistant.
You are given excerpts from a memory of those conversations: a context document that summarises them, and
individual messages with their dates, oldest first. Use only these excerpts.
- When a fact changed over time, the latest statement made before the question date is the current one.
- Resolve relative dates ("last week", "two days ago") against the date of the message that uses them.
- If the excerpts do not contain the answer, say that you do not know.
Reply with the answer only, in at most two sentences."""


def load_longmemeval(paths: Sequence[str | os.PathLike[str]]) -> list[Conversation]:
    """The LongMemEval questions of ``paths`` (one conversation each), in file order; other formats are an error."""
    conversations: list[Conversation] = []
    seen: set[str] = set()
    for path in paths:
        for conversation in load_conversations(path):
            if conversation.kind != "longmemeval":
                raise InputError(f"{path}: not a LongMemEval file (detected {conversation.kind!r} format)")
            if conversation.conversation_id in seen:
                raise InputError(f"{path}: question {conversation.conversation_id!r} appears twice in the input")
            seen.add(conversation.conversation_id)
            conversations.append(conversation)
    return conversations


def retrieved_positions(entries: Sequence[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The distinct sessions and turns (``"<session_id>:<turn>"``) of ranked entries, in rank order."""
    sessions, turns = [], []
    for entry in entries:
        tags = entry.get("tags") or {}
        if "session_id" in tags:
            sessions.append(tags["session_id"])
            if "turn" in tags:
                turns.append(f"{tags['session_id']}:{tags['turn']}")
    return unique_in_order(sessions), unique_in_order(turns)


def resolve_qa_model(
    qa_model: str | BaseChatModel | None, *, api_key: str | None = None, base_url: str | None = None
) -> BaseChatModel | None:
    """The chat model that answers questions (``"openai:<model>"`` or a model), or None for none/"none"."""
    if qa_model is None or (isinstance(qa_model, str) and qa_model.strip().lower() in ("", "none")):
        return None
    if isinstance(qa_model, str) and qa_model.strip().lower() == "extractive":
        raise ConfigError(
            "the extractive model cannot answer questions: give an openai:<model> QA model, "
            "or none for retrieval-only hypotheses"
        )
    return resolve_model(qa_model, api_key=api_key, base_url=base_url, timeout=600)


def search_bound(question_date: str | None) -> str | None:
    """The ``before`` bound of a question's searches: midnight (UTC) after the question's day, or None."""
    if not question_date:
        return None
    day = datetime.fromisoformat(question_date[:10]).date() + timedelta(days=1)
    return f"{day.isoformat()}T00:00:00Z"


async def answer_question(
    model: BaseChatModel, question: str, question_date: str | None, context: str
) -> tuple[str, dict[str, int]]:
    """Ask ``model`` to answer ``question`` from ``context``; returns the answer and its token usage."""
    date = (question_date or "unknown")[:16].replace("T", " ")
    prompt = [
        SystemMessage(QA_SYSTEM_PROMPT),
        HumanMessage(f"Question date: {date}\n\n{context}\n\nQuestion: {question}"),
    ]
    reply = await model.ainvoke(prompt)
    usage = getattr(reply, "usage_metadata", None) or {}
    text = (
        reply.content
        if isinstance(reply.content, str)
        else "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in reply.content)
    )
    return text.strip(), {
        "llm_calls": 1,
        "prompt_tokens": int(usage.get("input_tokens", 0) or 0),
        "completion_tokens": int(usage.get("output_tokens", 0) or 0),
    }


def _recall_flags(retrieved: Sequence[str], gold: Sequence[str], ks: Sequence[int]) -> dict[str, bool] | None:
    flags: dict[str, bool] = {}
    for k in ks:
        found = recall_at_k(retrieved, gold, k)
        if found is None:
            return None
        flags[f"any@{k}"], flags[f"all@{k}"] = found
    return flags


@dataclass
class SingleQuestionRunner(BenchmarkRunner):
    """LongMemEval, one memory per question (see the module docstring).

    ``qa_model``: ``"openai:<model>"`` or a chat model answers from the recall block (``budget_tokens``); None
    (default) gives retrieval-only hypotheses. ``top_k``: entries retrieved for the block (recall needs at least the
    largest of ``ks``, so ``max(top_k, *ks)`` are retrieved). ``workers``: questions run concurrently (asyncio
    tasks over one server connection and checkpointer). ``limit``: the first N questions of the input;
    ``shard="i/n"``: of those, the ones whose position among the sorted question ids is i modulo n.
    Re-running with the same ``out`` skips questions that have a record and resumes an interrupted ingestion.
    """

    qa_model: str | BaseChatModel | None = None
    budget_tokens: int = 1500
    vault: str = "longmemeval"

    async def arun(self, paths: Sequence[str | os.PathLike[str]]) -> BenchmarkReport:
        """Run the selected questions of ``paths`` not yet recorded; write and return the report."""
        selected = self._select(load_longmemeval(paths))
        qa = self._qa_model()
        make_folder(self.out, "--out")
        done = {r.get("question_id") for r in read_jsonl(self.records_path)}
        pending = [c for c in selected if c.conversation_id not in done]
        started = time.perf_counter()
        stored = 0
        if pending:
            async with self.open_harness(valid_title(pending[0].conversation_id)) as harness:
                with progress_bar(self.progress) as progress:
                    questions = progress.add_task("questions", total=len(pending), note="")
                    messages = progress.add_task("messages", total=sum(c.message_count for c in pending), note="")

                    async def work(conversation: Conversation) -> None:
                        nonlocal stored
                        record = await self._question(harness, conversation, qa, progress, messages)
                        append_jsonl(self.records_path, record)
                        stored += record["ingestion"]["messages"]
                        progress.update(questions, advance=1, note=conversation.conversation_id)

                    await run_pool(pending, self.workers, work, lambda c: c.conversation_id, self.failures)
        return self.report(
            this_run=run_rates(
                {"questions": len(pending) - len(self.failures), "messages": stored, "selected": len(selected)}, started
            )
        )

    def _qa_model(self) -> BaseChatModel | None:
        return resolve_qa_model(self.qa_model, api_key=self.api_key, base_url=self.base_url)

    async def _question(
        self, harness: MemoryHarness, conversation: Conversation, qa: BaseChatModel | None, progress: Any, task: Any
    ) -> dict[str, Any]:
        question = conversation.questions[0]
        qid = question.question_id
        memory_id, invoker, stats = await harness.replay(conversation, qid, progress, task)
        status = await invoker.athread_status(qid)
        recalled, search_s = await harness.recall(
            memory_id,
            question.question,
            budget_tokens=self.budget_tokens,
            top_k=self.top_k,
            before=search_bound(question.question_date),
        )
        context = recalled.as_prompt()
        qa_usage = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        qa_started = time.perf_counter()
        if qa is None:
            hypothesis = f"{RETRIEVAL_ONLY_MARK}\n{context}"
        else:
            hypothesis, qa_usage = await answer_question(qa, question.question, question.question_date, context)
        # Recall by LongMemEval's rule: the ranking extended until it holds max(ks) distinct sessions.
        deepest = max(self.ks)
        ranked = await harness.ranking(
            memory_id,
            question.question,
            before=search_bound(question.question_date),
            enough=lambda found: len(retrieved_positions(found)[0]) >= deepest,
        )
        sessions, turns = retrieved_positions(ranked)
        gold_turns = list(question.evidence_turns)
        return {
            "question_id": qid,
            "question_type": question.category,
            "question": question.question,
            "answer": question.answer,
            "question_date": question.question_date,
            "abstention": question.is_abstention,
            "hypothesis": hypothesis,
            "memory_id": memory_id,
            "retrieved": [
                {
                    "entry_id": e.get("entryId"),
                    "session_id": (e.get("tags") or {}).get("session_id"),
                    "turn": (e.get("tags") or {}).get("turn"),
                    "score": e.get("score"),
                }
                for e in ranked
            ],
            "retrieved_sessions": sessions,
            "retrieved_turns": turns,
            "answer_session_ids": list(question.evidence),
            "evidence_turns": gold_turns,
            "recall": {
                "session": None if question.is_abstention else _recall_flags(sessions, question.evidence, self.ks),
                "turn": None if question.is_abstention else _recall_flags(turns, gold_turns, self.ks),
            },
            "ingestion": {
                "seconds": round(stats.elapsed_s, 3),
                "messages": stats.messages,
                "skipped": stats.skipped,
                "messages_per_s": round(stats.messages_per_s, 2),
                "sessions": len(conversation.sessions),
                "entries": status.progress.entries,
                "contexts": status.progress.flushes,
                "recovered_errors": stats.errors[:20],
            },
            "usage": {"ingestion": status.usage.as_dict(), "qa": qa_usage},
            "search_s": round(search_s, 4),
            "qa_s": round(time.perf_counter() - qa_started, 3),
            "model": model_name(self.model),
            "qa_model": model_name(self.qa_model) if qa is not None else None,
            "top_k": self.top_k,
        }

    def report(self, this_run: dict[str, Any] | None = None) -> BenchmarkReport:
        """Rebuild ``summary.json`` and ``hypotheses.jsonl`` from every record in ``out`` and return the report."""
        records = read_jsonl(self.records_path)
        write_json(
            Path(self.out) / "hypotheses.jsonl",
            None,
            lines=({"question_id": r["question_id"], "hypothesis": r["hypothesis"]} for r in records),
        )
        tables = {
            "session recall (answer_session_ids)": aggregate(
                (_recall_record(r, "retrieved_sessions", "answer_session_ids") for r in records), self.ks
            ),
            "turn recall (has_answer turns)": aggregate(
                (_recall_record(r, "retrieved_turns", "evidence_turns") for r in records), self.ks
            ),
        }
        ingestion_usage = usage_totals(r["usage"]["ingestion"] for r in records)
        qa_usage = _sum(r["usage"]["qa"] for r in records)
        summary = {
            "benchmark": "longmemeval",
            "out": str(self.out),
            "questions": len(records),
            "failed": dict(self.failures),
            "this_run": this_run or {},
            "model": model_name(self.model),
            "qa_model": model_name(self.qa_model) if self.qa_model is not None else None,
            "top_k": self.top_k,
            "search_k": self.search_k,
            "shard": self.shard_label,
            "recall": {
                "session": tables["session recall (answer_session_ids)"].as_dict(),
                "turn": tables["turn recall (has_answer turns)"].as_dict(),
            },
            "ingestion": ingestion_totals([r["ingestion"] for r in records]),
            "usage": {"ingestion": ingestion_usage, "qa": qa_usage},
            "search_s_mean": round(sum(r["search_s"] for r in records) / len(records), 4) if records else None,
        }
        summary["usage_by_model"] = usage_by_model(
            ingestion_usage, model_name(self.qa_model) if self.qa_model is not None else None, qa_usage
        )
        write_json(Path(self.out) / "summary.json", summary)
        return BenchmarkReport(summary, tables, _notes(summary))


def _recall_record(record: dict[str, Any], retrieved: str, gold: str) -> RecallRecord:
    # Abstention questions have no answer to find: no gold, so metrics counts them as excluded.
    return RecallRecord(
        record["question_id"],
        record["question_type"],
        record[retrieved],
        () if record.get("abstention") else record[gold],
    )


def _sum(items: Any) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total


def _notes(summary: dict[str, Any]) -> list[str]:
    run = summary["this_run"]
    return report_notes(
        summary,
        recorded=f"questions recorded: {summary['questions']}",
        this_run=(
            f"{run.get('questions', 0)} of {run.get('selected', 0)} selected, {run.get('messages', 0)} messages in "
        ),
        usage=summary["usage"]["ingestion"],
        extra=[f"QA: {summary['qa_model'] or 'none (retrieval-only hypotheses)'}; usage {summary['usage']['qa']}"],
    )
