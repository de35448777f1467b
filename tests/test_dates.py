"""The date module: the loader's lenient parser, the agent's normaliser, the server's strict parser, the month table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from mycelian_agent import dates
from mycelian_agent.conversations import formats
from mycelian_agent.dates import (
    MONTHS,
    month_number,
    normalise_time,
    parse_rfc3339,
    resolve_relative_dates,
    strip_resolved_dates,
    to_rfc3339,
)
from mycelian_agent.errors import InputError
from mycelian_agent.memory_server.storage import validation
from mycelian_agent.models.extractive.text import conversation_date

# ---------------------------------------------------------------------------------------------------- to_rfc3339


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023/05/20 (Sat) 02:21", "2023-05-20T02:21:00Z"),
        ("2023/12/18 (Mon) 04:17", "2023-12-18T04:17:00Z"),
        ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00Z"),
        ("12:48 am on 1 February, 2023", "2023-02-01T00:48:00Z"),
        ("12:10 pm on 3 Sept, 2023", "2023-09-03T12:10:00Z"),
        ("11:01 am on 17 December, 2022", "2022-12-17T11:01:00Z"),
        ("2023-05-20T02:21:00Z", "2023-05-20T02:21:00Z"),
        ("2023-05-20T04:21:00+02:00", "2023-05-20T02:21:00Z"),
        ("2023-05-19T22:21:00-04:00", "2023-05-20T02:21:00Z"),
        ("2023-05-20 02:21", "2023-05-20T02:21:00Z"),  # no offset: UTC
        ("2023-05-20", "2023-05-20T00:00:00Z"),
        ("2023-05-20T02:21:00.250Z", "2023-05-20T02:21:00.250000Z"),
    ],
)
def test_to_rfc3339(text: str, expected: str) -> None:
    assert to_rfc3339(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2023/02/30 (Thu) 10:00",
        "2023/05/20 (Sat) 25:00",
        "13:00 pm on 8 May, 2023",
        "1:56 pm on 8 Smarch, 2023",
        "1:56 pm on 32 May, 2023",
        "20-05-2023",
        "2023-05-20T02:21:00+25:00",
    ],
)
def test_to_rfc3339_rejects(text: str) -> None:
    with pytest.raises(InputError, match="unparseable date .*expected RFC 3339 like '2023-05-20T02:21:00Z'"):
        to_rfc3339(text)


def test_to_rfc3339_rejects_non_strings_and_is_the_loaders() -> None:
    with pytest.raises(InputError, match=r"^date 20230520 must be a string like '2023-05-20T02:21:00Z', got int$"):
        to_rfc3339(20230520)  # type: ignore[arg-type]
    assert formats.to_rfc3339 is to_rfc3339


# ------------------------------------------------------------------------------------------------ normalise_time


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("2024-03-05T14:30:00Z", "2024-03-05T14:30:00Z"),
        ("2024-03-05T16:30:00+02:00", "2024-03-05T14:30:00Z"),
        ("2024-03-05T09:00:00-05:30", "2024-03-05T14:30:00Z"),
        ("2024-03-05T23:30:00-01:00", "2024-03-06T00:30:00Z"),  # the offset moves the day
        ("2024-03-05T14:30:00", "2024-03-05T14:30:00Z"),  # naive: UTC
        ("2024-03-05 14:30", "2024-03-05T14:30:00Z"),
        ("2024-03-05", "2024-03-05T00:00:00Z"),
        ("2024-03-05T14:30:00.999Z", "2024-03-05T14:30:00Z"),  # fractions dropped, not rounded
        (datetime(2024, 3, 5, 14, 30), "2024-03-05T14:30:00Z"),  # naive datetime: UTC
        (datetime(2024, 3, 5, 14, 30, tzinfo=UTC), "2024-03-05T14:30:00Z"),
        (datetime(2024, 3, 5, 20, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))), "2024-03-05T14:30:00Z"),
    ],
)
def test_normalise_time(value: str | datetime | None, expected: str | None) -> None:
    assert normalise_time(value) == expected


@pytest.mark.parametrize(
    "value", ["yesterday", "", "2024-13-01T00:00:00Z", "2024/03/05 (Tue) 14:30", "9999-12-31T23:59:59-01:00"]
)
def test_normalise_time_rejects(value: str) -> None:
    expected = f"conversation_time {value!r} is not an RFC 3339 timestamp (e.g. 2024-03-05T14:30:00Z)"
    with pytest.raises(InputError) as info:
        normalise_time(value)
    assert str(info.value) == expected


# ------------------------------------------------------------------------------------------------- parse_rfc3339


def test_the_server_uses_the_strict_parser() -> None:
    assert validation.parse_rfc3339 is dates.parse_rfc3339
    assert validation.format_timestamp is dates.format_timestamp


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
        (" 2024-05-01T12:00:00+00:00 ", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01T12:00:00.999999999Z", "2024-05-01T12:00:00.999999Z"),  # truncated, not rounded
        ("2024-05-01T00:30:00+01:00", "2024-04-30T23:30:00.000000Z"),
        (None, None),
    ],
)
def test_parse_rfc3339(text: str | None, normalised: str | None) -> None:
    assert parse_rfc3339("before", text) == normalised


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            "2024-05-01T12:00:00",
            "before must be an RFC 3339 timestamp with a time zone, e.g. 2024-05-01T12:00:00Z "
            "(got '2024-05-01T12:00:00')",
        ),
        (
            "2024-05-01T12:00:00+24:00",
            "before is not a valid date/time: '2024-05-01T12:00:00+24:00' (offset out of range)",
        ),
        (
            "2024-02-30T12:00:00Z",
            "before is not a valid date/time: '2024-02-30T12:00:00Z' (day is out of range for month)",
        ),
        (1714564800, "before must be an RFC 3339 string (got int)"),
    ],
)
def test_parse_rfc3339_rejects(value: object, problem: str) -> None:
    with pytest.raises(InputError) as info:
        parse_rfc3339("before", value)  # type: ignore[arg-type]
    assert str(info.value) == problem


# --------------------------------------------------------------------------------------------------- month table


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("January", 1),
        ("may", 5),
        ("Sept", 9),
        ("sep", 9),
        ("SEPTEMBER", 9),
        ("Dec.", 12),
        ("Ma", None),
        ("Smarch", None),
        ("Mayday", None),
        ("", None),
    ],
)
def test_month_number(name: str, number: int | None) -> None:
    assert month_number(name) == number


def test_extractive_dates_share_the_month_table() -> None:
    assert conversation_date("1:56 pm on 8 May, 2023") == "2023-05-08"
    assert conversation_date("12:10 pm on 3 Sept, 2023") == "2023-09-03"
    assert conversation_date("September 3rd, 2023") == "2023-09-03"
    # The loader and the extractive model read every LoCoMo-style month the same way.
    for name in MONTHS:
        for spelled in (name.title(), name[:3].title(), name[:4].title()):
            text = f"9:00 am on 2 {spelled}, 2023"
            assert conversation_date(text) == to_rfc3339(text)[:10], text


def test_resolved_dates_come_out_again_leaving_other_parentheses() -> None:
    text = (
        "Yesterday and last week, next month, last summer, next year, this weekend, last winter, "
        "two days ago; my niece (she is 7) came (by train) in 2019."
    )
    resolved = resolve_relative_dates(text, "2023-05-08T13:56:00Z")
    assert resolved != text and "last winter (winter 2022-2023)" in resolved and "(week of 2023-05-01)" in resolved
    assert strip_resolved_dates(resolved) == text
    assert strip_resolved_dates("I was born (1990) in (Lisbon)") == "I was born in (Lisbon)"  # its shape goes too
