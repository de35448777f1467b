"""Memory titles from any id: what upstream Mycelian accepts as a title (1 to 50 ASCII letters, digits, hyphens)."""

from __future__ import annotations

import hashlib
import re

__all__ = ["valid_title"]

_TITLE_OK = re.compile(r"[A-Za-z0-9-]{1,50}")


def valid_title(text: str) -> str:
    """Turn any id into a valid upstream title: 1 to 50 ASCII letters, digits and hyphens.

    A valid ``text`` is returned unchanged. Otherwise runs of other characters become one hyphen, the result is
    cut to 41 characters and ``-`` plus the first 8 hex digits of the SHA-1 of the original is appended, so
    different ids stay distinct (``"gpt4_2c50253f"`` → ``"gpt4-2c50253f-<hash>"``). Deterministic.
    """
    if _TITLE_OK.fullmatch(text):
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    base = re.sub(r"[^A-Za-z0-9-]+", "-", text)[:41].strip("-")
    return f"{base}-{digest}" if base else digest
