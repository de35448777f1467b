"""Overhead: per-message framework time and checkpoint size along a long conversation, ours against naive.

A generated conversation (one session, user and assistant alternating) is replayed with the extractive model
through the embedded server over stdio, with a SQLite checkpointer, twice: with the default
:class:`~mycelian_agent.agent.AgentSettings` (bounded window and state) and with ``AgentSettings.naive()`` (the
protocol's naive form: the whole history in state and prompts), on the same code. Per window of messages it
reports the framework time (``InvocationResult.framework_s``: wall time minus tool and model time, i.e. graph,
checkpoints and prompt building) p50/p95, and at each window end the latest checkpoint blob of the thread and the
checkpoint file's size (with its WAL). The naive run stops at the end of the window in which it exceeds its time
budget; the output states where it stopped.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from mycelian_bench.bench_common import (
    BenchResult,
    Target,
    file_bytes,
    fmt_bytes,
    generate_messages,
    md_table,
    save_plot,
    summarize,
)

__all__ = ["OVERHEAD_DEFAULTS", "OVERHEAD_QUICK", "run_overhead"]

OVERHEAD_DEFAULTS = {"messages": 2000, "window": 100, "naive_budget_s": 300.0, "flush_every": 6}
OVERHEAD_QUICK = {"messages": 200, "window": 50, "naive_budget_s": 30.0, "flush_every": 6}
THREAD = "overhead"


def latest_checkpoint_bytes(state: Path, thread_id: str) -> int | None:
    """Size of the newest checkpoint blob of ``thread_id`` in a SQLite checkpointer file."""
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=10)
    try:
        row = conn.execute(
            "SELECT length(checkpoint) FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
    finally:
        conn.close()
    return row[0] if row else None


def database_bytes(state: Path) -> int:
    """The logical size of a SQLite database (pages x page size, counting changes still in its WAL).

    The files on disk lag behind (the WAL is reused after a checkpoint, the main file grows at checkpoints), so
    this is the size the checkpoint database has reached, not a snapshot of two files.
    """
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


async def _replay(
    mode: str, messages: list[tuple[str, str]], work: Path, *, window: int, budget_s: float | None, flush_every: int
) -> dict[str, Any]:
    from mycelian_agent.agent.settings import AgentSettings
    from mycelian_agent.builder import build_agent

    settings = AgentSettings.naive() if mode == "naive" else AgentSettings()
    folder = work / mode
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    state = folder / "state.db"
    per_message: list[dict[str, float]] = []
    windows: list[dict[str, Any]] = []
    stopped_early = None
    started = time.perf_counter()
    async with build_agent(
        "extractive",
        db=folder / "memory.db",
        vault="bench",
        memory=f"overhead-{mode}",
        checkpointer=f"sqlite:{state}",
        settings=settings,
        flush_every=flush_every,
        embeddings=False,
    ) as invoker:  # the agent's cost, not the encoder's (§3 has that)
        await invoker.astart_session(THREAD, "2024-01-01T09:00:00Z")
        for number, (role, content) in enumerate(messages, 1):
            result = await invoker.aprocess_conversation_message(role, content, THREAD, "2024-01-01T09:00:00Z")
            per_message.append(
                {
                    "total": result.duration_s,
                    "tool": result.tool_s,
                    "model": result.model_s,
                    "framework": result.framework_s,
                    "flush": float(result.context_written),
                }
            )
            if number % window == 0 or number == len(messages):
                chunk = per_message[-(number - (windows[-1]["last"] if windows else 0)) :]
                fw = summarize([m["framework"] for m in chunk])
                windows.append(
                    {
                        "first": (windows[-1]["last"] if windows else 0) + 1,
                        "last": number,
                        "framework_ms": {k: v * 1000 for k, v in fw.items() if k != "n"},
                        "total_ms_p50": summarize([m["total"] for m in chunk])["p50"] * 1000,
                        "tool_ms_p50": summarize([m["tool"] for m in chunk])["p50"] * 1000,
                        "model_ms_p50": summarize([m["model"] for m in chunk])["p50"] * 1000,
                        "checkpoint_blob_bytes": latest_checkpoint_bytes(state, THREAD),
                        "checkpoint_file_bytes": database_bytes(state),
                        "checkpoint_disk_bytes": file_bytes(state),
                        "elapsed_s": round(time.perf_counter() - started, 2),
                    }
                )
                if budget_s is not None and number < len(messages) and time.perf_counter() - started > budget_s:
                    stopped_early = number
                    break
        await invoker.aend_session(THREAD, "2024-01-01T09:00:00Z")
    totals = {key: summarize([m[key] for m in per_message]) for key in ("total", "tool", "model", "framework")}
    return {
        "mode": mode,
        "messages": len(per_message),
        "requested": len(messages),
        "stopped_early_at": stopped_early,
        "seconds": round(time.perf_counter() - started, 2),
        "windows": windows,
        "breakdown_ms": {k: {s: v * 1000 for s, v in t.items() if s != "n"} for k, t in totals.items()},
        "final_checkpoint_blob_bytes": latest_checkpoint_bytes(state, THREAD),
        "final_checkpoint_file_bytes": database_bytes(state),
        "final_checkpoint_disk_bytes": file_bytes(state),
    }


def _table(ours: dict[str, Any], naive: dict[str, Any]) -> str:
    rows = []
    naive_by_last = {w["last"]: w for w in naive["windows"]}
    for w in ours["windows"]:
        n = naive_by_last.get(w["last"])
        rows.append(
            [
                f"{w['first']}-{w['last']}",
                f"{w['framework_ms']['p50']:.2f}",
                f"{w['framework_ms']['p95']:.2f}",
                f"{n['framework_ms']['p50']:.2f}" if n else "not run",
                f"{n['framework_ms']['p95']:.2f}" if n else "-",
                fmt_bytes(w["checkpoint_blob_bytes"]),
                fmt_bytes(n["checkpoint_blob_bytes"]) if n else "-",
                fmt_bytes(w["checkpoint_file_bytes"]),
                fmt_bytes(n["checkpoint_file_bytes"]) if n else "-",
            ]
        )
    return md_table(
        [
            "messages",
            "ours fw p50 ms",
            "ours fw p95 ms",
            "naive fw p50 ms",
            "naive fw p95 ms",
            "ours ckpt blob",
            "naive ckpt blob",
            "ours ckpt file",
            "naive ckpt file",
        ],
        rows,
    )


def _breakdown_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for run in runs:
        b = run["breakdown_ms"]
        total = b["total"]["mean"] or 1.0
        rows.append(
            [
                run["mode"],
                run["messages"],
                f"{b['total']['p50']:.2f}",
                f"{b['tool']['p50']:.2f}",
                f"{b['model']['p50']:.2f}",
                f"{b['framework']['p50']:.2f}",
                (
                    f"{100 * b['tool']['mean'] / total:.0f}% / {100 * b['model']['mean'] / total:.0f}% / "
                    f"{100 * b['framework']['mean'] / total:.0f}%"
                ),
            ]
        )
    return md_table(
        [
            "mode",
            "messages",
            "total p50 ms",
            "server round trip p50 ms",
            "model p50 ms",
            "framework p50 ms",
            "share of mean time: server / model / framework",
        ],
        rows,
    )


def run_overhead(
    out: Path,
    *,
    messages: int = 2000,
    window: int = 100,
    naive_budget_s: float | None = 300.0,
    flush_every: int = 6,
    naive: bool = True,
) -> BenchResult:
    """Replay ``messages`` generated messages for ours and (unless ``naive=False``) the naive form."""
    started = time.perf_counter()
    conversation = generate_messages(messages)
    work = out / "work" / "overhead"
    ours = asyncio.run(_replay("ours", conversation, work, window=window, budget_s=None, flush_every=flush_every))
    runs = [ours]
    naive_run = None
    if naive:
        naive_run = asyncio.run(
            _replay("naive", conversation, work, window=window, budget_s=naive_budget_s, flush_every=flush_every)
        )
        runs.append(naive_run)
    result = BenchResult(
        "overhead",
        {
            "params": {
                "messages": messages,
                "window": window,
                "naive_budget_s": naive_budget_s,
                "flush_every": flush_every,
                "model": "extractive",
                "server": "embedded (stdio)",
                "checkpointer": "sqlite",
                "sessions": 1,
            },
            "runs": {r["mode"]: r for r in runs},
        },
    )
    empty: dict[str, Any] = {"windows": []}
    result.tables.append(
        ("Per-message framework time (ms) and checkpoint size, by window", _table(ours, naive_run or empty))
    )
    result.tables.append(("Where a message's time goes (all messages of each run)", _breakdown_table(runs)))
    first, last = ours["windows"][0], ours["windows"][-1]
    growth = last["framework_ms"]["p50"] / first["framework_ms"]["p50"] if first["framework_ms"]["p50"] else None
    result.data["ours_framework_p50_last_over_first"] = growth
    result.notes.append(
        f"ours: framework p50 {first['framework_ms']['p50']:.2f} ms in messages {first['first']}-{first['last']} "
        f"and {last['framework_ms']['p50']:.2f} ms in {last['first']}-{last['last']} (x{growth:.2f}); latest "
        f"checkpoint blob {fmt_bytes(first['checkpoint_blob_bytes'])} -> {fmt_bytes(last['checkpoint_blob_bytes'])}"
    )
    if naive_run is not None:
        nfirst, nlast = naive_run["windows"][0], naive_run["windows"][-1]
        same = next((w for w in ours["windows"] if w["last"] == nlast["last"]), None)
        ratio = nlast["framework_ms"]["p50"] / same["framework_ms"]["p50"] if same else None
        result.data["naive_over_ours_framework_p50_last_common_window"] = ratio
        result.data["naive_over_ours_checkpoint_blob_last_common_window"] = (
            nlast["checkpoint_blob_bytes"] / same["checkpoint_blob_bytes"] if same else None
        )
        result.notes.append(
            f"naive: framework p50 {nfirst['framework_ms']['p50']:.2f} ms in messages {nfirst['first']}-"
            f"{nfirst['last']} and {nlast['framework_ms']['p50']:.2f} ms in {nlast['first']}-{nlast['last']}"
            + (f" ({ratio:.1f}x ours in the same window)" if ratio else "")
            + f"; latest checkpoint blob {fmt_bytes(nfirst['checkpoint_blob_bytes'])} -> "
            f"{fmt_bytes(nlast['checkpoint_blob_bytes'])}"
        )
        if naive_run["stopped_early_at"]:
            result.notes.append(
                f"naive run capped: stopped after {naive_run['stopped_early_at']} of {messages} messages, when it "
                f"passed its time budget of {naive_budget_s:.0f} s ({naive_run['seconds']:.0f} s)"
            )
        else:
            result.notes.append(
                f"naive run completed all {naive_run['messages']} messages in "
                f"{naive_run['seconds']:.0f} s (ours: {ours['seconds']:.0f} s)"
            )
    from mycelian_agent.agent.settings import AgentSettings

    prune = {
        mode: getattr(settings, "prune_every", None)
        for mode, settings in (("ours", AgentSettings()), ("naive", AgentSettings.naive()))
    }
    result.data["params"]["prune_every"] = prune
    result.notes.append(
        "framework time = invocation wall time - memory-server tool calls - model (extractive) time: the graph, "
        "checkpoint (de)serialisation and writes, prompt building. Checkpoint file = the SQLite checkpoint "
        "database's size (pages x page size, including changes still in its WAL). Old checkpoints: "
        + "; ".join(
            f"{mode} {'prunes every ' + str(every) + ' invocations' if every else 'keeps every one'}"
            for mode, every in prune.items()
        )
        + " (AgentSettings.prune_every)"
    )
    if naive_run is not None and ratio is not None:
        blob_ratio = result.data["naive_over_ours_checkpoint_blob_last_common_window"]
        result.targets.append(
            Target(
                "naive grows, ours flat",
                "ours' framework p50 and checkpoint blob stay flat; naive's grow",
                f"ours framework p50 x{growth:.2f} first->last window; naive x{ratio:.1f} ours and checkpoint blob "
                f"x{blob_ratio:.0f} ours at message {nlast['last']}",
                met=bool(growth is not None and growth < 1.5 and blob_ratio and blob_ratio > 2),
            )
        )

    def draw(axes: list[Any]) -> None:
        for run, color in ((ours, "tab:blue"), (naive_run, "tab:red")):
            if run is None:
                continue
            x = [w["last"] for w in run["windows"]]
            axes[0].plot(
                x,
                [w["framework_ms"]["p50"] for w in run["windows"]],
                color=color,
                marker="o",
                markersize=3,
                label=f"{run['mode']} p50",
            )
            axes[0].plot(
                x,
                [w["framework_ms"]["p95"] for w in run["windows"]],
                color=color,
                linestyle="--",
                label=f"{run['mode']} p95",
            )
            axes[1].plot(
                x,
                [w["checkpoint_blob_bytes"] / 1024 for w in run["windows"]],
                color=color,
                marker="o",
                markersize=3,
                label=f"{run['mode']} latest checkpoint blob",
            )
            axes[1].plot(
                x,
                [w["checkpoint_file_bytes"] / 1024 for w in run["windows"]],
                color=color,
                linestyle=":",
                label=f"{run['mode']} checkpoint file",
            )
        axes[0].set(title="Framework time per message", xlabel="message number (window end)", ylabel="ms")
        axes[1].set(title="Checkpoint size", xlabel="message number", ylabel="KiB (log)", yscale="log")

    save_plot(result, out, draw)
    result.seconds = time.perf_counter() - started
    return result
