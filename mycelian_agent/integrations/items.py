"""How a LangGraph store item is kept as a Mycelian entry, and the store's matching rules.

An item's key, value and times become an entry's raw text, summary and tags (:func:`encode_item`) and come back from
it (:func:`to_item`, :func:`to_search_item`); a namespace names a memory (:func:`namespace_title`, any labels:
see :mod:`~mycelian_agent.recall.names`); searches filter
values and list namespaces as ``InMemoryStore`` does (:func:`matches`, :func:`namespace_matches`). The mapping
itself is described in :mod:`~mycelian_agent.integrations.store`, whose :class:`MycelianStore` uses these.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from langgraph.store.base import Item, MatchCondition, SearchItem

from ..errors import InputError
from ..limits import (
    DESCRIPTION_MAX_CHARS,
    RAW_ENTRY_MAX_CHARS,
    SUMMARY_TARGET_CHARS,
    TAG_VALUE_MAX_CHARS,
    unicode_problem,
)
from ..recall.names import check_label, namespace_description, namespace_memory_title

__all__ = [
    "CREATED_TAG",
    "FIELD_TAG",
    "KEY_TAG",
    "SPEAKER",
    "check_key",
    "check_labels",
    "encode_item",
    "matches",
    "namespace_matches",
    "namespace_title",
    "to_item",
    "to_search_item",
]

#: Tag holding an item's key.
KEY_TAG = "store_key"
#: Tag naming the one text field a value was stored as (absent: the entry holds the value's JSON).
FIELD_TAG = "store_field"
#: Tag holding the creation time of a key's first version (kept across puts).
CREATED_TAG = "store_created"
#: Speaker shown for stored items in recall blocks.
SPEAKER = "saved note"


def check_labels(namespace: object, what: str) -> tuple[str, ...]:
    """``namespace`` when it is a tuple of strings (a search prefix or a namespace), else an :class:`InputError`
    naming it."""
    if not isinstance(namespace, tuple) or not all(isinstance(label, str) for label in namespace):
        raise InputError(f"{what} must be a tuple of strings, got {namespace!r}")
    return namespace


def namespace_title(namespace: tuple[str, ...]) -> str:
    """The title of the memory holding ``namespace``: its labels joined with ``-`` when that is a Mycelian title
    (``("memories", "alice")`` -> ``memories-alice``), else an encoded title
    (:func:`~mycelian_agent.recall.names.namespace_memory_title`); an :class:`InputError` for an empty namespace,
    a label that cannot name a memory, or labels too long to keep in the memory's description."""
    check_labels(namespace, "namespace")
    if not namespace:
        raise InputError("namespace is empty: give at least one label, e.g. ('memories', user_id)")
    for label in namespace:
        check_label(label, f"namespace {namespace!r}: label")
    if len(namespace_description(namespace)) > DESCRIPTION_MAX_CHARS:
        raise InputError(
            f"namespace {namespace!r} is too long to keep in a memory's description (at most "
            f"{DESCRIPTION_MAX_CHARS} characters as JSON): use fewer or shorter labels"
        )
    return namespace_memory_title(namespace)


def _time(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def check_key(key: object) -> str:
    """``key`` when it can name an item (it is kept in a tag: a non-empty string of at most
    :data:`TAG_VALUE_MAX_CHARS` characters that can be stored), else an :class:`InputError` naming it."""
    if not isinstance(key, str) or not key:
        raise InputError(f"key must be a non-empty string, got {key!r}")
    if len(key) > TAG_VALUE_MAX_CHARS:
        raise InputError(
            f"key has {len(key)} characters; a MycelianStore key has at most {TAG_VALUE_MAX_CHARS} "
            "(it is kept in a tag)"
        )
    if problem := unicode_problem(key):
        raise InputError(f"key {key!r}: {problem}")
    return key


def _json_problem(value: object, where: str) -> str | None:
    """What keeps ``value`` from coming back as it was put, or None: a key that is not a string (JSON would turn
    ``None`` into ``"null"``) or a number that is not finite (NaN and infinities are not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value!r}: not a JSON number (store it as a string or None)"
    if isinstance(value, Mapping):
        for field_name, inner in value.items():
            if not isinstance(field_name, str):
                return (
                    f"{where} has the key {field_name!r} ({type(field_name).__name__}): JSON keys are strings, "
                    "so it would come back changed"
                )
            if problem := _json_problem(inner, f"{where}[{field_name!r}]"):
                return problem
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            if problem := _json_problem(inner, f"{where}[{index}]"):
                return problem
    return None


def encode_item(key: object, value: object) -> tuple[str, str, dict[str, str]]:
    """``(raw_entry, summary, tags)`` of an item (see the module docstring)."""
    key = check_key(key)
    if not isinstance(value, Mapping):
        raise InputError(f"value of key {key!r} must be a mapping (a dict), got {type(value).__name__}")
    tags = {KEY_TAG: key, "speaker": SPEAKER}
    only = next(iter(value.items())) if len(value) == 1 else None
    if (
        only is not None
        and isinstance(only[0], str)
        and isinstance(only[1], str)
        and only[1].strip()
        and len(only[0]) <= TAG_VALUE_MAX_CHARS
    ):
        raw = only[1]
        tags[FIELD_TAG] = only[0]
    else:
        if problem := _json_problem(value, f"value of key {key!r}"):
            raise InputError(problem)
        try:
            raw = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"value of key {key!r} is not JSON data: {exc}") from None
    problem = unicode_problem(raw)
    if problem:
        raise InputError(f"value of key {key!r}: {problem}")
    if len(raw) > RAW_ENTRY_MAX_CHARS:
        raise InputError(
            f"value of key {key!r} is {len(raw)} characters as stored; a Mycelian entry holds at most "
            f"{RAW_ENTRY_MAX_CHARS} (store it in parts under several keys)"
        )
    summary = " ".join(raw.split())[:SUMMARY_TARGET_CHARS] or raw[:SUMMARY_TARGET_CHARS]
    return raw, summary, tags


def _value(entry: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(key, value)`` of an entry: a stored item's, or (an entry the store did not write) its id and contents."""
    tags = dict(entry.get("tags") or {})
    raw = str(entry.get("rawEntry") or "")
    key = tags.get(KEY_TAG)
    if key is None:
        value: dict[str, Any] = {"text": raw, "summary": entry.get("summary") or "", "tags": tags}
        if entry.get("conversationTime"):
            value["conversation_time"] = entry["conversationTime"]
        return str(entry["entryId"]), value
    if FIELD_TAG in tags:
        return key, {tags[FIELD_TAG]: raw}
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        decoded = None
    return key, decoded if isinstance(decoded, dict) else {"text": raw}


def _item_fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The key, value and times of the item an entry stores (the creation time of its first version)."""
    key, value = _value(entry)
    created = _time(str((entry.get("tags") or {}).get(CREATED_TAG) or entry["creationTime"]))
    return {"key": key, "value": value, "created_at": created, "updated_at": _time(entry["creationTime"])}


def to_item(entry: Mapping[str, Any], namespace: tuple[str, ...]) -> Item:
    """The item an entry of ``namespace``'s memory stores."""
    return Item(namespace=namespace, **_item_fields(entry))


def to_search_item(entry: Mapping[str, Any], namespace: tuple[str, ...], score: float | None = None) -> SearchItem:
    """The item an entry stores, as a search result (``score``: the server's relevance, None when listed)."""
    return SearchItem(namespace=namespace, score=score, **_item_fields(entry))


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _compare(actual: Any, wanted: Any) -> bool:
    """``InMemoryStore``'s filter rule: exact values, nested dicts, lists, and the comparison operators."""
    if isinstance(wanted, Mapping):
        if any(str(op).startswith("$") for op in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(_compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted))
        )
    return actual == wanted


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return actual == operand
    if op == "$ne":
        return actual != operand
    if op not in _OPERATORS:
        raise InputError(f"unsupported filter operator {op!r}: use one of {', '.join(_OPERATORS)}")
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[op]


def _field(value: Mapping[str, Any], key: str) -> Any:
    """``value[key]``; a key it lacks that holds dots is a path into nested dicts (``"user.access-level"``), as
    LangGraph's SQLite and PostgreSQL stores read it."""
    if key in value or "." not in key:
        return value.get(key)
    found: Any = value
    for part in key.split("."):
        if not isinstance(found, Mapping):
            return None
        found = found.get(part)
    return found


def matches(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes the search ``filter`` ``wanted`` (``InMemoryStore``'s rule; a dotted key is a path
    into nested fields)."""
    return not wanted or all(_compare(_field(value, k), v) for k, v in wanted.items())


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` meets a ``list_namespaces`` condition (a prefix or suffix, ``*`` matching any label)."""
    if condition.match_type not in ("prefix", "suffix"):
        raise InputError(f"unsupported namespace match type {condition.match_type!r}: use 'prefix' or 'suffix'")
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(want == "*" or have == want for have, want in pairs)
