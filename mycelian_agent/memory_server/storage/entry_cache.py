"""The analysed terms of a store's entries (``text.analysis.EntryTerms``), kept in memory by entry seq.

A write fills it with the terms it computed for the term statistics (once its transaction commits); a search reads
it through :meth:`MemoryStore.entry_terms <mycelian_agent.memory_server.storage.base.MemoryStore.entry_terms>`, so it
tokenises only candidates written by another process or dropped from the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

from mycelian_agent.memory_server.text.analysis import EntryTerms

__all__ = ["CACHED_ENTRIES", "EntryCache"]

#: Entries whose :class:`EntryTerms` stay cached (least recently scored dropped first; ~2 KB each).
CACHED_ENTRIES = 20_000


class EntryCache:
    """:class:`EntryTerms` by entry seq, least recently used dropped first. A seq is never reused; an entry that
    is updated or deleted is dropped (:meth:`discard`) and an update puts its new terms, so nothing goes stale in
    this process: a search tokenises only the candidates it has not scored before. Thread-safe."""

    def __init__(self, capacity: int = CACHED_ENTRIES) -> None:
        self._capacity = capacity
        self._items: OrderedDict[int, EntryTerms] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, items: Iterable[tuple[int, EntryTerms]]) -> None:
        """Keep these entries' terms (the newest put are the most recently used)."""
        with self._lock:
            self._items.update(items)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def discard(self, seqs: Iterable[int] | None = None) -> None:
        """Forget these entries' terms (None: every entry's), after they were replaced or deleted."""
        with self._lock:
            if seqs is None:
                self._items.clear()
                return
            for seq in seqs:
                self._items.pop(seq, None)

    def get(self, seqs: Sequence[int], load: Callable[[list[int]], Mapping[int, EntryTerms]]) -> dict[int, EntryTerms]:
        """The terms of ``seqs`` (``load(missing seqs)`` computes the others; seqs it does not return are left out)."""
        found: dict[int, EntryTerms] = {}
        with self._lock:
            for seq in seqs:
                item = self._items.get(seq)
                if item is not None:
                    self._items.move_to_end(seq)
                    found[seq] = item
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            loaded = load(missing)
            found.update(loaded)
            self.put(loaded.items())
        return {seq: found[seq] for seq in seqs if seq in found}
