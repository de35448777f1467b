"""Latency of the embedded memory server over a persistent stdio MCP session.

Measures ``add_entry`` (N calls into an empty memory) and ``search_memories`` (queries against a memory of 10,000
entries of varied chat-like text, filled through the store directly). Prints a table; ``--out`` writes JSON.

    python runners/bench_server.py [--entries 10000] [--adds 1000] [--searches 300] [--out bench.json]

Targets on a 2-core machine: add_entry p50 <= 5 ms, search_memories p50 <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mycelian_agent.memory_server.store import Store
from mycelian_agent.memory_server.testing import server_command

__all__ = ["main", "make_corpus", "make_queries"]

NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lucia", "Omar", "Priya", "Sven", "Chloe", "Diego", "Hannah", "Ravi"]
RELATIONS = ["sister", "brother", "mother", "father", "friend", "colleague", "neighbor", "cousin", "partner", "boss"]
CITIES = ["Denver", "Lisbon", "Osaka", "Toronto", "Nairobi", "Berlin", "Austin", "Melbourne", "Seville", "Oslo"]
HOBBIES = [
    "hiking",
    "pottery",
    "chess",
    "salsa dancing",
    "birdwatching",
    "rock climbing",
    "baking sourdough",
    "painting watercolors",
    "playing guitar",
    "running marathons",
    "gardening",
    "photography",
]
FOODS = ["ramen", "tacos", "paella", "sushi", "lasagna", "pho", "falafel", "curry", "dumplings", "risotto"]
THINGS = [
    "laptop",
    "bike",
    "camera",
    "tent",
    "espresso machine",
    "standing desk",
    "backpack",
    "headphones",
    "running shoes",
    "air purifier",
    "kayak",
    "telescope",
]
PURPOSES = [
    "a weekend trip",
    "working from home",
    "training for a race",
    "a birthday gift",
    "a small apartment",
    "beginners",
    "long flights",
    "rainy weather",
    "a tight budget",
    "a family of four",
]
JOBS = ["nurse", "data analyst", "architect", "teacher", "chef", "software engineer", "pilot", "lawyer"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]

USER_TEMPLATES = [
    "I went {hobby} with my {relation} {name} in {city} last weekend and it was great.",
    "Can you recommend a good {thing} for {purpose}? My budget is about {amount} dollars.",
    "My {relation} {name} just started a new job as a {job} in {city}.",
    "We are planning to move to {city} in {month}; I am worried about finding an apartment.",
    "I have been trying to cook {food} at home but it never tastes like the restaurant version.",
    "Remind me that {name}'s birthday is on {month} {day}, and she loves {hobby}.",
    "I bought a {thing} yesterday for {amount} dollars, was that a good price?",
    "Lately I feel tired after work; maybe I should take up {hobby} again.",
    "My {relation} recommended a {food} place in {city}, have you heard of it?",
    "I finished my {count}th {hobby} session this year, which is a personal record.",
]
ASSISTANT_TEMPLATES = [
    "For {purpose}, a lightweight {thing} is a good choice; look at models around {amount} dollars.",
    "{city} has a lively {hobby} community, so {name} will probably find a club quickly.",
    "To make {food} taste like a restaurant's, use more salt, high heat and fresh ingredients.",
    "Congratulations to {name} on the new {job} role! Moving to {city} in {month} sounds exciting.",
    "A budget of {amount} dollars is reasonable for a {thing}; compare warranties before buying.",
    "Taking up {hobby} again could help with the tiredness; start with two short sessions a week.",
]


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        name=rng.choice(NAMES),
        relation=rng.choice(RELATIONS),
        city=rng.choice(CITIES),
        hobby=rng.choice(HOBBIES),
        food=rng.choice(FOODS),
        thing=rng.choice(THINGS),
        purpose=rng.choice(PURPOSES),
        job=rng.choice(JOBS),
        month=rng.choice(MONTHS),
        day=rng.randint(1, 28),
        amount=rng.randrange(50, 3000, 10),
        count=rng.randint(4, 90),
    )


def make_corpus(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` chat-like entries (alternating user / assistant) with summaries, tags and conversation times."""
    rng = random.Random(seed)
    entries = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        raw = " ".join(
            _fill(rng.choice(USER_TEMPLATES if role == "user" else ASSISTANT_TEMPLATES), rng)
            for _ in range(rng.randint(1, 3))
        )
        summary = f"The {role} said: {raw[:160]}"
        day = 1 + i // 40
        entries.append(
            {
                "raw_entry": raw,
                "summary": summary,
                "tags": {"role": role, "turn": str(i)},
                "conversation_time": f"2024-{1 + (day // 28) % 12:02d}-{1 + day % 28:02d}T{i % 24:02d}:00:00Z",
            }
        )
    return entries


def make_queries(n: int, seed: int = 11) -> list[str]:
    """``n`` varied natural-language questions about the corpus."""
    rng = random.Random(seed)
    templates = [
        "What did the user say about {name}?",
        "Which {thing} did the assistant recommend for {purpose}?",
        "When is {name}'s birthday?",
        "Where is the user moving to, {city}?",
        "How does the user feel about {hobby}?",
        "What job did the user's {relation} start?",
        "restaurant {food} {city}",
        "How much did the user pay for the {thing}?",
    ]
    return [_fill(rng.choice(templates), rng) for _ in range(n)]


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    pct = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "n": len(ms),
        "p50_ms": round(pct[49], 3),
        "p95_ms": round(pct[94], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(ms[-1], 3),
    }


async def _call(session: ClientSession, tool: str, **args: Any) -> Any:
    result = await session.call_tool(tool, args)
    text = result.content[0].text
    if result.isError:
        raise RuntimeError(f"{tool} failed: {text}")
    return json.loads(text) if text[:1] in "{[" else text


def _prefill(db: Path, entries: list[dict[str, Any]], embeddings: bool) -> tuple[str, str, float]:
    started = time.perf_counter()
    with contextlib.closing(Store.open(db)) as store:
        vault = store.create_vault("bench")["vaultId"]
        memory = store.create_memory(vault, "big", "chat")["memoryId"]
        for entry in entries:
            store.add_entry(vault, memory, **entry)
        for k in range(0, len(entries), 500):
            store.put_context(vault, memory, "## Facts\n" + "\n".join(f"- {e['summary']}" for e in entries[k : k + 40]))
        if embeddings:
            from mycelian_agent.memory_server.embeddings import load_dense_index

            index = load_dense_index()
            if index is None:
                raise SystemExit("--embeddings: the embeddings extra is not installed")
            index.backfill(store.connection, memory)  # batched, instead of one vector per add_entry
    return vault, memory, time.perf_counter() - started


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fill, start the server over stdio, measure, and return the report."""
    workdir = Path(args.db).parent if args.db else Path(tempfile.mkdtemp(prefix="mycelian-bench-"))
    db = Path(args.db) if args.db else workdir / "bench.db"
    if db.exists():
        db.unlink()
    corpus = make_corpus(args.entries)
    vault, big, fill_s = _prefill(db, corpus, args.embeddings)
    command, cmd_args = server_command(db, *(["--embeddings"] if args.embeddings else []))
    params = StdioServerParameters(command=command, args=cmd_args, env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        memory = await _call(session, "create_memory_in_vault", vault_id=vault, title="adds", memory_type="chat")
        rng = random.Random(3)
        add_samples = []
        for i in range(args.warmup + args.adds):
            entry = corpus[rng.randrange(len(corpus))]
            started = time.perf_counter()
            await _call(
                session,
                "add_entry",
                vault_id=vault,
                memory_id=memory["memoryId"],
                idempotency_key=f"bench:{i}",
                **entry,
            )
            if i >= args.warmup:
                add_samples.append(time.perf_counter() - started)
        search_samples, hits = [], 0
        queries = make_queries(args.warmup + args.searches)
        for i, query in enumerate(queries):
            started = time.perf_counter()
            found = await _call(session, "search_memories", memory_id=big, query=query, top_ke=5, top_kc=2)
            if i >= args.warmup:
                search_samples.append(time.perf_counter() - started)
                hits += found["count"] > 0
    return {
        "environment": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "transport": "stdio (persistent session)",
            "search": "bm25 + dense (rrf)" if args.embeddings else "bm25",
        },
        "corpus": {"entries": args.entries, "prefill_seconds": round(fill_s, 2), "db_bytes": db.stat().st_size},
        "add_entry": _stats(add_samples),
        "search_memories": {**_stats(search_samples), "queries_with_hits": hits, "top_ke": 5, "top_kc": 2},
        "targets_ms": {"add_entry_p50": 5, "search_memories_p50": 20},
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10_000, help="entries in the searched memory")
    parser.add_argument("--adds", type=int, default=1000, help="measured add_entry calls")
    parser.add_argument("--searches", type=int, default=300, help="measured search_memories calls")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured calls before each measurement")
    parser.add_argument("--db", default=None, help="database file to (re)create (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    parser.add_argument("--embeddings", action="store_true", help="serve with --embeddings (needs the extra)")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(f"{'tool':<18}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}{'max ms':>10}{'target p50':>12}")
    for tool, target in (("add_entry", 5), ("search_memories", 20)):
        row = report[tool]
        print(
            f"{tool:<18}{row['n']:>6}{row['p50_ms']:>10.2f}{row['p95_ms']:>10.2f}{row['mean_ms']:>10.2f}"
            f"{row['max_ms']:>10.2f}{'<= ' + str(target):>12}"
        )
    print(
        f"corpus: {report['corpus']['entries']} entries, prefill {report['corpus']['prefill_seconds']} s; "
        f"search: {report['environment']['search']}; sqlite {report['environment']['sqlite']}, "
        f"{report['environment']['cpus']} CPUs"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
