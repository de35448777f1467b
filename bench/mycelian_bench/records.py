"""The files a benchmark run keeps: the JSONL and JSON files of its output folder (``records.jsonl`` is the source
of truth that makes a re-run resume). Which items a run handles is ``mycelian_agent.conversations.selection``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError

__all__ = ["append_jsonl", "read_jsonl", "write_json"]


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
