"""``mycelian-agent check DB``: whether a SQLite memory file is sound, and saving what of it can still be read.

The file is opened read-only (nothing is migrated or repaired): SQLite's ``PRAGMA integrity_check``, then each
memory's entries read in full, so the report says which memories are whole. :func:`salvage_database` reads the
entries one by one by their number, so a damaged page loses only the entries on it, and writes them as JSON.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError

__all__ = ["DatabaseCheck", "MemoryCheck", "check_database", "salvage_database"]

#: Problems of ``integrity_check`` listed at most (a badly damaged file has thousands).
PROBLEMS_LISTED = 5

_ENTRY_COLUMNS = ("entry_id", "memory_id", "creation_time", "conversation_time", "raw_entry", "summary", "tags")


@dataclass(frozen=True)
class MemoryCheck:
    """One memory of the file: its vault and title, and its entries read (None: they cannot all be read)."""

    vault: str
    title: str
    entries: int | None


@dataclass
class DatabaseCheck:
    """What :func:`check_database` found: ``problems`` empty when the file is sound; ``database`` False when the
    file is no SQLite database at all (empty, or something else)."""

    path: str
    problems: list[str] = field(default_factory=list)
    memories: list[MemoryCheck] = field(default_factory=list)
    database: bool = True

    @property
    def sound(self) -> bool:
        return not self.problems


def _open(path: str | Path) -> tuple[Path, sqlite3.Connection | None, str | None]:
    """The file, a read-only connection to it (None when it is no database) and why not."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{file}: no such file (give the path of the memory database)")
    try:
        if file.stat().st_size == 0:
            return file, None, "the file is empty: nothing was ever stored in it"
        with file.open("rb"):  # sqlite3 says only "unable to open database file"
            pass
        conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"{file}: cannot open it ({getattr(exc, 'strerror', None) or exc})") from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        if "not a database" in str(exc):
            return file, None, str(exc)
        raise ConfigError(f"{file}: cannot be read at all ({exc}): restore it from a backup") from exc
    return file, conn, None


def check_database(path: str | Path) -> DatabaseCheck:
    """Check the SQLite memory file ``path`` without changing it. A missing path is a :class:`ConfigError`."""
    file, conn, problem = _open(path)
    report = DatabaseCheck(str(file))
    if conn is None:
        report.problems.append(problem or "not a database")
        report.database = False
        return report
    with closing(conn):
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as exc:
            rows = [(str(exc),)]
        lines = [
            line
            for row in rows
            for line in str(row[0]).splitlines()
            if line != "ok" and not line.startswith("*** in database")
        ]
        report.problems += lines[:PROBLEMS_LISTED] + (
            [f"and {len(lines) - PROBLEMS_LISTED} more"] if len(lines) > PROBLEMS_LISTED else []
        )
        for vault, title, memory_id in _memory_rows(conn):
            try:
                count = sum(
                    1
                    for _ in conn.execute(
                        f"SELECT {', '.join(_ENTRY_COLUMNS)} FROM entries WHERE memory_id = ?", (memory_id,)
                    )
                )
            except sqlite3.DatabaseError:
                report.memories.append(MemoryCheck(vault, title, None))
            else:
                report.memories.append(MemoryCheck(vault, title, count))
    return report


def salvage_database(path: str | Path, out: str | Path) -> tuple[int, int]:
    """Write every entry (and each memory's latest context) of ``path`` that can still be read to the JSON file
    ``out``: ``{"memories": [{"vault", "title", "memory_id", "context", "entries": [...]}]}``. Entries are read one
    by one by their number, so a damaged page loses only its own. Returns (entries saved, entries lost)."""
    file, conn, problem = _open(path)
    if conn is None:
        raise ConfigError(f"{file}: nothing to save: {problem}")
    with closing(conn):
        memories: dict[str, dict[str, Any]] = {
            memory_id: {
                "vault": vault,
                "title": title,
                "memory_id": memory_id,
                "context": _context(conn, memory_id),
                "entries": [],
            }
            for vault, title, memory_id in _memory_rows(conn)
        }
        saved = lost = 0
        for seq in range(1, _last_seq(conn) + 1):
            try:
                row = conn.execute(f"SELECT {', '.join(_ENTRY_COLUMNS)} FROM entries WHERE seq = ?", (seq,)).fetchone()
            except sqlite3.DatabaseError:
                lost += 1
                continue
            if row is None:  # deleted, or never used
                continue
            entry: dict[str, Any] = dict(zip(_ENTRY_COLUMNS, row))
            memory = memories.setdefault(
                entry["memory_id"],
                {"vault": None, "title": None, "context": None, "memory_id": entry["memory_id"], "entries": []},
            )
            memory["entries"].append({**entry, "tags": _tags(entry["tags"])})
            saved += 1
    Path(out).write_text(
        json.dumps({"file": str(file), "memories": list(memories.values())}, ensure_ascii=False, indent=2),
        encoding="utf-8",
    )
    return saved, lost


def _memory_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    try:
        return conn.execute(
            "SELECT v.title, m.title, m.memory_id FROM memories m JOIN vaults v USING (vault_id) "
            "ORDER BY v.title, m.title"
        ).fetchall()
    except sqlite3.DatabaseError:
        return []  # the list of memories is damaged: their entries still name them by id


def _context(conn: sqlite3.Connection, memory_id: str) -> str | None:
    try:
        row = conn.execute(
            "SELECT content FROM contexts WHERE memory_id = ? ORDER BY seq DESC LIMIT 1", (memory_id,)
        ).fetchone()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row else None


def _last_seq(conn: sqlite3.Connection) -> int:
    """The highest entry number ever given (sqlite_sequence, else the table's own maximum)."""
    for sql in ("SELECT seq FROM sqlite_sequence WHERE name = 'entries'", "SELECT max(seq) FROM entries"):
        try:
            row = conn.execute(sql).fetchone()
        except sqlite3.DatabaseError:
            continue
        if row and row[0]:
            return int(row[0])
    return 0


def _tags(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text
