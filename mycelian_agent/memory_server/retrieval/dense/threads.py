"""How many threads encode a query: :class:`ThreadChoice` times both counts as they are used and takes the faster.

One short text (a search's query) on two free cores takes about half the time of one core (e5-small on this 2-core
machine: 9 against 17 ms). When another process holds a core, OpenMP's barriers wait for a thread the scheduler has
put aside, and the same text on two threads takes longer than on one (28 against 17 ms with a busy loop beside it,
over 100 ms while numpy's BLAS threads spin). Neither count is right on every machine at every moment, so both are
measured while they are used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["OPENMP_SPIN_COUNT", "ThreadChoice"]

#: ``GOMP_SPINCOUNT`` for a server that encodes (``mycelian-memory-server --embeddings`` sets it unless the
#: environment sets ``OMP_WAIT_POLICY`` or it): how long an idle OpenMP thread spins before it sleeps. libgomp's
#: default (300,000) keeps a core busy for milliseconds after every encode; ``OMP_WAIT_POLICY=PASSIVE`` (0) wakes
#: the second thread at every barrier, which made a query on two threads slower than on one
#: (BENCHMARKS.md §3 "Tuned constants").
OPENMP_SPIN_COUNT = 20_000

# Characters a text costs before its first character (the prefix, the model's fixed work), so that times of texts
# of different lengths compare.
_FIXED_CHARS = 16


class ThreadChoice:
    """Chooses between one thread and ``wide`` threads for encoding a query (or a few), by measured cost.

    ``pick()`` says which count to use; ``record(threads, seconds, chars)`` reports how long it took. Each count's
    cost per character is a moving average of its own calls; the cheaper count is used, and the other is tried
    again after ``retry_min`` calls, then after twice as many each time it is still the slower (up to
    ``retry_max``), so a machine that gets busy or quiet is noticed without paying for the slow count often. A
    retry also comes once ``retry_seconds`` times the other count's slowdown (its cost over the faster one's, at
    least 1) have passed, and at least ``retry_min`` calls: a busy spell early on does not keep a quiet machine's
    queries on one thread for hundreds of calls, and a count that was ten times slower is retried ten times less
    often. ``clock`` is for tests.
    Thread-safe: searches on several threads (HTTP sessions) may share one choice.
    """

    def __init__(
        self,
        wide: int,
        *,
        retry_min: int = 8,
        retry_max: int = 256,
        retry_seconds: float = 10.0,
        weight: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if wide < 1 or retry_min < 1 or retry_max < retry_min or retry_seconds <= 0 or not 0 < weight <= 1:
            raise ValueError(
                f"invalid thread choice (wide={wide}, retry {retry_min}-{retry_max} calls or "
                f"{retry_seconds} s, weight {weight})"
            )
        self.wide = wide
        self._retry_min = retry_min
        self._retry_max = retry_max
        self._retry_seconds = retry_seconds
        self._weight = weight
        self._clock = clock
        self._cost: dict[int, float] = {}  # seconds per character, by thread count
        self._retry_every = retry_min
        self._since_retry = 0
        self._last_retry = clock()
        self._lock = threading.Lock()

    def costs(self) -> dict[int, float]:
        """The current cost estimates (seconds per character) by thread count; a count not yet tried is absent."""
        with self._lock:
            return dict(self._cost)

    def _best(self) -> int:
        return min(self._cost, key=lambda n: (self._cost[n], n))

    def pick(self) -> int:
        """The thread count for the next call: the cheaper one, or now and then the other, to measure it again."""
        if self.wide <= 1:
            return 1
        with self._lock:
            for threads in (self.wide, 1):  # each count once first, all the cores first
                if threads not in self._cost:
                    return threads
            self._since_retry += 1
            best = self._best()
            now = self._clock()
            other = 1 if best == self.wide else self.wide
            # The timed retry waits as many times retry_seconds as the other count was slower: under heavy load the
            # slower count can take many times as long, and a retry at a fixed interval spent a good part of the time
            # on it (BENCHMARKS.md §3 "Tuned constants"); this way retries cost at most about one call
            # on the faster count per retry_seconds.
            slower = max(1.0, self._cost[other] / self._cost[best]) if self._cost[best] > 0 else 1.0
            due = self._since_retry >= self._retry_every or (
                self._since_retry >= self._retry_min and now - self._last_retry >= self._retry_seconds * slower
            )
            if not due:
                return best
            self._since_retry, self._last_retry = 0, now
            return other

    def record(self, threads: int, seconds: float, chars: int) -> None:
        """Report that ``threads`` threads encoded ``chars`` characters in ``seconds``."""
        cost = seconds / (max(chars, 0) + _FIXED_CHARS)
        with self._lock:
            previous = self._cost.get(threads)
            if previous is not None and threads == self._best():
                self._cost[threads] = previous + self._weight * (cost - previous)
                return
            # A count first tried, or tried again while the other is in use: its old estimate says nothing about
            # the machine now, so this call replaces it.
            self._cost[threads] = cost
            if len(self._cost) > 1:
                won = self._best() == threads
                self._retry_every = self._retry_min if won else min(self._retry_every * 2, self._retry_max)
