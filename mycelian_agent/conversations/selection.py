"""Which conversations one run handles: the first ``limit`` of the input, then shard ``i/n`` of those (``replay
--shard``, ``--workers``, and the benchmark runners, so a run split over processes covers every item once)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..errors import ConfigError

__all__ = ["parse_shard", "select_items"]

T = TypeVar("T")


def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"i/n"`` → ``(i, n)`` with ``0 <= i < n``; None stays None. Raises :class:`ConfigError` otherwise."""
    if text is None or isinstance(text, tuple):
        shard = text
    else:
        index, sep, count = str(text).partition("/")
        try:
            shard = (int(index), int(count)) if sep else None
        except ValueError:
            shard = None
        if shard is None:
            raise ConfigError(f"shard must look like i/n (e.g. 0/4), got {text!r}")
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ConfigError(f"shard i/n needs 0 <= i < n, got {shard[0]}/{shard[1]}")
    return shard


def select_items(
    items: Sequence[T], key: Callable[[T], str], *, limit: int | None = None, shard: tuple[int, int] | None = None
) -> list[T]:
    """The items one run handles: the first ``limit`` items (input order), then shard ``i/n`` of those.

    Sharding is by sorted id, modulo: the item whose id is the j-th (0-based) in sorted order belongs to shard
    ``j % n``. It depends only on the set of ids (not on file order or worker count), so ``0/n`` ... ``n-1/n`` are
    disjoint and cover the selection. The chosen items keep their input order.
    """
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    chosen = list(items[:limit] if limit is not None else items)
    if shard is None:
        return chosen
    index, count = shard
    position = {ident: j for j, ident in enumerate(sorted(key(item) for item in chosen))}
    return [item for item in chosen if position[key(item)] % count == index]
