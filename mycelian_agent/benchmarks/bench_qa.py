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
with; a re-run with other settings is refused) and the memory / checkpoint databases. Per slice the conditions
run one after the other, ``full`` first: a llama.cpp reader then re-reads the shared prefix from its cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..conversations.formats import LOCOMO_CATEGORIES, Conversation, Question, valid_title
from ..errors import ConfigError, make_folder
from ..recall.hits import estimate_tokens, when_label
from .records import append_jsonl, read_jsonl, write_json
from .runner import progress_bar
from .bench_common import QA_CONDITIONS
from .locomo import category_label, load_locomo
from .metrics import answer_tokens, token_f1

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "CONDITIONS", "READER_SYSTEM_PROMPT", "QASlice", "QATurn", "QABench", "slice_conversation", "make_slices",
    "pick_questions", "slice_turns", "bm25_block", "full_block", "reader_prompt", "exact_match", "evidence_shown",
    "resolve_reader", "check_endpoint", "summarize", "print_summary", "markdown_tables",
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


# ------------------------------------------------------------------------------------------------ slices


@dataclass(frozen=True)
class QASlice:
    """Consecutive whole sessions of one LoCoMo sample and the questions answerable from them alone.

    ``conversation`` holds the slice's sessions and its kept questions; ``question_date`` is the date of the
    session after the slice (None for the sample's last slice); ``tokens`` the estimated size of its turn lines.
    """

    slice_id: str
    sample_id: str
    conversation: Conversation
    question_date: str | None
    tokens: int

    @property
    def title(self) -> str:
        """The memory title (and thread id) of the slice."""
        return valid_title(self.slice_id.replace("/", "-"))

    def describe(self) -> dict[str, Any]:
        """JSON-ready: id, sessions, size, question date and the number of kept questions."""
        sessions = self.conversation.sessions
        return {"slice_id": self.slice_id, "sessions": [s.session_id for s in sessions],
                "messages": self.conversation.message_count, "tokens": self.tokens,
                "question_date": self.question_date, "questions": len(self.conversation.questions)}


@dataclass(frozen=True)
class QATurn:
    """One turn of a slice as the reader sees it: ``line`` is ``[date] speaker: words``."""

    position: int
    dia_id: str
    text: str
    line: str


def slice_turns(conversation: Conversation) -> list[QATurn]:
    """Every turn of ``conversation`` in order, dated, with its speaker."""
    turns: list[QATurn] = []
    for session in conversation.sessions:
        for message in session.messages:
            speaker = message.name or message.tags.get("speaker") or message.role
            turns.append(QATurn(len(turns), message.tags.get("dia_id", ""), message.content,
                                f"[{when_label(session.conversation_time)}] {speaker}: {message.content}"))
    return turns


def slice_conversation(conversation: Conversation, slice_tokens: int) -> list[QASlice]:
    """Cut a LoCoMo sample into slices of consecutive whole sessions of at most ``slice_tokens`` tokens (estimated
    over the dated turn lines; a larger session is a slice of its own), each with the questions of categories 1-4
    whose evidence turns all lie inside it."""
    if slice_tokens < 1:
        raise ConfigError(f"slice_tokens must be >= 1, got {slice_tokens}")
    groups: list[list[int]] = []
    size = 0
    for index, session in enumerate(conversation.sessions):
        tokens = sum(estimate_tokens(t.line) + 1 for t in slice_turns(replace(conversation, sessions=(session,))))
        if groups and groups[-1] and size + tokens <= slice_tokens:
            groups[-1].append(index)
            size += tokens
        else:
            groups.append([index])
            size = tokens
    slices = []
    for group in groups:
        sessions = tuple(conversation.sessions[i] for i in group)
        ids = {m.tags.get("dia_id") for s in sessions for m in s.messages}
        questions = tuple(q for q in conversation.questions
                          if q.category in LOCOMO_CATEGORIES and not q.is_abstention
                          and q.evidence and set(q.evidence) <= ids)
        after = group[-1] + 1
        part = replace(conversation, sessions=sessions, questions=questions)
        slices.append(QASlice(
            slice_id=f"{conversation.conversation_id}/s{group[0] + 1}-{group[-1] + 1}",
            sample_id=conversation.conversation_id, conversation=part,
            question_date=conversation.sessions[after].conversation_time if after < len(conversation.sessions)
            else None,
            tokens=sum(estimate_tokens(t.line) + 1 for t in slice_turns(part))))
    return slices


def make_slices(paths: Sequence[str | os.PathLike[str]], slice_tokens: int) -> list[QASlice]:
    """The slices of every LoCoMo sample of ``paths``, in file order."""
    return [s for conversation in load_locomo(paths) for s in slice_conversation(conversation, slice_tokens)]


def _interleaved(questions: Sequence[Question], start: int) -> list[Question]:
    """``questions`` with their categories taking turns (file order within a category), the first turn going to
    the ``start``-th category (modulo their number): so that a few questions per slice still cover them all."""
    by_category: dict[str, list[Question]] = {}
    for question in questions:
        by_category.setdefault(question.category, []).append(question)
    names = sorted(by_category)
    if not names:
        return []
    names = names[start % len(names):] + names[:start % len(names)]
    order: list[Question] = []
    for depth in range(max(len(v) for v in by_category.values())):
        order += [by_category[name][depth] for name in names if depth < len(by_category[name])]
    return order


def pick_questions(slices: Sequence[QASlice], limit: int | None) -> list[tuple[QASlice, list[Question]]]:
    """Up to ``limit`` questions (all: None), taken round-robin over the slices (one question of every slice,
    then a second, ...; within a slice the categories take turns, starting with a different one per slice),
    grouped back by slice in slice order; slices left without a question are dropped. Raises
    :class:`ConfigError` when the slices hold no question."""
    if limit is not None and limit < 1:
        raise ConfigError(f"questions must be >= 1, got {limit}")
    total = sum(len(s.conversation.questions) for s in slices)
    if not total:
        raise ConfigError(f"no questions: the {len(slices)} slice(s) hold no question of categories 1-4 whose "
                          "evidence lies inside one slice; raise --slice-tokens or give other LoCoMo files")
    wanted = total if limit is None else min(limit, total)
    taken: dict[int, int] = {}
    depth = 0
    while sum(taken.values()) < wanted:
        for index, piece in enumerate(slices):
            if sum(taken.values()) >= wanted:
                break
            if depth < len(piece.conversation.questions):
                taken[index] = taken.get(index, 0) + 1
        depth += 1
    return [(piece, _interleaved(piece.conversation.questions, i)[:taken[i]]) for i, piece in enumerate(slices)
            if taken.get(i)]


# ------------------------------------------------------------------------------------------------ memory blocks

_BM25_HEADING = "Conversation excerpts found by keyword search (oldest first; [date] speaker: words):"
_FULL_HEADING = "The conversation (oldest first; [date] speaker: words):"
_NONE_BLOCK = "(no memory is available)"


def bm25_block(turns: Sequence[QATurn], question: str, k: int = 10) -> str:
    """The ``k`` turns BM25 ranks highest for ``question`` (``bench_recall.OkapiBM25`` over lower-cased words; ties in
    time order), shown in time order."""
    from .bench_recall import bm25_ranker, tokenize

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
    """Whether every evidence turn's words (their first 60 characters) appear in ``block``."""
    if not block:
        return False
    flat = " ".join(block.split())
    return all(" ".join(texts.get(dia, "\0").split())[:60] in flat for dia in evidence)


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
            line = line[len(label):].strip()
    return line


# ------------------------------------------------------------------------------------------------ the reader


def check_endpoint(base_url: str, timeout: float = 5.0) -> None:
    """Raise :class:`ConfigError` when nothing answers HTTP at ``base_url`` (any HTTP status counts as an answer)."""
    import httpx

    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=timeout)
    except httpx.HTTPError as exc:
        raise ConfigError(f"reader endpoint {base_url} unreachable ({type(exc).__name__}: {exc}); start it "
                          "(e.g. mycelian-agent local-llm serve --port 8090) or fix --base-url") from None


def resolve_reader(reader: "str | BaseChatModel", *, api_key: str | None = None, base_url: str | None = None,
                   max_tokens: int | None = 64, model_timeout: float | None = 120.0) -> "BaseChatModel":
    """The reader chat model: ``"openai:<model>"`` (checked reachable when ``base_url`` is given) or any LangChain
    chat model, returned as is."""
    from langchain_core.language_models import BaseChatModel

    from ..models.resolve import resolve_model

    if isinstance(reader, BaseChatModel):
        return reader
    if not isinstance(reader, str) or not reader.strip().lower().startswith("openai:"):
        raise ConfigError(f"reader must be 'openai:<model>' or a LangChain chat model, got {reader!r}")
    model = resolve_model(reader, api_key=api_key, base_url=base_url, max_tokens=max_tokens, timeout=model_timeout,
                          max_retries=1)
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


async def _ask(reader: "BaseChatModel", system: str, human: str) -> tuple[str, dict[str, Any]]:
    """The reader's answer and its token usage (``source``: ``endpoint`` when reported, else ``estimate``)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    reply = await reader.ainvoke([SystemMessage(system), HumanMessage(human)])
    content = reply.content if isinstance(reply.content, str) else "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in reply.content)
    usage = getattr(reply, "usage_metadata", None) or {}
    reported = int(usage.get("input_tokens") or 0)
    cached = int((usage.get("input_token_details") or {}).get("cache_read") or 0)
    return content, {
        "prompt_tokens": reported or estimate_tokens(system) + estimate_tokens(human) + _PROMPT_OVERHEAD,
        "prompt_tokens_source": "endpoint" if reported else "estimate",
        "completion_tokens": int(usage.get("output_tokens") or 0), "cached_tokens": cached}


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
    reader: "str | BaseChatModel"
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
        from ..models.resolve import model_name

        return model_name(self.reader)

    def _settings(self) -> dict[str, Any]:
        return {"locomo": [Path(p).name for p in self.locomo], "slice_tokens": self.slice_tokens,
                "context_tokens": self.context_tokens, "budget_tokens": self.budget_tokens, "bm25_k": self.bm25_k,
                "reader": self.reader_name, "max_tokens": self.max_tokens, "prompt": READER_SYSTEM_PROMPT}

    def _check_settings(self) -> None:
        """Refuse to add records made with other settings to ``out``'s; record the settings of a new ``out``."""
        path = Path(self.out) / "qa_config.json"
        settings = self._settings()
        if path.exists():
            held = json.loads(path.read_text(encoding="utf-8"))
            changed = sorted(k for k in settings if held.get(k) != settings[k])
            if changed:
                raise ConfigError(f"{self.out} holds records made with other settings ({', '.join(changed)}): "
                                  "use another --out, or the same settings to resume")
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
            reader = resolve_reader(self.reader, api_key=self.api_key, base_url=self.base_url,
                                    max_tokens=self.max_tokens, model_timeout=self.model_timeout)
            with progress_bar(self.progress) as progress:
                task = progress.add_task("answers", total=todo, note="")
                for piece, questions in plan:
                    pending = {c: [q for q in questions if (q.question_id, c) not in done] for c in self.conditions}
                    if any(pending.values()):
                        answered += await self._slice(piece, pending, reader, progress, task)
        return self.summary(plan, this_run={"answers": answered, "wall_s": round(time.perf_counter() - started, 1)})

    async def _slice(self, piece: QASlice, pending: dict[str, list[Question]], reader: "BaseChatModel",
                     progress: Any, task: Any) -> int:
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
                    self.echo(f"{question.question_id} {condition}: f1 {record['f1']:.2f}, "
                              f"{record['prompt_tokens']} prompt tokens, {record['seconds']:.1f} s")
        return answered

    async def _recalls(self, piece: QASlice, questions: Sequence[Question]) -> dict[str, tuple[str, int, dict]]:
        """Replay the slice into its memory (resuming from the checkpoint) and recall for each question."""
        from ..builder import build_agent
        from ..conversations.replay import replay_conversation

        out = Path(self.out)
        blocks: dict[str, tuple[str, int, dict]] = {}
        async with build_agent("extractive", "in-process", db=str(out / "memory.db"), vault=VAULT,
                               memory=piece.title, checkpointer=f"sqlite:{out / 'state.db'}") as invoker:
            stats = await replay_conversation(invoker, piece.conversation, thread_id=piece.title)
            if self.echo and stats.messages:
                self.echo(f"{piece.slice_id}: {stats.messages} messages stored in {stats.elapsed_s:.1f} s")
            if not hasattr(invoker, "arecall"):
                raise ConfigError("this mycelian_agent has no invoker.arecall (the recall API): the recall "
                                  "condition cannot run; leave it out of --conditions")
            for question in questions:
                recall = await invoker.arecall(question.question, user=None, budget_tokens=self.budget_tokens)
                blocks[question.question_id] = (recall.as_prompt(), int(recall.tokens),
                                                {"recall_turns": len(recall.turns), "recall_notes": len(recall.notes),
                                                 "recall_hits": len(recall.hits)})
        return blocks

    async def _answer(self, piece: QASlice, question: Question, condition: str, block: str | None,
                      block_tokens: int, extra: dict[str, Any], texts: dict[str, str],
                      reader: "BaseChatModel") -> dict[str, Any] | None:
        system, human = reader_prompt(block, question.question, piece.question_date)
        started = time.perf_counter()
        try:
            reply, usage = await _ask(reader, system, human)
        except Exception as exc:
            if _unreachable(exc):
                where = f" {self.base_url}" if self.base_url else ""
                raise ConfigError(f"reader endpoint{where} unreachable ({type(exc).__name__}: {exc}); start it or "
                                  "fix --base-url, then run the same command again to resume") from None
            self.failures[f"{question.question_id} {condition}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return None
        hypothesis = _clean_answer(reply)
        return {
            "question_id": question.question_id, "condition": condition, "slice_id": piece.slice_id,
            "sample_id": piece.sample_id, "category": question.category,
            "category_name": LOCOMO_CATEGORIES.get(question.category, question.category),
            "question": question.question, "answer": question.answer, "question_date": piece.question_date,
            "evidence": list(question.evidence), "hypothesis": hypothesis, "reply": reply,
            "f1": round(token_f1(hypothesis, question.answer), 4), "em": exact_match(hypothesis, question.answer),
            "block_tokens": block_tokens, **usage,
            "evidence_shown": evidence_shown(block, question.evidence, texts),
            "seconds": round(time.perf_counter() - started, 3), **extra,
        }

    def summary(self, plan: Sequence[tuple[QASlice, list[Question]]] | None = None,
                this_run: dict[str, Any] | None = None) -> dict[str, Any]:
        """Rebuild ``qa_summary.json`` from the records of the planned questions (all recorded ones without a
        plan) and return it."""
        records = read_jsonl(self.records_path)
        if plan is not None:
            wanted = {q.question_id for _, qs in plan for q in qs}
            records = [r for r in records if r["question_id"] in wanted]
        summary = summarize(records, self.conditions)
        summary.update({
            "benchmark": "qa", "out": str(self.out), "reader": self.reader_name, "settings": self._settings(),
            "slices": [p.describe() | {"picked": len(qs)} for p, qs in plan] if plan is not None else None,
            "failed": dict(self.failures), "this_run": this_run or {},
        })
        summary["settings"].pop("prompt", None)
        write_json(Path(self.out) / "qa_summary.json", summary)
        return summary


# ------------------------------------------------------------------------------------------------ the summary


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _row(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    prompt = _mean([r["prompt_tokens"] for r in records])
    f1 = _mean([r["f1"] for r in records])
    sources = sorted({r["prompt_tokens_source"] for r in records})
    return {"n": len(records), "f1": f1, "em": _mean([float(r["em"]) for r in records]),
            "prompt_tokens": round(prompt, 1) if prompt is not None else None,
            "prompt_tokens_source": "+".join(sources) or None,
            "block_tokens": _mean([r["block_tokens"] for r in records]),
            "f1_per_1k_prompt_tokens": round(1000 * f1 / prompt, 4) if f1 is not None and prompt else None,
            "evidence_shown": _mean([float(r["evidence_shown"]) for r in records]),
            "seconds": _mean([r["seconds"] for r in records])}


def summarize(records: Sequence[dict[str, Any]], conditions: Sequence[str] = CONDITIONS) -> dict[str, Any]:
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
        categories[label] = {c: _row([r for q in sorted(paired) if category_label((r := held[q])["category"])
                                      == label]) for c, held in by_condition.items()}
    target = None
    recall, full = rows.get("recall"), rows.get("full")
    if recall and full and recall["n"]:
        share = recall["prompt_tokens"] / full["prompt_tokens"] if full["prompt_tokens"] else None
        target = {"goal": "recall F1 >= full F1 at <= 20% of full's prompt tokens",
                  "recall_f1": recall["f1"], "full_f1": full["f1"],
                  "prompt_token_share": round(share, 4) if share is not None else None,
                  "f1_met": recall["f1"] >= full["f1"], "tokens_met": share is not None and share <= 0.2}
        target["met"] = target["f1_met"] and target["tokens_met"]
    return {"questions_paired": len(paired), "records": {c: len(h) for c, h in by_condition.items()},
            "conditions": rows, "categories": categories, "target": target}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _tables(summary: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    head = ["condition", "n", "F1", "EM", "prompt tokens/q", "block tokens/q", "F1 per 1k prompt tokens",
            "evidence shown", "s/answer"]
    rows = [[name, str(row["n"]), _fmt(row["f1"]), _fmt(row["em"]),
             _fmt(row["prompt_tokens"], 0) + (" (est.)" if row["prompt_tokens_source"] == "estimate" else ""),
             _fmt(row["block_tokens"], 0), _fmt(row["f1_per_1k_prompt_tokens"]), _fmt(row["evidence_shown"], 2),
             _fmt(row["seconds"], 1)] for name, row in summary["conditions"].items()]
    conditions = list(summary["conditions"])
    cat_head = ["category", "n", *(f"{c} F1" for c in conditions)]
    cat_rows = [[label, str(next(iter(cells.values()))["n"]), *(_fmt(cells[c]["f1"]) for c in conditions)]
                for label, cells in summary["categories"].items()]
    return head, rows, cat_head, cat_rows


def _target_line(summary: dict[str, Any]) -> str | None:
    target = summary.get("target")
    if not target:
        return None
    return (f"target ({target['goal']}): recall F1 {_fmt(target['recall_f1'])} vs full {_fmt(target['full_f1'])}, "
            f"prompt tokens {_fmt((target['prompt_token_share'] or 0) * 100, 1)}% of full -> "
            + ("MET" if target["met"] else "MISSED"))


def markdown_tables(summary: dict[str, Any]) -> str:
    """The condition and category tables as Markdown, then the target line."""
    head, rows, cat_head, cat_rows = _tables(summary)

    def table(h: list[str], r: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(h) + " |", "|" + "---|" * len(h), *("| " + " | ".join(x) + " |" for x in r)]

    lines = table(head, rows) + [""] + table(cat_head, cat_rows)
    target = _target_line(summary)
    return "\n".join(lines + (["", target] if target else []))


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """Print the condition and category tables (rich), the target and any failures."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file: rich's default 80 columns would fold the table
            console = Console(width=140)
    head, rows, cat_head, cat_rows = _tables(summary)
    for title, h, r in ((f"QA: {summary['reader']}, {summary['questions_paired']} questions answered under every "
                         "condition", head, rows), ("F1 per category", cat_head, cat_rows)):
        table = Table(title=title, title_justify="left")
        for index, name in enumerate(h):
            table.add_column(name, justify="left" if index == 0 else "right")
        for row in r:
            table.add_row(*row)
        console.print(table)
    target = _target_line(summary)
    if target:
        console.print(target)
    if summary.get("failed"):
        console.print(f"FAILED ({len(summary['failed'])}; run the same command again to retry): "
                      + "; ".join(f"{k}: {v}" for k, v in list(summary["failed"].items())[:5]))
