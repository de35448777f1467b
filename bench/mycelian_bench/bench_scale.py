"""Growth: search in small memories as one database grows to a million entries, on SQLite and PostgreSQL (issue 26).
It is one module because its steps share one run's state, the grown databases and their timings, from the load to
the report.

    mycelian-agent bench scale --out OUT [--backend both] [--memories 1000] [--entries-per-memory 1000]
                               [--checkpoints 10000,100000] [--big-memory 100000] [--workers 1,2,4] [--pg-url URL]

Per backend (a SQLite file in OUT/work, and a database of a throwaway PostgreSQL cluster or of ``--pg-url``):

1. **Load** ``memories`` memories of ``entries_per_memory`` entries each (the ``server`` benchmark's corpus,
   ``bench_server.make_corpus``, seeded per memory; a context snapshot every 500 entries) through the store's bulk
   path, ``open_store(target).add_entries``, :data:`~mycelian_agent.limits.ADD_ENTRIES_MAX_ITEMS` entries a call.
2. At each **checkpoint** (total entries: ``checkpoints``, then the full load) record the loading rate since the
   last checkpoint and overall (entries/s, wall time), the database's size (SQLite: the file and its WAL;
   PostgreSQL: ``pg_database_size``) per entry, vacuum and analyse (PostgreSQL: what autovacuum does in a live
   service some minutes after a bulk load; ``settle_s``), and time ``search_memories`` in small memories: the same
   ``search_memories`` memories (spread over those loaded by the first checkpoint) queried in turn, over one stdio
   session (``bench_server._measure``, which also times ``add_entry`` into a fresh memory) and in process
   (``retrieval.search``). The growth ratio is the last checkpoint's p50 over the first's.
3. Load one **big memory** of ``big_memory`` entries into the same database, and time search in it the same way.
4. **Ingestion**: ``mycelian-agent replay --workers N`` (``bench_scaleout._replay``) of the same synthetic
   conversations into the grown database, N = ``workers``, each into a vault of its own with fresh checkpoints.

Only the public store API and the stdio server are used, so the benchmark measures whatever the store does.
Results go to ``OUT/scale.json``; the table is returned by :func:`markdown`. Progress goes to ``echo`` (stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError
from mycelian_agent.limits import ADD_ENTRIES_MAX_ITEMS
from mycelian_bench.bench_common import machine_info, md_table
from mycelian_bench.bench_server import TOP_KC, TOP_KE, _measure, _ms, make_corpus, make_queries

__all__ = ["BACKENDS", "TARGETS_MS", "markdown", "run_scale"]

BACKENDS = ("sqlite", "postgres")
#: Issue 26's targets: p50 ms of a search in a 1k-entry memory at 1M total entries, in a 100k-entry memory, and the
#: growth of the first from 10k to 1M total entries.
TARGETS_MS = {"small_memory_p50": 20.0, "big_memory_p50": 15.0, "growth": 1.5}
_CONTEXT_EVERY = 500  # entries per context snapshot (as the server benchmark's prefill)

Echo = Callable[[str], None]


class _Progress:
    """Entries loaded so far, shown as a bar on a terminal, else as a line every ``interval`` seconds."""

    def __init__(self, label: str, total: int, echo: Echo, *, interval: float = 30.0) -> None:
        self.label, self.total, self.echo, self.interval = label, total, echo, interval
        self.done = self.shown_done = 0
        self.started = self.shown = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        from rich.console import Console

        console = Console(stderr=True)
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} entries/s"),
                TimeRemainingColumn(),
                console=console,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, rate="-")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def say(self, line: str) -> None:
        """``echo`` a line (above the bar on a terminal)."""
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            self.echo(line)

    def advance(self, count: int) -> None:
        self.done += count
        now = time.perf_counter()
        rate = self.done / max(now - self.started, 1e-9)
        if self._bar is not None:
            self._bar.update(self._task, advance=count, rate=f"{rate:,.0f}")
        elif now - self.shown >= self.interval:
            # The remaining time from the rate since the last line: the overall one counts the checkpoints' pauses.
            recent = (self.done - self.shown_done) / (now - self.shown)
            self.shown, self.shown_done = now, self.done
            left = (self.total - self.done) / recent if recent else 0.0
            self.echo(
                f"{self.label}: {self.done:,} of {self.total:,} entries, {recent:,.0f} entries/s now "
                f"({rate:,.0f} overall), ~{left / 60:.1f} min left"
            )


def _load_memory(store: Any, vault: str, title: str, corpus: list[dict[str, Any]], progress: _Progress) -> str:
    """Create memory ``title`` and bulk-load ``corpus`` into it (contexts every 500 entries); its id."""
    memory = store.create_memory(vault, title, "chat")["memoryId"]
    for k in range(0, len(corpus), ADD_ENTRIES_MAX_ITEMS):
        chunk = corpus[k : k + ADD_ENTRIES_MAX_ITEMS]
        stored = store.add_entries(vault, memory, chunk)["stored"]
        if stored != len(chunk):
            raise RuntimeError(f"{title}: add_entries stored {stored} of {len(chunk)} entries")
        progress.advance(len(chunk))
    for k in range(0, len(corpus), _CONTEXT_EVERY):
        facts = "\n".join(f"- {e['summary']}" for e in corpus[k : k + 40])
        store.put_context(vault, memory, "## Facts\n" + facts)
    return memory


def _search_in_process(target: str, memories: Sequence[str], *, searches: int, warmup: int) -> tuple[list[float], int]:
    """``retrieval.search`` times over ``memories`` in turn (a store of its own, as a server process has)."""
    from mycelian_agent.memory_server.retrieval import search
    from mycelian_agent.memory_server.storage import open_store

    samples, hits = [], 0
    store = open_store(target, pool_size=1)
    try:
        for i, query in enumerate(make_queries(warmup + searches)):
            started = time.perf_counter()
            found = search(store, memories[i % len(memories)], query, top_ke=TOP_KE, top_kc=TOP_KC)
            if i >= warmup:
                samples.append(time.perf_counter() - started)
                hits += found["count"] > 0
    finally:
        store.close()
    return samples, hits


def _searches(
    target: str, vault: str, memories: Sequence[str], *, searches: int, warmup: int, adds: int
) -> dict[str, Any]:
    """Search (stdio and in process) and add_entry (stdio, into a memory of ``vault``) latency, as ``_ms`` dicts."""
    corpus = make_corpus(64, seed=3)  # what the timed add_entry calls write
    add_s, search_s, hits = asyncio.run(
        _measure(
            target,
            vault,
            memories[0],
            corpus,
            adds=adds,
            searches=searches,
            warmup=warmup,
            embeddings=False,
            memories=memories,
        )
    )
    local_s, local_hits = _search_in_process(target, memories, searches=searches, warmup=warmup)
    return {
        "search_stdio": {**_ms(search_s), "queries_with_hits": hits},
        "search_in_process": {**_ms(local_s), "queries_with_hits": local_hits},
        "add_entry_stdio": _ms(add_s),
    }


class _Database:
    """One backend's database: its target string, size and removal."""

    def __init__(self, backend: str, work: Path, cluster: Any, pg_url: str | None, suffix: str) -> None:
        self.backend, self.cluster, self.pg_url = backend, cluster, pg_url
        self.created: list[str] = []
        self.suffix = suffix
        if backend == "sqlite":
            self.path: Path | None = work / "scale.db"
            for end in ("", "-wal", "-shm"):
                Path(f"{self.path}{end}").unlink(missing_ok=True)
            self.target = str(self.path)
        else:
            self.path = None
            self.target = self.new_database("scale")

    def new_database(self, name: str) -> str:
        """A fresh PostgreSQL database named after ``name`` on the same server; its URL."""
        from mycelian_bench.bench_scaleout import _new_database

        full = f"{name}_{self.suffix}"
        url = _new_database(self.cluster, self.pg_url, full)
        self.created.append(full)
        return url

    def state(self, work: Path, name: str) -> str:
        """Where a replay's checkpoints go: a fresh SQLite file, or a fresh PostgreSQL database."""
        if self.backend == "sqlite":
            path = work / f"{name}.db"
            path.unlink(missing_ok=True)
            return str(path)
        return self.new_database(name)

    def size(self) -> int:
        """Bytes the database takes now (SQLite: the file and its WAL; PostgreSQL: ``pg_database_size``)."""
        if self.path is not None:
            return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        import psycopg

        with psycopg.connect(self.target) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0

    def settle(self) -> float:
        """Vacuum and analyse the database, as PostgreSQL's autovacuum would some minutes after a bulk load in a live
        service; the seconds it took. (Measured right after the load, the first searches ran beside autovacuum's
        VACUUM and ANALYZE of the new rows and the planner did not know the new memory yet. Waiting for autovacuum
        instead could wait minutes on small tables it had not reached.) SQLite: nothing to do."""
        if self.path is not None:
            return 0.0
        import psycopg

        started = time.perf_counter()
        with psycopg.connect(self.target, autocommit=True) as conn:  # VACUUM cannot run inside a transaction
            conn.execute("VACUUM (ANALYZE)")
        return round(time.perf_counter() - started, 1)

    def server_version(self) -> str:
        """The database engine's version."""
        if self.path is not None:
            return sqlite3.sqlite_version
        import psycopg

        with psycopg.connect(self.target) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def drop(self) -> None:
        """Drop the databases made on ``--pg-url``'s server (a throwaway cluster goes as a whole)."""
        if self.pg_url is None or not self.created:
            return
        import psycopg

        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _rate(entries: int, seconds: float) -> float:
    return round(entries / seconds, 1) if seconds > 0 else 0.0


def _run_backend(
    db: _Database,
    work: Path,
    *,
    memories: int,
    per_memory: int,
    checkpoints: Sequence[int],
    big_memory: int,
    searched: int,
    searches: int,
    warmup: int,
    adds: int,
    workers: Sequence[int],
    conversations: int,
    messages: int,
    echo: Echo,
) -> dict[str, Any]:
    from mycelian_agent.memory_server.storage import open_store
    from mycelian_bench.bench_scaleout import _conversations, _replay

    started = time.perf_counter()
    name, total = db.backend, memories * per_memory
    marks = sorted({c for c in checkpoints if 0 < c < total} | {total})
    first_count = min(memories, -(-marks[0] // per_memory))  # memories loaded by the first checkpoint
    picks = sorted({round(k * (first_count - 1) / max(searched - 1, 1)) for k in range(searched)})
    result: dict[str, Any] = {"engine": db.server_version(), "checkpoints": []}
    store = open_store(db.target, pool_size=1)
    try:
        vault = store.create_vault("scale")["vaultId"]
        ids: list[str] = []
        load_s = segment_s = 0.0
        segment_start = 0
        with _Progress(f"{name}: loading", total, echo) as progress:
            for m in range(memories):
                corpus = make_corpus(per_memory, seed=m)
                began = time.perf_counter()
                ids.append(_load_memory(store, vault, f"m{m:04d}", corpus, progress))
                spent = time.perf_counter() - began
                load_s += spent
                segment_s += spent
                loaded = (m + 1) * per_memory
                if loaded < marks[len(result["checkpoints"])]:  # a checkpoint: the first memory that reaches it
                    continue
                size = db.size()
                row: dict[str, Any] = {
                    "entries": loaded,
                    "memories": m + 1,
                    "load": {
                        "seconds": round(load_s, 1),
                        "entries_per_s": _rate(loaded, load_s),
                        "segment_entries": loaded - segment_start,
                        "segment_entries_per_s": _rate(loaded - segment_start, segment_s),
                    },
                    "db_bytes": size,
                    "bytes_per_entry": round(size / loaded, 1),
                }
                adds_vault = store.create_vault(f"adds-{loaded}")["vaultId"]  # _measure's add_entry memory
                row["settle_s"] = db.settle()
                row.update(
                    _searches(
                        db.target, adds_vault, [ids[p] for p in picks], searches=searches, warmup=warmup, adds=adds
                    )
                )
                result["checkpoints"].append(row)
                progress.say(
                    f"{name}: {loaded:,} entries in {m + 1} memories, loaded at "
                    f"{row['load']['entries_per_s']:,.0f} entries/s ({load_s:.0f} s), "
                    f"{row['bytes_per_entry']:,.0f} B/entry; search p50/p95 {_p(row['search_stdio'])} ms "
                    f"stdio, {_p(row['search_in_process'])} ms in process"
                )
                segment_start, segment_s = loaded, 0.0
        if big_memory:
            corpus = make_corpus(big_memory, seed=memories + 1)
            with _Progress(f"{name}: one memory of {big_memory:,}", big_memory, echo) as progress:
                began = time.perf_counter()
                big = _load_memory(store, vault, "big", corpus, progress)
                big_s = time.perf_counter() - began
            del corpus
            size = db.size()
            adds_big = store.create_vault("adds-big")["vaultId"]
            result["big_memory"] = {
                "entries": big_memory,
                "total_entries": total + big_memory,
                "load": {"seconds": round(big_s, 1), "entries_per_s": _rate(big_memory, big_s)},
                "settle_s": db.settle(),
                "db_bytes": size,
                "bytes_per_entry": round(size / (total + big_memory), 1),
                **_searches(db.target, adds_big, [big], searches=searches, warmup=warmup, adds=adds),
            }
            echo(
                f"{name}: one memory of {big_memory:,} entries loaded at "
                f"{result['big_memory']['load']['entries_per_s']:,.0f} entries/s; search p50/p95 "
                f"{_p(result['big_memory']['search_stdio'])} ms stdio, "
                f"{_p(result['big_memory']['search_in_process'])} ms in process"
            )
    finally:
        store.close()
    ingestion = []
    files = _conversations(work, conversations, messages) if workers else []
    for count in workers:
        echo(f"{name}: replay --workers {count} of {len(files)} conversations x {messages} messages")
        row = _replay(files, db.target, count, state=db.state(work, f"state_w{count}"), vault=f"ingest-w{count}")
        ingestion.append(row)
        echo(f"{name}: {row['messages_per_s']} messages/s with {count} workers")
    for row in ingestion:
        row["speedup"] = round(row["messages_per_s"] / ingestion[0]["messages_per_s"], 2)
    result["ingestion"] = ingestion
    with contextlib.closing(open_store(db.target, pool_size=1)) as store:
        counts = store.counts()
    result["stored"] = {"memories": counts["memories"], "entries": counts["entries"], "contexts": counts["contexts"]}
    result["db_bytes"] = db.size()
    first, last = result["checkpoints"][0], result["checkpoints"][-1]
    result["growth"] = {
        f"{kind}_p50": round(last[kind]["p50_ms"] / first[kind]["p50_ms"], 2) if first[kind]["p50_ms"] else None
        for kind in ("search_stdio", "search_in_process")
    }
    result["growth"].update({"from_entries": first["entries"], "to_entries": last["entries"]})
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 26's targets against what this run measured; ``met`` is None (not judged) when the run was smaller than
    the target's sizes (a quick run says nothing about a million entries)."""
    targets = []

    def add(name: str, goal: str, measured: str, ok: bool, full_size: bool) -> None:
        targets.append({"name": name, "goal": goal, "measured": measured, "met": ok if full_size else None})

    per = results["params"]["entries_per_memory"]
    for backend, data in results["backends"].items():
        first, last = data["checkpoints"][0], data["checkpoints"][-1]
        p50 = last["search_stdio"]["p50_ms"]
        add(
            f"{backend}: search p50 in a {per:,}-entry memory",
            f"<= {TARGETS_MS['small_memory_p50']:g} ms at 1,000,000 entries",
            f"{p50:.2f} ms at {last['entries']:,} entries",
            p50 <= TARGETS_MS["small_memory_p50"],
            last["entries"] >= 1_000_000 and per <= 1000,
        )
        growth = data["growth"]["search_stdio_p50"]
        if growth is not None and len(data["checkpoints"]) > 1:
            add(
                f"{backend}: growth of that search",
                f"<= {TARGETS_MS['growth']:g}x from 10,000 to 1,000,000 entries",
                f"{growth:.2f}x from {first['entries']:,} to {last['entries']:,}",
                growth <= TARGETS_MS["growth"],
                first["entries"] <= 10_000 and last["entries"] >= 1_000_000,
            )
        if "big_memory" in data:
            big = data["big_memory"]
            p50 = big["search_stdio"]["p50_ms"]
            add(
                f"{backend}: search p50 in one big memory",
                f"<= {TARGETS_MS['big_memory_p50']:g} ms at 100,000 entries",
                f"{p50:.2f} ms at {big['entries']:,} entries",
                p50 <= TARGETS_MS["big_memory_p50"],
                big["entries"] >= 100_000,
            )
    return targets


def run_scale(
    out: Path,
    *,
    backends: Sequence[str] = BACKENDS,
    memories: int = 1000,
    entries_per_memory: int = 1000,
    checkpoints: Sequence[int] = (10_000, 100_000),
    big_memory: int = 100_000,
    search_memories: int = 5,
    searches: int = 200,
    warmup: int = 20,
    adds: int = 100,
    workers: Sequence[int] = (1, 2, 4),
    conversations: int = 8,
    messages: int = 120,
    pg_url: str | None = None,
    keep_work: bool = False,
    echo: Echo | None = None,
) -> dict[str, Any]:
    """Run the growth benchmark (see the module docstring) and return its results, also written to
    ``OUT/scale.json``. ``checkpoints`` are total entries (taken at the first whole memory that reaches one; the
    full load is always one); ``workers`` empty skips ingestion; ``big_memory`` 0 skips the big memory. The
    databases are in ``OUT/work`` (SQLite) and on a throwaway cluster (or on ``pg_url``'s server, dropped at the
    end), removed unless ``keep_work``."""
    import json

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise ConfigError(f"scale: backends must be some of {', '.join(BACKENDS)}, got {list(backends)}")
    if min(memories, entries_per_memory, search_memories, searches) < 1 or min(warmup, adds, big_memory) < 0:
        raise ConfigError(
            "scale: memories, entries per memory, searched memories and searches must be >= 1; "
            "warmup, adds and the big memory >= 0"
        )
    if messages < 2 or conversations < 1:
        raise ConfigError("scale: at least one conversation of at least 2 messages")
    say = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work" / "scale"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    total = memories * entries_per_memory
    results: dict[str, Any] = {
        "benchmark": "scale",
        "environment": {
            **machine_info(),
            "sqlite": sqlite3.sqlite_version,
            "transport": "stdio (persistent session) and in process",
            "search": "lexical (no --embeddings)",
        },
        "params": {
            "backends": list(backends),
            "memories": memories,
            "entries_per_memory": entries_per_memory,
            "total_entries": total,
            "checkpoints": sorted({c for c in checkpoints if 0 < c < total} | {total}),
            "big_memory": big_memory,
            "search_memories": search_memories,
            "searches": searches,
            "warmup": warmup,
            "adds": adds,
            "top_ke": TOP_KE,
            "top_kc": TOP_KC,
            "add_entries_per_call": ADD_ENTRIES_MAX_ITEMS,
            "workers": list(workers),
            "conversations": conversations,
            "messages_per_conversation": messages,
        },
        "backends": {},
    }
    cluster = None
    try:
        for backend in backends:
            if backend == "postgres" and pg_url is None and cluster is None:
                from mycelian_agent.memory_server.pg_cluster import TemporaryCluster

                cluster = TemporaryCluster.start()
            db = _Database(backend, work, cluster, pg_url, str(int(time.time())))
            try:
                results["backends"][backend] = {
                    "target": (
                        "a file" if backend == "sqlite" else "--pg-url" if pg_url else "a throwaway cluster (fsync=off)"
                    ),
                    **_run_backend(
                        db,
                        work,
                        memories=memories,
                        per_memory=entries_per_memory,
                        checkpoints=checkpoints,
                        big_memory=big_memory,
                        searched=search_memories,
                        searches=searches,
                        warmup=warmup,
                        adds=adds,
                        workers=workers,
                        conversations=conversations,
                        messages=messages,
                        echo=say,
                    ),
                }
            finally:
                if not keep_work:
                    db.drop()
            (out / "scale.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")  # so far
    finally:
        if cluster is not None:
            if keep_work:
                say(f"kept the PostgreSQL cluster running: {cluster.url()} (data in {cluster.root})")
            else:
                cluster.stop()
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(OSError):
                work.parent.rmdir()  # OUT/work, when nothing else is in it
    results["targets"] = _targets(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    path = out / "scale.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def _p(row: dict[str, Any]) -> str:
    return f"{row['p50_ms']:.2f} / {row['p95_ms']:.2f}"


def markdown(results: dict[str, Any]) -> str:
    """The growth table (one row per backend and checkpoint, the big memory, the growth ratio) and ingestion."""
    per = results["params"]["entries_per_memory"]
    rows = []
    for backend, data in results["backends"].items():
        for row in data["checkpoints"]:
            rows.append(
                [
                    backend,
                    f"{row['entries']:,}",
                    f"{row['memories']:,} × {per:,}",
                    f"{row['load']['segment_entries_per_s']:,.0f} ({row['load']['entries_per_s']:,.0f})",
                    f"{row['bytes_per_entry']:,.0f}",
                    _p(row["search_stdio"]),
                    _p(row["search_in_process"]),
                    _p(row["add_entry_stdio"]),
                ]
            )
        if "big_memory" in data:
            big = data["big_memory"]
            rows.append(
                [
                    backend,
                    f"{big['total_entries']:,}",
                    f"one of {big['entries']:,}",
                    f"{big['load']['entries_per_s']:,.0f}",
                    f"{big['bytes_per_entry']:,.0f}",
                    _p(big["search_stdio"]),
                    _p(big["search_in_process"]),
                    _p(big["add_entry_stdio"]),
                ]
            )
        growth = data["growth"]
        if len(data["checkpoints"]) > 1:
            rows.append(
                [
                    backend,
                    f"growth {growth['to_entries']:,} / {growth['from_entries']:,}",
                    "",
                    "",
                    "",
                    f"{growth['search_stdio_p50']}x (p50)",
                    f"{growth['search_in_process_p50']}x (p50)",
                    "",
                ]
            )
    table = md_table(
        [
            "backend",
            "total entries",
            "searched memory",
            "load entries/s (overall)",
            "DB bytes/entry",
            "search p50 / p95 ms, stdio",
            "search p50 / p95 ms, in process",
            "add_entry p50 / p95 ms, stdio",
        ],
        rows,
    )
    lines = [
        f"Search in {results['params']['search_memories']} memories of {per:,} entries (in turn) as the "
        "database grows; top_ke 5, top_kc 2, lexical",
        "",
        table,
    ]
    ingest = [
        [backend, row["workers"], row["messages"], row["wall_s"], row["messages_per_s"], f"{row['speedup']}x"]
        for backend, data in results["backends"].items()
        for row in data["ingestion"]
    ]
    if ingest:
        lines += [
            "",
            "Replay into the grown database (extractive model), wall time",
            "",
            md_table(["backend", "workers", "messages", "wall s", "messages/s", "vs 1 worker"], ingest),
        ]
    verdicts = {True: "MET", False: "MISSED", None: "not judged (a smaller run)"}
    lines += [""] + [
        f"- target {t['name']}: {t['goal']}; measured {t['measured']} -> {verdicts[t['met']]}"
        for t in results["targets"]
    ]
    env = results["environment"]
    lines.append(
        f"- {env['cpus']} CPUs, load average {env['load_average']} at the start, Python {env['python']}, "
        + ", ".join(f"{b} {d['engine']}" for b, d in results["backends"].items())
        + f"; {results['seconds'] / 60:.1f} min"
    )
    return "\n".join(lines)
