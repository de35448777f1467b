"""Time named in a search query: "in May 2023", "last weekend", "two weeks before August 11, 2023" -> time spans.

:func:`parse_query_time` finds the expressions of a query that name a time and resolves each one, against the
question's date (``reference``), into spans of conversation time; :func:`boost` lifts the hits whose entry falls in
one of them. The search pipeline calls both (``pipeline.rank_entries``); this module does no I/O.

Only expressions that *name* a time act: "When did Caroline go to the support group?" asks for a time and names
none, so it is left alone, as are recurrences ("on Tuesdays"), bare weekdays ("on Friday"), vague words
("recently", "the other day") and a month name without a preposition or a day beside it ("May I ask ...", "June
said"). What is understood:

- absolute: a day ("on 8 May 2023", "May 8th, 2023", "2023-05-08"), a month ("in May 2023", "May of 2023"), a year
  ("in 2022"), a season ("in the summer of 2022");
- a month or day without its year ("in June", "on May 3"): that month or day of every year up to the reference
  (:data:`YEARS_BACK`; the question names the month, the memory's words decide the year);
- relative to ``reference`` (the store passes the search's ``before`` bound, else today): "today", "yesterday",
  "the day before yesterday", "last night", "last / this week|month|year|weekend|<weekday>|<season>", "this past
  weekend", "earlier this week|month|year", "N days|weeks|months|years ago", "a few days|weeks ago";
- offsets from a date: "two weeks before August 11, 2023", "the Friday before 14 August 2023", "the week after
  May 3", "last weekend before April 10, 2023".

A span covers the time the expression names and, for an offset from a date, the time up to that date too: in a
conversation the date named is most often the day the thing was told ("I got a puppy two weeks ago", said on
August 11). Every span is soft (a boost, :data:`TIME_BOOST`): the turn that tells about May may be dated June
("last month I ..."), and a year without entries must not empty the results.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from mycelian_agent.dates import MONTHS, NUMBER_WORDS, format_timestamp, month_number, resolved_periods

__all__ = [
    "ASKS_TIME_BOOST",
    "SPAN_SEARCH",
    "TIME_BOOST",
    "QueryTime",
    "TimeSpan",
    "asks_time",
    "boost",
    "lift_told_times",
    "moment",
    "parse_query_time",
    "reference_date",
    "referenced_spans",
    "span_bounds",
    "tells_time",
]

#: Score factor of a hit inside a named time span: score * (1 + TIME_BOOST); above 1 the temporal category lost.
#: Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
TIME_BOOST = 1.0
#: Things are told after they happen ("last week I ran a 5K"): a hit within this many days after a span's end
#: gets the smaller factor 1 + TOLD_AFTER_BOOST. Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
TOLD_AFTER_DAYS = 7
TOLD_AFTER_BOOST = 0.5
#: Whether a query naming a single span also searches that span alone (its entries join the pool).
SPAN_SEARCH = True
#: Score factor 1 + ASKS_TIME_BOOST of a hit that tells a time, when the question asks for one ("When did ...?"): the
#: answer a "when" question expects is a time (the expected answer type of question answering). One parameter, tuned
#: on LoCoMo dev's conv-26 + conv-30 and checked on conv-41 (BENCHMARKS.md §3, "the answer a 'when' question expects").
ASKS_TIME_BOOST = 0.25
#: Years back that a date without a year ("in June") covers, counted from the reference's year.
YEARS_BACK = 30


@dataclass(frozen=True)
class TimeSpan:
    """A stretch of conversation time ``[start, end)`` (UTC) that a query names; ``text``: the words naming it."""

    start: datetime
    end: datetime
    text: str

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass(frozen=True)
class QueryTime:
    """The time spans a query names (an entry in any of them matches) and the query without the words naming them."""

    spans: tuple[TimeSpan, ...]
    rest: str

    def __bool__(self) -> bool:
        return bool(self.spans)

    def contains(self, moment: datetime) -> bool:
        """Whether ``moment`` lies in one of the spans."""
        return any(moment in span for span in self.spans)

    def factor(self, moment: datetime, referenced: Sequence[TimeSpan] = ()) -> float:
        """The score factor of an entry at ``moment``: 1 + :data:`TIME_BOOST` inside a span, or when a time its own
        words name (``referenced``, :func:`referenced_spans`) overlaps one; 1 + :data:`TOLD_AFTER_BOOST` within
        :data:`TOLD_AFTER_DAYS` after one; else 1."""
        if self.contains(moment) or any(
            ref.start < span.end and span.start < ref.end for ref in referenced for span in self.spans
        ):
            return 1.0 + TIME_BOOST
        told = timedelta(days=TOLD_AFTER_DAYS)
        if any(span.end <= moment < span.end + told for span in self.spans):
            return 1.0 + TOLD_AFTER_BOOST
        return 1.0


# ------------------------------------------------------------------------------------------------- patterns

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_FULL_MONTH = "(?:" + "|".join(MONTHS) + ")"
_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY = "(?:" + "|".join(_WEEKDAYS) + ")"
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "fall": (9, 3), "autumn": (9, 3), "winter": (12, 3)}
_SEASON = "(?:" + "|".join(_SEASONS) + ")"
_NUMBERS = {**NUMBER_WORDS, "a few": 3, "few": 3, "several": 4}
_COUNT = (
    r"(?:\d{1,3}|a couple of|couple of|a couple|a few|few|several|an|a|one|two|three|four|five|six|seven|eight"
    r"|nine|ten|eleven|twelve)"
)
_UNIT = r"(?:day|night|week|weekend|month|year)s?"
_LEAD = r"(?:in|on|during|throughout|around|about|since|by|from|of|early|late|mid|the\s+end\s+of|the\s+start\s+of)"

# A date with a year: "8 May 2023", "8th of May, 2023", "May 8th, 2023", "2023-05-08". Groups: named ones.
_DATE_WITH_YEAR = (
    rf"(?:(?P<d1>{_DAY})\s+(?:of\s+)?(?P<m1>{_MONTH}),?\s+(?P<y1>{_YEAR})"
    rf"|(?P<m2>{_MONTH})\s+(?P<d2>{_DAY}),?\s+(?P<y2>{_YEAR})"
    rf"|(?P<y3>{_YEAR})-(?P<m3>0[1-9]|1[0-2])-(?P<d3>[0-2]\d|3[01]))"
)
# A day without a year: "May 3", "3 May", "the 3rd of May".
_DATE_NO_YEAR = rf"(?:(?:the\s+)?(?P<d4>{_DAY})\s+(?:of\s+)?(?P<m4>{_MONTH})|(?P<m5>{_MONTH})\s+(?P<d5>{_DAY}))"
# Any day ("the anchor" of an offset).
_ANCHOR = rf"(?:{_DATE_WITH_YEAR}|{_DATE_NO_YEAR})(?![\w:])"

_OFFSET = re.compile(
    rf"\b(?P<offset>(?P<count>{_COUNT})\s+(?P<unit>{_UNIT})|(?:the|last|that)\s+(?P<which>day|week|weekend|month"
    rf"|{_WEEKDAY})|(?P<nth>two|three|2|3)\s+weekends)\s+(?P<side>before|after|prior\s+to)\s+(?:the\s+)?{_ANCHOR}",
    re.I,
)
_DAY_WITH_YEAR = re.compile(rf"\b(?:on\s+|the\s+)?{_DATE_WITH_YEAR}(?![\w:])", re.I)
_MONTH_YEAR = re.compile(rf"\b(?:{_LEAD}\s+)?(?P<month>{_MONTH}),?\s+(?:of\s+)?(?P<year>{_YEAR})\b", re.I)
_SEASON_YEAR = re.compile(
    rf"\b(?:{_LEAD}\s+)?(?:the\s+)?(?P<season>{_SEASON})\s+(?:of\s+)?(?P<year>{_YEAR})"
    rf"(?:\s*[-/]\s*(?:{_YEAR}|\d\d))?\b",
    re.I,
)
_YEAR_ONLY = re.compile(rf"\b(?:in|during|throughout|since|of|from|by|early|late|mid)[\s-]+(?P<year>{_YEAR})\b", re.I)
_DAY_NO_YEAR = re.compile(rf"\b(?:on|since|by|from|until|till)\s+{_DATE_NO_YEAR}(?![\w:])", re.I)
_MONTH_ONLY = re.compile(
    rf"\b(?:{_LEAD}|last|this|past)[\s-]+(?P<month>{_FULL_MONTH}|sept)\b(?!\s+(?:\d|I\b|we\b))", re.I
)
_RELATIVE = re.compile(
    r"\b(?:(?P<twoday>the\s+day\s+before\s+yesterday)"
    r"|(?P<yesterday>yesterday|last\s+night)"
    r"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    rf"|(?P<count>{_COUNT})\s+(?P<unit>{_UNIT})\s+ago"
    r"|(?P<earlier>earlier|later)\s+this\s+(?P<period>week|month|year)"
    r"|(?P<which>last|this\s+past|this|past)\s+(?P<what>week|weekend|month|year|"
    + "|".join(_WEEKDAYS)
    + "|"
    + "|".join(_SEASONS)
    + r"))\b",
    re.I,
)
# A query holds a time expression only if it has a digit or one of these words: most queries stop at this check.
_CUES = frozenset(
    [
        "yesterday",
        "today",
        "tonight",
        "ago",
        "last",
        "past",
        "this",
        "earlier",
        *_SEASONS,
        *MONTHS,
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)
_CUE_WORD = re.compile(r"[a-z]+|\d")
# "twice a week", "once in the last month": a frequency, not a time.
_FREQUENCY = re.compile(r"\b(?:once|twice|thrice|times|per|every|each)\s*(?:in\s+)?(?:the\s+)?$", re.I)


# -------------------------------------------------------------------------------------------------- helpers


def _number(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _day(day: date) -> tuple[date, date]:
    return day, day + timedelta(days=1)


def _month(year: int, month: int, months: int = 1) -> tuple[date, date]:
    index = year * 12 + month - 1 + months
    return date(year, month, 1), date(index // 12, index % 12 + 1, 1)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _season(year: int, season: str) -> tuple[date, date]:
    first, months = _SEASONS[season]
    return _month(year, first, months)


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _weekend_before(day: date) -> date:
    """The Saturday of the last weekend that ended before ``day`` (the one just past on a Monday)."""
    return day - timedelta(days=(day.weekday() - 5) % 7 or 7) if day.weekday() != 6 else day - timedelta(days=8)


def _date(groups: dict[str, str | None], suffix: str) -> tuple[int | None, int, int] | None:
    """``(year or None, month, day)`` from the named groups ``d<suffix>``, ``m<suffix>``, ``y<suffix>``."""
    day, month, year = groups.get(f"d{suffix}"), groups.get(f"m{suffix}"), groups.get(f"y{suffix}")
    if not day or not month:
        return None
    month_no = int(month) if month.isdigit() else month_number(month)
    if month_no is None:
        return None
    return (int(year) if year else None), month_no, int(re.sub(r"\D", "", day))


def _anchor(groups: dict[str, str | None]) -> tuple[int | None, int, int] | None:
    for suffix in "12345":
        found = _date(groups, suffix)
        if found:
            return found
    return None


def _years(reference: date, month: int, day: int = 1) -> list[int]:
    """The years whose ``month``/``day`` began at or before ``reference``, newest first (:data:`YEARS_BACK`)."""
    newest = reference.year if (month, day) <= (reference.month, reference.day) else reference.year - 1
    return [year for year in range(newest, newest - YEARS_BACK, -1) if year >= 1]


def _valid(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


# -------------------------------------------------------------------------------------------------- resolvers

Spans = list[tuple[date, date]]


def _offset_spans(match: re.Match[str], reference: date) -> Spans:
    groups = match.groupdict()
    anchor = _anchor(groups)
    if anchor is None:
        return []
    year, month, day = anchor
    before = not groups["side"].lower().startswith("after")
    spans: Spans = []
    for each in [year] if year is not None else _years(reference, month, day)[:YEARS_BACK]:
        moment = _valid(each, month, day)
        if moment is None:
            continue
        if groups["count"]:
            count, unit = _number(groups["count"]), groups["unit"].lower().rstrip("s")
            days = {"day": count, "night": count, "week": 7 * count, "weekend": 7 * count}.get(unit)
            if days is not None:
                distance = timedelta(days=days + (2 if unit in ("week", "weekend") else 1))
            else:
                months = count * (12 if unit == "year" else 1)
                distance = moment - _add_months(moment.replace(day=1), -months - 1)
        elif groups["nth"]:
            distance = timedelta(days=7 * _number(groups["nth"]) + 2)
        else:
            which = groups["which"].lower()
            distance = timedelta(days={"day": 1, "week": 8, "weekend": 9, "month": 32}.get(which, 7))
        # The span reaches from the named time to the anchor day (told then, most often) or the other way round.
        spans.append((moment - distance, moment + timedelta(days=1)) if before else (moment, moment + distance))
    return spans


def _relative_spans(match: re.Match[str], reference: date) -> Spans:
    groups = match.groupdict()
    end = reference + timedelta(days=1)
    if groups["twoday"]:
        return [_day(reference - timedelta(days=2))]
    if groups["yesterday"]:
        return [_day(reference - timedelta(days=1))]
    if groups["today"]:
        return [_day(reference)]
    if groups["count"]:
        count, unit = _number(groups["count"]), groups["unit"].lower().rstrip("s")
        vague = groups["count"].lower().strip() in ("a few", "few", "several", "a couple", "couple of", "a couple of")
        if unit in ("day", "night"):
            middle = reference - timedelta(days=count)
            slack = max(1, count // 3) if vague or count > 3 else 0
            return [(middle - timedelta(days=slack), middle + timedelta(days=slack + 1))]
        if unit in ("week", "weekend"):
            middle = reference - timedelta(weeks=count)
            slack = 3 + (7 if vague else 0)
            return [(middle - timedelta(days=slack), middle + timedelta(days=slack + 1))]
        if unit == "month":
            first = _add_months(reference.replace(day=1), -count)
            return [(_add_months(first, -1) if vague else first, _add_months(first, 1))]
        year = reference.year - count
        return [(date(year - 1, 1, 1) if vague else date(year, 1, 1), date(year + 1, 1, 1))]
    if groups["earlier"]:
        period = groups["period"].lower()
        start = (
            _week_start(reference)
            if period == "week"
            else reference.replace(day=1)
            if period == "month"
            else reference.replace(month=1, day=1)
        )
        return [(start, end)] if groups["earlier"].lower() == "earlier" else []
    which = " ".join(groups["which"].lower().split())
    what = groups["what"].lower()
    last = which in ("last", "this past", "past")
    if what == "week":
        start = _week_start(reference) - timedelta(weeks=1 if last else 0)
        return [(start, start + timedelta(weeks=1))]
    if what == "weekend":
        saturday = _weekend_before(reference) if last else reference + timedelta(days=(5 - reference.weekday()) % 7)
        if not last and reference.weekday() == 6:
            saturday = reference - timedelta(days=1)
        return [(saturday, saturday + timedelta(days=2))]
    if what == "month":
        return [_month(*(_add_months(reference.replace(day=1), -1 if last else 0).timetuple()[:2]))]
    if what == "year":
        year = reference.year - (1 if last else 0)
        return [(date(year, 1, 1), date(year + 1, 1, 1))]
    if what in _SEASONS:
        first_month = _SEASONS[what][0]
        for year in _years(reference, first_month):
            start, stop = _season(year, what)
            if which == "this" or stop <= end:  # "last summer": the latest one that is over
                return [(start, stop)]
        return []
    target = _WEEKDAYS.index(what)
    if which == "this":
        return []  # "this Friday": past or coming, unsaid
    return [_day(reference - timedelta(days=(reference.weekday() - target) % 7 or 7))]


def _month_spans(month: str, year: int | None, reference: date) -> Spans:
    month_no = month_number(month)
    if month_no is None:
        return []
    years = [year] if year is not None else _years(reference, month_no)
    return [_month(each, month_no) for each in years]


Resolver = Callable[[re.Match[str], date], Spans]


# Order matters: longer forms first, and each takes its words out of the query before the next pattern runs.
def _resolvers() -> list[tuple[re.Pattern[str], Resolver]]:
    def absolute_day(match: re.Match[str], _reference: date) -> Spans:
        found = _anchor(match.groupdict())
        moment = _valid(found[0], found[1], found[2]) if found and found[0] is not None else None
        return [_day(moment)] if moment else []

    def month_year(match: re.Match[str], ref: date) -> Spans:
        return _month_spans(match["month"], int(match["year"]), ref)

    def season_year(match: re.Match[str], _ref: date) -> Spans:
        return [_season(int(match["year"]), match["season"].lower())]

    def year_only(match: re.Match[str], _ref: date) -> Spans:
        year = int(match["year"])
        return [(date(year, 1, 1), date(year + 1, 1, 1))]

    def day_no_year(match: re.Match[str], ref: date) -> Spans:
        found = _anchor(match.groupdict())
        if found is None:
            return []
        _, month, day = found
        return [_day(moment) for year in _years(ref, month, day) if (moment := _valid(year, month, day))]

    def month_only(match: re.Match[str], ref: date) -> Spans:
        words = match[0].lower().split()
        if words[0] in ("last", "past"):  # "last May": the latest one over
            spans = _month_spans(match["month"], None, ref)
            return [span for span in spans if span[1] <= ref + timedelta(days=1)][:1]
        if words[0] == "this":
            month_no = month_number(match["month"])
            return [_month(ref.year, month_no)] if month_no else []
        return _month_spans(match["month"], None, ref)

    resolvers: list[tuple[re.Pattern[str], Resolver]] = [
        (_OFFSET, _offset_spans),
        (_DAY_WITH_YEAR, absolute_day),
        (_SEASON_YEAR, season_year),
        (_MONTH_YEAR, month_year),
        (_YEAR_ONLY, year_only),
        (_DAY_NO_YEAR, day_no_year),
        (_MONTH_ONLY, month_only),
        (_RELATIVE, _relative_spans),
    ]
    return resolvers


def _moment(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def parse_query_time(query: str, reference: date | datetime | None = None) -> QueryTime:
    """The time spans ``query`` names, resolved against ``reference`` (the question's date; a datetime is taken in
    UTC; None: today, UTC), and the query with their words taken out.

    Nothing named gives an empty :class:`QueryTime` (false) whose ``rest`` is the query. See the module docstring
    for what is understood.
    """
    if not any(word in _CUES or word.isdigit() for word in _CUE_WORD.findall(query.lower())):
        return QueryTime((), query)
    if isinstance(reference, datetime):
        reference = (reference.astimezone(UTC) if reference.tzinfo else reference).date()
    today = reference or datetime.now(UTC).date()
    spans: list[TimeSpan] = []
    rest = query
    for pattern, resolve in _resolvers():
        pieces: list[str] = []
        position = 0
        for match in pattern.finditer(rest):
            if _FREQUENCY.search(rest, 0, match.start()):
                continue
            try:
                found = resolve(match, today)
            except (ValueError, OverflowError, KeyError):  # a date outside years 1-9999, an odd number word
                found = []
            if not found:
                continue
            spans += [TimeSpan(_moment(start), _moment(stop), match[0].strip()) for start, stop in found]
            pieces.append(rest[position : match.start()])
            position = match.end()
        pieces.append(rest[position:])
        rest = " ".join(" ".join(pieces).split())
    return QueryTime(tuple(spans), rest)


def boost(
    hits: Sequence[tuple[int, float]],
    moments: dict[int, datetime],
    named: QueryTime,
    referenced: dict[int, list[TimeSpan]] | None = None,
) -> list[tuple[int, float]]:
    """``hits`` (``(seq, score)``) with each score multiplied by :meth:`QueryTime.factor` of the entry's moment
    (``moments``: seq -> conversation time, else creation time; a seq without one keeps its score) and of the
    times its words name (``referenced``: seq -> :func:`referenced_spans`), best first (ties: newer)."""
    referenced = referenced or {}
    lifted = [
        (seq, score * named.factor(moments[seq], referenced.get(seq, ())) if seq in moments else score)
        for seq, score in hits
    ]
    return sorted(lifted, key=lambda pair: (-pair[1], -pair[0]))


def referenced_spans(text: str, when: str | None) -> list[TimeSpan]:
    """The days, weeks and months ``text`` names relative to its own time ``when`` ("yesterday", "last Friday",
    "next month": ``dates.resolved_periods``): a turn told on May 10 that says "yesterday I ran my first 10k" is
    about May 9, the day a question ("What did I do on May 9?") names."""
    if not when or not text:
        return []
    return [TimeSpan(_moment(start), _moment(stop), f"{start}..{stop}") for start, stop in resolved_periods(text, when)]


_ASKS_TIME = re.compile(
    r"^\W*(?:when\b|what\s+(?:date|day|year|month)\b|how\s+long\s+ago\b|which\s+(?:date|day|year|month)\b)", re.I
)
# What tells a time in a turn: broader than the query's expressions (a turn's "moved to 26 May", "on Friday", "the
# 15th" answer "when?"), narrower than any number (a month name needs a day or "in" beside it: "May I ...").
_TELLS_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|{_YEAR}|{_DAY}(?<=\d(?:st|nd|rd|th))|{_WEEKDAY}s?"
    rf"|(?:last|next|this|past|coming)\s+(?:\w+\s+)?(?:week|weekend|month|year|night|morning|evening|{_SEASON}"
    rf"|{_WEEKDAY})s?|{_MONTH}\.?\s+{_DAY}|{_DAY}\s+(?:of\s+)?{_MONTH}|in\s+{_MONTH})\b",
    re.I,
)


def asks_time(query: str) -> bool:
    """Whether ``query`` asks for a time: "When did ...", "What date ...", "How long ago ...", "Which year ..."."""
    return bool(_ASKS_TIME.match(query))


def tells_time(text: str, when: str | None) -> bool:
    """Whether ``text``, said at ``when`` (a stored timestamp, or None), tells a time: a date or a day of the month
    ("moved to 26 May", "the 15th"), a weekday, a year, "in <month>", "last / next <period>", "yesterday", "... ago"
    (bare clock times and durations do not count)."""
    return bool(_TELLS_TIME.search(text)) or bool(referenced_spans(text, when))


def lift_told_times(hits: Sequence[tuple[int, float]], told: set[int]) -> list[tuple[int, float]]:
    """``hits`` (``(seq, score)``) with the scores of the entries ``told`` (those that tell a time) multiplied by
    ``1 + ASKS_TIME_BOOST``, best first (ties keep their order): for a question that :func:`asks_time`."""
    lifted = [(seq, score * (1 + ASKS_TIME_BOOST) if seq in told else score) for seq, score in hits]
    return sorted(lifted, key=lambda pair: -pair[1])


_EARLIEST = datetime.min.replace(tzinfo=UTC)


def reference_date(before: str | None) -> date | None:
    """The question's date a search's exclusive ``before`` bound (the server's timestamp form) implies: the day of
    the last instant before it; None without a bound (then :func:`parse_query_time` takes today)."""
    if before is None:
        return None
    bound = moment(before)
    return (bound - timedelta(microseconds=1) if bound > _EARLIEST else bound).date()


def moment(timestamp: str) -> datetime:
    """A stored timestamp (``2023-05-08T13:56:00.000000Z``) as an aware datetime."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def span_bounds(span: TimeSpan, after: str | None, before: str | None) -> tuple[str, str]:
    """The exclusive ``(after, before)`` timestamps of ``span`` within a search's own bounds."""
    start = format_timestamp(span.start - timedelta(microseconds=1) if span.start > _EARLIEST else span.start)
    end = format_timestamp(span.end)
    return (start if after is None else max(after, start)), (end if before is None else min(before, end))
