"""The storage interface of the memory server: one validating front, two backends (SQLite, PostgreSQL).

:class:`MemoryStore` holds everything the tool contract says about storing that does not depend on the database:
argument checks, the JSON shapes of results, the idempotency-key rule. A backend implements the abstract methods
below, each one transaction. Failures raise :class:`~mycelian_agent.errors.InputError` (bad argument) or
:class:`~mycelian_agent.errors.MemoryServerError` (unknown id, conflict) and leave the database unchanged.

Searching is retrieval's (``retrieval/pipeline.py``): it asks a store only through its search reads
(:data:`SEARCH_READS`: candidates, statistics, neighbours, rows, contexts, dense hits). Storage imports nothing above
it (``text/`` only); the interface names no backend (``storage.open_store`` picks one). It is one module because it
is one contract: what a backend implements and what every caller of a store may rely on, read in one place.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from mycelian_agent.errors import InputError, MemoryServerError
from mycelian_agent.memory_server.storage import context_items, term_stats
from mycelian_agent.memory_server.storage.dense_index import DenseIndex
from mycelian_agent.memory_server.storage.entry_cache import EntryCache
from mycelian_agent.memory_server.storage.explained import ExplainsProblems
from mycelian_agent.memory_server.storage.rows import (
    ENTRY_FIELDS,
    DenseHits,
    Link,
    NewEntry,
    Row,
    entry_json,
    memory_json,
)
from mycelian_agent.memory_server.storage.validation import (
    LIMITS,
    check_entry,
    check_entry_item,
    check_memory_ids,
    check_memory_type,
    check_optional_text,
    check_text,
    check_title,
    check_uuid,
    parse_rfc3339,
)
from mycelian_agent.memory_server.storage.vectors import EntryVectors, VectorStatus
from mycelian_agent.memory_server.text import analysis
from mycelian_agent.memory_server.text.analysis import EntryTerms
from mycelian_agent.placeholder import PLACEHOLDER_CONTEXT

__all__ = [
    "ENTRY_FIELDS",
    "SEARCH_READS",
    "DenseHits",
    "DenseIndex",
    "Link",
    "MemoryStore",
    "NewEntry",
    "Row",
    "Statistics",
    "VectorStatus",
    "entry_json",
    "entry_not_found",
    "memory_json",
    "memory_not_found",
]

_ENTRY_CACHE_LOCK = threading.Lock()

#: What retrieval asks a store for (the public reads of :class:`MemoryStore`'s "search reads" section); each is
#: covered by ``tests/conformance`` on every backend.
SEARCH_READS = (
    "check_memory",
    "lexical_candidates",
    "term_counts",
    "entry_rows",
    "entry_terms",
    "neighbour_links",
    "neighbourhood",
    "entries_within",
    "ranked_contexts",
    "latest_context",
    "search_contexts",
    "has_dense",
    "dense_hits",
)
#: BM25's statistics of a memory for some stems: ``(entries, {stem: entries containing it}, tokens)``.
Statistics = Callable[[Sequence[str]], tuple[int, dict[str, int], int]]


def entry_not_found(entry_id: str, memory_id: str) -> MemoryServerError:
    """The error for an entry that is not in the memory."""
    return MemoryServerError(f"entry {entry_id} not found in memory {memory_id}")


def memory_not_found(memory_id: str, vault_id: str | None) -> MemoryServerError:
    """The error for a memory that is not there (in ``vault_id`` when given)."""
    where = f" in vault {vault_id}" if vault_id is not None else ""
    return MemoryServerError(f"memory {memory_id} not found{where}")


class MemoryStore(ExplainsProblems, ABC):
    """The memory database behind the tools. Public methods validate, then call one backend primitive; the search
    reads (:data:`SEARCH_READS`, at the end) are what retrieval asks of a store, with arguments it already checked."""

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
    def _update_entry(self, vault_id: str, memory_id: str, entry_id: str, entry: NewEntry) -> Row | None:
        """Replace an entry's text, summary and tags (and its conversation time when ``entry`` has one) under the
        same id and seq, keeping the replaced version in ``entry_versions``; the new row, or None when the memory
        holds no such entry (the memory must exist). The old version leaves the index, statistics and vectors."""

    @abstractmethod
    def _entry_versions(self, memory_id: str, entry_id: str) -> list[Row]:
        """The replaced versions of an entry, oldest first (with ``version`` and ``replaced_at``)."""

    @abstractmethod
    def _context_rows(self, memory_id: str) -> list[Row]:
        """``seq, content`` of every context snapshot of the memory, oldest first."""

    @abstractmethod
    def _replace_context(self, memory_id: str, seq: int, old: str, new: str) -> None:
        """Rewrite snapshot ``seq`` from ``old`` to ``new`` (and its index rows), in place; raise if its content is
        no longer ``old`` (another client wrote in between)."""

    def _purge(self) -> None:
        """After a delete commits: make the engine drop what it still holds of the deleted rows where it can do so
        at once (SQLite: merge the full-text index, checkpoint the WAL). Nothing by default."""

    @abstractmethod
    def _append_context(self, vault_id: str, memory_id: str, content: str) -> str:
        """Store a context snapshot (the memory must exist); return its timestamp."""

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
    ) -> DenseHits | None:
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
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        return memory_json(self._memory_row(vault_id, memory_id))

    def check_memory(self, memory_id: str, vault_id: str | None = None) -> None:
        """Raise unless the memory exists (in ``vault_id`` when given)."""
        memory_id = check_uuid("memory_id", memory_id)
        if vault_id is not None:
            vault_id = check_uuid("vault_id", vault_id)
        self._memory_row(vault_id, memory_id)

    def await_consistency(self, memory_id: str, vault_id: str | None = None) -> None:
        """Raise unless the memory exists; every committed entry of it is then searchable by its words (its own
        transaction indexed them). Vectors are not waited for: they are written behind, a search ranks with those
        present and says how many are pending (:meth:`wait_for_vectors` waits for them)."""
        self.check_memory(memory_id, vault_id)

    def wait_for_vectors(self, memory_id: str | None = None, timeout: float = 60.0) -> bool:
        """Wait up to ``timeout`` seconds until the vectors this store's dense index writes behind, of the memory's
        entries (None: of every memory), are written; whether they were (True without a dense index). For
        benchmarks, tests and maintenance: nothing on the write or search path waits for vectors. Safe from any
        thread (it reads nothing from the database): check the memory first where that matters."""
        return True if self._dense is None else self._dense.settle(memory_id, timeout)

    def vector_status(self, model: str | None = None, memory_id: str | None = None) -> VectorStatus:
        """How many entries (of ``memory_id``, or of the whole database) have a vector of ``model`` (default: the
        dense index's model) and how many are pending, with the oldest pending entry's age: SQL only, no encoder
        is loaded. :class:`InputError` when there is no model to count for."""
        model = model or getattr(self._dense, "model", None)
        if not model:
            raise InputError("vector_status needs a model name: this store has no dense index")
        if memory_id is not None:
            self.check_memory(memory_id)
        from mycelian_agent.memory_server.storage import entry_vectors

        with self._read() as conn:
            return entry_vectors(conn).status(conn, model, memory_id)

    def delete_memory(self, vault_id: str, memory_id: str) -> dict[str, Any]:
        """Delete a memory with every row it has (entries, versions, contexts, vectors, statistics, index key)
        and what this process caches of it."""
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        count = self._delete_memory(vault_id, memory_id)
        self._entry_cache.discard()  # (its seqs are not known here; deleting a memory is rare)
        if self._dense is not None:
            self._dense.entries_removed(memory_id, None)
        self._purge()
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
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        entry = check_entry(raw_entry, summary, tags, conversation_time, idempotency_key)
        row, inserted = self._append_entry(vault_id, memory_id, entry)
        self._check_same_entry(row, inserted, entry, memory_id)
        if inserted and self._dense is not None:
            self._dense.entries_written(memory_id, [int(row["seq"])])
        return {**entry_json(row), "status": "stored", "deduplicated": not inserted}

    def _check_same_entry(self, row: Row, inserted: bool, entry: NewEntry, memory_id: str) -> None:
        """An idempotency key already stored with another ``raw_entry`` is a conflict, not a retry, unless that
        ``raw_entry`` is one of the entry's replaced versions: the retry of a write that landed and was corrected
        since (``update_entry``) is answered with the entry as now stored, never written again."""
        if inserted or row["raw_entry"] == entry.raw_entry:
            return
        if any(old["raw_entry"] == entry.raw_entry for old in self._entry_versions(memory_id, row["entry_id"])):
            return
        raise MemoryServerError(
            f"idempotency_key {entry.idempotency_key!r} conflicts: memory {memory_id} already holds entry "
            f"{row['entry_id']} under that key with a different raw_entry"
        )

    def add_entries(self, vault_id: str, memory_id: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Append several entries in one transaction: all are stored, or none (any bad item, conflict or failure).

        Each item has ``add_entry``'s fields and rules (``raw_entry``, ``summary``, optional ``tags``,
        ``conversation_time``, ``idempotency_key``); errors name the item (``entries[3]: ...``). An item whose
        idempotency key is already stored with the same ``raw_entry`` is answered with that entry
        (``deduplicated``), so retrying a whole call stores nothing twice. Entries are appended in the given order.
        Returns ``{"entries": [entry + "deduplicated"], "count", "stored", "deduplicated", "status": "stored"}``.
        """
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        most = LIMITS["add_entries"]
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise InputError(f"entries must be a list of entry objects (got {type(entries).__name__})")
        if not 1 <= len(entries) <= most:
            raise InputError(f"entries must hold 1 to {most} entries (got {len(entries)})")
        items = [check_entry_item(index, item) for index, item in enumerate(entries)]
        self._memory_row(vault_id, memory_id)
        answers = []
        inserted_seqs = []
        with self._transaction(), self._dense.batch() if self._dense is not None else nullcontext():
            for index, entry in enumerate(items):
                try:
                    row, inserted = self._append_entry(vault_id, memory_id, entry)
                    self._check_same_entry(row, inserted, entry, memory_id)
                except (InputError, MemoryServerError) as exc:
                    exc.args = (f"entries[{index}]: {exc}; nothing was stored",)
                    raise
                answers.append({**entry_json(row), "deduplicated": not inserted})
                if inserted:
                    inserted_seqs.append(int(row["seq"]))
        if self._dense is not None:
            self._dense.entries_written(memory_id, inserted_seqs)
        deduplicated = sum(a["deduplicated"] for a in answers)
        return {
            "entries": answers,
            "count": len(answers),
            "stored": len(answers) - deduplicated,
            "deduplicated": deduplicated,
            "status": "stored",
        }

    def list_entries(
        self, vault_id: str, memory_id: str, limit: int = 25, before: str | None = None, after: str | None = None
    ) -> dict[str, Any]:
        """A page of entries: newest first (or, with ``after``, oldest first after it), with the next cursor."""
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
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
        return entry_json(self._require_entry(vault_id, memory_id, entry_id))

    def _require_entry(self, vault_id: str, memory_id: str, entry_id: str) -> Row:
        """The entry's row, after checking the three ids and the memory (errors name what is missing)."""
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        entry_id = check_uuid("entry_id", entry_id)
        self._memory_row(vault_id, memory_id)
        row = self._entry_row(memory_id, entry_id)
        if row is None:
            raise entry_not_found(entry_id, memory_id)
        return row

    def update_entry(
        self,
        vault_id: str,
        memory_id: str,
        entry_id: str,
        raw_entry: str,
        summary: str,
        tags: dict[str, str] | None = None,
        conversation_time: str | None = None,
    ) -> dict[str, Any]:
        """Replace an entry's text, summary and tags (and conversation time, when given) under the same id: the
        entry as now stored plus ``"version"`` (the first write is version 1), ``"status": "updated"`` and
        ``"contextItemsRemoved"``. The replaced version leaves search (index, statistics, vectors, caches) and the
        context snapshots (its items, unless the new text or another entry still says them: ``context_items.py``),
        and stays in :meth:`list_entry_versions`. ``add_entry``'s rules apply to the new fields."""
        entry = check_entry(raw_entry, summary, tags, conversation_time, None)
        old = self._require_entry(vault_id, memory_id, entry_id)
        vault_id, memory_id, entry_id, seq = old["vault_id"], old["memory_id"], old["entry_id"], int(old["seq"])
        rewrites = self._context_rewrites(
            memory_id, seq, [old["raw_entry"], old["summary"]], kept=[entry.raw_entry, entry.summary]
        )
        with self._transaction():
            row = self._update_entry(vault_id, memory_id, entry_id, entry)
            if row is None:
                raise entry_not_found(entry_id, memory_id)
            for context_seq, before, after, _ in rewrites:
                self._replace_context(memory_id, context_seq, before, after)
        if self._dense is not None:
            self._dense.entries_removed(memory_id, [seq], replaced=True)
            self._dense.entries_written(memory_id, [seq])
        return {**entry_json(row), "status": "updated", "contextItemsRemoved": sum(r[3] for r in rewrites)}

    def list_entry_versions(self, vault_id: str, memory_id: str, entry_id: str) -> dict[str, Any]:
        """Every version of an entry, oldest first and the current one last: ``{"entryId", "versions": [entry +
        "version" + "replacedAt" (None for the current one)], "count"}``."""
        current = self._require_entry(vault_id, memory_id, entry_id)
        versions = [
            {**entry_json(row), "replacedAt": row["replaced_at"]}
            for row in self._entry_versions(current["memory_id"], current["entry_id"])
        ]
        versions.append({**entry_json(current), "replacedAt": None})
        return {"entryId": current["entry_id"], "versions": versions, "count": len(versions)}

    def delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> dict[str, Any]:
        """Forget one entry: its row, versions, index rows, statistics, vector and cached terms, and the items of
        every context snapshot of the memory derived from it (``context_items.py``), in one transaction. Returns
        ``{"entryId", "status": "deleted", "contextItemsRemoved": n}``."""
        row = self._require_entry(vault_id, memory_id, entry_id)
        vault_id, memory_id, entry_id, seq = row["vault_id"], row["memory_id"], row["entry_id"], int(row["seq"])
        versions = [row, *self._entry_versions(memory_id, entry_id)]
        gone = [text for version in versions for text in (version["raw_entry"], version["summary"])]
        rewrites = self._context_rewrites(memory_id, seq, gone)
        with self._transaction():
            if not self._delete_entry(vault_id, memory_id, entry_id):
                raise entry_not_found(entry_id, memory_id)
            for context_seq, old, new, _ in rewrites:
                self._replace_context(memory_id, context_seq, old, new)
        self._entry_cache.discard([seq])
        if self._dense is not None:
            self._dense.entries_removed(memory_id, [seq])
        self._purge()
        return {"entryId": entry_id, "status": "deleted", "contextItemsRemoved": sum(r[3] for r in rewrites)}

    def _context_rewrites(self, memory_id: str, seq: int, gone: list[str], kept: Sequence[str] = ()) -> list[Any]:
        """``context_items.rewrites`` of the memory's snapshots for the texts ``gone`` that entry ``seq`` loses
        (``kept``: the texts it keeps, which, like another entry's, still support an item)."""
        return context_items.rewrites(
            [(int(c["seq"]), c["content"]) for c in self._context_rows(memory_id)],
            gone,
            lambda item: [*kept, *context_items.supporting_texts(self, memory_id, item, seq)],
        )

    # -- context -------------------------------------------------------------------------------------------

    def put_context(self, vault_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Store a new context snapshot (the whole document); older snapshots stay searchable."""
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        content = check_text("content", content, LIMITS["content"])
        now = self._append_context(vault_id, memory_id, content)
        return {"memoryId": memory_id, "timestamp": now, "status": "stored", "chars": len(content)}

    def get_context(self, vault_id: str, memory_id: str) -> str:
        """The newest context snapshot, or :data:`PLACEHOLDER_CONTEXT` if none was stored."""
        vault_id, memory_id = check_memory_ids(vault_id, memory_id)
        self._memory_row(vault_id, memory_id)
        row = self.latest_context(memory_id)
        return PLACEHOLDER_CONTEXT if row is None else row["content"]

    # -- search reads: what retrieval asks (SEARCH_READS; arguments already validated by the caller) -----------

    @abstractmethod
    def lexical_candidates(
        self,
        memory_id: str,
        terms: list[str],
        limit: int,
        after: str | None,
        before: str | None,
        *,
        statistics: Statistics | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best of the memory's entries for the query words ``terms`` by the index's own lexical
        ranking, within the exclusive time bounds: ``(seq, score > 0)``, the candidates that retrieval's BM25
        re-scores and re-orders (so in any order: SQLite returns a memory that has no more matches than ``limit``
        unranked). ``statistics(stems)``, when given, is BM25's ``(entries, {stem: entries containing it}, tokens)``
        of the memory, for a backend whose index does not keep them; it may read the database, so call it before
        taking a connection."""

    @abstractmethod
    def term_counts(self, memory_id: str, stems: Collection[str], words: Collection[str]) -> term_stats.TermCounts:
        """The memory's term statistics (``term_stats.py``, kept by every write): its entries, their BM25 tokens,
        and the entries containing each of ``stems`` (BM25 index stems) and ``words`` (feedback words; 0 for a term
        in none)."""

    @abstractmethod
    def entry_rows(self, memory_id: str, seqs: Sequence[int]) -> dict[int, Row]:
        """The rows of the memory's entries ``seqs``, by seq (seqs not in the memory left out)."""

    def entry_terms(
        self, memory_id: str, seqs: Sequence[int], *, weights: Sequence[float] | None = None
    ) -> dict[int, EntryTerms]:
        """How BM25 sees the memory's entries ``seqs`` (``text.analysis.entry_terms``), by seq: from the entry cache
        (which writes fill), else from their rows. ``weights`` (one per indexed field, as ``ENTRY_WEIGHTS``) analyses
        them afresh with other field weights, past the cache."""
        if weights is not None:
            return {seq: _entry_terms(row, weights) for seq, row in self.entry_rows(memory_id, seqs).items()}

        def load(missing: list[int]) -> dict[int, EntryTerms]:
            return {seq: _entry_terms(row) for seq, row in self.entry_rows(memory_id, missing).items()}

        return self._entry_cache.get(list(seqs), load)

    @abstractmethod
    def neighbour_links(self, memory_id: str, seqs: Sequence[int]) -> list[Link]:
        """Each of the memory's entries ``seqs`` as a :data:`~.rows.Link`: its previous and next entry in the memory
        within ``CONTEXT_GAP_DAYS`` (None where there is none) and whether it asks something (one of
        ``QUESTION_MARKS`` in its raw text)."""

    def neighbourhood(self, memory_id: str, seqs: Sequence[int]) -> tuple[list[Link], dict[int, Link]]:
        """``(links of seqs, {seq: link} of each of their neighbours that is not one of seqs)``, as
        :meth:`neighbour_links` gives them: what a ranking that shares scores two turns away reads (a backend may
        answer it in one read; this one makes two)."""
        links = self.neighbour_links(memory_id, seqs)
        given = {link[0] for link in links}
        around = sorted(
            {n for _, previous, following, _ in links for n in (previous, following) if n is not None} - given
        )
        return links, {link[0]: link for link in self.neighbour_links(memory_id, around)} if around else {}

    @abstractmethod
    def entries_within(self, memory_id: str, seqs: Collection[int], after: str | None, before: str | None) -> set[int]:
        """Those of the memory's entries ``seqs`` whose moment (conversation time, else creation time) lies inside
        the exclusive bounds (``storage.moments.time_bounds``)."""

    @abstractmethod
    def ranked_contexts(self, memory_id: str, terms: list[str], limit: int) -> list[tuple[Row, float]]:
        """The memory's context snapshots ranked against the query words ``terms``, best first: ``(row with
        content, creation_time; score > 0)``."""

    @abstractmethod
    def latest_context(self, memory_id: str) -> Row | None:
        """``content, creation_time`` of the memory's newest context snapshot, or None."""

    def search_contexts(
        self, memory_id: str, terms: list[str], limit: int
    ) -> tuple[list[tuple[Row, float]], Row | None]:
        """A search's context snapshots: ``(ranked_contexts(...) if terms else [], latest_context(...))`` (a backend
        may read both in fewer round trips)."""
        return self.ranked_contexts(memory_id, terms, limit) if terms else [], self.latest_context(memory_id)

    @property
    def has_dense(self) -> bool:
        """Whether the store has a dense index (its searches fuse :meth:`dense_hits`)."""
        return self._dense is not None

    def dense_hits(self, memory_id: str, query: str, k: int, after: str | None, before: str | None) -> DenseHits | None:
        """The dense side of a search (:class:`~.rows.DenseHits`: the ``k`` entries nearest to ``query`` within the
        bounds, the memory's typical cosine, the entries ranked without a vector as ``pending``) with the vectors
        present; None without a dense index. Call it before the lexical reads (its small catch-up may write)."""
        if self._dense is None:
            return None
        return self._dense_hits(memory_id, query, k, after, before)

    @property
    def _entry_cache(self) -> EntryCache:
        # Created on first use (no work at construction); the lock keeps two threads from making two caches.
        with _ENTRY_CACHE_LOCK:
            cache = self.__dict__.get("_bm25_entries")
            if cache is None:
                cache = self.__dict__["_bm25_entries"] = EntryCache()
            return cache


def _entry_terms(row: Row, weights: Sequence[float] | None = None) -> EntryTerms:
    moment = row["conversation_time"] or row["creation_time"]
    return analysis.entry_terms(row["raw_entry"], row["summary"], row["tags"], moment, weights=weights)
