"""Conformance: opening (migrations), several stores on one database, and a failed write, the same on every backend
(``conftest.BACKENDS``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conformance import Backend, all_entries, assert_statistics_recount, ids, store_threads, term_counts

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server import MemoryStore, open_store

# -- migrations --------------------------------------------------------------------------------------------------


def test_a_fresh_database_is_migrated_to_the_current_version_once(backend: Backend) -> None:
    """Stores opening a database with no schema at once all succeed; it ends at the current version, and opening it
    again finds nothing to do and keeps what was written."""
    target = backend.fresh()
    with ThreadPoolExecutor(max_workers=3) as pool:  # each store opened, and closed, on its own thread
        assert list(pool.map(lambda _: open_store(target, pool_size=1).close(), range(3))) == [None] * 3
    assert backend.schema_version(target) == backend.current_version
    first = backend.open(target)
    try:
        vault = first.create_vault("kept")["vaultId"]
        memory = first.create_memory(vault, "m", "CHAT")["memoryId"]
        first.add_entry(vault, memory, "The kayak trip is on Sunday", "kayak trip")
        snapshot = first.snapshot()
    finally:
        first.close()
    again = backend.open(target)
    try:
        assert backend.schema_version(target) == backend.current_version
        assert again.snapshot() == snapshot
        assert len(ids(again, memory, "kayak")) == 1
    finally:
        again.close()
    backend.mark_version(target, backend.current_version + 1)
    with pytest.raises(
        MemoryServerError,
        match=f"schema version {backend.current_version + 1}, newer than this "
        f"server's {backend.current_version}.*upgrade mycelian-agent",
    ):
        backend.open(target)


# -- several stores on one database ----------------------------------------------------------------------------------


def test_two_stores_on_one_database_see_each_others_writes(backend: Backend) -> None:
    one, two = backend.open(), backend.open()
    try:
        vault = one.create_vault("shared")["vaultId"]
        memory = one.create_memory(vault, "m", "CHAT")["memoryId"]
        assert two.list_memories(vault) == one.list_memories(vault)
        made = one.add_entries(
            vault,
            memory,
            [{"raw_entry": f"Note {i} about the garden and roses", "summary": f"garden note {i}"} for i in range(60)],
        )["entries"]
        kayak = one.add_entry(vault, memory, "The kayak trip is on Sunday", "kayak trip")["entryId"]
        assert ids(two, memory, "kayak", top_ke=1) == [kayak]
        before = ids(one, memory, "garden roses", top_ke=5)
        for entry in made[:40]:  # deleted by the other store
            two.delete_entry(vault, memory, entry["entryId"])
        two.put_context(vault, memory, "## Facts\n- likes roses")
        assert one.get_context(vault, memory) == "## Facts\n- likes roses"
        assert term_counts(one, memory, ["garden"], ["roses"]) == term_counts(two, memory, ["garden"], ["roses"])
        assert term_counts(one, memory, ["garden"], ["roses"]).entries == 21
        fresh = backend.open()
        try:  # what a store caches is dropped when another store changes the database
            assert ids(one, memory, "garden roses", top_ke=5) == ids(fresh, memory, "garden roses", top_ke=5)
        finally:
            fresh.close()
        assert ids(one, memory, "garden roses", top_ke=5) != before
        assert_statistics_recount(one, vault, memory)
    finally:
        one.close()
        two.close()


def test_concurrent_writes_with_one_idempotency_key_store_one_entry(backend: Backend) -> None:
    """Two stores, each on its own thread, sending every keyed write twice (a retry racing its original): one entry
    per key, and creation times still strictly increasing (exact list_entries cursors)."""
    with store_threads(backend, 2) as (a, b):
        vault = a.submit(lambda s: s.create_vault("v")["vaultId"]).result()
        memory = a.submit(lambda s: s.create_memory(vault, "m", "CHAT")["memoryId"]).result()

        def write(i: int) -> Callable[[MemoryStore], dict[str, Any]]:
            return lambda s: s.add_entry(vault, memory, f"message {i}", "s", idempotency_key=f"k{i}")

        def batch(i: int) -> Callable[[MemoryStore], dict[str, Any]]:
            items = [
                {"raw_entry": f"batch {i} item {k}", "summary": "s", "idempotency_key": f"b{i}-{k}"} for k in range(5)
            ]
            return lambda s: s.add_entries(vault, memory, items)

        futures = [thread.submit(write(i)) for i in range(20) for thread in (a, b)]
        futures += [thread.submit(batch(i)) for i in range(4) for thread in (b, a)]
        results: list[dict[str, Any]] = [f.result() for f in futures]
        singles, batches = results[:40], results[40:]
        assert sum(not r["deduplicated"] for r in singles) == 20
        assert sum(r["stored"] for r in batches) == 20 and sum(r["deduplicated"] for r in batches) == 20
        for i in range(20):  # the original and its retry answer the same entry
            assert singles[2 * i]["entryId"] == singles[2 * i + 1]["entryId"]
        entries = a.submit(lambda s: all_entries(s, vault, memory)).result()
        times = [e["creationTime"] for e in entries]
        assert len(entries) == 40 and times == sorted(set(times))


# -- a failed write ----------------------------------------------------------------------------------------------


class _Exploding:
    """A dense index (``base.DenseIndex``) whose write inside the entry's transaction fails."""

    def attach(self, vectors: Any, connect: Any) -> None:
        pass

    def similarities(
        self, conn: Any, memory_id: str, query: str, after: str | None = None, before: str | None = None
    ) -> tuple[list[int], Any]:
        return [], []

    def hits(
        self, connect: Any, memory_id: str, query: str, k: int, after: str | None = None, before: str | None = None
    ) -> None:
        return None

    def settle(self, memory_id: str | None = None, timeout: float = 60.0) -> bool:
        return True

    def index_entry(self, conn: Any, seq: int, memory_id: str, summary: str, raw_entry: str) -> None:
        raise RuntimeError("index offline")

    def batch(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def entries_written(self, memory_id: str, seqs: Any) -> None:
        raise AssertionError("a failed write must not be reported as committed")

    def close(self) -> None:
        pass


def test_a_failure_inside_a_write_rolls_it_back(backend: Backend) -> None:
    store: MemoryStore = open_store(backend.target, pool_size=1, dense_factory=_Exploding)
    try:
        vault = store.create_vault("v")["vaultId"]
        memory = store.create_memory(vault, "m", "CHAT")["memoryId"]
        before = store.snapshot()
        with pytest.raises(RuntimeError, match="index offline"):
            store.add_entry(vault, memory, "raw", "summary")
        with pytest.raises(RuntimeError, match="index offline"):
            store.add_entries(vault, memory, [{"raw_entry": "one", "summary": "s"}])
        assert store.snapshot() == before
        assert store.counts()["entries"] == store.counts()["entries_fts"] == 0
        assert term_counts(store, memory, ["raw"], []).entries == 0
    finally:
        store.close()
