"""``mycelian-agent bench scale`` (the growth benchmark) at a tiny size, on SQLite and PostgreSQL, run as a user runs
it: the command's JSON and table, and that its numbers describe what was loaded (behaviour, not timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

MEMORIES, PER_MEMORY, BIG = 3, 50, 120
WORKERS, CONVERSATIONS, MESSAGES = (1, 2), 2, 6
SEARCHES, WARMUP, ADDS, SEARCHED = 6, 2, 3, 2


def _run_scale(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "mycelian_agent.cli",
        "bench",
        "scale",
        "--out",
        str(out),
        "--memories",
        str(MEMORIES),
        "--entries-per-memory",
        str(PER_MEMORY),
        "--checkpoints",
        "50,100",
        "--big-memory",
        str(BIG),
        "--search-memories",
        str(SEARCHED),
        "--searches",
        str(SEARCHES),
        "--warmup",
        str(WARMUP),
        "--adds",
        str(ADDS),
        "--workers",
        ",".join(map(str, WORKERS)),
        "--conversations",
        str(CONVERSATIONS),
        "--messages",
        str(MESSAGES),
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=240)


@pytest.mark.slow
def test_bench_scale_grows_both_backends_and_reports_what_it_loaded(pg_cluster, tmp_path: Path) -> None:
    admin = pg_cluster.create_database("scale_admin")
    done = _run_scale(tmp_path, "--backend", "both", "--pg-url", admin)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "scale.json").read_text())
    assert results["params"]["checkpoints"] == [50, 100, 150]
    assert set(results["backends"]) == {"sqlite", "postgres"}
    measurements = 3 + 1  # the checkpoints and the big memory: each times ADDS add_entry calls after WARMUP
    for backend, data in results["backends"].items():
        rows = data["checkpoints"]
        assert [(r["entries"], r["memories"]) for r in rows] == [(50, 1), (100, 2), (150, 3)], backend
        for row in rows:
            assert row["db_bytes"] > 0 and row["bytes_per_entry"] == pytest.approx(
                row["db_bytes"] / row["entries"], abs=0.1
            )
            assert row["load"]["entries_per_s"] > 0 and row["load"]["segment_entries"] == PER_MEMORY
            assert row["search_stdio"]["n"] == row["search_in_process"]["n"] == SEARCHES
            assert row["search_stdio"]["queries_with_hits"] == row["search_in_process"]["queries_with_hits"] > 0
            assert row["add_entry_stdio"]["n"] == ADDS
        assert rows[-1]["db_bytes"] >= rows[0]["db_bytes"]
        big = data["big_memory"]
        assert (big["entries"], big["total_entries"]) == (BIG, MEMORIES * PER_MEMORY + BIG)
        assert big["search_stdio"]["queries_with_hits"] > 0 and big["db_bytes"] >= rows[-1]["db_bytes"]
        ingestion = data["ingestion"]
        assert [(r["workers"], r["messages"]) for r in ingestion] == [(w, CONVERSATIONS * MESSAGES) for w in WORKERS]
        assert ingestion[0]["speedup"] == 1.0 and all(r["messages_per_s"] > 0 for r in ingestion)
        # Everything that was written is in the database: the bulk load, the timed adds, the replayed messages
        # (the extractive model stores one entry per message).
        loaded = MEMORIES * PER_MEMORY + BIG
        adds = measurements * (ADDS + WARMUP)
        replayed = len(WORKERS) * CONVERSATIONS * MESSAGES
        assert data["stored"]["entries"] == loaded + adds + replayed, backend
        assert data["stored"]["memories"] == MEMORIES + 1 + measurements + len(WORKERS) * CONVERSATIONS
        assert data["growth"]["from_entries"] == 50 and data["growth"]["to_entries"] == 150
        assert data["growth"]["search_stdio_p50"] > 0
    assert all(t["met"] is None for t in results["targets"])  # a tiny run judges no target
    table = done.stdout
    assert "| sqlite | 150 | 3 × 50 |" in table and "| postgres | 270 | one of 120 |" in table
    assert "not judged" in table
    assert not (tmp_path / "work").exists()  # the databases are removed
    with __import__("psycopg").connect(admin) as conn:  # and those made on --pg-url's server dropped
        names = [
            r[0]
            for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'scale%' OR datname LIKE 'state%'"
            )
        ]
    assert names == ["scale_admin"]


def test_bench_scale_on_sqlite_alone_needs_no_postgres(tmp_path: Path) -> None:
    done = _run_scale(tmp_path, "--backend", "sqlite", "--workers", "0", "--big-memory", "0", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert list(results["backends"]) == ["sqlite"]
    data = results["backends"]["sqlite"]
    assert data["ingestion"] == [] and "big_memory" not in data
    assert data["stored"]["entries"] == MEMORIES * PER_MEMORY + 3 * (ADDS + WARMUP)
    assert "loading" in done.stderr or "entries in" in done.stderr  # progress on stderr


def test_bench_scale_refuses_bad_options_in_one_line(tmp_path: Path) -> None:
    done = _run_scale(tmp_path, "--backend", "sqlite", "--workers", "x")
    assert done.returncode != 0 and "Traceback" not in done.stderr and "--workers" in done.stderr
