"""The PostgreSQL store behind the memory server: a psycopg 3 connection pool, one transaction per primitive.

It implements the primitives of :class:`~mycelian_agent.memory_server.base.MemoryStore` (which validates and
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
frequencies, read from the GIN index) times PostgreSQL's saturating, length-normalised term weight — the shape of
BM25, so the neighbour scoring and cut-offs tuned on SQLite carry over (recall parity: tests/test_postgres.py).

Dense vectors (``--embeddings``): float32 bytes in ``entry_vectors`` (bytea), scored by an exact scan in the server
process as on SQLite (``embeddings.DenseVectors`` serves both); when the database has pgvector (or this role can
create it), also a ``vector`` column with an HNSW index, which answers the dense side of a search in a large memory
(``pg_vectors.py``). Which path serves is said once per database when the store opens.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError, MemoryServerError
from .base import DenseIndex, MemoryStore, NewEntry, Row, memory_not_found
from .feedback import EntryFields
from .fusion import DenseHits
from . import pg_vectors
from .pg_migrations import ENTRY_TSV, migrate
from .ranking import CONTEXT_GAP_DAYS, ENTRY_WEIGHTS, QUESTION_MARKS, entry_dated, entry_labels, index_words
from .validation import format_timestamp

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
_log = logging.getLogger(__name__)


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

    @classmethod
    def open(
        cls, url: str, *, pool_size: int = 4, timeout: float = 30.0, dense: DenseIndex | None = None
    ) -> PostgresStore:
        """Connect a pool of up to ``pool_size`` connections to ``url`` and migrate the schema. With ``dense``,
        every new entry gets a vector (written behind, on connections borrowed from the pool, or inline) and
        searches fuse them (see embeddings.py)."""
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
            use = getattr(dense, "use_pgvector", None)
            if use is not None:
                use(vectors.available)
        if dense is not None:
            try:
                dense.attach(store.maintenance_connection)
            except BaseException:
                pool.close()
                raise
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
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One transaction joined by the ``_tx`` primitives this thread calls inside it."""
        with self._pool.connection() as conn, conn.transaction():
            self._joined.conn = conn
            try:
                yield conn
            finally:
                self._joined.conn = None

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
        now = datetime.now(UTC)
        last = conn.execute(f"SELECT max(creation_time) AS t FROM {table} WHERE memory_id = %s", (memory_id,))
        value = last.fetchone()["t"]
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
            conn.execute("DELETE FROM memories WHERE memory_id = %s", (memory_id,))
        return int(count["n"])

    # -- entries -------------------------------------------------------------------------------------------

    def _append_entry(self, vault_id: str, memory_id: str, entry: NewEntry) -> tuple[Row, bool]:
        raw_entry, summary, tags, conversation_time, idempotency_key = entry
        by_key = f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE memory_id = %s AND idempotency_key = %s"
        with self._tx() as conn:
            self._require_memory(conn, vault_id, memory_id, lock=True)
            if idempotency_key is not None:
                existing = conn.execute(by_key, (memory_id, idempotency_key)).fetchone()
                if existing is not None:
                    return existing, False
            now = self._next_time(conn, "entries", memory_id)
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
            deleted = conn.execute(
                "DELETE FROM entries WHERE entry_id = %s AND memory_id = %s", (entry_id, memory_id)
            )
            return deleted.rowcount == 1

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

    @staticmethod
    def _lexemes(conn: Any, terms: Sequence[str]) -> list[str]:
        rows = conn.execute(
            "SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('mycelian', t))) AS lexeme "
            "FROM unnest(%s::text[]) AS t",
            (list(terms),),
        ).fetchall()
        return sorted(row["lexeme"] for row in rows)

    def _rank(
        self,
        conn: Any,
        table: str,
        memory_id: str,
        terms: Sequence[str],
        limit: int,
        where: str = "",
        params: Sequence[Any] = (),
    ) -> list[tuple[int, float]]:
        """BM25-shaped ranking of a memory's rows of ``table`` (see the module docstring)."""
        lexemes = self._lexemes(conn, terms)
        if not lexemes or limit <= 0:
            return []
        queries = [_tsquery(lexeme) for lexeme in lexemes]
        total = int(conn.execute(f"SELECT count(*) AS n FROM {table} WHERE memory_id = %s", (memory_id,))
                    .fetchone()["n"])
        # Document frequencies, counted up to half the memory: beyond that the IDF is clamped anyway, and
        # counting every match of a very common term is the costly part of a search.
        cap = total // 2 + 1
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE memory_id = %s AND tsv @@ %s::tsquery LIMIT %s) x)"
            f" AS d{i}"
            for i in range(len(queries))
        )
        found = conn.execute(
            f"SELECT {counts}", [value for q in queries for value in (memory_id, q, cap)]
        ).fetchone()
        frequencies = [int(found[f"d{i}"]) for i in range(len(queries))]
        weights = [_idf(total, n) for n in frequencies]
        score = " + ".join(f"%s * ts_rank('{_RANK_WEIGHTS}', t.tsv, %s::tsquery, 1)" for _ in queries)
        scoring = [value for w, q in zip(weights, queries, strict=True) for value in (w, q)]
        # Like search.prune_common_terms on SQLite: terms in half the memory or more (IDF ~0) still score, but do
        # not make rows candidates, unless the rarer terms find too few rows.
        rare = [q for q, n in zip(queries, frequencies, strict=True) if 2 * n < total]
        candidates = [rare] if rare and len(rare) < len(queries) else []
        candidates.append(queries)
        for matching in candidates:
            rows = conn.execute(
                f"SELECT t.seq, ({score}) AS score FROM {table} t WHERE t.memory_id = %s AND t.tsv @@ %s::tsquery"
                f"{where} ORDER BY score DESC, t.seq DESC LIMIT %s",
                [*scoring, memory_id, " | ".join(matching), *params, limit],
            ).fetchall()
            if len(rows) >= limit:
                break
        return [(int(row["seq"]), float(row["score"])) for row in rows if row["score"] > 0]

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
        self, memory_id: str, terms: list[str], limit: int, after: str | None, before: str | None
    ) -> list[tuple[int, float]]:
        where, params = self._time_bounds(after, before)
        with self._read() as conn:
            return self._rank(conn, "entries", memory_id, terms, limit, where, params)

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

    def _last_entry_seq(self, memory_id: str) -> int:
        with self._read() as conn:
            row = conn.execute(
                "SELECT coalesce(max(seq), 0) AS last FROM entries WHERE memory_id = %s", (memory_id,)
            ).fetchone()
        return int(row["last"])

    def _entry_texts(self, memory_id: str, after_seq: int) -> list[EntryFields]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, raw_entry, summary, tags, coalesce(conversation_time, creation_time) AS moment "
                "FROM entries WHERE memory_id = %s AND seq > %s ORDER BY seq",
                (memory_id, after_seq),
            ).fetchall()
        return [(int(r["seq"]), r["raw_entry"], r["summary"], r["tags"], r["moment"]) for r in rows]

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

    def _dense_similarities(
        self, memory_id: str, query: str, after: str | None, before: str | None
    ) -> tuple[list[int], Any] | None:
        if self._dense is None:
            return None
        with self._read() as conn:
            return self._dense.similarities(conn, memory_id, query, after, before)

    def _dense_hits(
        self, memory_id: str, query: str, k: int, after: str | None, before: str | None
    ) -> DenseHits | None:
        if self._dense is None:
            return None
        return self._dense.hits(self._read, memory_id, query, k, after, before)

    # -- introspection (tests, benchmarks) -----------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        # entries_fts / contexts_fts: rows with a non-empty tsvector (what the SQLite FTS tables hold).
        with self._read() as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM vaults) AS vaults, (SELECT count(*) FROM memories) AS memories, "
                "(SELECT count(*) FROM entries) AS entries, (SELECT count(*) FROM contexts) AS contexts, "
                "(SELECT count(*) FROM entry_vectors) AS entry_vectors, "
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
