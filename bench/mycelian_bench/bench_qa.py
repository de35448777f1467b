"""QA: what a reader can ANSWER from what memory returns (``mycelian-agent bench qa``).

One reader model answers the same LoCoMo questions under four conditions, in one run:

- ``recall``: the memory's recall block. Each slice is replayed with the extractive model into a memory of its own
  (our server in process, ``<out>/memory.db``), then ``invoker.arecall(question, budget_tokens=B)``; the block is
  ``Recall.as_prompt()``.
- ``bm25``: the top ``bm25_k`` raw turns of the slice by BM25 (``bench_recall.OkapiBM25``), in time order.
- ``full``: the whole slice, clipped to ``context_tokens`` (the oldest turns go first).
- ``none``: no memory.

Every turn shown is one line ``[date] speaker: words``. **Slices**: each LoCoMo conversation is cut into runs of
consecutive whole sessions of about ``slice_tokens`` tokens (a session that alone is larger is a slice of its own);
a slice keeps the questions of categories 1-4 whose evidence turns all lie inside it (category 5, adversarial, has
no gold answer). ``questions`` of them are taken round-robin over the slices, so every conversation contributes.
A question is asked on the date of the session after its slice (none for a conversation's last slice).

**Scores**: LoCoMo's token F1 and normalised exact match (:mod:`.metrics`), per condition and per category, over
the questions answered under every condition; prompt tokens per question as the endpoint reports them
(``usage_metadata``), else estimated (characters / 4: the record says which); F1 per 1,000 prompt tokens; and
how often every evidence turn was shown to the reader (``evidence_shown``).

**Files** in ``out``: ``qa_records.jsonl`` (one line per question and condition, appended as they are answered:
a re-run skips the pairs it holds), ``qa_summary.json``, ``qa_config.json`` (the settings the records were made
with; a re-run with other settings is refused), ``qa_ingestion.jsonl`` (each slice's ingestion usage, for the
summary's ``usage_by_model`` rows beside the reader's) and the memory / checkpoint databases. Per slice the conditions
run one after the other, ``full`` first: a llama.cpp reader then re-reads the shared prefix from its cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mycelian_agent.conversations.formats import LOCOMO_CATEGORIES, Question
from mycelian_agent.dates import strip_resolved_dates
from mycelian_agent.errors import ConfigError, make_folder
from mycelian_agent.recall.hits import estimate_tokens, when_label
from mycelian_bench.bench_common import QA_CONDITIONS
from mycelian_bench.metrics import answer_tokens, token_f1
from mycelian_bench.qa_report import markdown_tables, print_summary, summarize
from mycelian_bench.qa_slices import QASlice, QATurn, make_slices, pick_questions, slice_conversation, slice_turns
from mycelian_bench.records import append_jsonl, read_jsonl, write_json
from mycelian_bench.runner import progress_bar, usage_by_model, usage_totals

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "CONDITIONS",
    "READER_SYSTEM_PROMPT",
    "QABench",
    "QASlice",
    "QATurn",
    "bm25_block",
    "check_endpoint",
    "evidence_shown",
    "exact_match",
    "full_block",
    "make_slices",
    "markdown_tables",
    "pick_questions",
    "print_summary",
    "reader_prompt",
    "resolve_reader",
    "slice_conversation",
    "slice_turns",
    "summarize",
]

#: The conditions, in the order they are reported.
CONDITIONS = QA_CONDITIONS
#: The order they run in per slice: ``full`` first (a cached prompt prefix for the next questions), ``none`` last.
_RUN_ORDER = ("full", "bm25", "recall", "none")
_PROMPT_OVERHEAD = 8  # chat-template tokens around two messages, for the estimate
VAULT = "locomo-qa"

READER_SYSTEM_PROMPT = """You answer questions about a long conversation between two people, using only the memory \
you are given.
The conversation date of each line is given in brackets at its start, then the speaker.
- Answer in a few words: a name, a date, a number or a short phrase. No sentence, no explanation.
- For "when" questions give the date. Write dates as they are written in the memory; resolve "yesterday", \
"last week", "last year" against the date of the line that says it.
- If the memory does not hold the answer, give your best short guess."""


# ------------------------------------------------------------------------------------------------ memory blocks

_BM25_HEADING = "Conversation excerpts found by keyword search (oldest first; [date] speaker: words):"
_FULL_HEADING = "The conversation (oldest first; [date] speaker: words):"
_NONE_BLOCK = "(no memory is available)"


def bm25_block(turns: Sequence[QATurn], question: str, k: int = 10) -> str:
    """The ``k`` turns BM25 ranks highest for ``question`` (``bench_recall.OkapiBM25`` over lower-cased words; ties in
    time order), shown in time order."""
    from mycelian_bench.bench_recall import bm25_ranker, tokenize

    if not turns:
        return _NONE_BLOCK
    index, _ = bm25_ranker([t.text for t in turns])
    scores = list(index.get_scores(tokenize(question)))
    best = sorted(sorted(range(len(turns)), key=lambda i: (-scores[i], i))[:k])
    return "\n".join([_BM25_HEADING, *(turns[i].line for i in best)])


def full_block(turns: Sequence[QATurn], context_tokens: int) -> str:
    """Every turn, oldest first, within ``context_tokens`` (estimated): when they do not fit, the latest that do,
    after a line saying how many earlier turns were left out."""
    kept: list[str] = []
    size = estimate_tokens(_FULL_HEADING) + 12
    for turn in reversed(turns):
        size += estimate_tokens(turn.line) + 1
        if size > context_tokens:
            break
        kept.append(turn.line)
    kept.reverse()
    omitted = len(turns) - len(kept)
    return "\n".join([_FULL_HEADING, *([f"[... {omitted} earlier turns left out ...]"] if omitted else []), *kept])


def reader_prompt(block: str | None, question: str, question_date: str | None) -> tuple[str, str]:
    """``(system, human)`` messages: the memory block first (a shared prefix across questions), then the
    question's date and the question."""
    date = when_label(question_date)[:16] if question_date else "unknown"
    memory = block.strip() if block else _NONE_BLOCK
    return READER_SYSTEM_PROMPT, f"Memory:\n{memory}\n\nQuestion date: {date}\nQuestion: {question}\nShort answer:"


def evidence_shown(block: str | None, evidence: Iterable[str], texts: dict[str, str]) -> bool:
    """Whether every evidence turn's words (their first 60 characters) appear in ``block``; the dates a recall
    block puts beside relative ones ("yesterday (2023-05-07)") do not count against it."""
    if not block:
        return False
    flat = " ".join(strip_resolved_dates(block).split())
    return all(" ".join(strip_resolved_dates(texts.get(dia, "\0")).split())[:60] in flat for dia in evidence)


# ------------------------------------------------------------------------------------------------ scoring


def exact_match(prediction: str, gold: str) -> bool:
    """Normalised exact match: the same words after LoCoMo's normalisation (lower case, no punctuation or
    articles)."""
    predicted = answer_tokens(prediction)
    return bool(predicted) and predicted == answer_tokens(gold)


def _clean_answer(text: str) -> str:
    """The first non-empty line of a reply, without an ``Answer:`` label."""
    line = next((part.strip() for part in text.strip().splitlines() if part.strip()), "")
    for label in ("short answer:", "answer:"):
        if line.lower().startswith(label):
            line = line[len(label) :].strip()
    return line


# ------------------------------------------------------------------------------------------------ the reader


def check_endpoint(base_url: str, timeout: float = 5.0) -> None:
    """Raise :class:`ConfigError` when nothing answers HTTP at ``base_url`` (any HTTP status counts as an answer)."""
    import httpx

    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=timeout)
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"reader endpoint {base_url} unreachable ({type(exc).__name__}: {exc}); start it "
            "(e.g. mycelian-agent local-llm serve --port 8090) or fix --base-url"
        ) from None


def resolve_reader(
    reader: str | BaseChatModel,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    max_tokens: int | None = 64,
    model_timeout: float | None = 120.0,
) -> BaseChatModel:
    """The reader chat model: ``"openai:<model>"`` (checked reachable when ``base_url`` is given) or any LangChain
    chat model, returned as is."""
    from langchain_core.language_models import BaseChatModel

    from mycelian_agent.models.resolve import resolve_model

    if isinstance(reader, BaseChatModel):
        return reader
    if not isinstance(reader, str) or not reader.strip().lower().startswith("openai:"):
        raise ConfigError(f"reader must be 'openai:<model>' or a LangChain chat model, got {reader!r}")
    model = resolve_model(
        reader, api_key=api_key, base_url=base_url, max_tokens=max_tokens, timeout=model_timeout, max_retries=1
    )
    if base_url:
        check_endpoint(base_url)
    return model


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the endpoint cannot be reached at all (not a timeout: that is one slow answer)."""
    try:
        import openai
    except ImportError:  # pragma: no cover - openai comes with langchain-openai
        return False
    return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


async def _ask(reader: BaseChatModel, system: str, human: str) -> tuple[str, dict[str, Any]]:
    """The reader's answer and its token usage (``source``: ``endpoint`` when reported, else ``estimate``)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    reply = await reader.ainvoke([SystemMessage(system), HumanMessage(human)])
    content = (
        reply.content
        if isinstance(reply.content, str)
        else "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in reply.content)
    )
    usage = getattr(reply, "usage_metadata", None) or {}
    reported = int(usage.get("input_tokens") or 0)
    cached = int((usage.get("input_token_details") or {}).get("cache_read") or 0)
    return content, {
        "prompt_tokens": reported or estimate_tokens(system) + estimate_tokens(human) + _PROMPT_OVERHEAD,
        "prompt_tokens_source": "endpoint" if reported else "estimate",
        "completion_tokens": int(usage.get("output_tokens") or 0),
        "cached_tokens": cached,
    }


# ------------------------------------------------------------------------------------------------ the run


@dataclass
class QABench:
    """One QA run (see the module docstring). ``reader``: ``"openai:<model>"`` or a LangChain chat model.

    ``locomo``: LoCoMo files; ``questions``: how many (None: every question of every slice); ``slice_tokens``,
    ``context_tokens`` (the ``full`` condition's clip), ``budget_tokens`` (the recall block's), ``bm25_k``;
    ``conditions``: which to run. ``echo`` gets one line per answer (progress for logs).
    """

    out: str | Path
    locomo: Sequence[str | os.PathLike[str]]
    reader: str | BaseChatModel
    api_key: str | None = None
    base_url: str | None = None
    max_tokens: int | None = 64
    model_timeout: float | None = 120.0
    questions: int | None = 40
    slice_tokens: int = 6000
    context_tokens: int = 6000
    budget_tokens: int = 1500
    bm25_k: int = 10
    conditions: Sequence[str] = CONDITIONS
    progress: bool = False
    echo: Callable[[str], None] | None = None
    failures: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.out = Path(self.out).expanduser()
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown or not self.conditions:
            raise ConfigError(f"conditions must be some of {', '.join(CONDITIONS)}; got {list(self.conditions)}")
        self.conditions = tuple(c for c in CONDITIONS if c in self.conditions)
        for name in ("slice_tokens", "context_tokens", "budget_tokens", "bm25_k"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.locomo:
            raise ConfigError("no LoCoMo file given")

    @property
    def records_path(self) -> Path:
        return Path(self.out) / "qa_records.jsonl"

    @property
    def reader_name(self) -> str:
        from mycelian_agent.models.resolve import model_name

        return model_name(self.reader)

    def _settings(self) -> dict[str, Any]:
        return {
            "locomo": [Path(p).name for p in self.locomo],
            "slice_tokens": self.slice_tokens,
            "context_tokens": self.context_tokens,
            "budget_tokens": self.budget_tokens,
            "bm25_k": self.bm25_k,
            "reader": self.reader_name,
            "max_tokens": self.max_tokens,
            "prompt": READER_SYSTEM_PROMPT,
        }

    def _check_settings(self) -> None:
        """Refuse to add records made with other settings to ``out``'s; record the settings of a new ``out``."""
        path = Path(self.out) / "qa_config.json"
        settings = self._settings()
        if path.exists():
            held = json.loads(path.read_text(encoding="utf-8"))
            changed = sorted(k for k in settings if held.get(k) != settings[k])
            if changed:
                raise ConfigError(
                    f"{self.out} holds records made with other settings ({', '.join(changed)}): "
                    "use another --out, or the same settings to resume"
                )
        else:
            write_json(path, settings)

    def run(self) -> dict[str, Any]:
        """Synchronous :meth:`arun`."""
        return asyncio.run(self.arun())

    async def arun(self) -> dict[str, Any]:
        """Answer every selected (question, condition) pair not yet recorded; write and return the summary."""
        self.failures = {}
        slices = make_slices(self.locomo, self.slice_tokens)
        plan = pick_questions(slices, self.questions)
        make_folder(self.out, "--out")
        self._check_settings()
        done = {(r["question_id"], r["condition"]) for r in read_jsonl(self.records_path)}
        todo = sum((q.question_id, c) not in done for _, qs in plan for q in qs for c in self.conditions)
        started, answered = time.perf_counter(), 0
        if todo:
            reader = resolve_reader(
                self.reader,
                api_key=self.api_key,
                base_url=self.base_url,
                max_tokens=self.max_tokens,
                model_timeout=self.model_timeout,
            )
            with progress_bar(self.progress) as progress:
                task = progress.add_task("answers", total=todo, note="")
                for piece, questions in plan:
                    pending = {c: [q for q in questions if (q.question_id, c) not in done] for c in self.conditions}
                    if any(pending.values()):
                        answered += await self._slice(piece, pending, reader, progress, task)
        return self.summary(plan, this_run={"answers": answered, "wall_s": round(time.perf_counter() - started, 1)})

    async def _slice(
        self, piece: QASlice, pending: dict[str, list[Question]], reader: BaseChatModel, progress: Any, task: Any
    ) -> int:
        turns = slice_turns(piece.conversation)
        texts = {t.dia_id: t.text for t in turns}
        recalls = await self._recalls(piece, pending["recall"]) if pending.get("recall") else {}
        answered = 0
        for condition in _RUN_ORDER:
            for question in pending.get(condition, ()):
                if condition == "recall":
                    block, block_tokens, extra = recalls[question.question_id]
                elif condition == "bm25":
                    block = bm25_block(turns, question.question, self.bm25_k)
                    block_tokens, extra = estimate_tokens(block), {}
                elif condition == "full":
                    block = full_block(turns, self.context_tokens)
                    block_tokens, extra = estimate_tokens(block), {}
                else:
                    block, block_tokens, extra = None, 0, {}
                record = await self._answer(piece, question, condition, block, block_tokens, extra, texts, reader)
                if record is None:
                    continue
                append_jsonl(self.records_path, record)
                answered += 1
                progress.update(task, advance=1, note=f"{question.question_id} {condition}")
                if self.echo:
                    self.echo(
                        f"{question.question_id} {condition}: f1 {record['f1']:.2f}, "
                        f"{record['prompt_tokens']} prompt tokens, {record['seconds']:.1f} s"
                    )
        return answered

    async def _recalls(self, piece: QASlice, questions: Sequence[Question]) -> dict[str, tuple[str, int, dict]]:
        """Replay the slice into its memory (resuming from the checkpoint) and recall for each question."""
        from mycelian_agent.builder import build_agent
        from mycelian_agent.conversations.replay import replay_conversation

        out = Path(self.out)
        blocks: dict[str, tuple[str, int, dict]] = {}
        async with build_agent(
            "extractive",
            "in-process",
            db=str(out / "memory.db"),
            vault=VAULT,
            memory=piece.title,
            checkpointer=f"sqlite:{out / 'state.db'}",
        ) as invoker:
            stats = await replay_conversation(invoker, piece.conversation, thread_id=piece.title)
            if stats.messages:  # the thread's usage totals, for the summary's rows (a resumed slice keeps its line)
                status = await invoker.athread_status(piece.title)
                append_jsonl(self.ingestion_path, {"slice_id": piece.slice_id, "usage": status.usage.as_dict()})
            if self.echo and stats.messages:
                self.echo(f"{piece.slice_id}: {stats.messages} messages stored in {stats.elapsed_s:.1f} s")
            if not hasattr(invoker, "arecall"):
                raise ConfigError(
                    "this mycelian_agent has no invoker.arecall (the recall API): the recall "
                    "condition cannot run; leave it out of --conditions"
                )
            for question in questions:
                recall = await invoker.arecall(question.question, user=None, budget_tokens=self.budget_tokens)
                blocks[question.question_id] = (
                    recall.as_prompt(),
                    int(recall.tokens),
                    {
                        "recall_turns": len(recall.turns),
                        "recall_notes": len(recall.notes),
                        "recall_hits": len(recall.hits),
                    },
                )
        return blocks

    async def _answer(
        self,
        piece: QASlice,
        question: Question,
        condition: str,
        block: str | None,
        block_tokens: int,
        extra: dict[str, Any],
        texts: dict[str, str],
        reader: BaseChatModel,
    ) -> dict[str, Any] | None:
        system, human = reader_prompt(block, question.question, piece.question_date)
        started = time.perf_counter()
        try:
            reply, usage = await _ask(reader, system, human)
        except Exception as exc:
            if _unreachable(exc):
                where = f" {self.base_url}" if self.base_url else ""
                raise ConfigError(
                    f"reader endpoint{where} unreachable ({type(exc).__name__}: {exc}); start it or "
                    "fix --base-url, then run the same command again to resume"
                ) from None
            self.failures[f"{question.question_id} {condition}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return None
        hypothesis = _clean_answer(reply)
        return {
            "question_id": question.question_id,
            "condition": condition,
            "slice_id": piece.slice_id,
            "sample_id": piece.sample_id,
            "category": question.category,
            "category_name": LOCOMO_CATEGORIES.get(question.category, question.category),
            "question": question.question,
            "answer": question.answer,
            "question_date": piece.question_date,
            "evidence": list(question.evidence),
            "hypothesis": hypothesis,
            "reply": reply,
            "f1": round(token_f1(hypothesis, question.answer), 4),
            "em": exact_match(hypothesis, question.answer),
            "block_tokens": block_tokens,
            **usage,
            "evidence_shown": evidence_shown(block, question.evidence, texts),
            "seconds": round(time.perf_counter() - started, 3),
            **extra,
        }

    @property
    def ingestion_path(self) -> Path:
        """``<out>/qa_ingestion.jsonl``: the model usage of each slice's replay (the newest line per slice counts)."""
        return Path(self.out) / "qa_ingestion.jsonl"

    def _usage_by_model(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
        """The rows of the ingestion model(s) and the reader's, over ``records``."""
        latest = {line["slice_id"]: line["usage"] for line in read_jsonl(self.ingestion_path)}
        reader = {
            "llm_calls": len(records),
            **{key: sum(int(r.get(key) or 0) for r in records) for key in ("prompt_tokens", "completion_tokens")},
        }
        return usage_by_model(usage_totals(latest.values()), self.reader_name, reader)

    def summary(
        self, plan: Sequence[tuple[QASlice, list[Question]]] | None = None, this_run: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Rebuild ``qa_summary.json`` from the records of the planned questions (all recorded ones without a
        plan) and return it."""
        records = read_jsonl(self.records_path)
        if plan is not None:
            wanted = {q.question_id for _, qs in plan for q in qs}
            records = [r for r in records if r["question_id"] in wanted]
        summary = summarize(records, self.conditions)
        summary.update(
            {
                "benchmark": "qa",
                "out": str(self.out),
                "reader": self.reader_name,
                "settings": self._settings(),
                "slices": [p.describe() | {"picked": len(qs)} for p, qs in plan] if plan is not None else None,
                "failed": dict(self.failures),
                "this_run": this_run or {},
            }
        )
        summary["settings"].pop("prompt", None)
        summary["usage_by_model"] = self._usage_by_model(records)
        write_json(Path(self.out) / "qa_summary.json", summary)
        return summary
