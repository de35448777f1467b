"""The storage interface of the memory server: one validating front, two backends (SQLite, PostgreSQL).

:class:`MemoryStore` holds everything the tool contract says that does not depend on the database: argument
checks, the JSON shapes of results, the idempotency-key rule, the search pipeline (query terms, neighbouring-turn
context, query feedback, optional dense fusion). A backend implements the small set of ``_primitive`` methods below,
each one transaction. Failures raise :class:`~mycelian_agent.errors.InputError` (bad argument) or
:class:`~mycelian_agent.errors.MemoryServerError` (unknown id, conflict) and leave the database unchanged.

The interface names no backend: :func:`mycelian_agent.memory_server.storage.open_store` picks one from the target.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple, Protocol

from mycelian_agent.errors import InputError, MemoryServerError
from mycelian_agent.limits import SEARCH_DEPTH_MAX
from mycelian_agent.memory_server.retrieval import bm25
from mycelian_agent.memory_server.retrieval import coverage
from mycelian_agent.memory_server.retrieval import feedback as feedback_module
from mycelian_agent.memory_server.retrieval import fusion
from mycelian_agent.memory_server.retrieval import query_time
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.storage.placeholder import PLACEHOLDER_CONTEXT
from mycelian_agent.memory_server.storage.vectors import EntryVectors
from mycelian_agent.memory_server.retrieval.ranking import CONTEXT_DEPTH, current_first, query_terms, with_context
from mycelian_agent.memory_server.storage.validation import (
    LIMITS,
    check_idempotency_key,
    check_memory_type,
    check_optional_text,
    check_tags,
    check_text,
    check_title,
    check_uuid,
    parse_rfc3339,
)

__all__ = [
    "ENTRY_FIELDS",
    "POSTGRES_SCHEMES",
    "DenseIndex",
    "MemoryStore",
    "NewEntry",
    "Row",
    "is_postgres_url",
    "open_store",
]

_ENTRY_CACHE_LOCK = threading.Lock()

#: Row objects of a backend: anything indexable by column name (``sqlite3.Row``, a dict).
Row = Mapping[str, Any]
#: URL prefixes that select the PostgreSQL backend.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: The fields of one ``add_entries`` item (``raw_entry`` and ``summary`` required), as for ``add_entry``.
ENTRY_FIELDS = ("raw_entry", "summary", "tags", "conversation_time", "idempotency_key")


class NewEntry(NamedTuple):
    """One entry to append, validated (``add_entry``'s arguments after the ids)."""

    raw_entry: str
    summary: str
    tags: dict[str, str]
    conversation_time: str | None
    idempotency_key: str | None


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
        """``(seqs, cosines)`` of the memory's embedded entries (-inf outside the time bounds), by an exact scan.
        Called after :meth:`settle`."""

    def hits(
        self,
        connect: Callable[[], AbstractContextManager[Any]],
        memory_id: str,
        query: str,
        k: int,
        after: str | None = None,
        before: str | None = None,
    ) -> fusion.DenseHits | None:
        """The dense side of a search (``fusion.DenseHits``): the ``k`` nearest entries and the memory's typical
        cosine (``connect()``: the store's connection). Called after :meth:`settle`."""

    def attach(self, vectors: EntryVectors, connect: Callable[[], AbstractContextManager[Any]] | None) -> None:
        """Called once the store is open: ``vectors`` is the backend's vector SQL; ``connect()`` gives a connection
        of the index's own (None: none can be given), for writing vectors behind the entries' transactions."""

    def entries_written(self, memory_id: str, seqs: Sequence[int]) -> None:
        """Called after a write commits, with the seqs of the entries it inserted."""

    def settle(self, memory_id: str) -> bool:
        """Wait until every committed entry of the memory has its vector (False: gave up waiting)."""

    def close(self) -> None:
        """Finish and release what :meth:`attach` started (called before the store's connections close)."""


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


def _score(value: float) -> float:
    # Six significant digits: lexical scores on small memories are tiny, so fixed decimals would erase the order.
    return float(f"{value:.6g}")


def _entry_terms(row: Row) -> bm25.EntryTerms:
    moment = row["conversation_time"] or row["creation_time"]
    return bm25.entry_terms(row["raw_entry"], row["summary"], row["tags"], moment)


def memory_not_found(memory_id: str, vault_id: str | None) -> MemoryServerError:
    """The error for a memory that is not there (in ``vault_id`` when given)."""
    where = f" in vault {vault_id}" if vault_id is not None else ""
    return MemoryServerError(f"memory {memory_id} not found{where}")


def _new_entry(
    raw_entry: Any, summary: Any, tags: Any, conversation_time: Any, idempotency_key: Any
) -> NewEntry:
    """The checked arguments of one entry (``add_entry``'s rules)."""
    return NewEntry(
        check_text("raw_entry", raw_entry, LIMITS["raw_entry"]),
        check_text("summary", summary, LIMITS["summary"]),
        check_tags(tags),
        parse_rfc3339("conversation_time", conversation_time),
        check_idempotency_key(idempotency_key),
    )


def _new_item(index: int, item: Any) -> NewEntry:
    """Item ``index`` of an ``add_entries`` call, checked; errors name the item."""
    if not isinstance(item, Mapping):
        raise InputError(f"entries[{index}] must be an object with raw_entry and summary (got {type(item).__name__})")
    unknown = [key for key in item if key not in ENTRY_FIELDS]
    missing = [key for key in ENTRY_FIELDS[:2] if key not in item]
    if unknown or missing:
        problems = [f"unknown field {k!r}" for k in unknown] + [f"missing required field {k!r}" for k in missing]
        raise InputError(f"entries[{index}]: {'; '.join(problems)} (fields: {', '.join(ENTRY_FIELDS)})")
    try:
        return _new_entry(*(item.get(key) for key in ENTRY_FIELDS))
    except InputError as exc:
        raise InputError(f"entries[{index}]: {exc}") from None


def _check_same_entry(row: Row, inserted: bool, entry: NewEntry, memory_id: str) -> None:
    """An idempotency key already stored with another ``raw_entry`` is a conflict, not a retry."""
    if not inserted and row["raw_entry"] != entry.raw_entry:
        raise MemoryServerError(
            f"idempotency_key {entry.idempotency_key!r} conflicts: memory {memory_id} already holds entry "
            f"{row['entry_id']} under that key with a different raw_entry"
        )


class MemoryStore(ABC):
    """The memory database behind the tools. Public methods validate, then call one backend primitive."""

    #: How many calls the runtime may run at once on this store (1: one connection, one thread).
    concurrency: int = 1
    #: The optional dense index that backends write each new entry's vector to.
    _dense: DenseIndex | None = None

    # -- backend primitives (each one transaction; arguments already validated) ----------------------------

    @abstractmethod
    def _close(self) -> None:
        """Release the connection(s)."""

    @abstractmethod
    def _insert_vault(self, title: str, description: str) -> str:
        """Insert a vault and return its id; a taken title raises ``a vault titled ... already exists``."""

    @abstractmethod
    def _vault_rows(self) -> list[Row]:
        """``vault_id, title`` of every vault, oldest first."""

    @abstractmethod
    def _insert_memory(self, vault_id: str, title: str, memory_type: str, description: str) -> Row:
        """Insert a memory (its vault must exist; a taken title in the vault raises) and return its row."""

    @abstractmethod
    def _memory_rows(self, vault_id: str) -> list[Row]:
        """``memory_id, title`` of the vault's memories, oldest first (the vault must exist)."""

    @abstractmethod
    def _memory_row(self, vault_id: str | None, memory_id: str) -> Row:
        """The memory's row (in ``vault_id`` when given), or raise ``vault ... not found`` / ``memory ...``."""

    @abstractmethod
    def _delete_memory(self, vault_id: str, memory_id: str) -> int:
        """Delete a memory with everything it holds; return its entry count."""

    @abstractmethod
    def _append_entry(self, vault_id: str, memory_id: str, entry: NewEntry) -> tuple[Row, bool]:
        """Insert an entry, or find the one stored under ``idempotency_key``: ``(row, inserted)``."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """One transaction that the primitives called inside it join (instead of each opening its own): all of
        their writes commit together when the block ends, or none when it raises."""

    @abstractmethod
    def _entry_page(self, memory_id: str, limit: int, before: str | None, after: str | None) -> list[Row]:
        """Up to ``limit`` entries: newest first before ``before`` (or all), or oldest first after ``after``."""

    @abstractmethod
    def _entry_row(self, memory_id: str, entry_id: str) -> Row | None:
        """One entry of a memory, or None."""

    @abstractmethod
    def _delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> bool:
        """Delete one entry (the memory must exist); whether it was there."""

    @abstractmethod
    def _append_context(self, vault_id: str, memory_id: str, content: str) -> str:
        """Store a context snapshot (the memory must exist); return its timestamp."""

    @abstractmethod
    def _latest_context(self, memory_id: str) -> Row | None:
        """``content, creation_time`` of the newest snapshot, or None."""

    @abstractmethod
    def _lexical_entries(
        self, memory_id: str, terms: list[str], limit: int, after: str | None, before: str | None, *,
        statistics: Callable[[Sequence[str]], tuple[int, dict[str, int], int]] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best of the memory's entries by the index's own lexical ranking: ``(seq, score > 0)``, the
        candidates that ``bm25.py`` re-scores and re-orders (so in any order: SQLite returns a memory that has no
        more matches than ``limit`` unranked). ``statistics(stems)``, when given, is BM25's ``(entries,
        {stem: entries containing it}, tokens)`` of the memory (what ``bm25.rank`` uses), for a backend whose index
        does not keep them; it may read the database, so call it before taking a connection."""

    @abstractmethod
    def _neighbours(
        self, memory_id: str, seqs: Sequence[int], after: str | None, before: str | None
    ) -> tuple[list[tuple[int, int | None, int | None, bool]], set[int]]:
        """``(links, allowed)`` for :func:`ranking.with_context`: each seq's previous and next entry in the memory
        within ``CONTEXT_GAP_DAYS`` and whether the entry asks something (``ranking.QUESTION_MARKS`` in its raw
        text), and the seqs (given and neighbours) inside the time bounds."""

    @abstractmethod
    def _entry_rows(self, memory_id: str, seqs: Sequence[int]) -> dict[int, Row]:
        """The rows of the memory's entries ``seqs``, by seq."""

    @abstractmethod
    def _term_counts(self, memory_id: str, stems: Collection[str], words: Collection[str]) -> term_stats.TermCounts:
        """The memory's term statistics (``term_stats.py``, kept by every write): its entries, their BM25 tokens,
        and the entries containing each of ``stems`` (BM25 index stems) and ``words`` (feedback words)."""

    @abstractmethod
    def _lexical_contexts(self, memory_id: str, terms: list[str], limit: int) -> list[tuple[Row, float]]:
        """Context snapshots ranked against ``terms``: ``(row with content, creation_time; score)``."""

    @abstractmethod
    def _counts(self) -> dict[str, int]:
        """Row counts of every table and index."""

    @abstractmethod
    def _snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the vaults, memories, entries and contexts tables, in a stable order."""

    # -- lifecycle and introspection -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection(s), after the dense index has written the vectors it still owes."""
        try:
            if self._dense is not None:
                self._dense.close()
        finally:
            self._close()

    def counts(self) -> dict[str, int]:
        """Row counts of every table and index (tests, diagnostics)."""
        return self._counts()

    def snapshot(self) -> dict[str, Any]:
        """Every row of every table in a stable order, and the counts (tests: a refused call changes nothing)."""
        return {"rows": self._snapshot(), "counts": self._counts()}

    # -- the dense index (optional) -------------------------------------------------------------------------

    @abstractmethod
    def _read(self) -> AbstractContextManager[Any]:
        """A connection for reads outside any write (a search's), as a context manager."""

    def _attach_dense(self, vectors: EntryVectors, connect: Callable[[], AbstractContextManager[Any]] | None) -> None:
        """Called by the backend's ``open`` once the store is ready: hand the dense index (if any) the backend's
        vector SQL and ``connect`` (connections of the index's own; None: none can be given). Should the index
        refuse, the store's connections are released and the error raised."""
        if self._dense is None:
            return
        try:
            self._dense.attach(vectors, connect)
        except BaseException:
            self._close()
            raise

    def _dense_similarities(
        self, memory_id: str, query: str, after: str | None, before: str | None
    ) -> tuple[list[int], Any] | None:
        """``(seqs, cosines)`` from a dense index (see :meth:`DenseIndex.similarities`), None without one."""
        if self._dense is None:
            return None
        with self._read() as conn:
            return self._dense.similarities(conn, memory_id, query, after, before)

    def _dense_hits(
        self, memory_id: str, query: str, k: int, after: str | None, before: str | None
    ) -> fusion.DenseHits | None:
        """The dense side of a search from the store's index (see :meth:`DenseIndex.hits`), None without one."""
        if self._dense is None:
            return None
        return self._dense.hits(self._read, memory_id, query, k, after, before)

    @abstractmethod
    def maintenance_connection(self) -> AbstractContextManager[Any]:
        """A connection for maintenance outside the tools (the embeddings backfill), as a context manager."""

    # -- vaults and memories -------------------------------------------------------------------------------

    def create_vault(self, title: str, description: str | None = "") -> dict[str, Any]:
        """Create a vault; its title is unique."""
        title = check_title("title", title)
        description = check_optional_text("description", description, LIMITS["description"])
        return {"vaultId": self._insert_vault(title, description), "title": title}

    def list_vaults(self) -> list[dict[str, Any]]:
        """All vaults, oldest first."""
        return [{"vaultId": r["vault_id"], "title": r["title"]} for r in self._vault_rows()]

    def create_memory(
        self, vault_id: str, title: str, memory_type: str, description: str | None = ""
    ) -> dict[str, Any]:
        """Create a memory in a vault; its title is unique within the vault."""
        vault_id = check_uuid("vault_id", vault_id)
        title = check_title("title", title)
        memory_type = check_memory_type(memory_type)
        description = check_optional_text("description", description, LIMITS["description"])
        return memory_json(self._insert_memory(vault_id, title, memory_type, description))

    def list_memories(self, vault_id: str) -> list[dict[str, Any]]:
        """The memories of a vault, oldest first."""
        vault_id = check_uuid("vault_id", vault_id)
        return [{"memoryId": r["memory_id"], "title": r["title"]} for r in self._memory_rows(vault_id)]

    def get_memory(self, vault_id: str, memory_id: str) -> dict[str, Any]:
        """One memory of a vault."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        return memory_json(self._memory_row(vault_id, memory_id))

    def check_memory(self, memory_id: str, vault_id: str | None = None) -> None:
        """Raise unless the memory exists (in ``vault_id`` when given)."""
        memory_id = check_uuid("memory_id", memory_id)
        if vault_id is not None:
            vault_id = check_uuid("vault_id", vault_id)
        self._memory_row(vault_id, memory_id)

    def await_consistency(self, memory_id: str, vault_id: str | None = None) -> None:
        """Raise unless the memory exists; return once every committed entry of it is searchable on every side
        (with vectors written behind: once its queued entries are embedded)."""
        self.check_memory(memory_id, vault_id)
        if self._dense is not None:
            self._dense.settle(memory_id)

    def delete_memory(self, vault_id: str, memory_id: str) -> dict[str, Any]:
        """Delete a memory with its entries, contexts and index rows."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        count = self._delete_memory(vault_id, memory_id)
        return {"memoryId": memory_id, "status": "deleted", "entries": count}

    # -- entries -------------------------------------------------------------------------------------------

    def add_entry(
        self,
        vault_id: str,
        memory_id: str,
        raw_entry: str,
        summary: str,
        tags: dict[str, str] | None = None,
        conversation_time: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Append an entry; with ``idempotency_key``, a retry returns the stored entry (``deduplicated``)."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        entry = _new_entry(raw_entry, summary, tags, conversation_time, idempotency_key)
        row, inserted = self._append_entry(vault_id, memory_id, entry)
        _check_same_entry(row, inserted, entry, memory_id)
        if inserted and self._dense is not None:
            self._dense.entries_written(memory_id, [int(row["seq"])])
        return {**entry_json(row), "status": "stored", "deduplicated": not inserted}

    def add_entries(self, vault_id: str, memory_id: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Append several entries in one transaction: all are stored, or none (any bad item, conflict or failure).

        Each item has ``add_entry``'s fields and rules (``raw_entry``, ``summary``, optional ``tags``,
        ``conversation_time``, ``idempotency_key``); errors name the item (``entries[3]: ...``). An item whose
        idempotency key is already stored with the same ``raw_entry`` is answered with that entry
        (``deduplicated``), so retrying a whole call stores nothing twice. Entries are appended in the given order.
        Returns ``{"entries": [entry + "deduplicated"], "count", "stored", "deduplicated", "status": "stored"}``.
        """
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        most = LIMITS["add_entries"]
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise InputError(f"entries must be a list of entry objects (got {type(entries).__name__})")
        if not 1 <= len(entries) <= most:
            raise InputError(f"entries must hold 1 to {most} entries (got {len(entries)})")
        items = [_new_item(index, item) for index, item in enumerate(entries)]
        self._memory_row(vault_id, memory_id)
        answers = []
        inserted_seqs = []
        with self._transaction(), self._dense.batch() if self._dense is not None else nullcontext():
            for index, entry in enumerate(items):
                try:
                    row, inserted = self._append_entry(vault_id, memory_id, entry)
                    _check_same_entry(row, inserted, entry, memory_id)
                except (InputError, MemoryServerError) as exc:
                    exc.args = (f"entries[{index}]: {exc}; nothing was stored",)
                    raise
                answers.append({**entry_json(row), "deduplicated": not inserted})
                if inserted:
                    inserted_seqs.append(int(row["seq"]))
        if self._dense is not None:
            self._dense.entries_written(memory_id, inserted_seqs)
        deduplicated = sum(a["deduplicated"] for a in answers)
        return {"entries": answers, "count": len(answers), "stored": len(answers) - deduplicated,
                "deduplicated": deduplicated, "status": "stored"}

    def list_entries(
        self, vault_id: str, memory_id: str, limit: int = 25, before: str | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """A page of entries: newest first (or, with ``after``, oldest first after it), with the next cursor."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
            raise InputError(f"limit must be an integer from 1 to 50 (got {limit!r})")
        before = parse_rfc3339("before", before)
        after = parse_rfc3339("after", after)
        if before is not None and after is not None:
            raise InputError("before and after are mutually exclusive: give at most one")
        self._memory_row(vault_id, memory_id)
        rows = self._entry_page(memory_id, limit + 1, before, after)
        more = len(rows) > limit
        entries = [entry_json(r) for r in rows[:limit]]
        cursor = entries[-1]["creationTime"] if more else None
        return {
            "entries": entries,
            "count": len(entries),
            "applied_limit": limit,
            "next_before": cursor if after is None else None,
            "next_after": cursor if after is not None else None,
        }

    def get_entry(self, vault_id: str, memory_id: str, entry_id: str) -> dict[str, Any]:
        """One entry of a memory."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        entry_id = check_uuid("entry_id", entry_id)
        self._memory_row(vault_id, memory_id)
        row = self._entry_row(memory_id, entry_id)
        if row is None:
            raise MemoryServerError(f"entry {entry_id} not found in memory {memory_id}")
        return entry_json(row)

    def delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> dict[str, Any]:
        """Delete one entry (and its index rows)."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        entry_id = check_uuid("entry_id", entry_id)
        if not self._delete_entry(vault_id, memory_id, entry_id):
            raise MemoryServerError(f"entry {entry_id} not found in memory {memory_id}")
        return {"entryId": entry_id, "status": "deleted"}

    # -- context -------------------------------------------------------------------------------------------

    def put_context(self, vault_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Store a new context snapshot (the whole document); older snapshots stay searchable."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        content = check_text("content", content, LIMITS["content"])
        now = self._append_context(vault_id, memory_id, content)
        return {"memoryId": memory_id, "timestamp": now, "status": "stored", "chars": len(content)}

    def get_context(self, vault_id: str, memory_id: str) -> str:
        """The newest context snapshot, or :data:`PLACEHOLDER_CONTEXT` if none was stored."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        self._memory_row(vault_id, memory_id)
        row = self._latest_context(memory_id)
        return PLACEHOLDER_CONTEXT if row is None else row["content"]

    # -- search --------------------------------------------------------------------------------------------

    def search(
        self,
        memory_id: str,
        query: str,
        top_ke: int = 5,
        top_kc: int = 2,
        include_raw_entries: bool = False,
        *,
        after: str | None = None,
        before: str | None = None,
        vault_id: str | None = None,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Entries and context snapshots of one memory ranked against ``query``.

        ``offset`` skips the first entries of the ranking (paging: ``offset + top_ke`` at most
        :data:`~mycelian_agent.limits.SEARCH_DEPTH_MAX`); the context snapshots are the same on every page.
        All pages join into one ranking, each entry once: the first ``ranking.CONTEXT_DEPTH`` (50) places are the
        ranking of a 50-deep pool (what every ordinary search returns a prefix of), and deeper places continue with
        the rest of a ``SEARCH_DEPTH_MAX``-deep ranking (scores there may exceed the 50th's: neighbour shares and
        query feedback see more candidates).
        """
        memory_id = check_uuid("memory_id", memory_id)
        if vault_id is not None:
            vault_id = check_uuid("vault_id", vault_id)
        query = check_text("query", query, LIMITS["query"])
        for name, value, low, high in (("top_ke", top_ke, 0, 25), ("top_kc", top_kc, 1, 10),
                                       ("offset", offset, 0, SEARCH_DEPTH_MAX - 25)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InputError(f"{name} must be an integer from {low} to {high} (got {value!r})")
        if not isinstance(include_raw_entries, bool):
            raise InputError(f"include_raw_entries must be a boolean (got {include_raw_entries!r})")
        after = parse_rfc3339("after", after)
        before = parse_rfc3339("before", before)
        self._memory_row(vault_id, memory_id)
        terms = query_terms(query)
        entries = []
        depth = offset + top_ke if top_ke else 0
        ranked = self.rank_entries(memory_id, query, terms, min(depth, CONTEXT_DEPTH), after=after, before=before)
        if depth > CONTEXT_DEPTH:
            # A pool as deep as this page would reorder the first places (and one as deep as the next page would
            # reorder this one), so deep pages continue the 50-deep ranking from one fixed, deepest pool.
            shown = {row["seq"] for row, _ in ranked}
            deeper = self.rank_entries(memory_id, query, terms, SEARCH_DEPTH_MAX, after=after, before=before)
            ranked += [(row, score) for row, score in deeper if row["seq"] not in shown]
        for row, score in ranked[offset:depth]:
            item: dict[str, Any] = {"entryId": row["entry_id"], "summary": row["summary"]}
            if include_raw_entries:
                item["rawEntry"] = row["raw_entry"]
            item["score"] = _score(score)
            item["creationTime"] = row["creation_time"]
            if row["conversation_time"] is not None:
                item["conversationTime"] = row["conversation_time"]
            item["tags"] = json.loads(row["tags"])
            entries.append(item)
        contexts = (
            [
                {"context": row["content"], "timestamp": row["creation_time"], "score": _score(score)}
                for row, score in self._lexical_contexts(memory_id, terms, top_kc)
            ]
            if terms
            else []
        )
        latest = self._latest_context(memory_id)
        return {
            "entries": entries,
            "count": len(entries),
            "latestContext": PLACEHOLDER_CONTEXT if latest is None else latest["content"],
            "latestContextTimestamp": None if latest is None else latest["creation_time"],
            "contexts": contexts,
        }

    def rank_entries(
        self,
        memory_id: str,
        query: str,
        terms: list[str],
        limit: int,
        *,
        after: str | None = None,
        before: str | None = None,
        context: bool = True,
        feedback: bool = True,
        named_time: bool = True,
        names: bool = True,
    ) -> list[tuple[Row, float]]:
        """The memory's entries ranked for ``query`` (``terms`` from ``query_terms``): lexical hits, re-ranked with
        their neighbours' scores (``context``), joined by a second search with words of the best hits
        (``feedback``, see ``feedback.py``), those inside a time the query names lifted (``named_time``, see
        ``query_time.py``), the turns of a speaker the query names raised (``names``, see ``coverage.py``), fused
        with dense similarities when the store has an index."""
        if limit <= 0 or not terms:
            return []
        if self._dense is not None:
            # Before any connection is taken: the writer may need one of the pool's to finish.
            self._dense.settle(memory_id)
        # The dense side first, as the catch-up of entries without a vector should see the memory just settled.
        dense = self._dense_hits(memory_id, query, limit * fusion.DENSE_CANDIDATES, after, before)
        depth = max(limit, CONTEXT_DEPTH) if context else limit
        if self._dense is not None:
            # Fusion needs a lexical list deeper than the final cut so that an entry the dense side favours can
            # rise past weaker lexical hits. Not deeper than that: the neighbour shares and the query feedback then
            # work on the same pool as without dense (a pool of 100 at limit 25 lowered recall any@10 by 0.01).
            depth = max(depth, limit * 2)
        hits = self._lexical_ranking(memory_id, terms, depth, after, before, context)
        if feedback and hits:
            extra = self._feedback_terms(memory_id, terms, hits)
            if extra:
                second = self._lexical_ranking(memory_id, extra, depth, after, before, context)
                # The hits the words came from would match them best: no second score for them, or the second
                # search would only reshuffle the top (recall@1 fell from 0.36 to 0.30 on LoCoMo dev).
                sources = {seq for seq, _ in hits[: feedback_module.FEEDBACK_DOCS]}
                hits = feedback_module.combine(hits, [hit for hit in second if hit[0] not in sources])
        if named_time and hits:
            hits = self._time_named(memory_id, query, terms, hits, depth, after, before, context)
        if names and hits:
            hits = self._boost_named(memory_id, terms, hits)
        if self._dense is not None:
            hits = fusion.fuse(hits, dense, limit)
        hits = hits[:limit]
        rows = self._entry_rows(memory_id, [seq for seq, _ in hits])
        return [(rows[seq], score) for seq, score in hits if seq in rows]

    def _lexical_ranking(
        self, memory_id: str, terms: list[str], depth: int, after: str | None, before: str | None, context: bool,
    ) -> list[tuple[int, float]]:
        """BM25 hits (``bm25.py``), re-ranked with their neighbours' scores when ``context``: up to ``depth``, best
        first."""
        stems = bm25.query_stems(terms)
        read: list[term_stats.TermCounts] = []  # the memory's counts of ``stems``, read once when first needed

        def statistics(wanted: Sequence[str]) -> tuple[int, dict[str, int], int]:
            if not read:
                read.append(self._term_counts(memory_id, sorted(set(stems) | set(wanted)), ()))
            known = read[0]
            missing = [stem for stem in wanted if stem not in known.stems]
            if missing:
                known.stems.update(self._term_counts(memory_id, missing, ()).stems)
            return known.entries, {stem: known.stems[stem] for stem in wanted}, known.tokens

        candidates = self._lexical_entries(memory_id, terms, depth * bm25.CANDIDATES, after, before,
                                           statistics=statistics)
        if not candidates:
            return []
        count, frequencies, length = statistics(stems)
        entries = self._entry_cache.get(
            [seq for seq, _ in candidates],
            lambda seqs: {seq: _entry_terms(row) for seq, row in self._entry_rows(memory_id, seqs).items()})
        scored = bm25.rank(list(entries.items()), stems, count, frequencies, length)
        hits = [(seq, value) for seq, value, _ in scored[:depth]]
        if context and hits:
            links, allowed = self._neighbours(memory_id, [seq for seq, _ in hits], after, before)
            # The neighbours' own neighbours: the turns two steps from each hit (ranking.CONTEXT_FAR_AFTER).
            outer, further = self._neighbours(memory_id, sorted(allowed.difference(seq for seq, _ in hits)), after,
                                              before)
            matched = {seq: frozenset(by_stem) for seq, _, by_stem in scored}
            hits = with_context(hits, links, allowed | further, depth, matched, outer)
            hits = current_first(hits, entries, matched)
        return hits

    def _time_named(
        self, memory_id: str, query: str, terms: list[str], hits: list[tuple[int, float]], depth: int,
        after: str | None, before: str | None, context: bool,
    ) -> list[tuple[int, float]]:
        """``hits`` with the entries inside the times ``query`` names lifted (``query_time.py``), seen from the
        question's date: ``before`` (exclusive) when given, else today. A single named span is also searched on its
        own (the same ``terms``), so that its entries compete even when the whole memory's pool missed them."""
        named = query_time.parse_query_time(query, query_time.reference_date(before))
        if not named:
            return hits
        pooled = dict(hits)
        if len(named.spans) == 1 and query_time.SPAN_SEARCH:
            span_after, span_before = query_time.span_bounds(named.spans[0], after, before)
            if span_after < span_before:  # (else the span lies outside the search's own bounds)
                for seq, score in self._lexical_ranking(memory_id, terms, depth, span_after, span_before, context):
                    pooled[seq] = max(score, pooled.get(seq, 0.0))
        rows = self._entry_rows(memory_id, list(pooled))
        moments = {seq: query_time.moment(row["conversation_time"] or row["creation_time"])
                   for seq, row in rows.items()}
        return query_time.boost(list(pooled.items()), moments, named)[:depth]

    def _boost_named(self, memory_id: str, terms: list[str], hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """``coverage.boost_named_speakers`` on ``hits``, with each entry's author from the entry cache (entries not
        in it, such as neighbours the lexical search did not find, are read once and kept)."""
        entries = self._entry_cache.get(
            [seq for seq, _ in hits],
            lambda seqs: {seq: _entry_terms(row) for seq, row in self._entry_rows(memory_id, seqs).items()})
        authors = {seq: coverage.author_stems(terms_of.author) for seq, terms_of in entries.items()}
        return coverage.boost_named_speakers(hits, authors, bm25.query_stems(terms))

    def _feedback_terms(self, memory_id: str, terms: list[str], hits: Sequence[tuple[int, float]]) -> list[str]:
        """The words of the best ``hits`` to search for next (``feedback.expansion_terms``); none in a memory of
        fewer than ``FEEDBACK_MIN_ENTRIES`` entries."""
        top = hits[: feedback_module.FEEDBACK_DOCS]
        rows = self._entry_rows(memory_id, [seq for seq, _ in top])
        docs = [(feedback_module.feedback_words(f"{rows[seq]['summary']} {rows[seq]['raw_entry']}"), score)
                for seq, score in top if seq in rows]
        words = {word for doc, _ in docs for word in doc}
        entries, _, _, frequencies = self._term_counts(memory_id, (), words)
        if entries < feedback_module.FEEDBACK_MIN_ENTRIES:
            return []
        return feedback_module.expansion_terms(docs, entries, frequencies, exclude=set(terms))

    @property
    def _entry_cache(self) -> bm25.EntryCache:
        # Created on first use (no work at construction); the lock keeps two threads from making two caches.
        with _ENTRY_CACHE_LOCK:
            cache = self.__dict__.get("_bm25_entries")
            if cache is None:
                cache = self.__dict__["_bm25_entries"] = bm25.EntryCache()
            return cache
