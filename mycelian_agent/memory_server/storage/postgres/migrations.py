"""The PostgreSQL schema of the memory store, as numbered migrations tracked in ``mycelian_schema``.

Each pending migration is applied in one transaction together with its row in ``mycelian_schema``, under a
transaction-scoped advisory lock: processes that start at once (N servers or workers on one database) queue on
the lock, and each one re-reads the version after getting it, so all succeed and each migration runs once. Never
edit a released migration; append a new one.

Full-text search: ``tsvector`` columns (written by the store with the entry, weights A-D) with GIN indexes, in a
text search configuration ``mycelian``: the English Snowball stemmer *without* a stop-word list, like SQLite's
porter tokenizer (stop words are dropped from queries, not from the index, so a query made only of them still
finds them). Timestamps are kept as the fixed-width UTC text of the tool contract in ``COLLATE "C"`` columns,
so comparisons and cursors behave exactly as on SQLite, whatever the cluster's locale.

Search by memory (:func:`_index_by_memory`, the ``btree_gin`` extension of PostgreSQL's contrib): GIN indexes on
``(memory_id, tsv)`` of entries and contexts, so a search reads only the searched memory's postings (the
single-column ``tsv`` indexes held every memory's, each row filtered on the heap); they replace the single-column
ones. Where ``CREATE EXTENSION`` is refused (no CREATE right on the database), the single-column indexes stay and
the store says so once (see :data:`MEMORY_INDEX` and ``pg_store.PostgresStore.open``); an administrator's
``CREATE EXTENSION btree_gin`` plus the statements of :data:`MEMORY_INDEX_STATEMENTS` add them later (and
:data:`PENDING_LIST_STATEMENT` for each, as the store's message says: migration 7 bounds the pending lists of the
indexes there are when it runs).

Dense vectors: ``entry_vectors`` holds float32 bytes like SQLite's table, scored by an exact scan in the server
(``retrieval/dense``), and a pgvector column with an HNSW index where the extension exists (``vectors.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.text.analysis import entry_dated, entry_labels, index_words

__all__ = [
    "ADVISORY_LOCK_KEY",
    "ENTRY_TSV",
    "MEMORY_INDEX",
    "MEMORY_INDEX_STATEMENTS",
    "MIGRATIONS",
    "PENDING_LIST_KB",
    "PENDING_LIST_STATEMENT",
    "SCHEMA_VERSION",
    "TERMS_VERSION",
    "VERSIONS_VERSION",
    "has_memory_index",
    "migrate",
    "schema_version",
]

#: The advisory lock (one bigint) that serialises migrations of one database: "mycelian" in ASCII.
ADVISORY_LOCK_KEY = 0x6D7963656C69616E

_TEXT_C = 'text COLLATE "C"'

_V1 = [
    "CREATE TEXT SEARCH DICTIONARY mycelian_stem (TEMPLATE = snowball, Language = english)",
    "CREATE TEXT SEARCH CONFIGURATION mycelian (COPY = pg_catalog.english)",
    "ALTER TEXT SEARCH CONFIGURATION mycelian ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, "
    "hword, hword_part WITH mycelian_stem",
    f"""CREATE TABLE vaults (
        vault_id text PRIMARY KEY,
        title text NOT NULL UNIQUE,
        description text NOT NULL DEFAULT '',
        creation_time {_TEXT_C} NOT NULL
    )""",
    f"""CREATE TABLE memories (
        memory_id text PRIMARY KEY,
        vault_id text NOT NULL REFERENCES vaults(vault_id) ON DELETE CASCADE,
        title text NOT NULL,
        memory_type text NOT NULL,
        description text NOT NULL DEFAULT '',
        creation_time {_TEXT_C} NOT NULL,
        UNIQUE (vault_id, title)
    )""",
    f"""CREATE TABLE entries (
        seq bigserial PRIMARY KEY,
        entry_id text NOT NULL UNIQUE,
        memory_id text NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        vault_id text NOT NULL,
        creation_time {_TEXT_C} NOT NULL,
        conversation_time {_TEXT_C},
        raw_entry text NOT NULL,
        summary text NOT NULL,
        tags text NOT NULL DEFAULT '{{}}',
        idempotency_key text,
        tsv tsvector NOT NULL,
        UNIQUE (memory_id, idempotency_key)
    )""",
    "CREATE INDEX entries_by_time ON entries (memory_id, creation_time, seq)",
    "CREATE INDEX entries_by_seq ON entries (memory_id, seq)",
    "CREATE INDEX entries_tsv ON entries USING gin (tsv)",
    f"""CREATE TABLE contexts (
        seq bigserial PRIMARY KEY,
        memory_id text NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        content text NOT NULL,
        creation_time {_TEXT_C} NOT NULL,
        tsv tsvector NOT NULL
    )""",
    "CREATE INDEX contexts_by_memory ON contexts (memory_id, seq)",
    "CREATE INDEX contexts_tsv ON contexts USING gin (tsv)",
    """CREATE TABLE entry_vectors (
        seq bigint PRIMARY KEY REFERENCES entries(seq) ON DELETE CASCADE,
        memory_id text NOT NULL,
        model text NOT NULL,
        vector bytea NOT NULL
    )""",
    "CREATE INDEX entry_vectors_by_memory ON entry_vectors (memory_id, model)",
]

#: An entry's ``tsvector`` from the parameters ``summary_words``, ``raw_words``, ``labels`` and ``dated`` (each
#: passed through ``analysis.index_words``): the summary weighs A, the text and the speaker's name B, the date C.
ENTRY_TSV = (
    "setweight(to_tsvector('mycelian', %(summary_words)s), 'A') "
    "|| setweight(to_tsvector('mycelian', %(raw_words)s), 'B') "
    "|| setweight(to_tsvector('mycelian', %(labels)s), 'B') || setweight(to_tsvector('mycelian', %(dated)s), 'C')"
)


def _reindex_non_ascii(conn: Any) -> None:
    """Version 2: index the word tokens (``analysis.index_words``) of every entry and context holding a non-ASCII
    character. Version 1 passed the raw text to ``to_tsvector``, which under ``lc_ctype=C`` glued such characters
    to the words beside them; ASCII-only rows tokenise the same either way and are left alone."""
    non_ascii = "octet_length({0}) <> char_length({0})"
    rows = conn.execute(
        "SELECT seq, raw_entry, summary, tags, COALESCE(conversation_time, creation_time) FROM entries "
        f"WHERE {non_ascii.format('raw_entry')} OR {non_ascii.format('summary')} OR {non_ascii.format('tags')}"
    ).fetchall()
    with conn.cursor() as cursor:
        cursor.executemany(
            f"UPDATE entries SET tsv = {ENTRY_TSV} WHERE seq = %(seq)s",
            [
                {
                    "seq": seq,
                    "summary_words": index_words(summary),
                    "raw_words": index_words(raw_entry),
                    "labels": index_words(entry_labels(json.loads(tags))),
                    "dated": entry_dated(moment),
                }
                for seq, raw_entry, summary, tags, moment in rows
            ],
        )
        contexts = conn.execute(f"SELECT seq, content FROM contexts WHERE {non_ascii.format('content')}").fetchall()
        cursor.executemany(
            "UPDATE contexts SET tsv = to_tsvector('mycelian', %s) WHERE seq = %s",
            [(index_words(content), seq) for seq, content in contexts],
        )


def _count_terms(conn: Any) -> None:
    """Version 3, after its tables: count every memory's entries into them (``term_stats.recount``), one memory
    at a time, written with COPY."""
    memories = [row[0] for row in conn.execute("SELECT DISTINCT memory_id FROM entries ORDER BY memory_id")]
    for memory_id in memories:
        rows = conn.execute(
            "SELECT raw_entry, summary, tags, COALESCE(conversation_time, creation_time) FROM entries "
            "WHERE memory_id = %s ORDER BY seq",
            (memory_id,),
        ).fetchall()
        total = term_stats.recount((r[0], r[1], r[2], r[3]) for r in rows)
        conn.execute(
            "INSERT INTO memory_stats (memory_id, entries, tokens) VALUES (%s, %s, %s)",
            (memory_id, total.entries, total.tokens),
        )
        copying = "COPY term_stats (memory_id, kind, term, entries) FROM STDIN"
        with conn.cursor() as cursor, cursor.copy(copying) as copy:
            for kind, term, n in total.rows():
                copy.write_row((memory_id, kind, term, n))
    conn.execute("ANALYZE memory_stats, term_stats")  # planned from real numbers before autovacuum gets to them


# Version 3: per-memory term statistics (term_stats.py), kept by the store in each write's transaction, so a search
# reads only the rows of its terms instead of counting the memory; existing entries are counted here. Upserts
# rewrite a row per term on every write: a fill factor below 100 leaves room on the page for HOT updates.
_V3: list[str | Callable[[Any], None]] = [
    """CREATE TABLE memory_stats (
        memory_id text PRIMARY KEY REFERENCES memories(memory_id) ON DELETE CASCADE,
        entries bigint NOT NULL,
        tokens bigint NOT NULL
    ) WITH (fillfactor = 80)""",
    f"""CREATE TABLE term_stats (
        memory_id text NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        kind smallint NOT NULL,
        term {_TEXT_C} NOT NULL,
        entries integer NOT NULL,
        PRIMARY KEY (memory_id, kind, term)
    ) WITH (fillfactor = 80)""",
    _count_terms,
]


#: The index by memory that search uses when it exists (see the module docstring).
MEMORY_INDEX = "entries_memory_tsv"
#: The by-memory migration's statements once ``btree_gin`` is there: the two-column indexes replace the
#: single-column ones.
MEMORY_INDEX_STATEMENTS = (
    f"CREATE INDEX IF NOT EXISTS {MEMORY_INDEX} ON entries USING gin (memory_id, tsv)",
    "CREATE INDEX IF NOT EXISTS contexts_memory_tsv ON contexts USING gin (memory_id, tsv)",
    "DROP INDEX IF EXISTS entries_tsv",
    "DROP INDEX IF EXISTS contexts_tsv",
)
# Building the index over existing entries holds the entries table's SHARE lock (writes wait, reads go on) until
# the migration commits (measured: 400k entries in 8 s at this setting, so ~20 s a million).
_BUILD_MEMORY = "SET LOCAL maintenance_work_mem = '256MB'"


def _index_by_memory(conn: Any) -> None:
    """The by-memory migration: two-column GIN indexes ``(memory_id, tsv)`` (needs ``btree_gin``); without the
    right to create the extension, nothing changes (the single-column indexes stay; the store says so)."""
    import psycopg

    try:
        with conn.transaction():  # a savepoint: a refusal leaves the migration's transaction usable
            conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFile, psycopg.errors.FeatureNotSupported):
        return
    conn.execute(_BUILD_MEMORY)
    for statement in MEMORY_INDEX_STATEMENTS:
        conn.execute(statement)


def has_memory_index(conn: Any) -> bool:
    """Whether the database behind ``conn`` has the index by memory (else search filters on the heap)."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (MEMORY_INDEX,)).fetchone()
    return bool(row[0] if isinstance(row, tuple) else next(iter(row.values())))


def _inline_tsvectors(conn: Any) -> None:
    """Version 5: keep a context snapshot's ``tsvector`` in its row (``STORAGE MAIN``: compressed or moved out of
    line only when the row cannot fit in a page; the text goes out first). Such a ``tsvector`` (~5 KB for 40 lines)
    does not compress by a quarter, so it was stored out of line, uncompressed: every use of it in a ranking (the
    match, one ``ts_rank`` per lexeme) read it from the TOAST table again, 2.4x the cost of reading it in place. The
    memory id and the time stay in the row whatever its size (``PLAIN``: short; with the text out of line and the
    ``tsvector`` in, the row could still be over the TOAST threshold, which would move them out and make every
    check of a row's memory read the TOAST table). The existing snapshots are rewritten so (a copy of the same
    value, ``|| ''``; a context table is small: one snapshot per session). Entries keep the default: their
    ``tsvector`` is almost always small and in the row."""
    for column, storage in (("tsv", "MAIN"), ("memory_id", "PLAIN"), ("creation_time", "PLAIN")):
        conn.execute(f"ALTER TABLE contexts ALTER COLUMN {column} SET STORAGE {storage}")
    conn.execute("UPDATE contexts SET tsv = tsv || ''::tsvector")


# Version 6: each entry's BM25 terms as its write computed them (``terms.py``), read by searches in place of
# tokenising candidates their process has not seen. Nullable, no backfill: older rows are analysed from their text.
_V6 = ["ALTER TABLE entries ADD COLUMN terms text"]
#: The schema version from which entries keep their terms.
TERMS_VERSION = 6

#: Each GIN index's pending list is flushed into the index once it holds this many kB (PostgreSQL's default: 4 MB).
#: Every scan of the index reads the whole pending list: right after a bulk load a list near 4 MB (~5,000 entries)
#: cost a search in a 100,000-entry memory ~2 ms (295 pages: 14.6-15.0 ms against 12.7-13.6 once flushed); bounded
#: at 256 kB a scan reads at most 32 pages, and a write merges ~350 entries' keys a flush instead of ~5,000.
PENDING_LIST_KB = 256
#: The full-text indexes there may be (by memory, else the single-column ones; migrations 1 and 4).
_GIN_INDEXES = (MEMORY_INDEX, "contexts_memory_tsv", "entries_tsv", "contexts_tsv")
#: What bounds an index's pending list (``{}``: its name).
PENDING_LIST_STATEMENT = f"ALTER INDEX IF EXISTS {{}} SET (gin_pending_list_limit = {PENDING_LIST_KB})"


def _bound_pending_lists(conn: Any) -> None:
    """Version 7: bound the pending list of each full-text index (:data:`PENDING_LIST_KB`)."""
    for index in _GIN_INDEXES:
        conn.execute(PENDING_LIST_STATEMENT.format(index))


# Version 8: entry versions (``update_entry``). An entry keeps its id and seq (its place in the conversation) and
# counts its versions; each replaced version is kept, unindexed, in entry_versions until the entry is deleted.
_V8 = [
    "ALTER TABLE entries ADD COLUMN version integer NOT NULL DEFAULT 1",
    f"""CREATE TABLE entry_versions (
        seq bigint NOT NULL REFERENCES entries(seq) ON DELETE CASCADE,
        version integer NOT NULL,
        entry_id text NOT NULL,
        memory_id text NOT NULL,
        vault_id text NOT NULL,
        creation_time {_TEXT_C} NOT NULL,
        conversation_time {_TEXT_C},
        raw_entry text NOT NULL,
        summary text NOT NULL,
        tags text NOT NULL,
        replaced_at {_TEXT_C} NOT NULL,
        PRIMARY KEY (seq, version)
    )""",
    "CREATE INDEX entry_versions_by_entry ON entry_versions (entry_id, version)",
]
#: The schema version from which entries have versions.
VERSIONS_VERSION = 8

#: Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``: SQL statements, or functions of the connection for steps
#: that need Python (each one runs inside the migration's transaction).
MIGRATIONS: tuple[Sequence[str | Callable[[Any], None]], ...] = (
    _V1,
    [_reindex_non_ascii],
    _V3,
    [_index_by_memory],
    [_inline_tsvectors],
    _V6,
    [_bound_pending_lists],
    _V8,
)
#: The schema version a fully migrated database has.
SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS mycelian_schema (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


def schema_version(conn: Any) -> int:
    """The schema version of the database behind ``conn`` (0 when it has none yet)."""
    if conn.execute("SELECT to_regclass('mycelian_schema')").fetchone()[0] is None:
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM mycelian_schema").fetchone()[0])


def _check(found: int) -> None:
    if found > SCHEMA_VERSION:
        raise MemoryServerError(
            f"the memory database has schema version {found}, newer than this server's {SCHEMA_VERSION}: "
            "upgrade mycelian-agent"
        )


def migrate(conn: Any) -> int:
    """Bring the database behind ``conn`` (a psycopg connection in autocommit mode) up to
    :data:`SCHEMA_VERSION`; return the version found before. Safe to run from many processes at once."""
    found = schema_version(conn)
    _check(found)
    if found == SCHEMA_VERSION:
        return found
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_KEY,))
        conn.execute(_VERSION_TABLE)
        current = schema_version(conn)  # another process may have migrated while we waited for the lock
        _check(current)
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                if callable(statement):
                    statement(conn)
                else:
                    conn.execute(statement)
            conn.execute("INSERT INTO mycelian_schema (version) VALUES (%s)", (version,))
    return found
