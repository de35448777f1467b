"""What the conformance suite needs from a backend (:class:`Backend`, made by a factory in ``conftest.py``) and the
few helpers its tests share. Everything else goes through the storage interface itself: ``open_store`` and the
public methods of ``MemoryStore`` (its search reads, ``storage.base.SEARCH_READS``, among them) and the search
pipeline that runs on them (``retrieval.search``).

Every call into search or statistics goes through :func:`search` and :func:`term_counts` here, so a change of where
the search pipeline lives touches one place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mycelian_agent.memory_server import MemoryStore, open_store
from mycelian_agent.memory_server.retrieval import pipeline
from mycelian_agent.memory_server.storage import term_stats

__all__ = [
    "COUNT_KEYS",
    "Backend",
    "StoreThread",
    "all_entries",
    "assert_statistics_recount",
    "ids",
    "search",
    "store_threads",
    "term_counts",
]

T = TypeVar("T")

#: Keys every backend's ``counts()`` reports (the tools' tests and diagnostics read them).
COUNT_KEYS = frozenset(
    {
        "vaults",
        "memories",
        "entries",
        "contexts",
        "entries_fts",
        "contexts_fts",
        "entry_vectors",
        "memory_stats",
        "term_stats",
    }
)


def _no_check(store: MemoryStore) -> None:
    """A backend without an integrity check of its own."""


@dataclass
class Backend:
    """One backend as the suite sees it (built per test by the backend's factory fixture)."""

    name: str
    #: This test's database: migrated and empty; several stores may open it at once.
    target: str
    #: A new database with no schema at all (migration tests); each call gives another.
    fresh: Callable[[], str]
    #: The schema version recorded in a database.
    schema_version: Callable[[str], int]
    #: The version this release migrates to.
    current_version: int
    #: Record ``version`` as applied (a database written by a newer release).
    mark_version: Callable[[str, int], None]
    #: The backend's own consistency check of its indexes, raising on damage (after deletions).
    check_integrity: Callable[[MemoryStore], None] = field(default=_no_check)

    def open(self, target: str | None = None) -> MemoryStore:
        """A store on ``target`` (default: this test's database), opened as the server opens it."""
        return open_store(self.target if target is None else target, pool_size=2)


class StoreThread:
    """A store opened and used by one thread of its own (the threading rule every backend shares: SQLite's
    connection belongs to the thread that opened it), so that two stores can work at once."""

    def __init__(self, backend: Backend, target: str | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1)
        self.store = self._pool.submit(backend.open, target).result()

    def submit(self, call: Callable[[MemoryStore], T]) -> Future[T]:
        """Run ``call(store)`` on the store's thread."""
        return self._pool.submit(call, self.store)

    def close(self) -> None:
        """Close the store on its thread, then end the thread."""
        try:
            self._pool.submit(self.store.close).result()
        finally:
            self._pool.shutdown()


@contextlib.contextmanager
def store_threads(backend: Backend, count: int, target: str | None = None) -> Iterator[list[StoreThread]]:
    """``count`` stores on one database, each on its own thread, closed at the end."""
    threads: list[StoreThread] = []
    try:
        for _ in range(count):
            threads.append(StoreThread(backend, target))
        yield threads
    finally:
        for thread in threads:
            thread.close()


def search(store: MemoryStore, memory_id: str, query: str, **options: Any) -> dict[str, Any]:
    """A search of one memory (``search_memories``' arguments)."""
    found: dict[str, Any] = pipeline.search(store, memory_id, query, **options)
    return found


def ids(store: MemoryStore, memory_id: str, query: str, **options: Any) -> list[str]:
    """The entry ids a search returns, best first."""
    return [entry["entryId"] for entry in search(store, memory_id, query, **options)["entries"]]


def term_counts(store: MemoryStore, memory_id: str, stems: list[str], words: list[str]) -> term_stats.TermCounts:
    """The memory's statistics for ``stems`` (BM25 stems) and ``words`` (feedback words), as search reads them."""
    return store.term_counts(memory_id, stems, words)


def all_entries(store: MemoryStore, vault_id: str, memory_id: str) -> list[dict[str, Any]]:
    """Every entry of a memory, oldest first, through ``list_entries`` paging."""
    entries: list[dict[str, Any]] = []
    page = store.list_entries(vault_id, memory_id, limit=50, after="1970-01-01T00:00:00Z")
    while True:
        entries += page["entries"]
        if page["next_after"] is None:
            return entries
        page = store.list_entries(vault_id, memory_id, limit=50, after=page["next_after"])


def assert_statistics_recount(
    store: MemoryStore, vault_id: str, memory_id: str, also: tuple[list[str], list[str]] = ([], [])
) -> term_stats.MemoryDelta:
    """The memory's statistics equal a recount of its listed entries, for every term they hold and for ``also``
    (stems, words: terms of deleted entries, which must count 0 unless a listed entry holds them)."""
    total = term_stats.recount(
        (e["rawEntry"], e["summary"], e["tags"], e.get("conversationTime", e["creationTime"]))
        for e in all_entries(store, vault_id, memory_id)
    )
    expected = {(kind, term): n for kind, term, n in total.rows()}
    stems = sorted({term for kind, term in expected if kind == term_stats.STEM} | set(also[0]))
    words = sorted({term for kind, term in expected if kind == term_stats.WORD} | set(also[1]))
    counted = term_counts(store, memory_id, stems, words)
    assert (counted.entries, counted.tokens) == (total.entries, total.tokens)
    assert counted.stems == {stem: expected.get((term_stats.STEM, stem), 0) for stem in stems}
    assert counted.words == {word: expected.get((term_stats.WORD, word), 0) for word in words}
    return total
