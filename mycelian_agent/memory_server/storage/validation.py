"""Argument checks for the memory server's tools.

Every check raises :class:`~mycelian_agent.errors.InputError` whose message names the argument and the rule it
broke; the MCP layer turns it into an error result. Timestamps are normalised to one fixed UTC form
(``YYYY-MM-DDTHH:MM:SS.ffffffZ``) so that SQLite can compare them as strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mycelian_agent import limits
from mycelian_agent.dates import format_timestamp, parse_rfc3339
from mycelian_agent.errors import InputError
from mycelian_agent.memory_server.storage.rows import ENTRY_FIELDS, NewEntry

__all__ = [
    "LIMITS",
    "check_entry",
    "check_entry_item",
    "check_idempotency_key",
    "check_memory_ids",
    "check_memory_type",
    "check_optional_text",
    "check_tags",
    "check_text",
    "check_title",
    "check_uuid",
    "format_timestamp",
    "parse_rfc3339",
]

#: Size limits enforced on tool arguments (characters unless stated).
LIMITS: dict[str, int] = {
    "raw_entry": limits.RAW_ENTRY_MAX_CHARS,
    "summary": limits.SUMMARY_MAX_CHARS,
    "content": limits.CONTEXT_MAX_CHARS,
    "description": limits.DESCRIPTION_MAX_CHARS,
    "query": limits.QUERY_MAX_CHARS,
    "title": limits.TITLE_MAX_CHARS,
    "memory_type": limits.TITLE_MAX_CHARS,
    "tags_keys": limits.TAGS_MAX_KEYS,
    "tag_key": limits.TAG_KEY_MAX_CHARS,
    "tag_value": limits.TAG_VALUE_MAX_CHARS,
    "idempotency_key": limits.IDEMPOTENCY_KEY_MAX_CHARS,
    "add_entries": limits.ADD_ENTRIES_MAX_ITEMS,
}

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TITLE_RE = re.compile(r"[A-Za-z0-9-]{1,50}")
_MEMORY_TYPE_RE = re.compile(r"[A-Za-z0-9_-]{1,50}")


def _valid_unicode(name: str, value: str, *, stored: bool = True) -> str:
    if problem := limits.unicode_problem(value, stored=stored):
        raise InputError(f"{name}: {problem}")
    return value


def _show(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_uuid(name: str, value: str) -> str:
    """Return ``value`` as a canonical lower-case UUID, or raise naming ``name``."""
    if not isinstance(value, str) or not _UUID_RE.fullmatch(value):
        raise InputError(f"{name} must be a UUID like 123e4567-e89b-12d3-a456-426614174000 (got {_show(value)})")
    return value.lower()


def check_memory_ids(vault_id: str, memory_id: str) -> tuple[str, str]:
    """``(vault_id, memory_id)`` checked as UUIDs."""
    return check_uuid("vault_id", vault_id), check_uuid("memory_id", memory_id)


def check_title(name: str, value: str) -> str:
    """Titles are 1-50 characters of ASCII letters, digits and hyphen (upstream's rule)."""
    if not isinstance(value, str) or not _TITLE_RE.fullmatch(value):
        raise InputError(f"{name} must be 1-50 characters of letters, digits and hyphen (got {_show(value)})")
    return value


def check_memory_type(value: str) -> str:
    """Memory types are short identifiers such as ``NOTES`` or ``chat``."""
    if not isinstance(value, str) or not _MEMORY_TYPE_RE.fullmatch(value):
        raise InputError(
            f"memory_type must be 1-50 characters of letters, digits, hyphen and underscore (got {_show(value)})"
        )
    return value


def check_text(name: str, value: str, max_chars: int, *, stored: bool = True) -> str:
    """A required text: not blank after stripping, at most ``max_chars`` characters. Returned unchanged."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string (got {type(value).__name__})")
    if not value.strip():
        raise InputError(f"{name} must not be empty")
    if len(value) > max_chars:
        raise InputError(f"{name} is too long: {len(value)} characters (max {max_chars})")
    return _valid_unicode(name, value, stored=stored)


def check_optional_text(name: str, value: str | None, max_chars: int) -> str:
    """An optional text (``None`` → ``""``) of at most ``max_chars`` characters."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string (got {type(value).__name__})")
    if len(value) > max_chars:
        raise InputError(f"{name} is too long: {len(value)} characters (max {max_chars})")
    return _valid_unicode(name, value)


def check_tags(value: dict[str, str] | None) -> dict[str, str]:
    """Tags: an object of string → string, at most 32 keys, keys 1-64 and values ≤ 512 characters."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"tags must be an object of string to string (got {type(value).__name__})")
    if len(value) > LIMITS["tags_keys"]:
        raise InputError(f"tags has {len(value)} keys (max {LIMITS['tags_keys']})")
    for key, val in value.items():
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"tags keys must be non-empty strings (got {_show(key)})")
        if len(key) > LIMITS["tag_key"]:
            raise InputError(f"tags key {_show(key)} is too long: {len(key)} characters (max {LIMITS['tag_key']})")
        if not isinstance(val, str):
            raise InputError(f"tags[{key!r}] must be a string (got {type(val).__name__})")
        if len(val) > LIMITS["tag_value"]:
            raise InputError(f"tags[{key!r}] is too long: {len(val)} characters (max {LIMITS['tag_value']})")
        _valid_unicode("tags key", key)
        _valid_unicode("tags value", val)
    return dict(value)


def check_idempotency_key(value: str | None) -> str | None:
    """An optional idempotency key of 1-200 characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > LIMITS["idempotency_key"]:
        raise InputError(f"idempotency_key must be 1-{LIMITS['idempotency_key']} characters (got {_show(value)})")
    return _valid_unicode("idempotency_key", value)


def check_entry(raw_entry: Any, summary: Any, tags: Any, conversation_time: Any, idempotency_key: Any) -> NewEntry:
    """The checked arguments of one entry (``add_entry``'s rules)."""
    return NewEntry(
        check_text("raw_entry", raw_entry, LIMITS["raw_entry"]),
        check_text("summary", summary, LIMITS["summary"]),
        check_tags(tags),
        parse_rfc3339("conversation_time", conversation_time),
        check_idempotency_key(idempotency_key),
    )


def check_entry_item(index: int, item: Any) -> NewEntry:
    """Item ``index`` of an ``add_entries`` call, checked; errors name the item."""
    if not isinstance(item, Mapping):
        raise InputError(f"entries[{index}] must be an object with raw_entry and summary (got {type(item).__name__})")
    unknown = [key for key in item if key not in ENTRY_FIELDS]
    missing = [key for key in ENTRY_FIELDS[:2] if key not in item]
    if unknown or missing:
        problems = [f"unknown field {k!r}" for k in unknown] + [f"missing required field {k!r}" for k in missing]
        raise InputError(f"entries[{index}]: {'; '.join(problems)} (fields: {', '.join(ENTRY_FIELDS)})")
    try:
        return check_entry(*(item.get(key) for key in ENTRY_FIELDS))
    except InputError as exc:
        raise InputError(f"entries[{index}]: {exc}") from None
