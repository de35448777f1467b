"""The memory database schema, as numbered migrations tracked in ``PRAGMA user_version``.

Each migration is a list of steps (SQL statements, or functions of the connection for steps that need Python)
applied in one ``BEGIN IMMEDIATE`` transaction together with the new ``user_version``, so applying is atomic and
idempotent (a second process opening the same file waits, re-reads the version and skips what is done). Never edit
a released migration; append a new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.storage.sqlite import postings

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

_TOKENIZER = "porter unicode61 remove_diacritics 2"

# The FTS tables are contentless (the text lives once, in entries/contexts); triggers keep them in step, and the
# 'delete' command needs the exact indexed values, which the triggers pass from the old row.
_V1 = [
    """CREATE TABLE vaults (
        vault_id TEXT PRIMARY KEY,
        title TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        creation_time TEXT NOT NULL
    )""",
    """CREATE TABLE memories (
        memory_id TEXT PRIMARY KEY,
        vault_id TEXT NOT NULL REFERENCES vaults(vault_id) ON DELETE CASCADE,
        title TEXT NOT NULL,
        memory_type TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        creation_time TEXT NOT NULL,
        UNIQUE (vault_id, title)
    )""",
    """CREATE TABLE entries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        entry_id TEXT NOT NULL UNIQUE,
        memory_id TEXT NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        vault_id TEXT NOT NULL,
        creation_time TEXT NOT NULL,
        conversation_time TEXT,
        raw_entry TEXT NOT NULL,
        summary TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '{}',
        idempotency_key TEXT,
        UNIQUE (memory_id, idempotency_key)
    )""",
    "CREATE INDEX entries_by_time ON entries (memory_id, creation_time, seq)",
    """CREATE TABLE contexts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        content TEXT NOT NULL,
        creation_time TEXT NOT NULL
    )""",
    "CREATE INDEX contexts_by_memory ON contexts (memory_id, seq)",
    f"CREATE VIRTUAL TABLE entries_fts USING fts5(mkey, raw_entry, summary, content='', tokenize='{_TOKENIZER}')",
    f"CREATE VIRTUAL TABLE contexts_fts USING fts5(mkey, content, content='', tokenize='{_TOKENIZER}')",
    """CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
        INSERT INTO entries_fts (rowid, mkey, raw_entry, summary)
        VALUES (new.seq, 'm' || replace(new.memory_id, '-', ''), new.raw_entry, new.summary);
    END""",
    """CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
        INSERT INTO entries_fts (entries_fts, rowid, mkey, raw_entry, summary)
        VALUES ('delete', old.seq, 'm' || replace(old.memory_id, '-', ''), old.raw_entry, old.summary);
    END""",
    """CREATE TRIGGER entries_au AFTER UPDATE OF memory_id, raw_entry, summary ON entries BEGIN
        INSERT INTO entries_fts (entries_fts, rowid, mkey, raw_entry, summary)
        VALUES ('delete', old.seq, 'm' || replace(old.memory_id, '-', ''), old.raw_entry, old.summary);
        INSERT INTO entries_fts (rowid, mkey, raw_entry, summary)
        VALUES (new.seq, 'm' || replace(new.memory_id, '-', ''), new.raw_entry, new.summary);
    END""",
    """CREATE TRIGGER contexts_ai AFTER INSERT ON contexts BEGIN
        INSERT INTO contexts_fts (rowid, mkey, content)
        VALUES (new.seq, 'm' || replace(new.memory_id, '-', ''), new.content);
    END""",
    """CREATE TRIGGER contexts_ad AFTER DELETE ON contexts BEGIN
        INSERT INTO contexts_fts (contexts_fts, rowid, mkey, content)
        VALUES ('delete', old.seq, 'm' || replace(old.memory_id, '-', ''), old.content);
    END""",
]

# Dense vectors (the optional embeddings extra); created always so a database moves freely between setups.
_V2 = [
    """CREATE TABLE entry_vectors (
        seq INTEGER PRIMARY KEY REFERENCES entries(seq) ON DELETE CASCADE,
        memory_id TEXT NOT NULL,
        model TEXT NOT NULL,
        vector BLOB NOT NULL
    )""",
    "CREATE INDEX entry_vectors_by_memory ON entry_vectors (memory_id, model)",
]

# Migration 3 rebuilds entries_fts with two columns derived from the row, so names and dates are words a query can
# match: ``labels`` (the entry's tag values without digits: speaker names, topics — identifiers and
# counters such as ids, turn numbers and session keys carry digits and would only add noise) and ``dated`` (the
# conversation time, else the creation time, as words: "8 May 2023"). Both are pure functions of the row, so the
# delete triggers recompute the exact indexed values (the table stays contentless). Existing rows are re-indexed in
# the same transaction. The statements are built from the helpers below: like every released migration they must
# never change (a new index layout is a new migration that rebuilds the table again).
_LABELS = (
    "(SELECT coalesce(group_concat(value, ' '), '') FROM json_each({row}.tags) "
    "WHERE type = 'text' AND value NOT GLOB '*[0-9]*')"
)
_MONTHS = " ".join(
    f"WHEN '{n:02d}' THEN '{name}'"
    for n, name in enumerate(
        "January February March April May June July August September October November December".split(), start=1
    )
)
_DATED = (
    "(SELECT CAST(substr(t, 9, 2) AS INTEGER) || ' ' || CASE substr(t, 6, 2) " + _MONTHS + " ELSE '' END"
    " || ' ' || substr(t, 1, 4) FROM (SELECT coalesce({row}.conversation_time, {row}.creation_time) AS t))"
)


def _entry_values(row: str) -> str:
    return (
        f"{row}.seq, 'm' || replace({row}.memory_id, '-', ''), {row}.raw_entry, {row}.summary, "
        f"{_LABELS.format(row=row)}, {_DATED.format(row=row)}"
    )


_ENTRY_COLUMNS = "rowid, mkey, raw_entry, summary, labels, dated"
_V3 = [
    "DROP TRIGGER entries_ai",
    "DROP TRIGGER entries_ad",
    "DROP TRIGGER entries_au",
    "DROP TABLE entries_fts",
    f"CREATE VIRTUAL TABLE entries_fts USING fts5(mkey, raw_entry, summary, labels, dated, content='', "
    f"tokenize='{_TOKENIZER}')",
    f"""CREATE TRIGGER entries_ai AFTER INSERT ON entries BEGIN
        INSERT INTO entries_fts ({_ENTRY_COLUMNS}) VALUES ({_entry_values("new")});
    END""",
    f"""CREATE TRIGGER entries_ad AFTER DELETE ON entries BEGIN
        INSERT INTO entries_fts (entries_fts, {_ENTRY_COLUMNS}) VALUES ('delete', {_entry_values("old")});
    END""",
    f"""CREATE TRIGGER entries_au AFTER UPDATE OF memory_id, raw_entry, summary, tags, conversation_time, creation_time
    ON entries BEGIN
        INSERT INTO entries_fts (entries_fts, {_ENTRY_COLUMNS}) VALUES ('delete', {_entry_values("old")});
        INSERT INTO entries_fts ({_ENTRY_COLUMNS}) VALUES ({_entry_values("new")});
    END""",
    # An entry's neighbours in its memory (search adds their scores: see retrieval/ranking.py, with_context).
    "CREATE INDEX entries_by_seq ON entries (memory_id, seq)",
    f"INSERT INTO entries_fts ({_ENTRY_COLUMNS}) SELECT {_entry_values('entries')} FROM entries",
]


def _count_terms(conn: sqlite3.Connection) -> None:
    """Version 4, after its tables: count every memory's entries into them (``term_stats.recount``), one memory
    at a time."""
    memories = [row[0] for row in conn.execute("SELECT DISTINCT memory_id FROM entries ORDER BY memory_id")]
    for memory_id in memories:
        rows = conn.execute(
            "SELECT raw_entry, summary, tags, coalesce(conversation_time, creation_time) FROM entries "
            "WHERE memory_id = ? ORDER BY seq",
            (memory_id,),
        )
        total = term_stats.recount((r[0], r[1], r[2], r[3]) for r in rows)
        conn.execute(
            "INSERT INTO memory_stats (memory_id, entries, tokens) VALUES (?, ?, ?)",
            (memory_id, total.entries, total.tokens),
        )
        conn.executemany(
            "INSERT INTO term_stats (memory_id, kind, term, entries) VALUES (?, ?, ?, ?)",
            ((memory_id, kind, term, n) for kind, term, n in total.rows()),
        )


# Migration 4: per-memory term statistics (term_stats.py), kept by the store in each write's transaction, so a
# search reads only the rows of its terms instead of counting the memory. Existing entries are counted here.
_V4: list[str | Callable[[sqlite3.Connection], None]] = [
    """CREATE TABLE memory_stats (
        memory_id TEXT PRIMARY KEY REFERENCES memories(memory_id) ON DELETE CASCADE,
        entries INTEGER NOT NULL,
        tokens INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE term_stats (
        memory_id TEXT NOT NULL REFERENCES memories(memory_id) ON DELETE CASCADE,
        kind INTEGER NOT NULL,
        term TEXT NOT NULL,
        entries INTEGER NOT NULL,
        PRIMARY KEY (memory_id, kind, term)
    ) WITHOUT ROWID""",
    _count_terms,
]

# Migration 5: the full-text tables keyed by memory (postings.py), so a search reads only its memory's postings and
# FTS5's counts are the memory's: each indexed term carries the memory's key (memory_keys). The terms come from
# Python (text.analysis, the same stems the statistics count), so the store writes the index rows and the triggers
# go. Every existing entry and context snapshot is re-indexed in the same transaction (~1 minute per 200,000
# entries on 2 cores).
_V5: list[str | Callable[[sqlite3.Connection], None]] = [
    "DROP TRIGGER entries_ai",
    "DROP TRIGGER entries_ad",
    "DROP TRIGGER entries_au",
    "DROP TRIGGER contexts_ai",
    "DROP TRIGGER contexts_ad",
    "DROP TABLE entries_fts",
    "DROP TABLE contexts_fts",
    """CREATE TABLE memory_keys (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT NOT NULL UNIQUE REFERENCES memories(memory_id) ON DELETE CASCADE
    )""",
    "CREATE VIRTUAL TABLE entries_fts USING fts5(raw_entry, summary, labels, dated, content='', tokenize='ascii')",
    "CREATE VIRTUAL TABLE contexts_fts USING fts5(content, content='', tokenize='ascii')",
    postings.rebuild,
]

# Migration 6: entry versions (``update_entry``). An entry keeps its id and seq (its place in the conversation) and
# counts its versions; each replaced version is kept, unindexed, in entry_versions until the entry is deleted.
_V6 = [
    "ALTER TABLE entries ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
    """CREATE TABLE entry_versions (
        seq INTEGER NOT NULL REFERENCES entries(seq) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        entry_id TEXT NOT NULL,
        memory_id TEXT NOT NULL,
        vault_id TEXT NOT NULL,
        creation_time TEXT NOT NULL,
        conversation_time TEXT,
        raw_entry TEXT NOT NULL,
        summary TEXT NOT NULL,
        tags TEXT NOT NULL,
        replaced_at TEXT NOT NULL,
        UNIQUE (seq, version)
    )""",
    "CREATE INDEX entry_versions_by_entry ON entry_versions (entry_id, version)",
]

#: Migration ``n`` (1-based) is ``MIGRATIONS[n - 1]``: SQL statements, or functions of the connection (run inside
#: the migration's transaction).
MIGRATIONS: tuple[Sequence[str | Callable[[sqlite3.Connection], None]], ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
#: The schema version a fully migrated database has.
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn`` (autocommit mode) up to :data:`SCHEMA_VERSION`; return the version found before."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise MemoryServerError(
            f"the memory database has schema version {found}, newer than this server's {SCHEMA_VERSION}: "
            "upgrade mycelian-agent"
        )
    if found == SCHEMA_VERSION:
        return found
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                if callable(statement):
                    statement(conn)
                else:
                    conn.execute(statement)
            # PRAGMA takes no parameters; version is an int from our own table, never user input.
            conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found
