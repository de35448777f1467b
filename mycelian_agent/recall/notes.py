"""The part of a context document that a recall block carries: its items that bear on the query, a few standing
facts after them.

A context document is Markdown: ``## Section`` headings over ``- item`` lines (ours), or whatever an LLM wrote.
Items that share a telling word with the query come first (the rarer the shared words among the items, the
higher); then a few items of standing sections (facts, preferences, plans: what holds whatever the question, such
as an allergy) in document order. Items of chronological or open sections (a timeline, a log, open questions) are
taken only when they match: the turns of the recall block already carry what happened when. A recall bounded in
time takes no item dated outside its bounds (:func:`within_bounds`).
"""

from __future__ import annotations

import math
import re

from mycelian_agent.placeholder import is_placeholder_context
from mycelian_agent.words import WORD_RE, query_terms

__all__ = ["context_items", "select_notes", "within_bounds"]

_HEADING = re.compile(r"^\s*(?:#{1,6}\s+|\*\*)(?P<title>.+?)(?:\*\*)?:?\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")
#: Section titles whose items are chronological or transient: taken only when they match the query.
_EVENT_SECTIONS = re.compile(r"timeline|history|log|events|open questions|questions|earlier notes", re.IGNORECASE)
_DAY = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")


def within_bounds(item: str, after: str | None, before: str | None) -> bool:
    """Whether a context item may be shown by a recall bounded by ``after`` / ``before`` (RFC 3339): the document
    is the memory's newest, so it can hold facts from after a recall's ``before`` (a fact that changed since). An
    item naming a day (``YYYY-MM-DD``, as our documents date every item) on or after ``before``'s day is left out
    (a bound inside a day leaves out that day's items too: a day cannot say which side they were on), and one
    whose days all fall before ``after``'s day; an item naming no day is kept (nothing tells when it held)."""
    days = _DAY.findall(item)
    if not days:
        return True
    if before and any(day >= before[:10] for day in days):
        return False
    return not (after and all(day < after[:10] for day in days))


def context_items(document: str) -> list[tuple[str, str]]:
    """``(section, item)`` for each item of ``document`` (a bullet, or a line of plain text), in order; the
    section is the heading above it ('' before any)."""
    if is_placeholder_context(document):
        return []
    items: list[tuple[str, str]] = []
    section = ""
    for line in document.splitlines():
        if not line.strip():
            continue
        heading = _HEADING.match(line)
        if heading and not _BULLET.match(line):
            section = heading["title"].strip()
            continue
        text = _BULLET.sub("", line).strip()
        if text:
            items.append((section, text))
    return items


def _stems(text: str) -> set[str]:
    # A five-letter prefix joins the forms of a word ("allergic"/"allergy", "travel"/"travelling") without a
    # stemmer; shorter words must match whole.
    return {word[:5] for word in WORD_RE.findall(text.casefold())}


def select_notes(
    document: str, query: str, *, standing_max: int = 5, after: str | None = None, before: str | None = None
) -> tuple[list[str], list[str]]:
    """The items of ``document`` for a recall block on ``query``: ``(matched, standing)``.

    ``matched`` are the items sharing a telling word with the query, best first: words are weighed by how few
    items hold them (a word in most items, such as the user's name in every fact, tells nothing and matches
    nothing). ``standing`` are at most ``standing_max`` unmatched items of standing sections (not a timeline, log
    or open questions), in document order. An item whose words are mostly those of an item before it is left out,
    and with ``after`` / ``before`` one dated outside them (:func:`within_bounds`).
    """
    items = [(section, item) for section, item in context_items(document) if within_bounds(item, after, before)]
    stems = [_stems(item) for _, item in items]
    frequency: dict[str, int] = {}
    for found in stems:
        for stem in found:
            frequency[stem] = frequency.get(stem, 0) + 1
    # A word held by more than a third of the items (and by more than one) does not make a match.
    telling = {stem for stem, count in frequency.items() if count == 1 or count <= len(items) / 3}
    wanted = {term[:5] for term in query_terms(query)} & telling
    matched: list[tuple[float, int, str]] = []
    standing: list[str] = []
    for position, ((section, item), found) in enumerate(zip(items, stems)):
        weight = sum(math.log(1 + len(items) / frequency[stem]) for stem in wanted & found)
        if weight:
            matched.append((-weight, position, item))
        elif not _EVENT_SECTIONS.search(section):
            standing.append(item)
    chosen: list[tuple[str, set[str]]] = []
    kept_matched: list[str] = []
    kept_standing: list[str] = []
    for item, bucket in [(item, kept_matched) for _, _, item in sorted(matched)] + [
        (item, kept_standing) for item in standing
    ]:
        words = _stems(item)
        # A timeline line often restates a fact item (or the other way round): keep the first of the two.
        if any(len(words & other) >= 0.8 * min(len(words), len(other)) for _, other in chosen):
            continue
        if bucket is kept_standing and len(kept_standing) >= standing_max:
            break
        chosen.append((item, words))
        bucket.append(item)
    return kept_matched, kept_standing
