"""SQLite's full-text index keyed by memory: every indexed word carries its memory's key, so a search reads only
its own memory's postings.

FTS5 has no per-memory index: with plain words, a query's ``bm25()`` counts each term over the whole file (every
posting of every memory, most of a search's time once the file holds a million entries), and an ``AND`` with a
memory token still walks the other memories' postings. So the index holds *keyed terms*: the stem ``trip`` of an
entry of the memory whose key is 12 is indexed as ``12xtrip`` (:func:`keyed`). A query for ``12xtrip`` touches
exactly memory 12's postings, and FTS5's own counts for it are the memory's document frequencies: ``bm25()`` and
every count here cost what the memory holds, whatever else the file holds.

- **Keys** (``memory_keys``): a small integer per memory, ``AUTOINCREMENT`` so a deleted memory's key is never
  given to another one; made with the memory (migration 5 gave every existing memory one).
- **Terms**: the stems of ``text.analysis`` (FTS5's porter / unicode61 / remove_diacritics 2 rules, computed by the
  write that already tokenises the entry for its statistics), keyed and space-joined; the index's ``ascii``
  tokenizer splits only on ASCII non-alphanumerics, so a keyed term (letters and digits, any script) stays one
  token. The decimal key ends at its first ``x``: keyed terms of two memories never collide.
- **Tables** (contentless): ``entries_fts (raw_entry, summary, labels, dated)``, rowid = the entry's seq, and
  ``contexts_fts (content)``, rowid = the context's seq. The store writes and deletes their rows in the same
  transaction as the rows they index (no triggers: the terms come from Python). A contentless row's ``'delete'``
  needs the exact indexed values, recomputed here from the stored row by the same functions: so a change to
  ``text.analysis``'s stems or fields needs a migration that rebuilds the index (:func:`rebuild`), as the term
  statistics need a recount.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from mycelian_agent.memory_server.text.analysis import entry_fields, tokens

__all__ = [
    "CONTEXT_COLUMNS",
    "ENTRY_COLUMNS",
    "create_key",
    "index_context",
    "index_entry",
    "keyed",
    "memory_key",
    "rebuild",
    "unindex_context",
    "unindex_entry",
    "unindex_memory",
]

#: The indexed columns of ``entries_fts`` (``text.analysis.ENTRY_WEIGHTS`` weigh them, in this order).
ENTRY_COLUMNS = ("raw_entry", "summary", "labels", "dated")
#: The indexed column of ``contexts_fts``.
CONTEXT_COLUMNS = ("content",)

_INSERT_ENTRY = f"INSERT INTO entries_fts (rowid, {', '.join(ENTRY_COLUMNS)}) VALUES (?, ?, ?, ?, ?)"
_DELETE_ENTRY = (
    f"INSERT INTO entries_fts (entries_fts, rowid, {', '.join(ENTRY_COLUMNS)}) VALUES ('delete', ?, ?, ?, ?, ?)"
)
_INSERT_CONTEXT = "INSERT INTO contexts_fts (rowid, content) VALUES (?, ?)"
_DELETE_CONTEXT = "INSERT INTO contexts_fts (contexts_fts, rowid, content) VALUES ('delete', ?, ?)"


def keyed(key: int, stems: Iterable[str]) -> str:
    """``stems`` as memory ``key``'s index terms, space-joined (a query quotes each one)."""
    prefix = f"{key}x"
    return " ".join(prefix + stem for stem in stems)


def memory_key(conn: sqlite3.Connection, memory_id: str) -> int | None:
    """The memory's index key, or None if it has none (no such memory)."""
    row = conn.execute("SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,)).fetchone()
    return None if row is None else int(row[0])


def create_key(conn: sqlite3.Connection, memory_id: str) -> int:
    """Give a new memory its key (inside the transaction that inserts the memory)."""
    cursor = conn.execute("INSERT INTO memory_keys (memory_id) VALUES (?)", (memory_id,))
    if cursor.lastrowid is None:  # (never after an INSERT into a rowid table)
        raise sqlite3.DatabaseError(f"memory {memory_id} got no index key")
    return int(cursor.lastrowid)


def _entry_values(key: int, seq: int, fields: Sequence[Sequence[str]]) -> tuple[int, str, str, str, str]:
    raw_entry, summary, labels, dated = (keyed(key, field) for field in fields)
    return seq, raw_entry, summary, labels, dated


def index_entry(conn: sqlite3.Connection, key: int, seq: int, fields: Sequence[Sequence[str]]) -> None:
    """Index entry ``seq`` of the memory ``key`` from its :func:`~text.analysis.entry_fields`."""
    conn.execute(_INSERT_ENTRY, _entry_values(key, seq, fields))


def unindex_entry(conn: sqlite3.Connection, key: int, seq: int, fields: Sequence[Sequence[str]]) -> None:
    """Remove entry ``seq`` from the index (``fields``: what :func:`index_entry` was given, recomputed from the row)."""
    conn.execute(_DELETE_ENTRY, _entry_values(key, seq, fields))


def index_context(conn: sqlite3.Connection, key: int, seq: int, content: str) -> None:
    """Index context snapshot ``seq`` of the memory ``key``."""
    conn.execute(_INSERT_CONTEXT, (seq, keyed(key, tokens(content))))


def unindex_context(conn: sqlite3.Connection, key: int, seq: int, content: str) -> None:
    """Remove context snapshot ``seq`` (of the memory ``key``, holding ``content``) from the index."""
    conn.execute(_DELETE_CONTEXT, (seq, keyed(key, tokens(content))))


def _entries_of(conn: sqlite3.Connection, memory_id: str | None) -> Iterable[tuple[int, str, list[list[str]]]]:
    sql = (
        "SELECT e.seq, e.memory_id, e.raw_entry, e.summary, e.tags, "
        "coalesce(e.conversation_time, e.creation_time) FROM entries e"
    )
    rows = conn.execute(sql + " WHERE e.memory_id = ?", (memory_id,)) if memory_id else conn.execute(sql)
    for seq, owner, raw_entry, summary, tags, moment in rows:
        yield seq, owner, list(entry_fields(raw_entry, summary, tags, moment))


def unindex_memory(conn: sqlite3.Connection, memory_id: str) -> None:
    """Remove all of a memory's entries and context snapshots from the index (before the memory is deleted: its rows
    cascade, and the index rows must go with them)."""
    key = memory_key(conn, memory_id)
    if key is None:
        return
    conn.executemany(
        _DELETE_ENTRY, [_entry_values(key, seq, fields) for seq, _, fields in list(_entries_of(conn, memory_id))]
    )
    contexts = conn.execute("SELECT seq, content FROM contexts WHERE memory_id = ?", (memory_id,)).fetchall()
    conn.executemany(_DELETE_CONTEXT, [(seq, keyed(key, tokens(content))) for seq, content in contexts])


def rebuild(conn: sqlite3.Connection) -> None:
    """Index every entry and context snapshot of the database (migration 5, inside its transaction; the tables are
    new and empty). Memories without a key get one, oldest first."""
    conn.execute(
        "INSERT INTO memory_keys (memory_id) SELECT memory_id FROM memories "
        "WHERE memory_id NOT IN (SELECT memory_id FROM memory_keys) ORDER BY creation_time, rowid"
    )
    keys = dict(conn.execute("SELECT memory_id, key FROM memory_keys").fetchall())
    batch: list[tuple[int, str, str, str, str]] = []
    for seq, owner, fields in _entries_of(conn, None):
        batch.append(_entry_values(keys[owner], seq, fields))
        if len(batch) >= 1000:
            conn.executemany(_INSERT_ENTRY, batch)
            batch.clear()
    conn.executemany(_INSERT_ENTRY, batch)
    contexts = conn.execute("SELECT seq, memory_id, content FROM contexts")
    conn.executemany(_INSERT_CONTEXT, ((seq, keyed(keys[owner], tokens(content))) for seq, owner, content in contexts))
