"""JSON text read with every failure named: malformed JSON, nesting too deep, numbers too long to read."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from ..errors import InputError

__all__ = ["MAX_DEPTH", "parse_json_text"]

#: JSON nested deeper than this is refused before it is parsed into conversations (real inputs need about 6 levels).
MAX_DEPTH = 64


def _line_col(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line} column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


def _too_deep_at(text: str, limit: int) -> int:
    """Offset of the first bracket nested deeper than ``limit`` (outside strings), or 0."""
    depth = 0
    # Strings are skipped whole by the regular expression (a character loop in Python took ~1 s for 5 MB of text).
    for match in _JSON_TOKENS.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            if depth > limit:
                return match.start()
        elif char in "]}":
            depth -= 1
    return 0


def parse_json_text(text: str, source: str = "<memory>") -> Any:
    """``json.loads(text)`` whose every failure is an :class:`InputError` naming ``source`` and the position:
    malformed JSON, nesting deeper than :data:`MAX_DEPTH` and numbers too long to read included."""
    if deep := _too_deep_at(text, MAX_DEPTH):
        raise InputError(
            f"{source}: {_line_col(text, deep)}: JSON nested more than {MAX_DEPTH} levels deep "
            "(no accepted format nests that deep)"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: line {exc.lineno} column {exc.colno}: malformed JSON: {exc.msg}") from None
    except RecursionError:  # not reached after the depth check; kept so that no input escapes as a traceback
        raise InputError(f"{source}: JSON nested too deep to read") from None
    except ValueError:  # a number longer than Python reads (sys.get_int_max_str_digits)
        match = re.search(r"\d{1000,}", text)
        where = f"{_line_col(text, match.start())}: " if match else ""
        raise InputError(
            f"{source}: {where}number too long to read (more than {sys.get_int_max_str_digits()} "
            "digits); write it as a string if it is an id"
        ) from None
