"""One writer per thread: a lease on a thread, kept beside its checkpoints, for as long as an invoker writes it.

Two processes that write one thread of one checkpoint store interleave their message numbers (each counts from the
checkpoint it read), so the same message is stored under two idempotency keys: a silent duplicate. The invoker
therefore takes the thread's lease before it first writes the thread and keeps it until it closes; a second
process asking for the lease of a thread in use fails at once with :class:`ThreadBusyError` naming the thread and
the holder (or waits for it, when asked to).

- SQLite checkpointer: a row per thread in ``mycelian_thread_leases`` (same file, taken in an immediate
  transaction): owner, process id, host, the process's start time. A row whose process is gone (same host: no such
  process, or another process under a reused id) is taken over; the rows of this process are deleted on close.
- PostgreSQL checkpointer (rows as dicts): a session-level advisory lock per thread (released by the server when the
  session ends, so also when the process dies); the holder is found in ``pg_stat_activity`` by the session's
  ``application_name``. A ``"postgresql://..."`` checkpointer (``pg_checkpoints.PooledPostgresSaver``) keeps the
  locks on a session of their own, checked before a checkpoint read or write of a held thread when a restart may
  have ended it (``pg_checkpoints.py``): after a restart every held lease is taken again, and an invocation of a
  thread another process took meanwhile raises :class:`ThreadBusyError`. A saver the caller opened on one
  connection keeps them on that connection.
- The in-memory checkpointer (one process) and savers of other kinds: no lease (nothing else can write there).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from ..errors import ThreadBusyError

__all__ = ["ThreadLeases", "thread_leases"]

_OWNER: str | None = None  # this process's lease owner id, made on first use


def _owner() -> str:
    global _OWNER
    if _OWNER is None:
        _OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    return _OWNER


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc), '' where that cannot be read: tells a
    live holder from a new process that reuses a dead holder's id."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return not started or _start_time(pid) in ("", started)


class ThreadLeases:
    """No leases: the base of the lease kinds, used where no other process can write (in-memory checkpoints)."""

    async def acquire(self, thread_id: str, *, wait: float | None = None) -> None:
        """Take ``thread_id``'s lease for this process; :class:`ThreadBusyError` if another process holds it
        (after ``wait`` seconds of retrying, when given)."""
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            holder = await self._try(thread_id)
            if holder is None:
                return
            if deadline is None or time.monotonic() >= deadline:
                raise ThreadBusyError(thread_id, holder)
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    async def _try(self, thread_id: str) -> str | None:
        """Take the lease if free (or ours, or its holder is gone); else describe the holder."""
        return None

    async def release(self, thread_id: str) -> None:
        """Give back ``thread_id``'s lease (the invoker stops caching the thread's position with it)."""

    async def release_all(self) -> None:
        """Give back every lease this process holds in this store."""


_SQLITE_TABLE = """CREATE TABLE IF NOT EXISTS mycelian_thread_leases (
    thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    started TEXT NOT NULL, acquired REAL NOT NULL)"""


class _SqliteLeases(ThreadLeases):
    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self._ready = False

    async def _try(self, thread_id: str) -> str | None:
        conn, host, pid = self.saver.conn, socket.gethostname(), os.getpid()
        async with self.saver.lock:
            if not self._ready:
                await conn.execute(_SQLITE_TABLE)
                await conn.commit()
                self._ready = True
            await conn.execute("BEGIN IMMEDIATE")
            try:
                # Closed at once: a statement left open keeps a read snapshot, and this connection's next write
                # after another process's commit would fail with "database is locked" (no busy wait in WAL).
                async with conn.execute(
                    "SELECT owner, pid, host, started, acquired FROM mycelian_thread_leases WHERE thread_id = ?",
                    (thread_id,),
                ) as cursor:
                    row = await cursor.fetchone()
                if row is not None and row[0] != _owner() and (row[2] != host or _alive(row[1], row[3])):
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row[4]))
                    return f"process {row[1]} on {row[2]}, since {when}"
                await conn.execute(
                    "INSERT OR REPLACE INTO mycelian_thread_leases VALUES (?, ?, ?, ?, ?, ?)",
                    (thread_id, _owner(), pid, host, _start_time(pid), time.time()),
                )
            finally:
                await conn.commit()
        return None

    async def release(self, thread_id: str) -> None:
        if not self._ready:
            return
        async with self.saver.lock:
            await self.saver.conn.execute(
                "DELETE FROM mycelian_thread_leases WHERE thread_id = ? AND owner = ?", (thread_id, _owner())
            )
            await self.saver.conn.commit()

    async def release_all(self) -> None:
        if not self._ready:
            return
        async with self.saver.lock:
            await self.saver.conn.execute("DELETE FROM mycelian_thread_leases WHERE owner = ?", (_owner(),))
            await self.saver.conn.commit()


def _pg_key(thread_id: str) -> tuple[int, int]:
    """The two 32-bit halves of the thread's advisory lock key (as ``pg_locks`` shows them: classid, objid)."""
    digest = hashlib.blake2b(f"mycelian-thread:{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "big"), int.from_bytes(digest[4:], "big")


class _PostgresLeases(ThreadLeases):
    """Advisory locks on the connection of a saver opened on one connection (the caller's)."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self._held: set[tuple[int, int]] = set()
        self._named = False
        self._lock: asyncio.Lock = saver.lock

    async def _session(self) -> Any:
        """The connection the locks live on."""
        return self.saver.conn

    async def _try(self, thread_id: str) -> str | None:
        key = _pg_key(thread_id)
        if key in self._held:
            return None
        async with self._lock:
            conn = await self._session()
            if not self._named:  # how a blocked process names this one
                await conn.execute(
                    "SELECT set_config('application_name', %s, false)",
                    (f"mycelian-agent pid {os.getpid()} on {socket.gethostname()}"[:63],),
                )
                self._named = True
            if await _take(conn, key):
                self._held.add(key)
                return None
            holder = await _holder(conn, key)
        return holder if holder is not None else await self._try(thread_id)  # None: released meanwhile

    async def release(self, thread_id: str) -> None:
        key = _pg_key(thread_id)
        if key in self._held:
            async with self._lock:
                await self._unlock([key])
        self._held.discard(key)

    async def release_all(self) -> None:
        if self._held:
            async with self._lock:
                await self._unlock(sorted(self._held))
        self._held.clear()

    async def _unlock(self, keys: list[tuple[int, int]]) -> None:
        from psycopg import OperationalError

        conn = await self._session()
        try:
            for key in keys:
                if conn.closed:
                    return
                await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_signed(key[0]), _signed(key[1])))
        except OperationalError:  # the server ended the session (a restart, a shutdown), and its locks with it
            return


class _PooledPostgresLeases(_PostgresLeases):
    """Advisory locks on the pooled saver's own session, checked before a checkpoint read or write of a held thread
    when the pool made a connection since the last check, or the last check is ``LEASE_RECHECK_S`` old."""

    def __init__(self, saver: Any) -> None:
        super().__init__(saver)
        self._named = True  # the session is named when it is opened
        self._lock = asyncio.Lock()
        #: Leases lost to another process while the server restarted, with their new holder: writes refused.
        self._lost: dict[tuple[int, int], str] = {}
        self._checked_at = (-1, 0.0)  # (the pool's connections made, the loop's time) at the last check
        saver.check_lease = self.check_lease

    async def _session(self) -> Any:
        return await self.saver.lease_session()

    async def _try(self, thread_id: str) -> str | None:
        from psycopg import OperationalError

        try:
            return await super()._try(thread_id)
        except OperationalError:  # the session ended (a restart): take the held leases again, then this one
            async with self._lock:
                await self._take_again()
            return await super()._try(thread_id)

    async def release(self, thread_id: str) -> None:
        self._lost.pop(_pg_key(thread_id), None)
        await super().release(thread_id)

    async def check_lease(self, thread_id: str) -> None:
        """Make sure this process still holds ``thread_id``'s lease before its checkpoint is used, when a restart may
        have ended the leases' session: one round trip on it; when it ended, a new one takes every held lease
        again, and a thread another process took meanwhile raises :class:`ThreadBusyError`."""
        from psycopg import OperationalError

        from .pg_checkpoints import LEASE_RECHECK_S

        key = _pg_key(thread_id)
        made, now = self.saver.connections_made, asyncio.get_running_loop().time()
        if key in self._held and (made != self._checked_at[0] or now - self._checked_at[1] > LEASE_RECHECK_S):
            async with self._lock:
                try:
                    await (await self._session()).execute("SELECT 1")
                except OperationalError:
                    await self._take_again()
            self._checked_at = (made, now)  # only once checked: a check that failed is made again next time
        if key in self._lost:
            raise ThreadBusyError(thread_id, self._lost[key])

    async def _take_again(self) -> None:
        """On a new session, take every held lease again; those another process holds now move to ``_lost``."""
        session = await self.saver.lease_session(renew=True)
        for key in sorted(self._held):
            if not await _take(session, key):
                self._held.discard(key)
                holder = await _holder(session, key)
                self._lost[key] = f"{holder or 'another process'}; taken while the checkpoint server restarted"


async def _take(conn: Any, key: tuple[int, int]) -> bool:
    row = await (
        await conn.execute("SELECT pg_try_advisory_lock(%s, %s) AS got", (_signed(key[0]), _signed(key[1])))
    ).fetchone()
    return bool(row["got"])


async def _holder(conn: Any, key: tuple[int, int]) -> str | None:
    """Who holds the lock ``key`` (None: nobody now)."""
    row = await (
        await conn.execute(
            "SELECT a.application_name, a.client_addr::text AS addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 2",
            key,
        )
    ).fetchone()
    if row is None:
        return None
    name, addr = row["application_name"] or "a PostgreSQL client", row["addr"]
    return f"{name}{f' from {addr}' if addr else ''}, connected since {row['backend_start']:%Y-%m-%d %H:%M:%S}"


def _signed(half: int) -> int:
    """A 32-bit half as the signed int4 that ``pg_advisory_lock(int4, int4)`` takes."""
    return half - (1 << 32) if half >= 1 << 31 else half


def thread_leases(saver: Any) -> ThreadLeases:
    """The lease kind for checkpointer ``saver`` (see the module docstring)."""
    kind = type(saver).__name__
    if kind == "AsyncSqliteSaver":
        return _SqliteLeases(saver)
    if kind == "PooledPostgresSaver":
        return _PooledPostgresLeases(saver)
    if kind == "AsyncPostgresSaver" and not callable(getattr(saver.conn, "connection", None)):
        return _PostgresLeases(saver)
    return ThreadLeases()
