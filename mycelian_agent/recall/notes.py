"""The part of a context document that a recall block carries: its items that bear on the query, standing facts
after them.

A context document is Markdown: ``## Section`` headings over ``- item`` lines (ours), or whatever an LLM wrote.
Items that share a word with the query come first (most shared words first); then the items of standing sections
(facts, preferences, plans: what holds whatever the question, such as an allergy) in document order. Items of
chronological or open sections (a timeline, a log, open questions) are taken only when they match: the turns of
the recall block already carry what happened when.
"""

from __future__ import annotations

import re

from ..memory_server.placeholder import is_placeholder_context
from ..memory_server.ranking import WORD_RE, query_terms

__all__ = ["context_items", "select_notes"]

_HEADING = re.compile(r"^\s*(?:#{1,6}\s+|\*\*)(?P<title>.+?)(?:\*\*)?:?\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")
#: Section titles whose items are chronological or transient: taken only when they match the query.
_EVENT_SECTIONS = re.compile(r"timeline|history|log|events|open questions|questions|earlier notes", re.IGNORECASE)


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


def select_notes(document: str, query: str) -> list[str]:
    """The items of ``document`` for a recall block on ``query``, best first (see the module docstring); an item
    whose words are mostly those of an item before it is left out."""
    wanted = {term[:5] for term in query_terms(query)}
    matched: list[tuple[int, int, str]] = []
    standing: list[str] = []
    for position, (section, item) in enumerate(context_items(document)):
        shared = len(wanted & _stems(item))
        if shared:
            matched.append((-shared, position, item))
        elif not _EVENT_SECTIONS.search(section):
            standing.append(item)
    chosen: list[tuple[str, set[str]]] = []
    for item in [item for _, _, item in sorted(matched)] + standing:
        stems = _stems(item)
        # A timeline line often restates a fact item (or the other way round): keep the first of the two.
        if not any(len(stems & other) >= 0.8 * min(len(stems), len(other)) for _, other in chosen):
            chosen.append((item, stems))
    return [item for item, _ in chosen]
