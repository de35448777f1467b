"""Write-behind for dense vectors: entries are embedded by a background thread after their write commits.

Encoding one entry costs far more than the rest of its write (e5-small: ~60 ms of CPU for one passage on this
2-core machine; ``add_entry`` without it: p50 ~2 ms over stdio at 10k entries). So ``add_entry`` commits the entry
alone and returns; its seq is handed to a :class:`VectorWriter`, whose thread takes the queued entries (up to a
batch), reads their text on a connection of its own, encodes them on one thread (holding no connection: on Postgres
the pool stays free for searches) and stores the vectors in one short transaction.

Vectors are off the write path: nothing a client does waits for them. ``await_consistency`` (a flush, a session
end) returns once the words are searchable, which the entry's own transaction already made them; a search ranks
with the vectors present, embeds a small gap itself (``dense_vectors.CATCHUP_LIMIT``: the entries it takes from the
queue with :meth:`VectorWriter.claim`) and reports how many entries it ranked without a vector. Only callers that
ask for vectors wait for them (:meth:`VectorWriter.settle`, :meth:`VectorWriter.wait_idle`: benchmarks, tests,
``await_consistency`` with ``vectors``). Closing stops promptly (:data:`CLOSE_TIMEOUT`): what is left is found at
the next start.

Nothing is lost on a crash or a close: entries committed without a vector are found at the next start and embedded
in the background (:meth:`VectorWriter.start` queues them behind new writes; a hybrid server drains them while no
new write is queued), or at once by ``mycelian-agent embeddings backfill DB``.

The thread reads each entry's text by seq and writes its vector only if the same entry (seq *and* entry id) is still
there, so an entry deleted in between (or a seq reused after a rolled-back insert) never gets another entry's
vector. A failed batch (the encoder raised, the database refused) is logged and its entries are tried again one by
one after a pause (:data:`ATTEMPTS` in all, so one text the encoder cannot take does not sink the others); an entry
that still fails is counted in :attr:`failures` and left for the search's catch-up or the next start. Waits are
bounded, and once one has timed out, waits stop until the writer makes progress again. If the thread dies, the
index writes vectors inline again.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = [
    "ATTEMPTS",
    "BATCH",
    "CLOSE_TIMEOUT",
    "GATHER_BATCH",
    "GATHER_SECONDS",
    "NICE",
    "RETRY_SECONDS",
    "SETTLE_TIMEOUT",
    "VectorWriter",
]

#: How long an explicit wait for a memory's vectors (:meth:`VectorWriter.settle`) waits by default.
SETTLE_TIMEOUT = 60.0
#: How long closing the store lets the thread finish the batch it is embedding; the entries not yet embedded are
#: found at the next start (a batch on one thread takes about a second, which a closing process should not wait for:
#: BENCHMARKS.md §3 "Tuned constants").
CLOSE_TIMEOUT = 0.25
#: Entries per batch: on one thread the cost per passage is the same from 8 texts to 128 (BENCHMARKS.md §3,
#: "Issue 38"), and a small batch stores its vectors sooner (searches find them) and leaves less unfinished work
#: when the store closes.
BATCH = 16
#: Tries per entry before it is left to the catch-up and the next start; retries wait this long times the try.
ATTEMPTS = 3
RETRY_SECONDS = 1.0
#: While nobody waits for them, queued entries are left to gather for up to this long (or until there are
#: :data:`GATHER_BATCH`), so one encoder call takes several; a wait for vectors ends the gathering at once.
GATHER_SECONDS = 0.2
GATHER_BATCH = 16
#: The writer thread's nice value on Linux (where it is a thread's own): it encodes with the CPU that the agent, the
#: server's requests and the machine's other work leave idle, instead of taking it from them (a hybrid replay on a
#: busy 2-core machine was slower at nice 0: BENCHMARKS.md §3 "Tuned constants"). Its vectors then take longer
#: on a busy machine; the backlog stays visible (``vector_status``) and a search embeds a small gap itself.
NICE = 19
# Backlog batches are small: a new write queued behind one waits for it.
_BACKLOG_BATCH = 16
_log = logging.getLogger(__name__)

#: ``connect()`` -> a context manager yielding a database connection of the thread's own (sqlite3 or psycopg).
Connect = Callable[[], AbstractContextManager[Any]]
#: ``embed(connect, seqs)`` -> how many of the entries ``seqs`` got a vector (the others are gone).
Embed = Callable[[Connect, Sequence[int]], int]
#: ``missing(conn)`` -> ``(seq, memory_id)`` of the entries without a vector, in seq order.
Missing = Callable[[Any], Sequence[tuple[int, str]]]


class _Abandoned(Exception):
    """The store closed while a batch was being encoded: its vectors are not written (the next start does)."""


class VectorWriter:
    """A background thread that embeds committed entries in batches; see the module docstring.

    ``submit`` queues entries after their write commits; ``claim`` takes some back (a search embeds them itself);
    ``settle`` waits for a memory's entries, ``wait_idle`` for all; ``close`` stops the thread after its current
    batch (within :data:`CLOSE_TIMEOUT`). Thread-safe.
    """

    def __init__(self, connect: Connect, embed: Embed, missing: Missing, *, batch: int = BATCH) -> None:
        self._connect = connect
        self._embed = embed
        self._missing = missing
        self._batch = batch
        self._lock = threading.Condition()
        self._queue: dict[int, str] = {}  # seq -> memory id, in submission order (new writes first)
        self._backlog: dict[int, str] = {}  # found without a vector at start, or failed once: after the queue
        self._waiting: dict[str, int] = {}  # memory id -> its entries in the queue or in the batch being embedded
        self._stopping = False
        self._looking = True  # until the search for entries without vectors (at start) is done
        self._in_flight: dict[int, str] = {}  # seq -> memory id of the batch being embedded
        self._in_flight_queued: set[int] = set()  # those of them taken from the queue (not the backlog)
        self._waiters = 0  # settle() / wait_idle() calls waiting: the thread stops gathering
        self._attempts: dict[int, int] = {}  # seq -> failed tries so far (such seqs wait in the backlog)
        self._retry_at = 0.0  # monotonic time before which the backlog is not tried (after a failure)
        self._progress = 0  # batches finished; a settle() that timed out records it in _stalled_at
        self._stalled_at = -1
        self._abandon = False  # close(): stop after the current batch, and write nothing more
        self._thread = threading.Thread(target=self._run, name="mycelian-vectors", daemon=True)
        #: Entries embedded, and entries whose batch failed (left for the catch-up or the next start).
        self.written = 0
        self.failures = 0

    # -- the store's side ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; it first looks for committed entries that have no vector yet (an earlier crash)."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread runs (a stopped writer's entries are left to the catch-up and the next start)."""
        return self._thread.is_alive()

    def submit(self, memory_id: str, seqs: Sequence[int]) -> None:
        """Queue entries of ``memory_id`` whose write has committed."""
        with self._lock:
            for seq in seqs:
                if seq in self._queue:
                    continue
                self._backlog.pop(seq, None)
                self._waiting[memory_id] = self._waiting.get(memory_id, 0) + 1
                self._queue[seq] = memory_id
            self._lock.notify_all()

    def pending(self, memory_id: str | None = None) -> int:
        """Queued entries (of ``memory_id``, or of every memory) that have no vector yet, backlog excluded."""
        with self._lock:
            if memory_id is None:
                return sum(self._waiting.values())
            return self._waiting.get(memory_id, 0)

    def outstanding(self, memory_id: str) -> int:
        """The memory's entries this writer still has to embed: queued, in the backlog or being embedded."""
        with self._lock:
            return (
                self._waiting.get(memory_id, 0)
                + sum(1 for owner in self._backlog.values() if owner == memory_id)
                + sum(
                    1
                    for seq, owner in self._in_flight.items()
                    if owner == memory_id and seq not in self._in_flight_queued
                )
            )

    def claim(self, seqs: Sequence[int]) -> set[int]:
        """Take those of ``seqs`` that wait in the queue or the backlog out of them (a search embeds them itself)
        and return them; seqs being embedded now, or not held, stay as they are."""
        with self._lock:
            claimed: set[int] = set()
            for seq in seqs:
                memory_id = self._queue.pop(seq, None)
                if memory_id is not None:
                    self._forget(memory_id)
                    claimed.add(seq)
                elif self._backlog.pop(seq, None) is not None:
                    self._attempts.pop(seq, None)
                    claimed.add(seq)
            if claimed:
                self._lock.notify_all()  # a settle() may be done now
            return claimed

    def drop(self, memory_id: str, seqs: Sequence[int] | None = None) -> None:
        """Take the memory's entries ``seqs`` (None: all of the memory's) out of the queue and the backlog: they
        were deleted (a batch being embedded writes nothing for an entry that is gone)."""
        with self._lock:
            held = [seq for seq, owner in [*self._queue.items(), *self._backlog.items()] if owner == memory_id]
            for seq in held if seqs is None else [seq for seq in seqs if seq in held]:
                if self._queue.pop(seq, None) is not None:
                    self._forget(memory_id)
                self._backlog.pop(seq, None)
                self._attempts.pop(seq, None)
            self._lock.notify_all()

    def _forget(self, memory_id: str) -> None:
        """One of the memory's queued entries left the queue for good (lock held)."""
        left = self._waiting[memory_id] - 1
        if left:
            self._waiting[memory_id] = left
        else:
            del self._waiting[memory_id]

    def settle(self, memory_id: str, timeout: float = SETTLE_TIMEOUT) -> bool:
        """Wait until the memory's entries that this writer holds (queued, in the backlog, being embedded) have
        their vectors; False if ``timeout`` passed first, or at once if the thread is not running or has made no
        progress since an earlier wait timed out. Nothing but an explicit wait for vectors calls it."""

        def done() -> bool:
            return not (
                self._looking
                or self._waiting.get(memory_id)
                or memory_id in self._in_flight.values()
                or memory_id in self._backlog.values()
            )

        with self._lock:
            if not done() and self._stalled_at == self._progress:
                return False
        if self._wait_until(done, timeout):
            return True
        with self._lock:
            self._stalled_at = self._progress
        return False

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the queue and the backlog are both embedded (tests, benchmarks, maintenance); False if
        ``timeout`` passed first or the thread stopped."""
        return self._wait_until(
            lambda: not (self._waiting or self._backlog or self._looking or self._in_flight), timeout
        )

    def _wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            if done():
                return True
            self._waiters += 1
            self._lock.notify_all()  # the thread stops gathering
            try:
                while not done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self._thread.is_alive():
                        return False
                    # Short waits: a thread that died without notifying is noticed within a second.
                    self._lock.wait(min(remaining, 1.0))
                return True
            finally:
                self._waiters -= 1

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread: it finishes the batch it is embedding if that takes at most ``timeout`` (default
        :data:`CLOSE_TIMEOUT`), else it writes nothing more. Entries left without a vector are said once in the log
        (info: they are embedded at the next start, or by the backfill command)."""
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self._lock:
            self._abandon = True
            left = len(set(self._queue) | set(self._backlog) | set(self._in_flight))
            self._queue.clear()
            self._backlog.clear()
            self._waiting.clear()
            self._lock.notify_all()
        if left:
            _log.info(
                "closing with %d entries not yet embedded: they are embedded by the next hybrid server that "
                "opens this database, or now by `mycelian-agent embeddings backfill DB`",
                left,
            )

    # -- the thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        _lower_priority()
        try:
            self._find_backlog()
            while True:
                with self._lock:
                    while not self._queue:
                        if self._stopping or self._abandon:
                            return
                        pause = self._retry_at - time.monotonic()
                        if self._backlog and pause <= 0:
                            break
                        self._lock.wait(pause if self._backlog else None)
                    if self._stopping or self._abandon:
                        return  # closing: what is queued is found at the next start
                    self._gather()
                    if not (self._queue or self._backlog):
                        continue  # a search claimed them while they gathered
                    batch = self._take()
                    self._in_flight = {seq: memory_id for seq, memory_id, _ in batch}
                    self._in_flight_queued = {seq for seq, _, queued in batch if queued}
                self._embed_batch(batch)
        except BaseException:
            # Not an expected failure (those are handled per batch): logged, not re-raised (a thread's exception
            # would only be printed); the index goes back to inline writes once the thread is gone.
            _log.critical(
                "the vector writer stopped; new entries are embedded inline, entries it still held by "
                "the search's catch-up and the next start",
                exc_info=True,
            )
        finally:
            with self._lock:  # wake any settle() so it sees the thread is gone
                self._lock.notify_all()

    def _gather(self) -> None:
        """Let queued entries gather into a bigger batch while nobody waits for them (lock held)."""
        deadline = time.monotonic() + GATHER_SECONDS
        while self._queue and len(self._queue) < GATHER_BATCH and not self._waiters and not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._lock.wait(remaining)

    def _find_backlog(self) -> None:
        try:
            with self._connect() as conn:
                rows = self._missing(conn)
        except Exception as exc:
            _log.error(
                "could not look for entries without vectors (%s); the search catch-up and the backfill "
                "command still embed them",
                exc,
                exc_info=_unexpected(exc),
            )
            rows = []
        with self._lock:
            for seq, memory_id in rows:
                if seq not in self._queue:
                    self._backlog[seq] = memory_id
            self._looking = False
            self._lock.notify_all()
        if rows:
            _log.info("embedding %d entries written without a vector, in the background", len(rows))

    def _take(self) -> list[tuple[int, str, bool]]:
        """One batch of ``(seq, memory id, queued)``: the queued entries (up to a batch), else a smaller part of
        the backlog, so that new writes wait behind at most one small backlog batch."""
        queued = bool(self._queue)
        source, size = (self._queue, self._batch) if queued else (self._backlog, _BACKLOG_BATCH)
        if not queued and next(iter(source)) in self._attempts:
            size = 1  # a retry goes alone: one text the encoder cannot take must not fail the others again
        batch: list[tuple[int, str, bool]] = []
        while source and len(batch) < size:
            seq = next(iter(source))
            batch.append((seq, source.pop(seq), queued))
        return batch

    @contextmanager
    def _open(self) -> Iterator[Any]:
        """The thread's connection, unless the store is closing (then :class:`_Abandoned`: nothing is written)."""
        if self._abandon:
            raise _Abandoned
        with self._connect() as conn:
            yield conn

    def _embed_batch(self, batch: list[tuple[int, str, bool]]) -> None:
        failed = False
        try:
            self.written += self._embed(self._open, [seq for seq, _, _ in batch])
        except _Abandoned:
            pass
        except Exception as exc:
            failed = True
            _log.error(
                "could not embed %d entries (seqs %d-%d: %s); each is tried again alone, up to %d tries",
                len(batch),
                batch[0][0],
                batch[-1][0],
                exc,
                ATTEMPTS,
                exc_info=_unexpected(exc),
            )
        finally:
            with self._lock:
                self._in_flight, self._in_flight_queued = {}, set()
                self._progress += 1
                for seq, memory_id, queued in batch:
                    if queued and memory_id in self._waiting:
                        self._forget(memory_id)
                    tries = self._attempts.pop(seq, 0) + failed
                    if not failed:
                        continue
                    if tries < ATTEMPTS and not self._stopping:
                        self._attempts[seq] = tries
                        self._backlog[seq] = memory_id
                        self._retry_at = time.monotonic() + RETRY_SECONDS * tries
                    else:
                        self.failures += 1
                        _log.error(
                            "gave up embedding entry seq %d after %d tries; a search embeds a small gap "
                            "itself, and the next start or the backfill command embeds the rest",
                            seq,
                            tries,
                        )
                self._lock.notify_all()


def _lower_priority() -> None:
    """Give the calling thread the nice value :data:`NICE` (Linux, where ``setpriority`` on a thread id affects that
    thread alone; elsewhere the id could name a process, so nothing is done). Raising one's nice value needs no
    privilege; a refusal is not an error."""
    if not sys.platform.startswith("linux") or NICE <= 0:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except OSError:
        _log.debug("could not lower the vector writer's priority", exc_info=True)


def _unexpected(exc: BaseException) -> bool:
    """Whether a failure is worth its traceback in the log: a database's own error (a damaged file, a full disk, a
    server gone) is said in one line; any other may be a bug."""
    return type(exc).__module__.partition(".")[0] not in ("sqlite3", "psycopg")
