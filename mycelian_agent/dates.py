"""Dates and times: the one month table and the three parsers of the package.

- :func:`to_rfc3339`: the lenient conversation-file parser (RFC 3339 / ISO 8601, LongMemEval, LoCoMo dates).
- :func:`normalise_time`: the agent's ``conversation_time`` argument, to ``YYYY-MM-DDTHH:MM:SSZ``.
- :func:`parse_rfc3339`: the memory server's strict parser (a zone is required), to ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.
- :func:`resolve_relative_dates`: "yesterday" -> "yesterday (2023-05-07)", seen from a message's time;
  :func:`strip_resolved_dates` takes those dates out again.

A value without a zone is taken as UTC everywhere except in :func:`parse_rfc3339`, which refuses it. Every failure
is an :class:`~mycelian_agent.errors.InputError` naming the value and an example of the accepted form. A leaf
module: the memory server imports it, so it depends on nothing but the standard library and ``errors``.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from mycelian_agent.errors import InputError

__all__ = [
    "MONTHS",
    "NUMBER_WORDS",
    "format_timestamp",
    "month_number",
    "normalise_time",
    "parse_rfc3339",
    "resolve_relative_dates",
    "resolved_periods",
    "strip_resolved_dates",
    "to_rfc3339",
]

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
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
        hour_text, minute_text, ampm, day_text, month_name, year_text = m.groups()
        month_no = month_number(month_name)
        if not 1 <= int(hour_text) <= 12 or month_no is None:
            raise ValueError(text)
        hour24 = int(hour_text) % 12 + (12 if ampm.lower() == "p" else 0)
        return datetime(int(year_text), month_no, int(day_text), hour24, int(minute_text))
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


# ---------------------------------------------------------------------------------------- relative dates

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: Counting words and their numbers ("a couple of weeks ago"); query_time.py adds the vaguer ones a question uses.
NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
    "a couple": 2,
}
# (first month, last month) of each season, northern hemisphere; winter runs from December into the next year.
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 2)}
# What resolve_relative_dates writes in its parentheses (the labels of _resolve below).
_RESOLVED_DATE_LABELS = (
    r" \((?:(?:week|weekend) of \d{4}-\d{2}-\d{2}|\d{4}-\d{2}-\d{2}|(?:{months}) \d{4}|"
    r"(?:{seasons}) \d{4}(?:-\d{4})?|\d{4})\)"
)
_RESOLVED_DATE = re.compile(
    _RESOLVED_DATE_LABELS.replace("{months}", "|".join(month.capitalize() for month in MONTHS)).replace(
        "{seasons}", "|".join(_SEASONS)
    )
)
_COUNT = r"(\d{1,3}|a couple of|couple of|a couple|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(day|week|month|year)s?"
_RELATIVE_DATE = re.compile(
    r"\b(?:"
    r"(?P<twoday>the day before yesterday|the day after tomorrow)"
    r"|(?P<oneday>yesterday|tomorrow)(?:\s+(?:morning|afternoon|evening|night))?"
    r"|(?P<lastnight>last night)"
    rf"|{_COUNT}\s+{_UNIT}\s+(?P<ago>ago|from now)"
    rf"|(?P<in>in)\s+{_COUNT}\s+{_UNIT}"
    r"|(?P<which>last|next|this past|this coming|this)\s+(?P<what>week|month|year|weekend|"
    + "|".join(_WEEKDAYS)
    + "|"
    + "|".join(_SEASONS)
    + r")"
    r")\b(?!\s*\()",  # an expression already followed by "(" is taken to be resolved
    re.I,
)
_FREQUENCY = re.compile(r"\b(?:once|twice|thrice|times|per)\s*$", re.I)


def _anchor_date(when: Any) -> date | None:
    if isinstance(when, datetime):
        return _utc(when).date()
    if isinstance(when, date):
        return when
    if isinstance(when, str) and when.strip():
        try:
            return datetime.fromisoformat(to_rfc3339(when).replace("Z", "+00:00")).date()
        except InputError:
            return None
    return None


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _month_label(day: date) -> str:
    return f"{MONTHS[day.month - 1].capitalize()} {day.year}"


def _week_label(day: date) -> str:
    return f"week of {(day - timedelta(days=day.weekday())).isoformat()}"


def _season_label(season: str, which: str, today: date) -> str:
    first, last = _SEASONS[season]
    month, year = today.month, today.year
    if season == "winter":  # a winter is named by its December's year: "winter 2022-2023"
        current = year if month == 12 else year - 1 if month <= last else None
        if which == "last":
            start = (current - 1) if current is not None else year - 1
        elif which == "next":
            start = (current + 1) if current is not None else year
        else:
            start = current if current is not None else year
        return f"winter {start}-{start + 1}"
    if which == "last":
        start = year if month > last else year - 1
    elif which == "next":
        start = year if month < first else year + 1
    else:
        start = year
    return f"{season} {start}"


def _resolve(match: re.Match[str], today: date) -> str | None:
    """The absolute date (or period) ``match`` names, seen from ``today``; None when it names none."""
    groups = match.groupdict()
    if groups["twoday"]:
        return (today + timedelta(days=2 if "after" in groups["twoday"].lower() else -2)).isoformat()
    if groups["oneday"]:
        return (today + timedelta(days=1 if groups["oneday"].lower() == "tomorrow" else -1)).isoformat()
    if groups["lastnight"]:
        return (today - timedelta(days=1)).isoformat()
    if groups["ago"] or groups["in"]:
        words = [g for g in match.groups() if g is not None]
        count_text, unit = (words[1], words[2]) if groups["in"] else (words[0], words[1])
        count_text = " ".join(count_text.lower().split())
        count = int(count_text) if count_text.isdigit() else NUMBER_WORDS[count_text]
        sign = -1 if (groups["ago"] or "").lower() == "ago" else 1
        unit = unit.lower()
        if unit == "day":
            return (today + timedelta(days=sign * count)).isoformat()
        if unit == "week":
            return _week_label(today + timedelta(weeks=sign * count))
        if unit == "month":
            return _month_label(_add_months(today, sign * count))
        return str(today.year + sign * count)
    which = " ".join(groups["which"].lower().split())
    which = {"this past": "last", "this coming": "this"}.get(which, which)
    what = groups["what"].lower()
    step = {"last": -1, "next": 1, "this": 0}[which]
    if what == "week":
        return _week_label(today + timedelta(weeks=step))
    if what == "month":
        return _month_label(_add_months(today, step))
    if what == "year":
        return str(today.year + step)
    if what in _SEASONS:
        return _season_label(what, which, today)
    if what == "weekend":
        weekday = today.weekday()
        saturday = today - timedelta(days=weekday - 5) if weekday >= 5 else today + timedelta(days=5 - weekday)
        if which == "last":
            saturday -= timedelta(days=7)
        elif which == "next" and weekday >= 5:
            saturday += timedelta(days=7)
        return f"weekend of {saturday.isoformat()}"
    target = _WEEKDAYS.index(what)
    if which == "last":
        delta = -((today.weekday() - target) % 7 or 7)
    elif which == "next":
        delta = (target - today.weekday()) % 7 or 7
    else:
        delta = (target - today.weekday()) % 7
    return (today + timedelta(days=delta)).isoformat()


# The labels of _resolve that name a day, a week, a weekend or a month (seasons and years are too wide to lift a
# question's day or span by).
_PERIOD_LABEL = re.compile(
    r"\((?:(?P<kind>week|weekend) of )?(?P<day>\d{4}-\d{2}-\d{2})\)|\((?P<month>{months}) (?P<year>\d{4})\)".replace(
        "{months}", "|".join(month.capitalize() for month in MONTHS)
    )
)


def resolved_periods(text: str, when: str | date | datetime | None) -> list[tuple[date, date]]:
    """The days, weeks, weekends and months ``text`` names relative to ``when`` (as :func:`resolve_relative_dates`
    resolves them), each as ``(first day, day after the last)``: "Yesterday I ran my first 10k", said on 2024-05-10,
    names ``(2024-05-09, 2024-05-10)``; "next month" ``(2024-06-01, 2024-07-01)``."""
    periods = []
    for match in _PERIOD_LABEL.finditer(resolve_relative_dates(text, when)):
        try:
            if match["day"]:
                start = date.fromisoformat(match["day"])
                periods.append((start, start + timedelta(days={"week": 7, "weekend": 2}.get(match["kind"] or "", 1))))
            else:
                start = date(int(match["year"]), MONTHS.index(match["month"].lower()) + 1, 1)
                periods.append((start, _add_months(start, 1)))
        except (ValueError, OverflowError):
            continue
    return periods


def strip_resolved_dates(text: str) -> str:
    """``text`` without the dates :func:`resolve_relative_dates` puts beside relative ones (" (2023-05-07)",
    " (week of 2023-05-01)", " (June 2023)", " (summer 2022)", " (2024)", ...): the words as they were written, to
    compare a resolved text with the original. A parenthesis of the same shape written by the speaker goes too."""
    return _RESOLVED_DATE.sub("", text)


def resolve_relative_dates(text: str, when: str | date | datetime | None) -> str:
    """``text`` with the absolute date put beside each relative date it contains, seen from ``when``.

    ``when`` is the message's time (RFC 3339, a LoCoMo or LongMemEval date, a ``date`` or ``datetime``); when it
    is None or unparseable the text is returned unchanged. The original words stay, the date follows in
    parentheses: "yesterday (2023-05-07)", "two days ago (2023-05-06)", "last Friday (2023-05-05)", "last week
    (week of 2023-05-01)" (weeks start on Monday), "next month (June 2023)", "in 3 weeks (week of 2023-05-29)",
    "this weekend (weekend of 2023-05-13)", "last summer (summer 2022)", "next year (2024)". "last <weekday>" is the
    most recent one before the day, "next <weekday>" the first one after it, "this <weekday>" the one of the coming
    seven days (today included). Vague expressions ("a few days ago", "recently", "the other day") and frequencies
    ("twice in a week") are left alone; an expression already followed by a parenthesis is not annotated again.
    """
    today = _anchor_date(when)
    if today is None or not text:
        return text

    def annotate(match: re.Match[str]) -> str:
        if match.group("in") and _FREQUENCY.search(match.string, 0, match.start()):
            return match[0]
        try:
            resolved = _resolve(match, today)
        except (ValueError, OverflowError, KeyError):  # a date outside years 1-9999
            resolved = None
        return f"{match[0]} ({resolved})" if resolved else match[0]

    return _RELATIVE_DATE.sub(annotate, text)
