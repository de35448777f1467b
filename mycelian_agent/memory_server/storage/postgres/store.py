"""The PostgreSQL store behind the memory server: a psycopg 3 connection pool, one transaction per primitive.

It implements the primitives of :class:`~mycelian_agent.memory_server.storage.base.MemoryStore` (which validates and
shapes results exactly as for SQLite). Several servers and workers may share one database:

- every write to a memory first locks that memory's row (``FOR UPDATE``), so its entries' creation times stay
  strictly increasing (exact ``list_entries`` cursors) and its sequence numbers follow commit order; writes to
  different memories run in parallel, and with one lock per transaction there is no lock cycle (no deadlock);
- idempotency keys are a unique constraint (``INSERT ... ON CONFLICT DO NOTHING``), titles too: two processes
  creating the same vault or memory get one row and a clear "already exists" for the loser (``ensure_vault`` /
  ``ensure_memory`` then use the winner's);
- each write is one transaction: stored whole or not at all.

The ``tsvector`` search (candidates, contexts, neighbours) is ``lexical.py``, the schema ``migrations.py``, pgvector
``vectors.py``. What is left is one module because it is one set of rules: every primitive below takes its
connection from the same pool, joins the same per-thread transaction and holds the same memory row lock, and the
term statistics its writes change are written by the transaction that holds them.

Dense vectors (``--embeddings``): float32 bytes in ``entry_vectors`` (bytea), scored by an exact scan in the server
process as on SQLite (``retrieval/dense``'s ``DenseVectors`` serves both); when the database has pgvector (or this
role can
create it), also a ``vector`` column with an HNSW index, which answers the dense side of a search in a large memory
(``vectors.py``). Which path serves is said once per database when the store opens.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from mycelian_agent.errors import ConfigError, MemoryServerError, one_line
from mycelian_agent.memory_server.storage import moments, term_stats
from mycelian_agent.memory_server.storage.base import (
    DenseIndex,
    Link,
    MemoryStore,
    NewEntry,
    Row,
    Statistics,
    memory_not_found,
)
from mycelian_agent.memory_server.storage.context_items import content_changed
from mycelian_agent.memory_server.storage.moments import time_bounds
from mycelian_agent.memory_server.storage.postgres import lexical
from mycelian_agent.memory_server.storage.postgres import terms as pg_terms
from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors

# (INSTALL_HINT, announce_dense_path, require_psycopg: re-exported, callers import them here)
from mycelian_agent.memory_server.storage.postgres.connecting import (
    INSTALL_HINT,
    _configure,
    _say_dense_path,
    _say_no_memory_index,
    announce_dense_path,
    require_psycopg,
)
from mycelian_agent.memory_server.storage.postgres.migrations import (
    ENTRY_TSV,
    TERMS_VERSION,
    VERSIONS_VERSION,
    has_memory_index,
    migrate,
    schema_version,
)
from mycelian_agent.memory_server.storage.postgres.problems import RECONNECT_WAIT, server_problem
from mycelian_agent.memory_server.storage.validation import format_timestamp
from mycelian_agent.memory_server.storage.versions import keep_version
from mycelian_agent.memory_server.text.analysis import EntryTerms, entry_dated, entry_labels, index_words
from mycelian_agent.paths import redact_url

__all__ = ["INSTALL_HINT", "PostgresStore", "announce_dense_path", "require_psycopg"]

_ENTRY_COLUMNS = (
    "seq, entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, summary, tags, idempotency_key, "
    "version"
)
# The term_stats rows of one memory and kind for a list of terms, from parameters (memory_id, kind, terms). As a
# join on the whole key, each term is one primary-key probe whatever the table's statistics say (`term = ANY(...)`
# was planned as a filter over every row of the memory and kind until the table was analysed).
_TERM_KEYS = "(memory_id, kind, term) IN (SELECT %s, %s::smallint, unnest(%s::text[]))"


class PostgresStore(MemoryStore):
    """The PostgreSQL memory database. Create with :meth:`open`; every primitive is one transaction."""

    reconnect_wait = RECONNECT_WAIT

    def __init__(self, pool: Any, *, url: str, pool_size: int, dense: DenseIndex | None = None) -> None:
        self._pool = pool
        self.url = url
        self.concurrency = pool_size
        self._dense = dense
        self._joined = threading.local()  # the connection of this thread's open _transaction, if any
        self._lexicon = lexical.Lexicon()  # the lexemes of the query terms seen
        self._keeps_terms = True  # whether entries have the terms column (False only at an older schema: tests)
        self._columns = _ENTRY_COLUMNS  # (an older schema, in tests, has no version column: 1 AS version)

    @classmethod
    def open(
        cls, url: str, *, pool_size: int = 4, timeout: float = 30.0, dense: DenseIndex | None = None
    ) -> PostgresStore:
        """Connect a pool of up to ``pool_size`` connections to ``url`` and migrate the schema. With ``dense``,
        every new entry gets a vector (written behind, on connections borrowed from the pool, or inline) and
        searches fuse them (see ``retrieval/dense``)."""
        require_psycopg()
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        if pool_size < 1:
            raise ConfigError(f"pool_size must be at least 1 (got {pool_size})")
        shown = redact_url(url)
        vectors = None
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=int(timeout)) as conn:
                migrate(conn)
                keeps_terms = schema_version(conn) >= TERMS_VERSION
                versions = schema_version(conn) >= VERSIONS_VERSION
                if not has_memory_index(conn):
                    _say_no_memory_index()
                if dense is not None:
                    vectors = pg_vectors.prepare(conn)
        except psycopg.OperationalError as exc:
            raise MemoryServerError(
                f"cannot connect to the memory database {shown}: {one_line(exc)} "
                "(check that PostgreSQL is running and the URL's host, port, user and database)"
            ) from exc
        except psycopg.Error as exc:
            raise MemoryServerError(f"cannot prepare the memory database {shown}: {one_line(exc)}") from exc
        pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            check=ConnectionPool.check_connection,  # a restart cut them all
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=_configure,
            open=False,
            timeout=timeout,
            name="mycelian-memory",
        )
        pool.open(wait=True, timeout=timeout)
        store = cls(pool, url=url, pool_size=pool_size, dense=dense)
        store._keeps_terms = keeps_terms
        if not versions:
            store._columns = _ENTRY_COLUMNS.replace("version", "1 AS version")
        if dense is not None and vectors is not None:
            _say_dense_path(shown, vectors, getattr(dense, "hnsw_min", None))
        store._attach_dense(
            pg_vectors.PostgresVectors(pgvector=vectors is not None and vectors.available), store.maintenance_connection
        )
        return store

    def _close(self) -> None:
        self._pool.close()

    def problem(self, exc: BaseException) -> MemoryServerError | None:
        return server_problem(exc, redact_url(self.url))

    # -- plumbing ------------------------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        joined = getattr(self._joined, "conn", None)
        if joined is not None:  # inside _transaction on this thread (add_entries): join that transaction
            yield joined
            return
        with self._transaction() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One transaction joined by the ``_tx`` primitives this thread calls inside it; the term statistics its
        writes change are written at its end (term_stats.py)."""
        delta = term_stats.Delta()
        with self._pool.connection() as conn, conn.transaction():
            # (vault_id, memory_id) -> the creation time of the entry this transaction last wrote there: the memory's
            # row lock is held from its first write to the commit, so a bulk write locks and reads it once.
            self._joined.conn, self._joined.delta, self._joined.appended = conn, delta, {}
            try:
                yield conn
                self._write_statistics(conn, delta)
            finally:
                self._joined.conn = self._joined.delta = self._joined.appended = None
        if delta.written:  # only once committed: a rolled-back entry was never stored
            self._entry_cache.put(delta.written)

    @property
    def _delta(self) -> term_stats.Delta:
        """The statistics changes of this thread's open write transaction."""
        return self._joined.delta

    @staticmethod
    def _write_statistics(conn: Any, changes: term_stats.Delta) -> None:
        """Upsert the changed statistics rows (under the memory's row lock, which every write holds), deleting
        those that reach zero."""
        for memory_id, delta in changes.take():
            conn.execute(
                "INSERT INTO memory_stats AS s (memory_id, entries, tokens) VALUES (%s, %s, %s) "
                "ON CONFLICT (memory_id) DO UPDATE SET entries = s.entries + EXCLUDED.entries, "
                "tokens = s.tokens + EXCLUDED.tokens",
                (memory_id, delta.entries, delta.tokens),
            )
            rows = delta.rows()
            if not rows:
                continue
            kinds, terms, counts = ([row[i] for row in rows] for i in range(3))
            conn.execute(
                "INSERT INTO term_stats AS s (memory_id, kind, term, entries) "
                "SELECT %s, k, t, n FROM unnest(%s::smallint[], %s::text[], %s::integer[]) AS c(k, t, n) "
                "ON CONFLICT (memory_id, kind, term) DO UPDATE SET entries = s.entries + EXCLUDED.entries",
                (memory_id, kinds, terms, counts),
            )
            if delta.entries < 0:
                conn.execute("DELETE FROM memory_stats WHERE memory_id = %s AND entries <= 0", (memory_id,))
            for kind in (term_stats.STEM, term_stats.WORD):
                gone = [t for k, t, n in rows if k == kind and n < 0]
                if gone:
                    conn.execute(f"DELETE FROM term_stats WHERE {_TERM_KEYS} AND entries <= 0", (memory_id, kind, gone))

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def maintenance_connection(self) -> Iterator[Any]:
        """A pooled connection in autocommit mode (rows as dicts)."""
        with self._read() as conn:
            yield conn

    @staticmethod
    def _next_time(conn: Any, table: str, memory_id: str) -> str:
        # Strictly increasing per memory (the caller holds the memory's row lock).
        last = conn.execute(f"SELECT max(creation_time) AS t FROM {table} WHERE memory_id = %s", (memory_id,))
        return PostgresStore._time_after(last.fetchone()["t"])

    @staticmethod
    def _time_after(value: str | None) -> str:
        """Now, or a microsecond after ``value`` (a stored creation time) if that is not earlier."""
        now = datetime.now(UTC)
        if value is not None:
            previous = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            if now <= previous:
                now = previous + timedelta(microseconds=1)
        return format_timestamp(now)

    @staticmethod
    def _require_vault(conn: Any, vault_id: str) -> None:
        if conn.execute("SELECT 1 FROM vaults WHERE vault_id = %s", (vault_id,)).fetchone() is None:
            raise MemoryServerError(f"vault {vault_id} not found")

    def _require_memory(self, conn: Any, vault_id: str | None, memory_id: str, *, lock: bool = False) -> Row:
        suffix = " FOR UPDATE" if lock else ""
        if vault_id is None:
            row = conn.execute(f"SELECT * FROM memories WHERE memory_id = %s{suffix}", (memory_id,)).fetchone()
        else:
            row = conn.execute(
                f"SELECT * FROM memories WHERE memory_id = %s AND vault_id = %s{suffix}", (memory_id, vault_id)
            ).fetchone()
        if row is None:
            if vault_id is not None:
                self._require_vault(conn, vault_id)
            raise memory_not_found(memory_id, vault_id)
        return row

    # -- vaults and memories -------------------------------------------------------------------------------

    def _insert_vault(self, title: str, description: str) -> str:
        with self._tx() as conn:
            row = conn.execute(
                "INSERT INTO vaults (vault_id, title, description, creation_time) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (title) DO NOTHING RETURNING vault_id",
                (str(uuid.uuid4()), title, description, format_timestamp(datetime.now(UTC))),
            ).fetchone()
        if row is None:
            raise MemoryServerError(f"a vault titled {title!r} already exists")
        return str(row["vault_id"])

    def _vault_rows(self) -> list[Row]:
        with self._read() as conn:
            return conn.execute("SELECT vault_id, title FROM vaults ORDER BY creation_time, vault_id").fetchall()

    def _insert_memory(self, vault_id: str, title: str, memory_type: str, description: str) -> Row:
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM vaults WHERE vault_id = %s FOR KEY SHARE", (vault_id,)).fetchone() is None:
                raise MemoryServerError(f"vault {vault_id} not found")
            row = conn.execute(
                "INSERT INTO memories (memory_id, vault_id, title, memory_type, description, creation_time) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (vault_id, title) DO NOTHING RETURNING *",
                (str(uuid.uuid4()), vault_id, title, memory_type, description, format_timestamp(datetime.now(UTC))),
            ).fetchone()
        if row is None:
            raise MemoryServerError(f"a memory titled {title!r} already exists in vault {vault_id}")
        return row

    def _memory_rows(self, vault_id: str) -> list[Row]:
        with self._read() as conn:
            self._require_vault(conn, vault_id)
            return conn.execute(
                "SELECT memory_id, title FROM memories WHERE vault_id = %s ORDER BY creation_time, memory_id",
                (vault_id,),
            ).fetchall()

    def _memory_row(self, vault_id: str | None, memory_id: str) -> Row:
        with self._read() as conn:
            return self._require_memory(conn, vault_id, memory_id)

    def _delete_memory(self, vault_id: str, memory_id: str) -> int:
        with self._tx() as conn:
            self._require_memory(conn, vault_id, memory_id, lock=True)
            count = conn.execute("SELECT count(*) AS n FROM entries WHERE memory_id = %s", (memory_id,)).fetchone()
            conn.execute("DELETE FROM memories WHERE memory_id = %s", (memory_id,))  # its statistics cascade
            self._delta.drop(memory_id)
        return int(count["n"])

    # -- entries -------------------------------------------------------------------------------------------

    def _append_entry(self, vault_id: str, memory_id: str, entry: NewEntry) -> tuple[Row, bool]:
        raw_entry, summary, tags, conversation_time, idempotency_key = entry
        by_key = f"SELECT {self._columns} FROM entries WHERE memory_id = %s AND idempotency_key = %s"
        with self._tx() as conn:
            appended = self._joined.appended
            previous = appended.get((vault_id, memory_id))
            if previous is None:
                self._require_memory(conn, vault_id, memory_id, lock=True)
            if idempotency_key is not None:
                existing = conn.execute(by_key, (memory_id, idempotency_key)).fetchone()
                if existing is not None:
                    return existing, False
            if previous is None:
                now = self._next_time(conn, "entries", memory_id)
            else:  # the lock is held since this transaction's first write here: no other entry came in between
                now = self._time_after(previous)
            counts = term_stats.entry_counts(raw_entry, summary, tags, conversation_time or now)
            values = {
                "entry_id": str(uuid.uuid4()),
                "memory_id": memory_id,
                "vault_id": vault_id,
                "creation_time": now,
                "conversation_time": conversation_time,
                "raw_entry": raw_entry,
                "summary": summary,
                "tags": json.dumps(tags, ensure_ascii=False, sort_keys=True),
                "idempotency_key": idempotency_key,
                "summary_words": index_words(summary),
                "raw_words": index_words(raw_entry),
                "labels": index_words(entry_labels(tags)),
                "dated": entry_dated(conversation_time or now),
                "terms": pg_terms.encode(counts.terms),
            }
            column, value = ("terms, ", "%(terms)s, ") if self._keeps_terms else ("", "")
            row = conn.execute(
                "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
                f"summary, tags, idempotency_key, {column}tsv) VALUES (%(entry_id)s, %(memory_id)s, %(vault_id)s, "
                "%(creation_time)s, %(conversation_time)s, %(raw_entry)s, %(summary)s, %(tags)s, "
                f"%(idempotency_key)s, {value}{ENTRY_TSV}) ON CONFLICT (memory_id, idempotency_key) DO NOTHING "
                f"RETURNING {self._columns}",
                values,
            ).fetchone()
            if row is None:  # only without the row lock's protection (kept as a second line of defence)
                return conn.execute(by_key, (memory_id, idempotency_key)).fetchone(), False
            appended[(vault_id, memory_id)] = now
            self._delta.add(memory_id, counts, seq=int(row["seq"]))
            if self._dense is not None:
                self._dense.index_entry(conn, int(row["seq"]), memory_id, summary, raw_entry)
        return row, True

    def _entry_page(self, memory_id: str, limit: int, before: str | None, after: str | None) -> list[Row]:
        sql, params = moments.entry_page(memory_id, limit, before, after, mark="%s")
        with self._read() as conn:
            return conn.execute(f"SELECT {self._columns} FROM entries {sql}", params).fetchall()

    def _entry_row(self, memory_id: str, entry_id: str) -> Row | None:
        with self._read() as conn:
            return conn.execute(
                f"SELECT {self._columns} FROM entries WHERE entry_id = %s AND memory_id = %s", (entry_id, memory_id)
            ).fetchone()

    def _delete_entry(self, vault_id: str, memory_id: str, entry_id: str) -> bool:
        with self._tx() as conn:
            self._require_memory(conn, vault_id, memory_id, lock=True)
            row = conn.execute(
                "DELETE FROM entries WHERE entry_id = %s AND memory_id = %s "
                "RETURNING raw_entry, summary, tags, coalesce(conversation_time, creation_time) AS moment",
                (entry_id, memory_id),
            ).fetchone()
            if row is None:
                return False
            self._delta.add(
                memory_id, term_stats.entry_counts(row["raw_entry"], row["summary"], row["tags"], row["moment"]), -1
            )
            return True

    def _update_entry(self, vault_id: str, memory_id: str, entry_id: str, entry: NewEntry) -> Row | None:
        with self._tx() as conn:
            self._require_memory(conn, vault_id, memory_id, lock=True)
            old = conn.execute(
                f"SELECT {self._columns} FROM entries WHERE entry_id = %s AND memory_id = %s", (entry_id, memory_id)
            ).fetchone()
            if old is None:
                return None
            seq = int(old["seq"])
            conn.execute(keep_version("%s"), (format_timestamp(datetime.now(UTC)), seq))
            before = term_stats.entry_counts(
                old["raw_entry"], old["summary"], old["tags"], old["conversation_time"] or old["creation_time"]
            )
            self._delta.add(memory_id, before, -1)
            conversation_time = entry.conversation_time or old["conversation_time"]
            moment = conversation_time or old["creation_time"]
            after = term_stats.entry_counts(entry.raw_entry, entry.summary, entry.tags, moment)
            values = {
                "seq": seq,
                "conversation_time": conversation_time,
                "raw_entry": entry.raw_entry,
                "summary": entry.summary,
                "tags": json.dumps(entry.tags, ensure_ascii=False, sort_keys=True),
                "summary_words": index_words(entry.summary),
                "raw_words": index_words(entry.raw_entry),
                "labels": index_words(entry_labels(entry.tags)),
                "dated": entry_dated(moment),
                "terms": pg_terms.encode(after.terms),
            }
            terms = "terms = %(terms)s, " if self._keeps_terms else ""
            row = conn.execute(
                "UPDATE entries SET conversation_time = %(conversation_time)s, raw_entry = %(raw_entry)s, "
                f"summary = %(summary)s, tags = %(tags)s, {terms}tsv = {ENTRY_TSV}, version = version + 1 "
                f"WHERE seq = %(seq)s RETURNING {self._columns}",
                values,
            ).fetchone()
            self._delta.add(memory_id, after, seq=seq)
            # The replaced text's vector goes now; the new one is written inline here or behind (entries_written).
            conn.execute("DELETE FROM entry_vectors WHERE seq = %s", (seq,))
            if self._dense is not None:
                self._dense.index_entry(conn, seq, memory_id, entry.summary, entry.raw_entry)
        return row

    def _entry_versions(self, memory_id: str, entry_id: str) -> list[Row]:
        with self._read() as conn:
            return conn.execute(
                "SELECT * FROM entry_versions WHERE entry_id = %s AND memory_id = %s ORDER BY version",
                (entry_id, memory_id),
            ).fetchall()

    # -- context -------------------------------------------------------------------------------------------

    def _append_context(self, vault_id: str, memory_id: str, content: str) -> str:
        with self._tx() as conn:
            self._require_memory(conn, vault_id, memory_id, lock=True)
            now = self._next_time(conn, "contexts", memory_id)
            conn.execute(
                "INSERT INTO contexts (memory_id, content, creation_time, tsv) "
                "VALUES (%s, %s, %s, to_tsvector('mycelian', %s))",
                (memory_id, content, now, index_words(content)),
            )
        return now

    def _context_rows(self, memory_id: str) -> list[Row]:
        with self._read() as conn:
            return conn.execute(
                "SELECT seq, content FROM contexts WHERE memory_id = %s ORDER BY seq", (memory_id,)
            ).fetchall()

    def _replace_context(self, memory_id: str, seq: int, old: str, new: str) -> None:
        with self._tx() as conn:
            changed = conn.execute(
                "UPDATE contexts SET content = %s, tsv = to_tsvector('mycelian', %s) "
                "WHERE seq = %s AND memory_id = %s AND content = %s",
                (new, index_words(new), seq, memory_id, old),
            ).rowcount
        if not changed:
            raise content_changed(memory_id)

    def latest_context(self, memory_id: str) -> Row | None:
        with self._read() as conn:
            return conn.execute(
                "SELECT content, creation_time FROM contexts WHERE memory_id = %s ORDER BY seq DESC LIMIT 1",
                (memory_id,),
            ).fetchone()

    # -- search reads (tsvector candidates, contexts, neighbours: lexical.py) -------------------------------

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
        where, params = time_bounds(after, before, mark="%s")
        known = lexical.known(terms, statistics)  # before taking a connection: it may read entries on one
        with self._read() as conn:
            return lexical.rank(conn, self._lexicon, "entries", memory_id, terms, limit, where, params, known)

    def neighbour_links(self, memory_id: str, seqs: Sequence[int]) -> list[Link]:
        if not seqs:
            return []
        with self._read() as conn:
            return lexical.neighbour_links(conn, memory_id, seqs)

    def neighbourhood(self, memory_id: str, seqs: Sequence[int]) -> tuple[list[Link], dict[int, Link]]:
        if not seqs:
            return [], {}
        with self._read() as conn:
            return lexical.neighbourhood(conn, memory_id, seqs)

    def entries_within(self, memory_id: str, seqs: Collection[int], after: str | None, before: str | None) -> set[int]:
        if not seqs:
            return set()
        with self._read() as conn:
            return lexical.entries_within(conn, memory_id, seqs, after, before)

    def entry_rows(self, memory_id: str, seqs: Sequence[int]) -> dict[int, Row]:
        if not seqs:
            return {}
        # By key, then the memory checked (behind a fence): with the memory tested in the scan, a memory the
        # statistics do not know yet (loaded since the last ANALYZE) was planned as one row and read whole through
        # its memory index (3 ms for a new 10k-entry memory).
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT * FROM (SELECT {self._columns} FROM entries WHERE seq = ANY(%s) OFFSET 0) e "
                "WHERE e.memory_id = %s",
                (list(seqs), memory_id),
            ).fetchall()
        return {int(row["seq"]): row for row in rows}

    def entry_terms(
        self, memory_id: str, seqs: Sequence[int], *, weights: Sequence[float] | None = None
    ) -> dict[int, EntryTerms]:
        """:meth:`MemoryStore.entry_terms`, the entries the cache lacks read as their writes stored them
        (``terms.py``)."""
        if weights is not None or not self._keeps_terms:
            return super().entry_terms(memory_id, seqs, weights=weights)

        def load(missing: list[int]) -> dict[int, EntryTerms]:
            with self._read() as conn:
                return pg_terms.read(conn, memory_id, missing)

        return self._entry_cache.get(list(seqs), load)

    def term_counts(self, memory_id: str, stems: Collection[str], words: Collection[str]) -> term_stats.TermCounts:
        counts = {term_stats.STEM: dict.fromkeys(stems, 0), term_stats.WORD: dict.fromkeys(words, 0)}
        terms = f"SELECT kind, term, entries, 0 FROM term_stats WHERE {_TERM_KEYS}"
        entries = tokens = 0
        with self._read() as conn:  # one statement: one snapshot of both tables
            for found in conn.execute(
                "SELECT NULL::smallint AS kind, NULL::text AS term, entries, tokens FROM memory_stats "
                f"WHERE memory_id = %s UNION ALL {terms} UNION ALL {terms}",
                (memory_id, *(value for kind, terms_ in counts.items() for value in (memory_id, kind, list(terms_)))),
            ):
                if found["kind"] is None:
                    entries, tokens = int(found["entries"]), int(found["tokens"])
                else:
                    counts[found["kind"]][found["term"]] = int(found["entries"])
        return term_stats.TermCounts(entries, tokens, counts[term_stats.STEM], counts[term_stats.WORD])

    def ranked_contexts(self, memory_id: str, terms: list[str], limit: int) -> list[tuple[Row, float]]:
        with self._read() as conn:
            return lexical.contexts(conn, self._lexicon, memory_id, terms, limit, latest=False)[0]

    def search_contexts(
        self, memory_id: str, terms: list[str], limit: int
    ) -> tuple[list[tuple[Row, float]], Row | None]:
        """:meth:`MemoryStore.search_contexts` in two statements (``lexical.contexts``)."""
        with self._read() as conn:
            return lexical.contexts(conn, self._lexicon, memory_id, terms, limit, latest=True)

    # -- introspection (tests, benchmarks) -----------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        # entries_fts / contexts_fts: rows with a non-empty tsvector (what the SQLite FTS tables hold).
        with self._read() as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM vaults) AS vaults, (SELECT count(*) FROM memories) AS memories, "
                "(SELECT count(*) FROM entries) AS entries, (SELECT count(*) FROM contexts) AS contexts, "
                "(SELECT count(*) FROM entry_vectors) AS entry_vectors, "
                "(SELECT count(*) FROM memory_stats) AS memory_stats, (SELECT count(*) FROM term_stats) AS term_stats, "
                "(SELECT count(*) FROM entries WHERE length(tsv) > 0) AS entries_fts, "
                "(SELECT count(*) FROM contexts WHERE length(tsv) > 0) AS contexts_fts"
            ).fetchone()
        return {key: int(value) for key, value in row.items()}

    def _snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        orders = {
            "vaults": "creation_time, vault_id",
            "memories": "creation_time, memory_id",
            "entries": "seq",
            "contexts": "seq",
            "entry_versions": "seq, version",
        }
        with self._read() as conn:
            return {
                table: [tuple(r.values()) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
                for table, order in orders.items()
            }
