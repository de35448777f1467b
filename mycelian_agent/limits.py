"""Size limits of the memory tools, in one place: the server enforces them, the agent stays within them.

Upstream Mycelian's tool reference fixes most of these (``raw_entry`` 9,000 characters, titles 50); the rest are
ours. Also here: the two operations both sides need to agree on, cutting tags to size and splitting a message
that is too long for one entry into ordered parts that join back to the original text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ADD_ENTRIES_MAX_ITEMS",
    "CONTEXT_MAX_CHARS",
    "DESCRIPTION_MAX_CHARS",
    "IDEMPOTENCY_KEY_MAX_CHARS",
    "NAME_MAX_CHARS",
    "QUERY_MAX_CHARS",
    "RAW_ENTRY_MAX_CHARS",
    "SEARCH_DEPTH_MAX",
    "SUMMARY_MAX_CHARS",
    "SUMMARY_TARGET_CHARS",
    "TAGS_MAX_KEYS",
    "TAG_KEY_MAX_CHARS",
    "TAG_VALUE_MAX_CHARS",
    "TITLE_MAX_CHARS",
    "clip_tags",
    "name_problem",
    "split_oversize",
    "unicode_problem",
]

RAW_ENTRY_MAX_CHARS = 9000  # add_entry raw_entry (upstream's limit); longer messages are stored as parts
SUMMARY_MAX_CHARS = 2000  # add_entry summary, hard limit on the server
SUMMARY_TARGET_CHARS = 400  # the length summaries are written to (what the model is asked for; extractive output)
CONTEXT_MAX_CHARS = 65536  # put_context content, hard limit on the server (the agent writes far less: see settings)
DESCRIPTION_MAX_CHARS = 1000  # vault and memory descriptions
QUERY_MAX_CHARS = 2000  # search_memories query
SEARCH_DEPTH_MAX = (
    1000  # search_memories offset + top_ke: how deep a ranking can be paged (ours; upstream has no paging)
)
TITLE_MAX_CHARS = 50  # vault and memory titles (upstream's rule), memory types
TAGS_MAX_KEYS = 32
TAG_KEY_MAX_CHARS = 64
TAG_VALUE_MAX_CHARS = 512
IDEMPOTENCY_KEY_MAX_CHARS = 200
ADD_ENTRIES_MAX_ITEMS = 100  # add_entries (ours): entries per call, stored in one transaction
NAME_MAX_CHARS = 100  # speaker names: the name goes into every prompt and summary of the speaker's messages


_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode_problem(text: str, *, stored: bool = True) -> str | None:
    """What makes ``text`` unstorable, or None when it is fine: a lone surrogate such as ``"\\ud83d"`` (not
    encodable as UTF-8) and, for text that is ``stored``, a NUL character.

    JSON allows ``\\ud83d`` escapes that decode to half a character; such a string cannot be encoded as UTF-8,
    sent over MCP or stored. PostgreSQL's text cannot hold U+0000, so no backend stores it (one rule for both, not a
    database error on one of them); a search query is not stored and may hold it. The input loader, the agent's
    public call, the model's tool arguments and the memory server all refuse such text with this message.
    """
    match = _SURROGATE.search(text)
    if match is not None:
        return (
            f"invalid Unicode: lone surrogate \\u{ord(match.group()):04x} at character {match.start()} "
            "(half of a UTF-16 pair, cannot be stored as UTF-8; fix the text or its \\u escapes)"
        )
    if stored and (nul := text.find("\x00")) >= 0:
        return (
            f"a NUL character (U+0000) at character {nul}: it cannot be stored (PostgreSQL text cannot hold "
            "it, so no backend stores it); remove it from the text"
        )
    return None


def name_problem(name: object) -> str | None:
    """What is wrong with a speaker name, or None when it is acceptable.

    A name is a non-empty string of at most :data:`NAME_MAX_CHARS` characters on one line (no control characters);
    surrounding whitespace is ignored. The input file loader and the agent's public call share this check.
    """
    if not isinstance(name, str):
        return f"a speaker name must be a string, got {type(name).__name__}"
    text = name.strip()
    if not text:
        return "a speaker name must not be empty"
    if len(text) > NAME_MAX_CHARS:
        return f"a speaker name must be at most {NAME_MAX_CHARS} characters, got {len(text)}"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "a speaker name must be one line without control characters"
    return unicode_problem(text)


def clip_tags(tags: Mapping[Any, Any]) -> dict[str, str]:
    """Tags as the server accepts them: string keys and values cut to size, ``None`` values dropped.

    The number of keys is not cut here: which tags to keep is the caller's choice (code-owned tags win).
    """
    return {str(k)[:TAG_KEY_MAX_CHARS]: str(v)[:TAG_VALUE_MAX_CHARS] for k, v in tags.items() if v is not None}


# Preferred cut points, strongest first; a cut falls after the matched separator.
_BOUNDARIES = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraph
    re.compile(r"\n\s*"),  # line
    re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s+"),  # sentence
    re.compile(r"\s+"),  # any whitespace
)


def split_oversize(content: str, limit: int = RAW_ENTRY_MAX_CHARS) -> list[str]:
    """Split ``content`` into parts of at most ``limit`` characters; ``"".join(parts) == content`` exactly.

    Cuts after a paragraph break where possible, else after a line break, a sentence end, any whitespace, and
    only as a last resort in the middle of a word. A boundary is used only if it keeps the part at least half
    the limit long, so parts are not needlessly small. Every part is non-empty; ``""`` gives ``[]``.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    parts: list[str] = []
    start = 0
    min_cut = max(1, limit // 2)
    # Offsets into ``content``, never its remainder: slicing the rest after each part copied the whole tail, so
    # splitting cost the square of the message's size.
    while len(content) - start > limit:
        window = content[start : start + limit]
        cut = limit
        for pattern in _BOUNDARIES:
            ends = [m.end() for m in pattern.finditer(window) if m.end() >= min_cut]
            if ends:
                cut = ends[-1]
                break
        parts.append(window[:cut])
        start += cut
    if start < len(content):
        parts.append(content[start:])
    return parts
