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

Dense vectors: no pgvector (see pg_store.py); ``entry_vectors`` holds float32 bytes like SQLite's table, scored
by an exact scan in the server (``embeddings.DenseVectors``).
"""

from __future__ import annotations

from typing import Any

from ..errors import MemoryServerError

__all__ = ["ADVISORY_LOCK_KEY", "MIGRATIONS", "SCHEMA_VERSION", "migrate", "schema_version"]

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

#: Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``.
MIGRATIONS: tuple[list[str], ...] = (_V1,)
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
                conn.execute(statement)
            conn.execute("INSERT INTO mycelian_schema (version) VALUES (%s)", (version,))
    return found
