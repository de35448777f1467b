"""A SQLite memory file that cannot be read or written, named in one line: the file, the problem, what to do.

A damaged file (``database disk image is malformed``), a file that is no database and a full disk surface from
sqlite3 deep inside a query; :func:`file_problem` turns them into a :class:`MemoryServerError` at the store's edge
(the server's store runner, the CLI's local connection), so no command prints a traceback for them.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from mycelian_agent.errors import MemoryServerError

__all__ = ["FULL_BELOW_BYTES", "file_problem"]

#: Free space under which an I/O error of a write is taken for a full disk (SQLite reports a full disk met while
#: it grows the WAL or its index as "disk I/O error", not "database or disk is full").
FULL_BELOW_BYTES = 4 * 1024 * 1024


def file_problem(exc: BaseException, path: str | None) -> MemoryServerError | None:
    """``exc`` as the one-line error a user of the memory file ``path`` can act on; None when it is not a problem
    of the file or its disk (a locked database, a constraint, a bug: those keep their own handling)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    where = path or "(in memory)"
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    check = f"`mycelian-agent check {where}` tells what can still be read and how to save it"
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return MemoryServerError(
            f"the memory database {where} is damaged ({text}): {check}, or restore the file from a backup"
        )
    if name == "SQLITE_NOTADB" or "not a database" in text:
        return MemoryServerError(f"{where} is not a memory database ({text}): is --db the right file? {check}")
    if name == "SQLITE_FULL" or "disk is full" in text or (name.startswith("SQLITE_IOERR") and _nearly_full(path)):
        return MemoryServerError(
            f"the disk holding the memory database {where} is full ({text}): nothing of this "
            "call was written; free some space and run it again"
        )
    if name.startswith("SQLITE_IOERR") or "disk I/O error" in text:
        return MemoryServerError(
            f"cannot read or write the memory database {where} ({text}): check the disk it "
            "is on (removed, read-only, failing?) and run it again"
        )
    return None


def _nearly_full(path: str | None) -> bool:
    if not path:
        return False
    try:
        return shutil.disk_usage(Path(path).parent).free < FULL_BELOW_BYTES
    except OSError:
        return False
