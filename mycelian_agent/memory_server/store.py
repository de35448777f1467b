"""The SQLite store behind the memory server (synchronous; one connection, used from one thread).

Public methods validate their arguments, run in one transaction each, and return the JSON-ready objects of the
tool contract (docs/ARCHITECTURE.md, "Memory server contract"). Failures raise
:class:`~mycelian_agent.errors.InputError` (bad argument) or :class:`~mycelian_agent.errors.MemoryServerError`
(unknown id, conflict) and leave the database unchanged.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, InputError, MemoryServerError
from ..limits import SEARCH_DEPTH_MAX
from . import fusion
from . import search as lexical
from .migrations import migrate
from .placeholder import PLACEHOLDER_CONTEXT
from .validation import (
    LIMITS,
    check_idempotency_key,
    check_memory_type,
    check_optional_text,
    check_tags,
    check_text,
    check_title,
    check_uuid,
    format_timestamp,
    parse_rfc3339,
)

__all__ = ["SYNC_MODES", "DenseIndex", "Store"]

#: Accepted ``synchronous`` settings. NORMAL (WAL) survives a process kill; FULL also survives power loss.
SYNC_MODES = ("NORMAL", "FULL")


class DenseIndex(Protocol):
    """What the store needs from an optional dense (embedding) index; see ``embeddings.py``."""

    def index_entry(self, conn: sqlite3.Connection, seq: int, memory_id: str, text: str) -> None:
        """Store the vector of one new entry (inside the caller's transaction)."""

    def similarities(
        self,
        conn: sqlite3.Connection,
        memory_id: str,
        query: str,
        after: str | None = None,
        before: str | None = None,
    ) -> tuple[list[int], Any]:
        """``(seqs, cosines)`` of the memory's embedded entries (-inf outside the time bounds); see fusion.py."""


def _entry_json(row: sqlite3.Row) -> dict[str, Any]:
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


def _score(value: float) -> float:
    # Six significant digits: BM25 values on small memories are tiny, so fixed decimals would erase the order.
    return float(f"{value:.6g}")


def _memory_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "memoryId": row["memory_id"],
        "vaultId": row["vault_id"],
        "title": row["title"],
        "description": row["description"],
        "memoryType": row["memory_type"],
        "creationTime": row["creation_time"],
    }


class Store:
    """The memory database. Create with :meth:`open`; every method is one transaction."""

    def __init__(self, conn: sqlite3.Connection, *, dense: DenseIndex | None = None) -> None:
        self._conn = conn
        self._dense = dense

    @classmethod
    def open(cls, path: str | Path, *, synchronous: str = "NORMAL", dense: DenseIndex | None = None) -> Store:
        """Open (creating and migrating if needed) the database at ``path`` (``":memory:"`` allowed)."""
        mode = synchronous.upper()
        if mode not in SYNC_MODES:
            raise ConfigError(f"synchronous must be one of {', '.join(SYNC_MODES)} (got {synchronous!r})")
        target = str(path)
        try:
            if target != ":memory:" and not target.startswith("file:"):
                target = str(Path(target).expanduser())
                Path(target).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(target, isolation_level=None, uri=target.startswith("file:"))
        except (OSError, sqlite3.Error) as exc:
            raise MemoryServerError(f"cannot open the memory database {target}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA journal_mode = WAL")
            # Both values come from SYNC_MODES above, never from raw user text.
            conn.execute(f"PRAGMA synchronous = {mode}")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise MemoryServerError(f"cannot open the memory database {target}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return cls(conn, dense=dense)

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite on the last close)."""
        self._conn.close()

    # -- plumbing ------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT (disk full, I/O error): never leave the connection inside a transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _next_time(conn: sqlite3.Connection, table: str, memory_id: str) -> str:
        # Creation times are strictly increasing per memory, so they are exact list_entries cursors.
        now = datetime.now(UTC)
        last = conn.execute(f"SELECT max(creation_time) FROM {table} WHERE memory_id = ?", (memory_id,)).fetchone()[0]
        if last is not None:
            previous = datetime.strptime(last, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            if now <= previous:
                now = previous + timedelta(microseconds=1)
        return format_timestamp(now)

    def _require_vault(self, conn: sqlite3.Connection, vault_id: str) -> None:
        if conn.execute("SELECT 1 FROM vaults WHERE vault_id = ?", (vault_id,)).fetchone() is None:
            raise MemoryServerError(f"vault {vault_id} not found")

    def _require_memory(self, conn: sqlite3.Connection, vault_id: str | None, memory_id: str) -> sqlite3.Row:
        if vault_id is None:
            row = conn.execute("SELECT * FROM memories WHERE memory_id = ?", (memory_id,)).fetchone()
            if row is None:
                raise MemoryServerError(f"memory {memory_id} not found")
            return row
        row = conn.execute(
            "SELECT * FROM memories WHERE memory_id = ? AND vault_id = ?", (memory_id, vault_id)
        ).fetchone()
        if row is None:
            self._require_vault(conn, vault_id)
            raise MemoryServerError(f"memory {memory_id} not found in vault {vault_id}")
        return row

    # -- vaults and memories -------------------------------------------------------------------------------

    def create_vault(self, title: str, description: str | None = "") -> dict[str, Any]:
        """Create a vault; its title is unique."""
        title = check_title("title", title)
        description = check_optional_text("description", description, LIMITS["description"])
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM vaults WHERE title = ?", (title,)).fetchone():
                raise MemoryServerError(f"a vault titled {title!r} already exists")
            vault_id = str(uuid.uuid4())
            now = format_timestamp(datetime.now(UTC))
            conn.execute(
                "INSERT INTO vaults (vault_id, title, description, creation_time) VALUES (?, ?, ?, ?)",
                (vault_id, title, description, now),
            )
        return {"vaultId": vault_id, "title": title}

    def list_vaults(self) -> list[dict[str, Any]]:
        """All vaults, oldest first."""
        rows = self._conn.execute("SELECT vault_id, title FROM vaults ORDER BY creation_time, rowid").fetchall()
        return [{"vaultId": r["vault_id"], "title": r["title"]} for r in rows]

    def create_memory(
        self, vault_id: str, title: str, memory_type: str, description: str | None = ""
    ) -> dict[str, Any]:
        """Create a memory in a vault; its title is unique within the vault."""
        vault_id = check_uuid("vault_id", vault_id)
        title = check_title("title", title)
        memory_type = check_memory_type(memory_type)
        description = check_optional_text("description", description, LIMITS["description"])
        with self._write() as conn:
            self._require_vault(conn, vault_id)
            if conn.execute("SELECT 1 FROM memories WHERE vault_id = ? AND title = ?", (vault_id, title)).fetchone():
                raise MemoryServerError(f"a memory titled {title!r} already exists in vault {vault_id}")
            memory_id = str(uuid.uuid4())
            now = format_timestamp(datetime.now(UTC))
            conn.execute(
                "INSERT INTO memories (memory_id, vault_id, title, memory_type, description, creation_time) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (memory_id, vault_id, title, memory_type, description, now),
            )
            row = self._require_memory(conn, vault_id, memory_id)
        return _memory_json(row)

    def list_memories(self, vault_id: str) -> list[dict[str, Any]]:
        """The memories of a vault, oldest first."""
        vault_id = check_uuid("vault_id", vault_id)
        self._require_vault(self._conn, vault_id)
        rows = self._conn.execute(
            "SELECT memory_id, title FROM memories WHERE vault_id = ? ORDER BY creation_time, rowid", (vault_id,)
        ).fetchall()
        return [{"memoryId": r["memory_id"], "title": r["title"]} for r in rows]

    def get_memory(self, vault_id: str, memory_id: str) -> dict[str, Any]:
        """One memory of a vault."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        return _memory_json(self._require_memory(self._conn, vault_id, memory_id))

    def check_memory(self, memory_id: str, vault_id: str | None = None) -> None:
        """Raise unless the memory exists (in ``vault_id`` when given)."""
        memory_id = check_uuid("memory_id", memory_id)
        if vault_id is not None:
            vault_id = check_uuid("vault_id", vault_id)
        self._require_memory(self._conn, vault_id, memory_id)

    def delete_memory(self, vault_id: str, memory_id: str) -> dict[str, Any]:
        """Delete a memory with its entries, contexts and index rows."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            count = conn.execute("SELECT count(*) FROM entries WHERE memory_id = ?", (memory_id,)).fetchone()[0]
            conn.execute("DELETE FROM memories WHERE memory_id = ?", (memory_id,))
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
        raw_entry = check_text("raw_entry", raw_entry, LIMITS["raw_entry"])
        summary = check_text("summary", summary, LIMITS["summary"])
        tags = check_tags(tags)
        conversation_time = parse_rfc3339("conversation_time", conversation_time)
        idempotency_key = check_idempotency_key(idempotency_key)
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            if idempotency_key is not None:
                existing = conn.execute(
                    "SELECT * FROM entries WHERE memory_id = ? AND idempotency_key = ?", (memory_id, idempotency_key)
                ).fetchone()
                if existing is not None:
                    if existing["raw_entry"] != raw_entry:
                        raise MemoryServerError(
                            f"idempotency_key {idempotency_key!r} conflicts: memory {memory_id} already holds entry "
                            f"{existing['entry_id']} under that key with a different raw_entry"
                        )
                    return {**_entry_json(existing), "status": "stored", "deduplicated": True}
            entry_id = str(uuid.uuid4())
            cursor = conn.execute(
                "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
                "summary, tags, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry_id,
                    memory_id,
                    vault_id,
                    self._next_time(conn, "entries", memory_id),
                    conversation_time,
                    raw_entry,
                    summary,
                    json.dumps(tags, ensure_ascii=False, sort_keys=True),
                    idempotency_key,
                ),
            )
            seq = cursor.lastrowid
            if self._dense is not None:
                self._dense.index_entry(conn, seq, memory_id, f"{summary}\n{raw_entry}")
            row = conn.execute("SELECT * FROM entries WHERE seq = ?", (seq,)).fetchone()
        return {**_entry_json(row), "status": "stored", "deduplicated": False}

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
        self._require_memory(self._conn, vault_id, memory_id)
        if after is not None:
            sql = "WHERE memory_id = ? AND creation_time > ? ORDER BY creation_time, seq LIMIT ?"
            params: list[Any] = [memory_id, after, limit + 1]
        elif before is not None:
            sql = "WHERE memory_id = ? AND creation_time < ? ORDER BY creation_time DESC, seq DESC LIMIT ?"
            params = [memory_id, before, limit + 1]
        else:
            sql = "WHERE memory_id = ? ORDER BY creation_time DESC, seq DESC LIMIT ?"
            params = [memory_id, limit + 1]
        rows = self._conn.execute(f"SELECT * FROM entries {sql}", params).fetchall()
        more = len(rows) > limit
        entries = [_entry_json(r) for r in rows[:limit]]
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
        self._require_memory(self._conn, vault_id, memory_id)
        row = self._conn.execute(
            "SELECT * FROM entries WHERE entry_id = ? AND memory_id = ?", (entry_id, memory_id)
        ).fetchone()
        if row is None:
            raise MemoryServerError(f"entry {entry_id} not found in memory {memory_id}")
        return _entry_json(row)

    def delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> dict[str, Any]:
        """Delete one entry (and its index rows)."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        entry_id = check_uuid("entry_id", entry_id)
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            deleted = conn.execute("DELETE FROM entries WHERE entry_id = ? AND memory_id = ?", (entry_id, memory_id))
            if deleted.rowcount != 1:
                raise MemoryServerError(f"entry {entry_id} not found in memory {memory_id}")
        return {"entryId": entry_id, "status": "deleted"}

    # -- context -------------------------------------------------------------------------------------------

    def put_context(self, vault_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Store a new context snapshot (the whole document); older snapshots stay searchable."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        content = check_text("content", content, LIMITS["content"])
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            now = self._next_time(conn, "contexts", memory_id)
            conn.execute(
                "INSERT INTO contexts (memory_id, content, creation_time) VALUES (?, ?, ?)", (memory_id, content, now)
            )
        return {"memoryId": memory_id, "timestamp": now, "status": "stored", "chars": len(content)}

    def _latest_context(self, memory_id: str) -> sqlite3.Row | None:
        return self._conn.execute(
            "SELECT content, creation_time FROM contexts WHERE memory_id = ? ORDER BY seq DESC LIMIT 1", (memory_id,)
        ).fetchone()

    def get_context(self, vault_id: str, memory_id: str) -> str:
        """The newest context snapshot, or :data:`PLACEHOLDER_CONTEXT` if none was stored."""
        vault_id = check_uuid("vault_id", vault_id)
        memory_id = check_uuid("memory_id", memory_id)
        self._require_memory(self._conn, vault_id, memory_id)
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
        """Entries and context snapshots of one memory ranked against ``query`` (see ``search.py``).

        ``offset`` skips the first entries of the ranking (paging: ``offset + top_ke`` at most
        :data:`~mycelian_agent.limits.SEARCH_DEPTH_MAX`); the context snapshots are the same on every page.
        Pages within the first ``search.CONTEXT_DEPTH`` (50) entries join into exactly one ranking; deeper ones
        are cut from a deeper re-ranked pool, where neighbour scores can move an entry by a few places.
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
        self._require_memory(self._conn, vault_id, memory_id)
        terms = lexical.query_terms(query)
        hits = self._rank_entries(memory_id, query, terms, offset + top_ke if top_ke else 0, after, before)[offset:]
        entries = []
        for row, score in hits:
            item: dict[str, Any] = {"entryId": row["entry_id"], "summary": row["summary"]}
            if include_raw_entries:
                item["rawEntry"] = row["raw_entry"]
            item["score"] = _score(score)
            item["creationTime"] = row["creation_time"]
            if row["conversation_time"] is not None:
                item["conversationTime"] = row["conversation_time"]
            item["tags"] = json.loads(row["tags"])
            entries.append(item)
        contexts = [
            {"context": row["content"], "timestamp": row["creation_time"], "score": _score(score)}
            for row, score in lexical.search_contexts(self._conn, memory_id, terms, top_kc)
        ]
        latest = self._latest_context(memory_id)
        return {
            "entries": entries,
            "count": len(entries),
            "latestContext": PLACEHOLDER_CONTEXT if latest is None else latest["content"],
            "latestContextTimestamp": None if latest is None else latest["creation_time"],
            "contexts": contexts,
        }

    def _rank_entries(
        self, memory_id: str, query: str, terms: list[str], limit: int, after: str | None, before: str | None
    ) -> list[tuple[sqlite3.Row, float]]:
        if limit == 0 or not terms:
            return []
        if self._dense is None:
            return lexical.search_entries(self._conn, memory_id, terms, limit, after=after, before=before)
        # Fusion needs deeper lists than the final cut so that an item ranked well by one side can surface.
        depth = max(50, limit * 4)
        bm25 = lexical.search_entries(self._conn, memory_id, terms, depth, after=after, before=before)
        seqs, cosines = self._dense.similarities(self._conn, memory_id, query, after, before)
        fused = fusion.fuse([(row["seq"], score) for row, score in bm25], seqs, cosines, limit)
        rows = {row["seq"]: row for row, _ in bm25}
        missing = [seq for seq, _ in fused if seq not in rows]
        if missing:
            marks = ",".join("?" * len(missing))
            sql = f"SELECT * FROM entries WHERE memory_id = ? AND seq IN ({marks})"
            for row in self._conn.execute(sql, [memory_id, *missing]):
                rows[row["seq"]] = row
        return [(rows[seq], score) for seq, score in fused if seq in rows]

    # -- introspection (tests, benchmarks) -----------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Row counts of every table, FTS indexes included (for tests and diagnostics)."""
        tables = ("vaults", "memories", "entries", "contexts", "entry_vectors")
        counts = {t: self._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        # Contentless FTS tables cannot be counted directly; their doc-size table has one row per document.
        for fts in ("entries_fts", "contexts_fts"):
            counts[fts] = self._conn.execute(f"SELECT count(*) FROM {fts}_docsize").fetchone()[0]
        return counts

    @property
    def connection(self) -> sqlite3.Connection:
        """The underlying connection (bulk loading in benchmarks; use from the store's thread only)."""
        return self._conn
