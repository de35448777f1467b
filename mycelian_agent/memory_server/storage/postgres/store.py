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

Ranking (:meth:`PostgresStore._lexical_entries`): the ``tsvector`` of an entry carries the summary (weight A), the
text and the labels (B) and the date in words (C), mapped from ``ranking.ENTRY_WEIGHTS``. Each query lexeme ``t``
scores ``idf(t) * ts_rank(weights, tsv, t, 1)`` summed over the lexemes: BM25's IDF (from the memory's document
frequencies) times PostgreSQL's saturating, length-normalised term weight — the shape of BM25, so the neighbour
scoring and cut-offs tuned on SQLite carry over (recall parity: tests/test_postgres.py). The frequencies come from
one call, :meth:`PostgresStore._frequencies`: BM25's own statistics of the memory where a query word is one Porter
stem and one lexeme (no query counts them), else counts in the index. The GIN index on ``(memory_id, tsv)``
(``btree_gin``; pg_migrations.py) reads only the memory's postings. ``ts_rank`` reads each scored row from the heap,
so a query matching more than :data:`EXACT_ROWS` rows (a large memory's common words) ranks a bounded part of them
(:meth:`PostgresStore._rank_bounded`): every LoCoMo-sized memory is ranked whole, as before.

Dense vectors (``--embeddings``): float32 bytes in ``entry_vectors`` (bytea), scored by an exact scan in the server
process as on SQLite (``retrieval/dense``'s ``DenseVectors`` serves both); when the database has pgvector (or this role can
create it), also a ``vector`` column with an HNSW index, which answers the dense side of a search in a large memory
(``vectors.py``). Which path serves is said once per database when the store opens.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mycelian_agent.errors import ConfigError, MemoryServerError
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.storage.base import DenseIndex, MemoryStore, NewEntry, Row, memory_not_found
from mycelian_agent.memory_server.storage.postgres import vectors as pg_vectors
from mycelian_agent.memory_server.retrieval.bm25 import tokens
from mycelian_agent.memory_server.storage.postgres.migrations import ENTRY_TSV, MEMORY_INDEX_STATEMENTS, has_memory_index, migrate
from mycelian_agent.memory_server.retrieval.ranking import CONTEXT_GAP_DAYS, ENTRY_WEIGHTS, QUESTION_MARKS, entry_dated, entry_labels, index_words
from mycelian_agent.memory_server.storage.validation import format_timestamp

__all__ = ["INSTALL_HINT", "PostgresStore", "announce_dense_path", "one_line", "redact_url", "require_psycopg"]

#: What to install when psycopg is missing.
INSTALL_HINT = "pip install 'mycelian-agent[postgres]'"

_ENTRY_COLUMNS = (
    "seq, entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, summary, tags, idempotency_key"
)
# ts_rank's weights are {D, C, B, A}, each at most 1: ENTRY_WEIGHTS scaled by the summary's (the largest).
_TOP = ENTRY_WEIGHTS[2]
_RANK_WEIGHTS = "{0.1, %.4f, %.4f, 1.0}" % (ENTRY_WEIGHTS[4] / _TOP, ENTRY_WEIGHTS[1] / _TOP)
_MOMENT = "COALESCE({0}.conversation_time, {0}.creation_time)"
# The term_stats rows of one memory and kind for a list of terms, from parameters (memory_id, kind, terms). As a
# join on the whole key, each term is one primary-key probe whatever the table's statistics say (`term = ANY(...)`
# was planned as a filter over every row of the memory and kind until the table was analysed).
_TERM_KEYS = "(memory_id, kind, term) IN (SELECT %s, %s::smallint, unnest(%s::text[]))"
#: A ranking whose candidate lexemes match at most this many of the memory's rows scores every one of them (exact:
#: every LoCoMo-sized memory); above, :meth:`PostgresStore._rank_bounded` scores a bounded part.
EXACT_ROWS = 2000
#: The bounded ranking's parts: rows holding the rarest lexemes scored at most (every row of as many of the
#: rarest as fit, else rows holding the two rarest), and the matches among the newest rows aimed at (reading at
#: most NEWEST_ROWS rows).
BOUNDED_ROWS = 400
NEWEST_ROWS = 2000
# Query terms whose lexemes a store keeps (cleared when full: a few hundred KB).
_CACHED_TERMS = 10_000
# BM25's entry count and document frequencies, by query term (the terms that are one Porter stem).
_Known = tuple[int, dict[str, int]]


def require_psycopg() -> None:
    """Raise :class:`ConfigError` naming the install command unless psycopg 3 and psycopg_pool import."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"a postgresql:// memory database needs psycopg 3 ({exc}): {INSTALL_HINT}") from None


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's messages carry newlines and tabs)."""
    return " ".join(str(exc).split())


_log = logging.getLogger(__name__)
_said_no_memory_index = False


def _say_no_memory_index() -> None:
    # Once per process: every store opened on such a database would say the same.
    global _said_no_memory_index
    if not _said_no_memory_index:
        _said_no_memory_index = True
        _log.warning(
            "the memory database has no search index by memory (CREATE EXTENSION btree_gin was refused: it needs "
            "the CREATE right on the database): searches read every memory's postings and slow down as the "
            "database grows; as an administrator run CREATE EXTENSION btree_gin; then %s",
            "; ".join(MEMORY_INDEX_STATEMENTS),
        )


_said: set[tuple[str, bool]] = set()


def announce_dense_path(url: str, hnsw_min: int) -> str:
    """At a server's start (``--embeddings`` on ``url``): migrate the database and prepare it for pgvector if it can
    be had (``pg_vectors.prepare``), log which dense path serves (once, as a store's open would) and return it in a few
    words for the startup line."""
    require_psycopg()
    import psycopg

    shown = redact_url(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            vectors = pg_vectors.prepare(conn)
    except psycopg.Error as exc:
        raise MemoryServerError(f"cannot prepare the memory database {shown}: {one_line(exc)}") from exc
    _say_dense_path(shown, vectors, hnsw_min)
    if vectors.available:
        return f"dense: pgvector {vectors.version} HNSW for memories of {hnsw_min}+ vectors"
    return "dense: exact scan (no pgvector)"


def _say_dense_path(shown: str, vectors: pg_vectors.Availability, hnsw_min: int | None) -> None:
    """Log which dense path serves the database (once per database and path in a process: sessions reopen it)."""
    if (shown, vectors.available) in _said:
        return
    _said.add((shown, vectors.available))
    if vectors.available:
        _log.info("dense search on %s: pgvector %s, an HNSW index for memories of %s+ vectors (smaller ones: the "
                  "exact scan)", shown, vectors.version, hnsw_min)
    else:
        _log.warning("dense search on %s: the exact scan in the server process (slow for memories of 100k "
                     "entries) because %s", shown, vectors.reason)


def _tsquery(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _idf(total: int, found: int) -> float:
    # FTS5's BM25 IDF, clamped the same way: terms in half the documents or more weigh almost nothing.
    return max(1e-6, math.log((total - found + 0.5) / (found + 0.5)))


class PostgresStore(MemoryStore):
    """The PostgreSQL memory database. Create with :meth:`open`; every primitive is one transaction."""

    def __init__(self, pool: Any, *, url: str, pool_size: int, dense: DenseIndex | None = None) -> None:
        self._pool = pool
        self.url = url
        self.concurrency = pool_size
        self._dense = dense
        self._joined = threading.local()  # the connection of this thread's open _transaction, if any
        self._lexeme_cache: dict[str, list[str]] = {}
        self._lexeme_lock = threading.Lock()

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
            kwargs={"autocommit": True, "row_factory": dict_row},
            open=False,
            timeout=timeout,
            name="mycelian-memory",
        )
        pool.open(wait=True, timeout=timeout)
        store = cls(pool, url=url, pool_size=pool_size, dense=dense)
        if dense is not None and vectors is not None:
            _say_dense_path(shown, vectors, getattr(dense, "hnsw_min", None))
        store._attach_dense(pg_vectors.PostgresVectors(pgvector=vectors is not None and vectors.available),
                            store.maintenance_connection)
        return store

    def _close(self) -> None:
        self._pool.close()

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
                    conn.execute(
                        f"DELETE FROM term_stats WHERE {_TERM_KEYS} AND entries <= 0", (memory_id, kind, gone)
                    )

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
        by_key = f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE memory_id = %s AND idempotency_key = %s"
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
            }
            row = conn.execute(
                "INSERT INTO entries (entry_id, memory_id, vault_id, creation_time, conversation_time, raw_entry, "
                "summary, tags, idempotency_key, tsv) VALUES (%(entry_id)s, %(memory_id)s, %(vault_id)s, "
                "%(creation_time)s, %(conversation_time)s, %(raw_entry)s, %(summary)s, %(tags)s, "
                f"%(idempotency_key)s, {ENTRY_TSV}) ON CONFLICT (memory_id, idempotency_key) DO NOTHING "
                f"RETURNING {_ENTRY_COLUMNS}",
                values,
            ).fetchone()
            if row is None:  # only without the row lock's protection (kept as a second line of defence)
                return conn.execute(by_key, (memory_id, idempotency_key)).fetchone(), False
            appended[(vault_id, memory_id)] = now
            counts = term_stats.entry_counts(raw_entry, summary, tags, conversation_time or now)
            self._delta.add(memory_id, counts, seq=int(row["seq"]))
            if self._dense is not None:
                self._dense.index_entry(conn, int(row["seq"]), memory_id, summary, raw_entry)
        return row, True

    def _entry_page(self, memory_id: str, limit: int, before: str | None, after: str | None) -> list[Row]:
        if after is not None:
            sql = "WHERE memory_id = %s AND creation_time > %s ORDER BY creation_time, seq LIMIT %s"
            params: list[Any] = [memory_id, after, limit]
        elif before is not None:
            sql = "WHERE memory_id = %s AND creation_time < %s ORDER BY creation_time DESC, seq DESC LIMIT %s"
            params = [memory_id, before, limit]
        else:
            sql = "WHERE memory_id = %s ORDER BY creation_time DESC, seq DESC LIMIT %s"
            params = [memory_id, limit]
        with self._read() as conn:
            return conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries {sql}", params).fetchall()

    def _entry_row(self, memory_id: str, entry_id: str) -> Row | None:
        with self._read() as conn:
            return conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE entry_id = %s AND memory_id = %s", (entry_id, memory_id)
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

    def _latest_context(self, memory_id: str) -> Row | None:
        with self._read() as conn:
            return conn.execute(
                "SELECT content, creation_time FROM contexts WHERE memory_id = %s ORDER BY seq DESC LIMIT 1",
                (memory_id,),
            ).fetchone()

    # -- search --------------------------------------------------------------------------------------------

    def _lexemes(self, conn: Any, terms: Sequence[str]) -> dict[str, list[str]]:
        """Each term's lexemes (the ``mycelian`` configuration's, as the index holds them), kept per store (the
        configuration is the schema's: a term's lexemes do not change), so a search asks only for new words."""
        with self._lexeme_lock:
            known = {term: self._lexeme_cache[term] for term in terms if term in self._lexeme_cache}
        missing = [term for term in terms if term not in known]
        if missing:
            rows = conn.execute(
                "SELECT t AS term, tsvector_to_array(to_tsvector('mycelian', t)) AS lexemes "
                "FROM unnest(%s::text[]) AS t",
                (missing,),
            ).fetchall()
            found = {row["term"]: list(row["lexemes"]) for row in rows}
            with self._lexeme_lock:
                if len(self._lexeme_cache) + len(found) > _CACHED_TERMS:
                    self._lexeme_cache.clear()
                self._lexeme_cache.update(found)
            known.update(found)
        return known

    @staticmethod
    def _counted_frequencies(
        conn: Any, table: str, memory_id: str, lexemes: Sequence[str], total: int | None
    ) -> tuple[int, dict[str, int]]:
        """``(rows of the memory, {lexeme: rows holding it})`` counted in ``table``. Given ``total``, each count
        stops at half the memory (beyond that the IDF is clamped anyway, and the term is common either way);
        without, the memory's rows are counted in the same statement and the counts are whole (one round trip: the
        contexts of a memory, few rows)."""
        cap = "" if total is None else " LIMIT %s"
        counts = [
            f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE memory_id = %s AND tsv @@ %s::tsquery{cap}) x) AS d{i}"
            for i in range(len(lexemes))
        ]
        values: list[Any] = [value for lexeme in lexemes for value in (memory_id, _tsquery(lexeme))]
        if total is None:
            counts.append(f"(SELECT count(*) FROM {table} WHERE memory_id = %s) AS total")
            values.append(memory_id)
        else:
            values = [value for k in range(0, len(values), 2) for value in (*values[k : k + 2], total // 2 + 1)]
        found = conn.execute(f"SELECT {', '.join(counts)}", values).fetchone()
        total = int(found["total"]) if total is None else total
        return total, {lexeme: int(found[f"d{i}"]) for i, lexeme in enumerate(lexemes)}

    def _frequencies(
        self, conn: Any, table: str, memory_id: str, lexemes_of: dict[str, list[str]], known: _Known | None
    ) -> tuple[int, dict[str, int]]:
        """The one source of a ranking's document frequencies: ``(rows of the memory, {lexeme: rows holding it})``.
        A lexeme that is a term's only lexeme, of a term whose only stem ``known`` (BM25's statistics) counts, takes
        that count (the Snowball lexeme and the Porter stem of one word name the same rows but for the words the
        two stemmers conflate differently); the others are counted in the index."""
        frequencies: dict[str, int] = {}
        total = None
        if known is not None:
            total, by_term = known
            for term, lexemes in lexemes_of.items():
                if len(lexemes) == 1 and term in by_term:
                    frequencies[lexemes[0]] = max(frequencies.get(lexemes[0], 0), by_term[term])
        missing = sorted({lexeme for lexemes in lexemes_of.values() for lexeme in lexemes} - frequencies.keys())
        if missing or total is None:
            total, counted = self._counted_frequencies(conn, table, memory_id, missing, total)
            frequencies.update(counted)
        return total, frequencies

    @staticmethod
    def _known(
        terms: Sequence[str], statistics: Callable[[Sequence[str]], tuple[int, dict[str, int], int]] | None
    ) -> _Known | None:
        # BM25's counts of the terms that are one stem each, by term.
        if statistics is None:
            return None
        stem_of = {}
        for term in terms:
            stems = tokens(term)
            if len(stems) == 1:
                stem_of[term] = stems[0]
        entries, by_stem, _ = statistics(sorted(set(stem_of.values())))
        return entries, {term: by_stem.get(stem, 0) for term, stem in stem_of.items()}

    def _rank(
        self,
        conn: Any,
        table: str,
        memory_id: str,
        terms: Sequence[str],
        limit: int,
        where: str = "",
        params: Sequence[Any] = (),
        known: _Known | None = None,
    ) -> list[tuple[int, float]]:
        """BM25-shaped ranking of a memory's rows of ``table`` (see the module docstring)."""
        if limit <= 0:
            return []
        lexemes_of = self._lexemes(conn, terms)
        lexemes = sorted({lexeme for found in lexemes_of.values() for lexeme in found})
        if not lexemes:
            return []
        total, by_lexeme = self._frequencies(conn, table, memory_id, lexemes_of, known)
        frequencies = [by_lexeme[lexeme] for lexeme in lexemes]
        queries = [_tsquery(lexeme) for lexeme in lexemes]
        weights = [_idf(total, n) for n in frequencies]
        score = " + ".join(f"%s * ts_rank('{_RANK_WEIGHTS}', t.tsv, %s::tsquery, 1)" for _ in queries)
        scoring = [value for w, q in zip(weights, queries, strict=True) for value in (w, q)]
        # Like search.prune_common_terms on SQLite: terms in half the memory or more (IDF ~0) still score, but do
        # not make rows candidates, unless the rarer terms find too few rows.
        rare = [(n, q) for q, n in zip(queries, frequencies, strict=True) if 2 * n < total]
        candidates = [rare] if rare and len(rare) < len(queries) else []
        candidates.append(list(zip(frequencies, queries, strict=True)))
        for matching in candidates:
            rows = []
            if sum(n for n, _ in matching) > EXACT_ROWS:
                rows = self._rank_bounded(conn, table, memory_id, matching, total, score, scoring, limit, where,
                                          params)
            # Every match when the bounded part found too few inside the time bounds (a span far from the newest
            # rows: costly on a large memory, as the time filter reads each match from the heap).
            if not rows or (where and len(rows) < limit):
                rows = conn.execute(
                    f"SELECT t.seq, ({score}) AS score FROM {table} t WHERE t.memory_id = %s AND t.tsv @@ %s::tsquery"
                    f"{where} ORDER BY score DESC, t.seq DESC LIMIT %s",
                    [*scoring, memory_id, " | ".join(q for _, q in matching), *params, limit],
                ).fetchall()
            if len(rows) >= limit:
                break
        return [(int(row["seq"]), float(row["score"])) for row in rows if row["score"] > 0]

    @staticmethod
    def _rank_bounded(
        conn: Any, table: str, memory_id: str, matching: Sequence[tuple[int, str]], total: int, score: str,
        scoring: Sequence[Any], limit: int, where: str, params: Sequence[Any],
    ) -> list[Any]:
        """The ranking of a query matching more than :data:`EXACT_ROWS` rows, from a bounded part of them (each
        row scored is read from the heap): every row holding one of the rarest lexemes, as many of them as hold at
        most :data:`BOUNDED_ROWS` rows together (the rows a term-at-a-time ranking puts first, ranked exactly: "I'm
        flying to Lisbon" for "when is the Lisbon trip" in a memory where "trip" is common); when even the rarest
        is in more rows, up to :data:`BOUNDED_ROWS` holding both of the two rarest; and those holding any lexeme
        among the memory's newest rows, as many rows as hold :data:`BOUNDED_ROWS` matches if the lexemes are spread
        evenly (at most :data:`NEWEST_ROWS`)."""
        ordered = sorted(matching)
        rarest, held = [], 0
        for n, q in ordered:
            if held + n > BOUNDED_ROWS:
                break
            rarest.append(q)
            held += n
        both = " | ".join(rarest) if rarest else " & ".join(q for _, q in ordered[:2])
        anyone = " | ".join(q for _, q in ordered)
        newest = min(NEWEST_ROWS, max(limit, total * BOUNDED_ROWS // max(1, sum(n for n, _ in ordered))))
        # The newest rows: their seqs from the (memory_id, seq) index alone, then each row by its key. (Read
        # whole, the planner walks the primary key down through every newer memory's rows, or scans every match of
        # the lexemes, its row estimates not knowing that a memory's rows are a run of seqs; the same with the time
        # bounds inside.) A row in both parts counts once.
        recent = (f"SELECT t.seq, t.tsv FROM (SELECT r.seq FROM {table} r WHERE r.memory_id = %s "
                  f"ORDER BY r.seq DESC LIMIT %s) n JOIN {table} t ON t.seq = n.seq "
                  f"WHERE t.tsv @@ %s::tsquery{where}")
        pick = f"SELECT t.seq, t.tsv FROM {table} t WHERE t.memory_id = %s AND t.tsv @@ %s::tsquery{where} LIMIT %s"
        return conn.execute(
            f"SELECT * FROM (SELECT DISTINCT ON (t.seq) t.seq, ({score}) AS score "
            f"FROM (({pick}) UNION ALL ({recent})) t "
            "ORDER BY t.seq) s ORDER BY score DESC, seq DESC LIMIT %s",
            [*scoring, memory_id, both, *params, BOUNDED_ROWS, memory_id, newest, anyone, *params, limit],
        ).fetchall()

    @staticmethod
    def _time_bounds(after: str | None, before: str | None) -> tuple[str, list[str]]:
        where, params = "", []
        moment = _MOMENT.format("t")
        if after is not None:
            where, params = f"{where} AND {moment} > %s", [*params, after]
        if before is not None:
            where, params = f"{where} AND {moment} < %s", [*params, before]
        return where, params

    def _lexical_entries(
        self, memory_id: str, terms: list[str], limit: int, after: str | None, before: str | None, *,
        statistics: Callable[[Sequence[str]], tuple[int, dict[str, int], int]] | None = None,
    ) -> list[tuple[int, float]]:
        where, params = self._time_bounds(after, before)
        known = self._known(terms, statistics)  # before taking a connection: it may read entries on one
        with self._read() as conn:
            return self._rank(conn, "entries", memory_id, terms, limit, where, params, known)

    def _neighbours(
        self, memory_id: str, seqs: Sequence[int], after: str | None, before: str | None
    ) -> tuple[list[tuple[int, int | None, int | None, bool]], set[int]]:
        if not seqs:
            return [], set()
        gap = CONTEXT_GAP_DAYS * 86400.0
        asks = " OR ".join("strpos(e.raw_entry, %s) > 0" for _ in QUESTION_MARKS)
        near = (
            f"abs(extract(epoch FROM ({_MOMENT.format('{0}')}::timestamptz - {_MOMENT.format('e')}::timestamptz)))"
            f" <= {gap!r}"
        )
        sql = (
            f"SELECT e.seq, p.seq AS previous, n.seq AS following, ({asks}) AS asks FROM entries e "
            f"LEFT JOIN LATERAL (SELECT x.seq FROM entries x WHERE x.memory_id = e.memory_id AND x.seq < e.seq "
            f"ORDER BY x.seq DESC LIMIT 1) px ON true LEFT JOIN entries p ON p.seq = px.seq AND {near.format('p')} "
            f"LEFT JOIN LATERAL (SELECT x.seq FROM entries x WHERE x.memory_id = e.memory_id AND x.seq > e.seq "
            f"ORDER BY x.seq LIMIT 1) nx ON true LEFT JOIN entries n ON n.seq = nx.seq AND {near.format('n')} "
            f"WHERE e.seq = ANY(%s) AND e.memory_id = %s"
        )
        where, params = self._time_bounds(after, before)
        given = set(seqs)
        with self._read() as conn:
            links = [
                (int(r["seq"]), r["previous"], r["following"], bool(r["asks"]))
                for r in conn.execute(sql, (*QUESTION_MARKS, list(seqs), memory_id)).fetchall()
            ]
            allowed = given | {n for _, previous, following, _ in links for n in (previous, following) if n is not None}
            outside = allowed - given
            if where and outside:  # neighbours outside the time bounds do not count
                rows = conn.execute(
                    f"SELECT t.seq FROM entries t WHERE t.seq = ANY(%s){where}", [list(outside), *params]
                ).fetchall()
                allowed = given | {int(r["seq"]) for r in rows}
        return links, allowed

    def _entry_rows(self, memory_id: str, seqs: Sequence[int]) -> dict[int, Row]:
        if not seqs:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE memory_id = %s AND seq = ANY(%s)",
                (memory_id, list(seqs)),
            ).fetchall()
        return {int(row["seq"]): row for row in rows}

    def _term_counts(self, memory_id: str, stems: Collection[str], words: Collection[str]) -> term_stats.TermCounts:
        counts = {term_stats.STEM: dict.fromkeys(stems, 0), term_stats.WORD: dict.fromkeys(words, 0)}
        terms = f"SELECT kind, term, entries, 0 FROM term_stats WHERE {_TERM_KEYS}"
        entries = tokens = 0
        with self._read() as conn:  # one statement: one snapshot of both tables
            for found in conn.execute(
                "SELECT NULL::smallint AS kind, NULL::text AS term, entries, tokens FROM memory_stats "
                f"WHERE memory_id = %s UNION ALL {terms} UNION ALL {terms}",
                (memory_id, *(value for kind, found in counts.items() for value in (memory_id, kind, list(found)))),
            ):
                if found["kind"] is None:
                    entries, tokens = int(found["entries"]), int(found["tokens"])
                else:
                    counts[found["kind"]][found["term"]] = int(found["entries"])
        return term_stats.TermCounts(entries, tokens, counts[term_stats.STEM], counts[term_stats.WORD])

    def _lexical_contexts(self, memory_id: str, terms: list[str], limit: int) -> list[tuple[Row, float]]:
        with self._read() as conn:
            ranked = self._rank(conn, "contexts", memory_id, terms, limit)
            if not ranked:
                return []
            rows = conn.execute(
                "SELECT seq, content, creation_time FROM contexts WHERE memory_id = %s AND seq = ANY(%s)",
                (memory_id, [seq for seq, _ in ranked]),
            ).fetchall()
        by_seq = {int(row["seq"]): row for row in rows}
        return [(by_seq[seq], score) for seq, score in ranked if seq in by_seq]

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
        }
        with self._read() as conn:
            return {
                table: [tuple(r.values()) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
                for table, order in orders.items()
            }
