"""The items a benchmark run handles and the files it keeps: ``limit`` then ``shard`` selection, and the JSONL and
JSON files of its output folder (``records.jsonl`` is the source of truth that makes a re-run resume)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError

__all__ = ["append_jsonl", "parse_shard", "read_jsonl", "select_items", "write_json"]

T = TypeVar("T")


# ------------------------------------------------------------------------------------------------- selection


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


def select_items(items: Sequence[T], key: Callable[[T], str], *, limit: int | None = None,
                 shard: tuple[int, int] | None = None) -> list[T]:
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


# ------------------------------------------------------------------------------------------------- files


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file ([] when missing). A torn last line (a crash mid-write) is cut off the file."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines) - (text.endswith("\n")):
                raise ConfigError(f"{path}: line {number} is not JSON; fix or remove the file") from None
            # Only the unterminated last line can be torn: drop it so the next append starts on a clean line.
            path.write_text(text[: len(text) - len(line)], encoding="utf-8")
    return records


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one object as one line, flushed to disk before returning."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: Path, value: Any, *, lines: Iterable[dict[str, Any]] | None = None) -> None:
    """Write ``value`` as indented JSON (or, with ``lines``, those objects as JSONL), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        if lines is None:
            json.dump(value, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        else:
            for line in lines:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    tmp.replace(path)


