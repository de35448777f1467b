"""What the dense side costs at query time. Query vectors kept for repeated questions
(``retrieval/dense/query_cache.py``): a repeat returns the same vector without encoding, the cache is bounded (least
recently used first out), keyed by model and spacing-free text, and a search ranks the same from a kept vector as
from a fresh one. A memory's entry and vector counts are read again only when the database changed
(``SqliteVectors.version``)."""

from __future__ import annotations

import contextlib
import threading

import pytest

np = pytest.importorskip("numpy")

from dense_stub import (
    CountingEncoder,
    memory_of,
)

from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors
from mycelian_agent.memory_server.retrieval.dense.query_cache import (
    QueryVectorCache,
    normalise_query,
)
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.memory_server.storage.sqlite.vectors import SqliteVectors


def _encode_counting(seen: list[str]):
    def encode(text: str):
        seen.append(text)
        return np.full(3, float(len(seen)), dtype=np.float32)

    return encode


def test_a_repeated_query_returns_the_same_vector_without_encoding() -> None:
    seen: list[str] = []
    cache = QueryVectorCache(4)
    first = cache.vector("m", "Where did Caroline move?", _encode_counting(seen))
    again = cache.vector("m", "  Where did   Caroline move?\n", _encode_counting(seen))
    assert again is first and seen == ["Where did Caroline move?"]
    assert (cache.hits, cache.misses) == (1, 1)
    with pytest.raises(ValueError):
        again[0] = 0.0  # kept vectors are read-only: a caller cannot change a later search's query


def test_the_model_is_part_of_the_key() -> None:
    seen: list[str] = []
    cache = QueryVectorCache(4)
    cache.vector("a", "car", _encode_counting(seen))
    cache.vector("b", "car", _encode_counting(seen))
    assert seen == ["car", "car"] and len(cache) == 2


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    seen: list[str] = []
    cache = QueryVectorCache(2)
    encode = _encode_counting(seen)
    cache.vector("m", "one", encode)
    cache.vector("m", "two", encode)
    cache.vector("m", "one", encode)  # "one" is now the most recent
    cache.vector("m", "three", encode)  # "two" goes
    assert len(cache) == 2
    cache.vector("m", "one", encode)
    cache.vector("m", "two", encode)
    assert seen == ["one", "two", "three", "two"]


def test_size_zero_keeps_nothing_and_a_bad_size_is_refused() -> None:
    seen: list[str] = []
    cache = QueryVectorCache(0)
    cache.vector("m", "car", _encode_counting(seen))
    cache.vector("m", "car", _encode_counting(seen))
    assert seen == ["car", "car"] and len(cache) == 0
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError):
            QueryVectorCache(bad)


def test_threads_asking_at_once_get_a_consistent_cache() -> None:
    cache = QueryVectorCache(8)
    encode = lambda text: np.full(3, float(len(text)), dtype=np.float32)  # noqa: E731
    errors: list[BaseException] = []

    def ask(worker: int) -> None:
        try:
            for i in range(200):
                text = f"query {(i + worker) % 12}"
                assert cache.vector("m", text, encode)[0] == len(text)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(cache) == 8 and cache.hits + cache.misses == 800


def test_normalise_query_collapses_whitespace_only() -> None:
    assert normalise_query("  When did\tMel  paint?\n") == "When did Mel paint?"
    assert normalise_query("Car") != normalise_query("car")  # the encoder sees case


def test_a_search_asked_again_encodes_its_query_once_and_ranks_the_same() -> None:
    entries, queries = CountingEncoder(), CountingEncoder()
    index = DenseVectors(entries, model="fake", queries=queries, write_behind=False)
    with contextlib.closing(Store.open(":memory:", dense=index)) as store:
        v, m = memory_of(store)
        store.add_entry(v, m, "I bought a new car", "bought car")
        store.add_entry(v, m, "My puppy chewed the sofa", "puppy")
        store.add_entry(v, m, "We flew to Paris", "trip to France")
        first = search(store, m, "automobile or hound", top_ke=3)
        again = search(store, m, "automobile  or hound ", top_ke=3)
        page = search(store, m, "automobile or hound", top_ke=1, offset=1)
    assert queries.texts == 1 and index.query_vectors.hits == 2
    assert [e["entryId"] for e in again["entries"]] == [e["entryId"] for e in first["entries"]]
    assert page["entries"][0]["entryId"] == first["entries"][1]["entryId"]


def test_an_index_without_a_cache_encodes_every_search() -> None:
    queries = CountingEncoder()
    index = DenseVectors(CountingEncoder(), model="fake", queries=queries, write_behind=False, query_cache=0)
    with contextlib.closing(Store.open(":memory:", dense=index)) as store:
        v, m = memory_of(store)
        store.add_entry(v, m, "I bought a new car", "bought car")
        search(store, m, "automobile", top_ke=1)
        search(store, m, "automobile", top_ke=1)
    assert queries.texts == 2


def test_counts_are_read_again_only_after_the_database_changed(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[str] = []
    original = SqliteVectors.vector_count

    def vector_count(self, conn, model, memory_id):
        counted.append(memory_id)
        return original(self, conn, model, memory_id)

    monkeypatch.setattr(SqliteVectors, "vector_count", vector_count)
    index = DenseVectors(CountingEncoder(), model="fake", write_behind=False)
    path = tmp_path / "m.db"
    with contextlib.closing(Store.open(path, dense=index)) as store:
        v, m = memory_of(store)
        car = store.add_entry(v, m, "I bought a new car", "bought car")["entryId"]
        first = search(store, m, "automobile", top_ke=3)
        search(store, m, "puppy", top_ke=3)
        assert len(counted) == 1  # nothing changed between the two searches
        store.add_entry(v, m, "My puppy chewed the sofa", "puppy")  # this connection's write
        assert search(store, m, "hound", top_ke=1)["entries"][0]["summary"] == "puppy"
        assert len(counted) == 2
        with contextlib.closing(Store.open(path)) as other:  # another connection's write (no vector: caught up)
            other.add_entry(v, m, "We flew to Paris", "trip to France")
        assert search(store, m, "france", top_ke=1)["entries"][0]["summary"] == "trip to France"
        assert len(counted) >= 3 and index.embedded_at_search == 1
        search(store, m, "automobile", top_ke=3)  # counts once more: the catch-up wrote a vector
        settled = len(counted)
        search(store, m, "automobile", top_ke=3)
        assert len(counted) == settled
        store.delete_entry(v, m, car)
        found = search(store, m, "automobile", top_ke=3)["entries"]
        assert len(counted) == settled + 1 and car not in {e["entryId"] for e in found}
    assert first["entries"][0]["entryId"] == car
