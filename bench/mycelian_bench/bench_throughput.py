"""Throughput: concurrent conversations against one memory-server connection and one checkpointer. It is one module
because its measurements share one report and the baselines they are read against, measured in the same run.

N conversations (N = 1, 4, 16, 64), each with its own thread id and its own memory, run at once on one event loop
and share one embedded server (stdio) and one SQLite checkpointer, as the benchmark runners do. The model is a
scripted one that waits a fixed latency per call (``asyncio.sleep``, as a remote LLM would) and then returns a
valid tool call. Each conversation is one session: start, M messages (every ``flush_every``-th also writes the
context document: a second model call), end. Reported: messages/s and the scaling efficiency
``msgs/s at N / (N x msgs/s at 1)``, both from this run, and where a message's time goes at each N.

Then the same with the extractive model and no latency: ingestion messages/s (1 conversation, and several at once).
With ``batch_size > 1`` also batched extractive ingestion (one conversation), one call per message and in bulk (all
messages in one ``aprocess_conversation_messages`` call), against the unbatched conversation measured in the same
run, with the framework time amortised over every invocation (accepts, batch writes, session start and end).
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from mycelian_agent.models.task import TASK_KEY
from mycelian_bench.bench_common import BenchResult, Target, generate_messages, md_table, save_plot

__all__ = ["THROUGHPUT_DEFAULTS", "THROUGHPUT_QUICK", "DelayedToolModel", "run_throughput"]

THROUGHPUT_DEFAULTS = {
    "levels": (1, 4, 16, 64),
    "messages": 24,
    "latency_s": 0.2,
    "extractive_messages": 400,
    "extractive_streams": 4,
}
THROUGHPUT_QUICK = {
    "levels": (1, 4, 16),
    "messages": 6,
    "latency_s": 0.1,
    "extractive_messages": 60,
    "extractive_streams": 4,
}


_call_ids = itertools.count(1)


def _tool_call(name: str, args: dict[str, Any]) -> AIMessage:
    """An AIMessage holding one call of ``name`` (zero token usage: the model is scripted)."""
    call = {"name": name, "args": args, "id": f"call_bench_{next(_call_ids)}", "type": "tool_call"}
    return AIMessage(
        content="", tool_calls=[call], usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    )


class DelayedToolModel(BaseChatModel):
    """A scripted chat model: waits ``latency_s`` (asyncio.sleep), then returns one valid call of the forced tool."""

    latency_s: float = 0.2

    @property
    def _llm_type(self) -> str:
        return "delayed-scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _reply(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> AIMessage:
        human = next((m for m in reversed(messages) if m.type == "human"), None)
        task = (human.additional_kwargs.get(TASK_KEY) if human is not None else None) or {}
        name = kwargs.get("tool_choice") or task.get("operation")
        if name in ("add_entries", "add_entries_and_context"):
            args: dict[str, Any] = {
                "entries": [
                    {
                        "item": item["item"],
                        "summary": str(item["message"]["content"])[:200],
                        "tags": {"topic": "benchmark"},
                    }
                    for item in task.get("items") or []
                ]
            }
            if name == "add_entries_and_context":
                args["context"] = f"# Context\n- {len(task.get('items') or [])} new messages merged."
            return _tool_call(name, args)
        if name == "put_context":
            seen = len(task.get("messages") or [])
            return _tool_call("put_context", {"content": f"# Context\n- {seen} new messages merged."})
        text = str((task.get("message") or {}).get("content", "message"))
        return _tool_call("add_entry", {"summary": text[:200], "tags": {"topic": "benchmark"}})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        time.sleep(self.latency_s)
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, kwargs))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        await asyncio.sleep(self.latency_s)
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, kwargs))])


def children_cpu_s() -> float:
    """CPU seconds (user + system) used so far by this process's live child processes (the stdio server).

    Read from ``/proc`` (Linux); 0.0 where it is not available.
    """
    import os

    me, total = str(os.getpid()), 0.0
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:  # fields[1] is the parent pid; utime, stime are fields[11], fields[12]
                total += (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, ValueError, IndexError):
        return 0.0
    return total


async def _conversation(
    harness: Any, title: str, messages: list[tuple[str, str]], results: list[Any], bulk: bool = False
) -> None:
    _, invoker = await harness.invoker_for(title)
    results.append(("start", await invoker.astart_session(title, "2024-01-01T09:00:00Z")))
    if bulk:  # all messages in one call: one invocation per batch (aprocess_conversation_messages)
        taken = await invoker.aprocess_conversation_messages(
            title, [{"role": role, "content": content} for role, content in messages], "2024-01-01T09:00:00Z"
        )
        results.extend(("message", result) for result in taken)
    else:
        for role, content in messages:
            results.append(
                ("message", await invoker.aprocess_conversation_message(role, content, title, "2024-01-01T09:00:00Z"))
            )
    results.append(("end", await invoker.aend_session(title, "2024-01-01T09:00:00Z")))


async def _level(
    harness: Any, label: str, count: int, messages: list[tuple[str, str]], bulk: bool = False
) -> dict[str, Any]:
    from mycelian_agent.builder import ensure_memory

    titles = [f"{label}-n{count}-c{i}" for i in range(count)]
    for title in titles:  # memories created before the clock starts
        await ensure_memory(harness.connection, harness.vault_id, title)
    results: list[Any] = []
    cpu, server_cpu = time.process_time(), children_cpu_s()
    started = time.perf_counter()
    await asyncio.gather(*(_conversation(harness, t, messages, results, bulk) for t in titles))
    wall = time.perf_counter() - started
    cpu, server_cpu = time.process_time() - cpu, children_cpu_s() - server_cpu
    per_message = [r for kind, r in results if kind == "message"]  # bulk: one per invocation, over the messages
    n = count * len(messages)
    mean = {
        key: 1000 * sum(getattr(r, key) for r in per_message) / n
        for key in ("duration_s", "tool_s", "model_s", "framework_s")
    }
    every = [r for _, r in results]
    amortised = {
        key: 1000 * sum(getattr(r, key) for r in every) / n
        for key in ("duration_s", "tool_s", "model_s", "framework_s")
    }
    return {
        "conversations": count,
        "messages": n,
        "model_calls": sum(r.llm_calls for _, r in results),
        "wall_s": wall,
        "messages_per_s": n / wall,
        "agent_cpu_s": cpu,
        "server_cpu_s": server_cpu,
        "agent_cpu_busy": cpu / wall,
        "cpu_ms_per_message": {"agent": 1000 * cpu / n, "server": 1000 * server_cpu / n},
        "mean_ms": {
            "total": mean["duration_s"],
            "server": mean["tool_s"],
            "model": mean["model_s"],
            "framework": mean["framework_s"],
        },
        "amortised_ms": {
            "total": amortised["duration_s"],
            "server": amortised["tool_s"],
            "model": amortised["model_s"],
            "framework": amortised["framework_s"],
        },
    }


async def _run_levels(
    model: Any,
    work: Path,
    label: str,
    levels: Sequence[int],
    messages: list[tuple[str, str]],
    flush_every: int,
    batch_size: int = 1,
    bulk: bool = False,
) -> list[dict[str, Any]]:
    from mycelian_agent.builder import build_agent
    from mycelian_bench.runner import MemoryHarness

    folder = work / label
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    async with build_agent(
        model,
        db=folder / "memory.db",
        vault="bench",
        memory=f"{label}-base",
        checkpointer=f"sqlite:{folder / 'state.db'}",
        flush_every=flush_every,
        batch_size=batch_size,
        embeddings=False,
    ) as base:  # BM25 alone: the agent's own speed
        harness = MemoryHarness(base, flush_every)
        await _level(harness, f"{label}-warmup", 1, messages[:2], bulk)  # imports, prepared statements, first bind
        return [await _level(harness, label, n, messages, bulk) for n in levels]


async def _profiled_ingestion(work: Path, messages: list[tuple[str, str]], flush_every: int) -> dict[str, Any]:
    """One conversation of extractive ingestion under pyinstrument: seconds per component, per message."""
    from pyinstrument import Profiler

    from mycelian_agent.builder import build_agent
    from mycelian_agent.models.extractive import ExtractiveChatModel
    from mycelian_bench.bench_profile import breakdown

    folder = work / "profiled"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    async with build_agent(
        ExtractiveChatModel(),
        db=folder / "memory.db",
        vault="bench",
        memory="profiled",
        checkpointer=f"sqlite:{folder / 'state.db'}",
        flush_every=flush_every,
        embeddings=False,
    ) as invoker:
        await invoker.astart_session("profiled", "2024-01-01T09:00:00Z")
        for role, content in messages[:10]:  # warm-up, not profiled
            await invoker.aprocess_conversation_message(role, content, "profiled", "2024-01-01T09:00:00Z")
        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        for role, content in messages[10:]:
            await invoker.aprocess_conversation_message(role, content, "profiled", "2024-01-01T09:00:00Z")
        profiler.stop()
    n = max(1, len(messages) - 10)
    totals = breakdown(profiler.last_session)
    whole = sum(totals.values()) or 1.0
    return {
        "messages": n,
        "components": {
            name: {"ms_per_message": 1000 * secs / n, "share": secs / whole} for name, secs in totals.most_common()
        },
    }


def run_throughput(
    out: Path,
    *,
    levels: Sequence[int] = (1, 4, 16, 64),
    messages: int = 24,
    latency_s: float = 0.2,
    extractive_messages: int = 400,
    extractive_streams: int = 4,
    flush_every: int = 6,
    profile: bool = False,
    batch_size: int = 1,
) -> BenchResult:
    """Scaling with a fixed-latency scripted model, then zero-latency extractive ingestion (``profile``: also a
    pyinstrument breakdown of where one conversation's ingestion time goes, when pyinstrument is installed;
    ``batch_size`` > 1: also batched extractive ingestion against the unbatched run)."""
    from mycelian_agent.models.extractive import ExtractiveChatModel

    started = time.perf_counter()
    levels = sorted(set(levels) | {1})
    work = out / "work" / "throughput"
    conversation = generate_messages(messages, seed=11)
    scaled = asyncio.run(
        _run_levels(DelayedToolModel(latency_s=latency_s), work, "delayed", levels, conversation, flush_every)
    )
    base = scaled[0]["messages_per_s"]
    for row in scaled:
        row["efficiency"] = row["messages_per_s"] / (row["conversations"] * base)
    model_calls_per_conversation = scaled[0]["model_calls"]
    ideal = messages / (model_calls_per_conversation * latency_s)
    extractive_conversation = generate_messages(extractive_messages, seed=13)
    per_stream = generate_messages(max(1, extractive_messages // extractive_streams), seed=17)
    extractive = asyncio.run(
        _run_levels(ExtractiveChatModel(), work, "extractive", [1], extractive_conversation, flush_every)
    )
    extractive += asyncio.run(
        _run_levels(ExtractiveChatModel(), work, "extractive-concurrent", [extractive_streams], per_stream, flush_every)
    )
    result = BenchResult(
        "throughput",
        {
            "params": {
                "levels": list(levels),
                "messages_per_conversation": messages,
                "latency_s": latency_s,
                "flush_every": flush_every,
                "model_calls_per_conversation": model_calls_per_conversation,
                "ideal_messages_per_s_at_1": ideal,
                "checkpointer": "sqlite (shared)",
                "server": "embedded (stdio, one shared session)",
                "extractive_messages": extractive_messages,
                "extractive_streams": extractive_streams,
            },
            "scaling": scaled,
            "extractive": extractive,
        },
    )
    rows = [
        [
            r["conversations"],
            r["messages"],
            f"{r['wall_s']:.2f}",
            f"{r['messages_per_s']:.1f}",
            f"{100 * r['efficiency']:.0f}%",
            f"{r['mean_ms']['total']:.1f}",
            f"{r['mean_ms']['model']:.1f}",
            f"{r['mean_ms']['server']:.1f}",
            f"{r['mean_ms']['framework']:.1f}",
            f"{100 * r['agent_cpu_busy']:.0f}%",
            f"{r['cpu_ms_per_message']['agent']:.1f}",
            f"{r['cpu_ms_per_message']['server']:.1f}",
        ]
        for r in scaled
    ]
    headers = [
        "conversations",
        "messages",
        "wall s",
        "msgs/s",
        "efficiency",
        "per message ms: total",
        "model",
        "server round trip",
        "framework",
        "agent process CPU busy",
        "agent CPU ms/msg",
        "server CPU ms/msg",
    ]
    title = (
        f"Scaling with a {latency_s * 1000:.0f} ms scripted model ({messages} messages per conversation, "
        f"{model_calls_per_conversation} model calls)"
    )
    result.tables.append((title, md_table(headers, rows)))
    rows = [
        [
            f"{r['conversations']} at once",
            r["messages"],
            f"{r['wall_s']:.2f}",
            f"{r['messages_per_s']:.1f}",
            f"{r['mean_ms']['total']:.2f}",
            f"{r['mean_ms']['model']:.2f}",
            f"{r['mean_ms']['server']:.2f}",
            f"{r['mean_ms']['framework']:.2f}",
            f"{100 * r['agent_cpu_busy']:.0f}%",
            f"{r['cpu_ms_per_message']['agent']:.1f}",
            f"{r['cpu_ms_per_message']['server']:.1f}",
        ]
        for r in extractive
    ]
    result.tables.append(
        (
            "Extractive ingestion, no model latency",
            md_table(
                [
                    "conversations",
                    "messages",
                    "wall s",
                    "msgs/s",
                    "per message ms: total",
                    "model",
                    "server round trip",
                    "framework",
                    "agent process CPU busy",
                    "agent CPU ms/msg",
                    "server CPU ms/msg",
                ],
                rows,
            ),
        )
    )
    result.notes.append(
        f"at 1 conversation the latency alone allows {ideal:.2f} msgs/s "
        f"({model_calls_per_conversation} calls x {latency_s * 1000:.0f} ms for {messages} messages); "
        f"measured {base:.2f}"
    )
    result.notes.append(
        "msgs/s counts stored messages over the wall time of whole conversations (session start "
        "and end included); per-message times are means over the message invocations; at N > 1 "
        "'server round trip' includes waiting behind other conversations' calls on the shared session "
        "and 'framework' includes waiting for the event loop"
    )
    at16 = next((r for r in scaled if r["conversations"] == 16), None)
    if at16 is not None:
        result.targets.append(
            Target(
                "scaling at 16",
                ">= 80% scaling efficiency at 16 conversations",
                f"{100 * at16['efficiency']:.0f}%",
                met=at16["efficiency"] >= 0.8,
                why=_cpu_note(at16, latency_s),
            )
        )
    best = max(extractive, key=lambda r: r["messages_per_s"])
    result.targets.append(
        Target(
            "extractive ingestion",
            ">= 200 messages/s",
            f"{best['messages_per_s']:.0f} msgs/s (best of: "
            + ", ".join(f"{r['conversations']} conversation(s) {r['messages_per_s']:.0f}" for r in extractive)
            + ")",
            met=best["messages_per_s"] >= 200,
            why=f"one message costs {extractive[0]['mean_ms']['total']:.1f} ms in one conversation: "
            f"{extractive[0]['mean_ms']['server']:.1f} ms server round trip, {extractive[0]['mean_ms']['model']:.1f} "
            f"ms extractive model, {extractive[0]['mean_ms']['framework']:.1f} ms framework; CPU per message "
            f"{extractive[0]['cpu_ms_per_message']['agent']:.1f} ms in the agent process and "
            f"{extractive[0]['cpu_ms_per_message']['server']:.1f} ms in the server process; 200 msgs/s needs "
            "5 ms per message",
        )
    )

    if batch_size > 1:
        _batched(result, work, extractive_conversation, extractive[0], flush_every, batch_size)

    if profile:
        from mycelian_bench.bench_common import have_module

        if have_module("pyinstrument"):
            prof = asyncio.run(_profiled_ingestion(work, extractive_conversation, flush_every))
            result.data["profile"] = prof
            result.tables.append(
                (
                    (
                        "Where the agent process's time goes: extractive ingestion, one conversation, "
                        f"{prof['messages']} messages, sampled by pyinstrument "
                        "(slower than unprofiled: read the shares)"
                    ),
                    md_table(
                        ["component", "ms per message (profiled)", "share"],
                        [
                            [name, f"{v['ms_per_message']:.2f}", f"{100 * v['share']:.1f}%"]
                            for name, v in prof["components"].items()
                        ],
                    ),
                )
            )
        else:
            result.notes.append("profile skipped: pyinstrument is not installed")

    def draw(axes: list[Any]) -> None:
        x = [r["conversations"] for r in scaled]
        axes[0].plot(x, [r["messages_per_s"] for r in scaled], marker="o", label="measured")
        axes[0].plot(x, [n * base for n in x], linestyle="--", color="gray", label="linear (N x msgs/s at 1)")
        axes[0].set(
            title=f"Messages/s, {latency_s * 1000:.0f} ms model latency",
            xlabel="concurrent conversations",
            ylabel="messages/s",
            xscale="log",
            yscale="log",
        )
        axes[1].plot(x, [100 * r["efficiency"] for r in scaled], marker="o", label="scaling efficiency")
        axes[1].axhline(80, color="red", linestyle=":", label="target 80%")
        axes[1].set(
            title="Scaling efficiency", xlabel="concurrent conversations", ylabel="%", xscale="log", ylim=(0, 110)
        )
        for ax in axes:
            ax.set_xticks(x, [str(v) for v in x])

    save_plot(result, out, draw)
    result.seconds = time.perf_counter() - started
    return result


def _batched(
    result: BenchResult,
    work: Path,
    conversation: list[tuple[str, str]],
    baseline: dict[str, Any],
    flush_every: int,
    batch_size: int,
) -> None:
    """Batched extractive ingestion of ``conversation`` in one conversation, against ``baseline`` (unbatched): one
    call per message (an accept invocation each), then the bulk path (all messages in one call: one invocation per
    batch, written with the server's add_entries)."""
    from mycelian_agent.models.extractive import ExtractiveChatModel

    row = asyncio.run(
        _run_levels(
            ExtractiveChatModel(), work, f"extractive-batch{batch_size}", [1], conversation, flush_every, batch_size
        )
    )[0]
    bulk = asyncio.run(
        _run_levels(
            ExtractiveChatModel(),
            work,
            f"extractive-batch{batch_size}-bulk",
            [1],
            conversation,
            flush_every,
            batch_size,
            bulk=True,
        )
    )[0]

    def ratio(r: dict[str, Any]) -> float:
        return r["messages_per_s"] / baseline["messages_per_s"] if baseline["messages_per_s"] else float("inf")

    result.data["batched"] = {
        "batch_size": batch_size,
        "row": row,
        "bulk": bulk,
        "baseline": baseline,
        "speedup": ratio(row),
        "bulk_speedup": ratio(bulk),
    }
    rows = [
        [
            label,
            r["messages"],
            r["model_calls"],
            f"{r['model_calls'] / r['messages']:.3f}",
            f"{r['wall_s']:.2f}",
            f"{r['messages_per_s']:.0f}",
            f"{ratio(r):.1f}x",
            f"{r['amortised_ms']['total']:.2f}",
            f"{r['amortised_ms']['server']:.2f}",
            f"{r['amortised_ms']['model']:.2f}",
            f"{r['amortised_ms']['framework']:.2f}",
            f"{r['cpu_ms_per_message']['agent']:.1f}",
            f"{r['cpu_ms_per_message']['server']:.1f}",
        ]
        for label, r in (
            ("batch 1", baseline),
            (f"batch {batch_size}, one call per message", row),
            (f"batch {batch_size}, bulk", bulk),
        )
    ]
    result.tables.append(
        (
            f"Extractive ingestion, one conversation: batch {batch_size} against batch 1 (same run; "
            "per message = every invocation's time over the messages)",
            md_table(
                [
                    "mode",
                    "messages",
                    "model calls",
                    "calls/msg",
                    "wall s",
                    "msgs/s",
                    "ratio to batch 1",
                    "per message ms: total",
                    "server",
                    "model",
                    "framework",
                    "agent CPU ms/msg",
                    "server CPU ms/msg",
                ],
                rows,
            ),
        )
    )
    framework = bulk["amortised_ms"]["framework"]
    result.targets.append(
        Target(
            f"batched ingestion (batch {batch_size}, bulk)",
            ">= 500 messages/s in one process",
            f"{bulk['messages_per_s']:.0f} msgs/s ({ratio(bulk):.1f}x batch 1's {baseline['messages_per_s']:.0f} in "
            f"the same run; one call per message: {row['messages_per_s']:.0f})",
            met=bulk["messages_per_s"] >= 500,
            why=f"per message {bulk['amortised_ms']['total']:.2f} ms: server {bulk['amortised_ms']['server']:.2f}, "
            f"model {bulk['amortised_ms']['model']:.2f}, framework {framework:.2f}; 500 msgs/s needs 2 ms",
        )
    )
    result.targets.append(
        Target(
            f"batched framework time (batch {batch_size}, bulk)",
            "<= 2 ms per message, amortised",
            f"{framework:.2f} ms",
            met=framework <= 2.0,
            why=f"one invocation (a graph run and a checkpoint write) per batch of {batch_size}; one call per message: "
            f"{row['amortised_ms']['framework']:.2f} ms",
        )
    )


def _cpu_note(row: dict[str, Any], latency_s: float) -> str:
    return (
        f"the agent process was busy {100 * row['agent_cpu_busy']:.0f}% of the wall time "
        f"({row['cpu_ms_per_message']['agent']:.1f} ms CPU per message on its one event-loop thread, "
        f"{row['cpu_ms_per_message']['server']:.1f} ms in the server process); {row['conversations']} "
        f"conversations need {row['conversations'] * row['cpu_ms_per_message']['agent']:.0f} ms of agent CPU per "
        f"{latency_s * 1000:.0f} ms model round"
    )
