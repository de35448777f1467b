"""The SQLite store behind the memory server (synchronous; one connection, used from one thread).

It implements the primitives of :class:`~mycelian_agent.memory_server.storage.base.MemoryStore`, which validates the
arguments and shapes the results of the tool contract (docs/ARCHITECTURE.md, "Memory server contract"). Each
primitive is one transaction; failures leave the database unchanged.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError, MemoryServerError
from mycelian_agent.memory_server.storage import moments, term_stats
from mycelian_agent.memory_server.storage.base import DenseIndex, Link, MemoryStore, NewEntry, Row, Statistics
from mycelian_agent.memory_server.storage.context_items import content_changed
from mycelian_agent.memory_server.storage.sqlite import lexical, postings
from mycelian_agent.memory_server.storage.sqlite.migrations import migrate
from mycelian_agent.memory_server.storage.sqlite.problems import file_problem
from mycelian_agent.memory_server.storage.sqlite.vectors import SqliteVectors
from mycelian_agent.memory_server.storage.validation import format_timestamp
from mycelian_agent.memory_server.storage.versions import keep_version

__all__ = ["SYNC_MODES", "Store"]

#: Accepted ``synchronous`` settings. NORMAL (WAL) survives a process kill; FULL also survives power loss.
SYNC_MODES = ("NORMAL", "FULL")


#: How long a statement waits for another connection's lock before failing with "database is locked".
_BUSY_TIMEOUT_MS = 10_000


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode. Switching the mode of a new file needs it alone, and SQLite answers "database
    is locked" at once, without the busy timeout, while another process opens it too (servers started together on
    a new file): so retry within the same timeout."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class Store(MemoryStore):
    """The SQLite memory database. Create with :meth:`open`; every primitive is one transaction."""

    def __init__(self, conn: sqlite3.Connection, *, dense: DenseIndex | None = None) -> None:
        self._conn = conn
        self._dense = dense
        self._keys: dict[str, int] = {}  # memories' index keys (postings.py), read once
        self._target: str | None = None  # the database's path, for connections of its own (None: in memory)
        self._mode = "NORMAL"
        self._delta = term_stats.Delta()  # the open write transaction's statistics changes (written at its end)

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
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            _enable_wal(conn)
            # Both values come from SYNC_MODES above, never from raw user text.
            conn.execute(f"PRAGMA synchronous = {mode}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")  # deleted rows' bytes are overwritten (issue 39: forgetting)
            migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise file_problem(exc, target) or MemoryServerError(
                f"cannot open the memory database {target}: {exc}"
            ) from exc
        except BaseException:
            conn.close()
            raise
        store = cls(conn, dense=dense)
        # The file SQLite opened, as an absolute path; "" for an in-memory or temporary database (":memory:",
        # "file::memory:", a memory URI), which a second connection could not see: vectors are written inline there.
        main_file = next((row["file"] for row in conn.execute("PRAGMA database_list") if row["name"] == "main"), "")
        store._target, store._mode = (main_file or None), mode
        store._attach_dense(SqliteVectors(), store._side_connection if store._target is not None else None)
        return store

    def _close(self) -> None:
        # The WAL is checkpointed by SQLite on the last close.
        self._conn.close()

    def problem(self, exc: BaseException) -> MemoryServerError | None:
        return file_problem(exc, self._target)

    # -- plumbing ------------------------------------------------------------------------------------------

    @contextmanager
    def _side_connection(self) -> Iterator[sqlite3.Connection]:
        """A new connection to the same file (the dense index's writer thread), closed after the block."""
        assert self._target is not None
        conn = sqlite3.connect(self._target, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA synchronous = {self._mode}")  # from SYNC_MODES, never raw user text
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn.in_transaction:  # inside _transaction (add_entries): join it; it commits or rolls back
            yield conn
            return
        conn.execute("BEGIN IMMEDIATE")
        self._delta = delta = term_stats.Delta()
        try:
            yield conn
            self._write_statistics(conn)
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT (disk full, I/O error): never leave the connection inside a transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            self._delta = term_stats.Delta()
        # Only once committed: a rolled-back insert's seq may be given to another entry.
        if delta.written:
            self._entry_cache.put(delta.written)

    def _write_statistics(self, conn: sqlite3.Connection) -> None:
        """Write the transaction's term statistics changes (term_stats.py): one upsert per changed row, rows
        that reach zero deleted."""
        for memory_id, delta in self._delta.take():
            conn.execute(
                "INSERT INTO memory_stats (memory_id, entries, tokens) VALUES (?, ?, ?) ON CONFLICT (memory_id) "
                "DO UPDATE SET entries = entries + excluded.entries, tokens = tokens + excluded.tokens",
                (memory_id, delta.entries, delta.tokens),
            )
            rows = delta.rows()
            conn.executemany(
                "INSERT INTO term_stats (memory_id, kind, term, entries) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (memory_id, kind, term) DO UPDATE SET entries = entries + excluded.entries",
                [(memory_id, kind, term, n) for kind, term, n in rows],
            )
            if delta.entries < 0:
                conn.execute("DELETE FROM memory_stats WHERE memory_id = ? AND entries <= 0", (memory_id,))
            gone = [(memory_id, kind, term) for kind, term, n in rows if n < 0]
            if gone:
                conn.executemany(
                    "DELETE FROM term_stats WHERE memory_id = ? AND kind = ? AND term = ? AND entries <= 0", gone
                )

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction joined by the primitives called inside it (``_write`` nests)."""
        return self._write()

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

    def _insert_vault(self, title: str, description: str) -> str:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM vaults WHERE title = ?", (title,)).fetchone():
                raise MemoryServerError(f"a vault titled {title!r} already exists")
            vault_id = str(uuid.uuid4())
            now = format_timestamp(datetime.now(UTC))
            conn.execute(
                "INSERT INTO vaults (vault_id, title, description, creation_time) VALUES (?, ?, ?, ?)",
                (vault_id, title, description, now),
            )
        return vault_id

    def _vault_rows(self) -> list[Row]:
        return self._conn.execute("SELECT vault_id, title FROM vaults ORDER BY creation_time, rowid").fetchall()

    def _insert_memory(self, vault_id: str, title: str, memory_type: str, description: str) -> Row:
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
            postings.create_key(conn, memory_id)
            return self._require_memory(conn, vault_id, memory_id)

    def _memory_rows(self, vault_id: str) -> list[Row]:
        self._require_vault(self._conn, vault_id)
        return self._conn.execute(
            "SELECT memory_id, title FROM memories WHERE vault_id = ? ORDER BY creation_time, rowid", (vault_id,)
        ).fetchall()

    def _memory_row(self, vault_id: str | None, memory_id: str) -> Row:
        return self._require_memory(self._conn, vault_id, memory_id)

    def _delete_memory(self, vault_id: str, memory_id: str) -> int:
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            count = conn.execute("SELECT count(*) FROM entries WHERE memory_id = ?", (memory_id,)).fetchone()[0]
            postings.unindex_memory(conn, memory_id)
            conn.execute("DELETE FROM memories WHERE memory_id = ?", (memory_id,))  # its statistics and key cascade
            self._delta.drop(memory_id)
            self._keys.pop(memory_id, None)
        return int(count)

    # -- entries -------------------------------------------------------------------------------------------

    def _append_entry(self, vault_id: str, memory_id: str, entry: NewEntry) -> tuple[Row, bool]:
        raw_entry, summary, tags, conversation_time, idempotency_key = entry
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            if idempotency_key is not None:
                existing = conn.execute(
                    "SELECT * FROM entries WHERE memory_id = ? AND idempotency_key = ?", (memory_id, idempotency_key)
                ).fetchone()
                if existing is not None:
                    return existing, False
            now = self._next_time(conn, "entries", memory_id)
            cursor = conn.execute(
                "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
                "summary, tags, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    str(uuid.uuid4()),
                    memory_id,
                    vault_id,
                    now,
                    conversation_time,
                    raw_entry,
                    summary,
                    json.dumps(tags, ensure_ascii=False, sort_keys=True),
                    idempotency_key,
                ),
            )
            seq = cursor.lastrowid
            if seq is None:  # (never after an INSERT into a rowid table)
                raise MemoryServerError(f"the new entry of memory {memory_id} got no row id")
            counts = term_stats.entry_counts(raw_entry, summary, tags, conversation_time or now)
            postings.index_entry(conn, self._key(conn, memory_id), seq, counts.fields)
            self._delta.add(memory_id, counts, seq=seq)
            if self._dense is not None:
                assert seq is not None  # an INSERT into a rowid table sets lastrowid
                self._dense.index_entry(conn, seq, memory_id, summary, raw_entry)
            return conn.execute("SELECT * FROM entries WHERE seq = ?", (seq,)).fetchone(), True

    def _entry_page(self, memory_id: str, limit: int, before: str | None, after: str | None) -> list[Row]:
        sql, params = moments.entry_page(memory_id, limit, before, after, mark="?")
        return self._conn.execute(f"SELECT * FROM entries {sql}", params).fetchall()

    def _entry_row(self, memory_id: str, entry_id: str) -> Row | None:
        return self._conn.execute(
            "SELECT * FROM entries WHERE entry_id = ? AND memory_id = ?", (entry_id, memory_id)
        ).fetchone()

    def _delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> bool:
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            row = conn.execute(
                "DELETE FROM entries WHERE entry_id = ? AND memory_id = ? "
                "RETURNING raw_entry, summary, tags, coalesce(conversation_time, creation_time), seq",
                (entry_id, memory_id),
            ).fetchone()
            if row is None:
                return False
            counts = term_stats.entry_counts(row[0], row[1], row[2], row[3])
            postings.unindex_entry(conn, self._key(conn, memory_id), row[4], counts.fields)
            self._delta.add(memory_id, counts, -1)
            return True

    def _update_entry(self, vault_id: str, memory_id: str, entry_id: str, entry: NewEntry) -> Row | None:
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            old = conn.execute(
                "SELECT * FROM entries WHERE entry_id = ? AND memory_id = ?", (entry_id, memory_id)
            ).fetchone()
            if old is None:
                return None
            seq = int(old["seq"])
            conn.execute(keep_version("?"), (format_timestamp(datetime.now(UTC)), seq))
            key = self._key(conn, memory_id)
            before = term_stats.entry_counts(
                old["raw_entry"], old["summary"], old["tags"], old["conversation_time"] or old["creation_time"]
            )
            postings.unindex_entry(conn, key, seq, before.fields)
            self._delta.add(memory_id, before, -1)
            conversation_time = entry.conversation_time or old["conversation_time"]
            conn.execute(
                "UPDATE entries SET raw_entry = ?, summary = ?, tags = ?, conversation_time = ?, "
                "version = version + 1 WHERE seq = ?",
                (
                    entry.raw_entry,
                    entry.summary,
                    json.dumps(entry.tags, ensure_ascii=False, sort_keys=True),
                    conversation_time,
                    seq,
                ),
            )
            after = term_stats.entry_counts(
                entry.raw_entry, entry.summary, entry.tags, conversation_time or old["creation_time"]
            )
            postings.index_entry(conn, key, seq, after.fields)
            self._delta.add(memory_id, after, seq=seq)
            # The replaced text's vector goes now; the new one is written inline here or behind (entries_written).
            conn.execute("DELETE FROM entry_vectors WHERE seq = ?", (seq,))
            if self._dense is not None:
                self._dense.index_entry(conn, seq, memory_id, entry.summary, entry.raw_entry)
            return conn.execute("SELECT * FROM entries WHERE seq = ?", (seq,)).fetchone()

    def _entry_versions(self, memory_id: str, entry_id: str) -> list[Row]:
        return self._conn.execute(
            "SELECT * FROM entry_versions WHERE entry_id = ? AND memory_id = ? ORDER BY version", (entry_id, memory_id)
        ).fetchall()

    # -- context -------------------------------------------------------------------------------------------

    def _append_context(self, vault_id: str, memory_id: str, content: str) -> str:
        with self._write() as conn:
            self._require_memory(conn, vault_id, memory_id)
            now = self._next_time(conn, "contexts", memory_id)
            cursor = conn.execute(
                "INSERT INTO contexts (memory_id, content, creation_time) VALUES (?, ?, ?)", (memory_id, content, now)
            )
            if cursor.lastrowid is None:  # (never after an INSERT into a rowid table)
                raise MemoryServerError(f"the new context of memory {memory_id} got no row id")
            postings.index_context(conn, self._key(conn, memory_id), cursor.lastrowid, content)
        return now

    def _context_rows(self, memory_id: str) -> list[Row]:
        return self._conn.execute(
            "SELECT seq, content FROM contexts WHERE memory_id = ? ORDER BY seq", (memory_id,)
        ).fetchall()

    def _replace_context(self, memory_id: str, seq: int, old: str, new: str) -> None:
        with self._write() as conn:
            changed = conn.execute(
                "UPDATE contexts SET content = ? WHERE seq = ? AND memory_id = ? AND content = ?",
                (new, seq, memory_id, old),
            ).rowcount
            if not changed:
                raise content_changed(memory_id)
            key = self._key(conn, memory_id)
            postings.unindex_context(conn, key, seq, old)
            postings.index_context(conn, key, seq, new)

    def _purge(self) -> None:
        # secure_delete (set on every connection) zeroes the freed cells and pages; the full-text index keeps a
        # deleted document's terms in its old segments until they are merged, and the WAL keeps old page images
        # until a checkpoint: so merge both indexes, then checkpoint and truncate the WAL. A reader holding an old
        # snapshot (another process) can keep the checkpoint from finishing; the next delete's checkpoint retries.
        with self._write() as conn:
            for table in ("entries_fts", "contexts_fts"):
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    def _key(self, conn: sqlite3.Connection, memory_id: str) -> int:
        """The memory's index key (postings.py), inside a write that has checked the memory exists."""
        key = self._keys.get(memory_id)
        if key is None:
            key = postings.memory_key(conn, memory_id)
            if key is None:
                raise MemoryServerError(
                    f"memory {memory_id} has no index key: the database is damaged (its memory_keys row is missing)"
                )
            self._keys[memory_id] = key  # (a committed memory's key never changes; see _delete_memory)
        return key

    def latest_context(self, memory_id: str) -> Row | None:
        return self._conn.execute(
            "SELECT content, creation_time FROM contexts WHERE memory_id = ? ORDER BY seq DESC LIMIT 1", (memory_id,)
        ).fetchone()

    # -- search reads (FTS5 candidates and contexts: lexical.py) ------------------------------------------

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
        where, params = lexical.time_bounds(after, before)
        counts = None if statistics is None else (lambda stems: statistics(stems)[:2])
        return lexical.rank_entries(self._conn, self._search_key(memory_id), terms, limit, where, params, counts)

    def neighbour_links(self, memory_id: str, seqs: Sequence[int]) -> list[Link]:
        return lexical.neighbour_links(self._conn, memory_id, seqs)

    def entries_within(self, memory_id: str, seqs: Collection[int], after: str | None, before: str | None) -> set[int]:
        return lexical.entries_within(self._conn, memory_id, list(seqs), after, before)

    def entry_rows(self, memory_id: str, seqs: Sequence[int]) -> dict[int, Row]:
        if not seqs:
            return {}
        marks = ",".join("?" * len(seqs))
        sql = f"SELECT * FROM entries WHERE memory_id = ? AND seq IN ({marks})"
        return {row["seq"]: row for row in self._conn.execute(sql, [memory_id, *seqs])}

    def term_counts(self, memory_id: str, stems: Collection[str], words: Collection[str]) -> term_stats.TermCounts:
        conn = self._conn
        row = conn.execute("SELECT entries, tokens FROM memory_stats WHERE memory_id = ?", (memory_id,)).fetchone()
        found: list[dict[str, int]] = []
        for kind, terms in ((term_stats.STEM, stems), (term_stats.WORD, words)):
            counts = dict.fromkeys(terms, 0)
            if row is not None and counts:
                marks = ",".join("?" * len(counts))
                sql = f"SELECT term, entries FROM term_stats WHERE memory_id = ? AND kind = ? AND term IN ({marks})"
                counts.update(conn.execute(sql, [memory_id, kind, *counts]).fetchall())
            found.append(counts)
        entries, tokens = (0, 0) if row is None else (int(row[0]), int(row[1]))
        return term_stats.TermCounts(entries, tokens, found[0], found[1])

    def ranked_contexts(self, memory_id: str, terms: list[str], limit: int) -> list[tuple[Row, float]]:
        return list(lexical.search_contexts(self._conn, self._search_key(memory_id), memory_id, terms, limit))

    def _search_key(self, memory_id: str) -> int | None:
        """The memory's index key for a search (None: no such memory, so nothing matches)."""
        key = self._keys.get(memory_id)
        if key is None:
            key = postings.memory_key(self._conn, memory_id)
            if key is not None:
                self._keys[memory_id] = key
        return key

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return nullcontext(self._conn)

    # -- introspection (tests, benchmarks) -----------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        tables = ("vaults", "memories", "entries", "contexts", "entry_vectors", "memory_stats", "term_stats")
        counts = {t: self._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        # Contentless FTS tables cannot be counted directly; their doc-size table has one row per document.
        for fts in ("entries_fts", "contexts_fts"):
            counts[fts] = self._conn.execute(f"SELECT count(*) FROM {fts}_docsize").fetchone()[0]
        return counts

    def _snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        return {
            t: [tuple(r) for r in self._conn.execute(f"SELECT * FROM {t} ORDER BY rowid")]
            for t in ("vaults", "memories", "entries", "contexts", "entry_versions")
        }

    @contextmanager
    def maintenance_connection(self) -> Iterator[sqlite3.Connection]:
        """The store's connection (use from the store's thread only)."""
        yield self._conn

    @property
    def connection(self) -> sqlite3.Connection:
        """The underlying connection (bulk loading in benchmarks; use from the store's thread only)."""
        return self._conn
