"""The row types a store hands up: database rows, a validated new entry, a neighbour link, the dense side of a search.

They are storage's vocabulary (``base.py`` names them in the interface, the backends return them, retrieval reads
them), so they live below retrieval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

__all__ = ["ENTRY_FIELDS", "DenseHits", "Link", "NewEntry", "Row", "entry_json", "memory_json"]


class Row(Protocol):
    """A row of a backend: anything indexable by column name (``sqlite3.Row``, psycopg's dict rows)."""

    def __getitem__(self, key: str, /) -> Any:
        """The value of column ``key``."""


#: The fields of one ``add_entries`` item (``raw_entry`` and ``summary`` required), as for ``add_entry``.
ENTRY_FIELDS = ("raw_entry", "summary", "tags", "conversation_time", "idempotency_key")
#: One entry's neighbours (:meth:`MemoryStore.neighbour_links`): ``(seq, previous seq, next seq, asks)``, the
#: previous and next entry of its memory within ``CONTEXT_GAP_DAYS`` (None where there is none) and whether its
#: raw text holds one of ``QUESTION_MARKS``.
Link = tuple[int, int | None, int | None, bool]


class NewEntry(NamedTuple):
    """One entry to append, validated (``add_entry``'s arguments after the ids)."""

    raw_entry: str
    summary: str
    tags: dict[str, str]
    conversation_time: str | None
    idempotency_key: str | None


@dataclass
class DenseHits:
    """What the fusion (``retrieval/fusion.py``) needs from the dense side of one search.

    ``cosines``: seq -> cosine of the query's nearest entries (within the search's time bounds); ``nearest``: those
    seqs, best first; ``typical``: the typical cosine of the memory (the median over its sample, see ``fusion.py``);
    ``more(seqs)``: the cosines of other entries (the lexical candidates; those without a vector or outside the
    bounds are left out), asked for once the lexical ranking is known."""

    cosines: Mapping[int, float]
    nearest: Sequence[int]
    typical: float
    more: Callable[[Sequence[int]], Mapping[int, float]] | None = None
    #: Which path answered (``scan`` or ``hnsw``): logs and tests.
    path: str = field(default="scan")
    #: The vectors behind the dense side, for the dense feedback (``retrieval/dense_feedback``: ``ScanSpace`` from
    #: the exact scan, ``IndexSpace`` from an approximate index); None when there are none.
    space: Any = field(default=None, compare=False)
    #: How many of the memory's entries had no vector yet (written behind, not there yet): ranked by words alone.
    pending: int = 0

    @property
    def best(self) -> float | None:
        """The best cosine within the bounds (the nearest entry's), None when no entry has one."""
        return self.cosines[self.nearest[0]] if self.nearest else None


def entry_json(row: Row) -> dict[str, Any]:
    """The entry object of the tool contract."""
    entry: dict[str, Any] = {
        "entryId": row["entry_id"],
        "memoryId": row["memory_id"],
        "vaultId": row["vault_id"],
        "creationTime": row["creation_time"],
    }
    if row["conversation_time"] is not None:
        entry["conversationTime"] = row["conversation_time"]
    entry["rawEntry"] = row["raw_entry"]
    entry["summary"] = row["summary"]
    entry["tags"] = json.loads(row["tags"])
    try:
        entry["version"] = int(row["version"])
    except (IndexError, KeyError):  # a row of a schema before versions (tests write at old schemas): the first
        entry["version"] = 1
    return entry


def memory_json(row: Row) -> dict[str, Any]:
    """The memory object of the tool contract."""
    return {
        "memoryId": row["memory_id"],
        "vaultId": row["vault_id"],
        "title": row["title"],
        "description": row["description"],
        "memoryType": row["memory_type"],
        "creationTime": row["creation_time"],
    }
