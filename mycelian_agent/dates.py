"""Dates and times: the one month table and the three parsers of the package.

- :func:`to_rfc3339`: the lenient conversation-file parser (RFC 3339 / ISO 8601, LongMemEval, LoCoMo dates).
- :func:`normalise_time`: the agent's ``conversation_time`` argument, to ``YYYY-MM-DDTHH:MM:SSZ``.
- :func:`parse_rfc3339`: the memory server's strict parser (a zone is required), to ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

A value without a zone is taken as UTC everywhere except in :func:`parse_rfc3339`, which refuses it. Every failure
is an :class:`~mycelian_agent.errors.InputError` naming the value and an example of the accepted form. A leaf
module: the memory server imports it, so it depends on nothing but the standard library and ``errors``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from mycelian_agent.errors import InputError

__all__ = ["MONTHS", "format_timestamp", "month_number", "normalise_time", "parse_rfc3339", "to_rfc3339"]

MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)

# Regexes rather than strptime for the benchmark forms: strptime's %a, %b and %p follow the process locale, and
# LoCoMo abbreviates September as "Sept", which %b does not know.
_LONGMEMEVAL = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{3}\))?\s*(\d{1,2}):(\d{2})(?::(\d{2}))?")
_LOCOMO = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})", re.I)
# fromisoformat alone accepts more than RFC 3339 (no zone, week dates, basic format); the server needs the shape.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


def month_number(name: str) -> int | None:
    """1-12 for an English month name or an abbreviation of at least three letters (``"Sept"``, ``"dec."``).

    Case-insensitive; None for anything else.
    """
    name = name.strip().rstrip(".").lower()
    if len(name) < 3:
        return None
    return next((i for i, month in enumerate(MONTHS, 1) if month.startswith(name)), None)


def _utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _parse_lenient(text: str) -> datetime:
    if m := _LONGMEMEVAL.fullmatch(text):
        year, month, day, hour, minute, second = (int(g or 0) for g in m.groups())
        return datetime(year, month, day, hour, minute, second)
    if m := _LOCOMO.fullmatch(text):
        hour, minute, ampm, day, month, year = m.groups()
        month_no = month_number(month)
        if not 1 <= int(hour) <= 12 or month_no is None:
            raise ValueError(text)
        hour24 = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
        return datetime(int(year), month_no, int(day), hour24, int(minute))
    if re.match(r"\d{4}-?\d{2}", text):
        return datetime.fromisoformat(text)
    raise ValueError(text)


def to_rfc3339(text: str) -> str:
    """Normalise a conversation-file date to RFC 3339 UTC (``"2023-05-20T02:21:00Z"``).

    Accepts LongMemEval ``"2023/05/20 (Sat) 02:21"`` (the weekday is not checked), LoCoMo
    ``"1:56 pm on 8 May, 2023"`` and ISO 8601 / RFC 3339 (offsets are converted to UTC; a value without an
    offset is taken as UTC; a bare date means midnight). Benchmark dates carry no zone and are taken as UTC.
    Fractions of a second are kept (``"...T02:21:00.250000Z"``). Raises :class:`InputError` when the text is
    none of these.
    """
    if not isinstance(text, str):
        raise InputError(f"date {text!r} must be a string like '2023-05-20T02:21:00Z', got {type(text).__name__}")
    try:
        moment = _utc(_parse_lenient(text.strip()))
    except (ValueError, OverflowError):
        raise InputError(
            f"unparseable date {text!r} (expected RFC 3339 like '2023-05-20T02:21:00Z', LongMemEval like "
            "'2023/05/20 (Sat) 02:21' or LoCoMo like '1:56 pm on 8 May, 2023')"
        ) from None
    return moment.isoformat().replace("+00:00", "Z")


def normalise_time(value: str | datetime | None) -> str | None:
    """The agent's ``conversation_time``: ``YYYY-MM-DDTHH:MM:SSZ`` in UTC, or None for None.

    Takes an ISO 8601 / RFC 3339 string or a :class:`datetime`; a value without a zone is taken as UTC.
    Fractions of a second are dropped. Raises :class:`InputError` for any other string, or when the instant
    falls outside years 1-9999 in UTC.
    """
    if value is None:
        return None
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError):  # OverflowError: the instant in UTC is outside years 1-9999
        raise InputError(
            f"conversation_time {value!r} is not an RFC 3339 timestamp (e.g. 2024-03-05T14:30:00Z)"
        ) from None


def _show(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def parse_rfc3339(name: str, value: str | None) -> str | None:
    """The memory server's timestamps: RFC 3339 with a required zone, returned as :func:`format_timestamp` gives.

    ``name`` is the argument's name for error messages; None gives None. Fractions beyond microseconds (Go emits
    nanoseconds) are truncated, not rounded. Raises :class:`InputError` for anything else.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{name} must be an RFC 3339 string (got {type(value).__name__})")
    match = _RFC3339.fullmatch(value.strip())
    if not match:
        raise InputError(
            f"{name} must be an RFC 3339 timestamp with a time zone, e.g. 2024-05-01T12:00:00Z (got {_show(value)})"
        )
    day, time, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    micro = (fraction or "")[:6].ljust(6, "0")
    try:
        if int(zone[1:3]) * 60 + int(zone[4:6]) >= 24 * 60:
            raise ValueError("offset out of range")
        return format_timestamp(datetime.fromisoformat(f"{day}T{time}.{micro}{zone}"))
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{name} is not a valid date/time: {_show(value)} ({exc})") from None


def format_timestamp(moment: datetime) -> str:
    """The memory server's stored and returned form of an instant: ``2024-05-01T12:00:00.000000Z`` (UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
