"""What a store needs from an optional dense (embedding) index: :class:`DenseIndex` (implemented by
``retrieval/dense``'s ``DenseVectors``; the store names no implementation, so storage imports nothing above it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from mycelian_agent.memory_server.storage.rows import DenseHits
from mycelian_agent.memory_server.storage.vectors import EntryVectors

__all__ = ["DenseIndex"]


class DenseIndex(Protocol):
    """What a store needs from an optional dense (embedding) index; see ``retrieval/dense``. ``conn`` is the
    backend's connection (sqlite3 or psycopg), inside the caller's transaction for writes. The index reads and
    writes vectors only through the :class:`~mycelian_agent.memory_server.storage.vectors.EntryVectors` the store
    gives it (:meth:`attach`)."""

    def index_entry(self, conn: Any, seq: int, memory_id: str, summary: str, raw_entry: str) -> None:
        """Store the vector of one new entry (inside the caller's transaction); the index decides what text of
        the entry it embeds."""

    def batch(self) -> AbstractContextManager[None]:
        """A block whose entries are embedded together at its end (inside the same transaction)."""

    def similarities(
        self,
        conn: Any,
        memory_id: str,
        query: str,
        after: str | None = None,
        before: str | None = None,
    ) -> tuple[list[int], Any]:
        """``(seqs, cosines)`` of the memory's embedded entries (-inf outside the time bounds), by an exact scan."""

    def hits(
        self,
        connect: Callable[[], AbstractContextManager[Any]],
        memory_id: str,
        query: str,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> DenseHits | None:
        """The dense side of a search (:class:`DenseHits`): the ``k`` nearest entries, the memory's typical cosine
        and how many of its entries had no vector yet (``connect()``: the store's connection). Waits for nothing:
        vectors written behind that are not there yet are counted in ``pending``."""

    def entries_removed(self, memory_id: str, seqs: Sequence[int] | None, *, replaced: bool = False) -> None:
        """Called after a write that deleted the memory's entries ``seqs`` (None: the whole memory) or ``replaced``
        their text commits: forget what the index keeps in memory of them (cached matrices, samples, queued
        writes), and store no vector of a replaced text after it."""

    def attach(self, vectors: EntryVectors, connect: Callable[[], AbstractContextManager[Any]] | None) -> None:
        """Called once the store is open: ``vectors`` is the backend's vector SQL; ``connect()`` gives a connection
        of the index's own (None: none can be given), for writing vectors behind the entries' transactions."""

    def entries_written(self, memory_id: str, seqs: Sequence[int]) -> None:
        """Called after a write commits, with the seqs of the entries it inserted."""

    def settle(self, memory_id: str | None = None, timeout: float = 60.0) -> bool:
        """Wait up to ``timeout`` seconds until the vectors written behind of the memory's entries (None: of every
        memory) are written (False: gave up waiting). Only explicit waits for vectors call it."""

    def close(self) -> None:
        """Finish and release what :meth:`attach` started (called before the store's connections close)."""
