"""The extractive model's context document: parse the previous document, merge new messages, cap the size."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .text import (
    _MY_WORD,
    _QUESTION_TAIL,
    _SECOND_PERSON,
    _STATEMENT_START,
    _features,
    _score,
    _select,
    _speaker,
    _split_units,
    _trim,
    conversation_date,
    entry_tags,
    third_person,
)

__all__ = ["merge_context", "CONTEXT_SECTIONS", "DEFAULT_CONTEXT_MAX_CHARS"]

DEFAULT_CONTEXT_MAX_CHARS = 5000
CONTEXT_TITLE = "# Conversation context"
CONTEXT_SECTIONS = ("Facts", "Preferences", "Decisions and plans", "Timeline", "Open questions")
EARLIER_NOTES = "Earlier notes"

# --- put_context --------------------------------------------------------------------------------------------------
_HEADING = re.compile(r"^##\s+(.+?)\s*$")
_ITEM_DATE = re.compile(r"(?:^|\()(\d{4}-\d{2}-\d{2})\b")
_OUR_HEADINGS = frozenset(CONTEXT_SECTIONS) | {EARLIER_NOTES}
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def _parse_context(text: str) -> tuple[dict[str, list[str]], str]:
    """Sections of a document in our format, plus any foreign text (kept as "Earlier notes")."""
    sections: dict[str, list[str]] = {name: [] for name in CONTEXT_SECTIONS}
    text = (text or "").strip()
    if not any((m := _HEADING.match(line)) and m[1] in _OUR_HEADINGS for line in text.splitlines()):
        return sections, text
    notes: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        if m := _HEADING.match(line):
            current = m[1] if m[1] in _OUR_HEADINGS else None
            if current is None:
                notes.append(line)
            continue
        if current in sections:
            item = line.strip().removeprefix("- ").strip()
            if item:
                sections[current].append(item)
        elif line.strip() and line.strip() != CONTEXT_TITLE:
            notes.append(line)
    return sections, "\n".join(notes).strip()


def _dedupe_key(item: str, keep_date: bool) -> str:
    text = item.lower() if keep_date else _ITEM_DATE.sub("", item.lower())
    return " ".join(_NON_ALNUM.sub(" ", text).split())


def _merge_unique(items: list[str], new_items: Sequence[str], *, keep_date: bool = False) -> list[str]:
    """``items`` + ``new_items`` without duplicates; an item containing a shorter one replaces it in place."""
    merged = list(items)
    keys = [_dedupe_key(item, keep_date) for item in merged]
    for new in new_items:
        key = _dedupe_key(new, keep_date)
        if not key or key in keys:
            continue
        # Containment only for longer texts: "user: yes" must not swallow every item that mentions "yes".
        index = next(
            (i for i, old in enumerate(keys) if min(len(key), len(old)) >= 30 and (key in old or old in key)), None
        )
        if index is None:
            merged.append(new)
            keys.append(key)
        elif len(key) > len(keys[index]):
            merged[index], keys[index] = new, key
    return merged


def _message_items(messages: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Facts, preferences, plans, timeline lines and unanswered questions found in ``messages``."""
    found: dict[str, list[str]] = {name: [] for name in CONTEXT_SECTIONS}
    for index, message in enumerate(messages):
        speaker = _speaker(str(message.get("role", "")))
        day = conversation_date(message.get("conversation_time"))
        sentences, _ = _split_units(str(message.get("content") or ""))
        if not sentences:
            continue
        is_user = speaker == "user"
        snippet = " ".join(_select(sentences, is_user, 150 if is_user else 110))
        name = message.get("name")
        label = " ".join(name.split()) if isinstance(name, str) and name.strip() else speaker.capitalize()
        found["Timeline"].append(f"{day + ': ' if day else ''}{label}: {snippet}")
        if not is_user:
            continue
        suffix = f" ({day})" if day else ""
        answered = any(_speaker(str(m.get("role", ""))) != "user" for m in messages[index + 1 :])
        candidates = []
        for position, sentence in enumerate(sentences):
            f = _features(sentence)
            if sentence.endswith("?") and not _STATEMENT_START.match(sentence):
                if not answered and len(found["Open questions"]) < 3:
                    found["Open questions"].append(_trim(sentence, 200) + suffix)
                if f.first_person and (f.number or f.date or f.proper_nouns):  # "..., given my commute is 40 min?"
                    candidates.append((-_score(sentence, True, position), position, "Facts", sentence))
                continue
            if sentence.endswith("?"):  # "I'm planning X, any tips?": keep the statement
                sentence = _QUESTION_TAIL.sub("", sentence).rstrip(" ,;?") + "."
                f = _features(sentence)
            if not f.first_person or f.words < 4 or f.filler:
                continue
            if f.preference:
                section = "Preferences"
            elif f.plan:
                section = "Decisions and plans"
            elif not f.request and (f.number or f.date or f.proper_nouns or _MY_WORD.search(sentence)):
                section = "Facts"
            else:
                continue
            candidates.append((-_score(sentence, True, position), position, section, sentence))
        for _, _, section, sentence in sorted(candidates)[:3]:
            said = None if sentence.endswith("?") else third_person(sentence)
            verb = "asked" if sentence.endswith("?") else "said"
            readable = said and "the user" in said.lower() and not _SECOND_PERSON.search(said)
            text = said if readable else f'The user {verb}: "{sentence}"'
            found[section].append(_trim(text, 220) + suffix)
    return found


def _render(sections: Mapping[str, list[str]], notes: str) -> str:
    parts = [CONTEXT_TITLE]
    for name in CONTEXT_SECTIONS:
        if sections[name]:
            parts.append(f"## {name}\n" + "\n".join(f"- {item}" for item in sections[name]))
    if notes:
        parts.append(f"## {EARLIER_NOTES}\n{notes}")
    return "\n\n".join(parts) + "\n"


def _shrink(sections: dict[str, list[str]], notes: str, max_chars: int) -> tuple[str, str]:
    """Drop items until the document fits: oldest timeline items, then earlier notes, then the oldest other items."""
    others = [(name, item) for name in CONTEXT_SECTIONS if name != "Timeline" for item in sections[name]]
    position = {pair: i for i, pair in enumerate(others)}
    others.sort(key=lambda pair: ((m[1] if (m := _ITEM_DATE.search(pair[1])) else ""), position[pair]))
    drops = [("Timeline", item) for item in sections["Timeline"]] + [(EARLIER_NOTES, notes)] + others
    size = len(_render(sections, notes))
    for name, item in drops:
        if size <= max_chars:
            size = len(_render(sections, notes))  # the running estimate is exact but cheap to confirm
            if size <= max_chars:
                break
        if name == EARLIER_NOTES:
            size -= len(notes) + len(EARLIER_NOTES) + 6 if notes else 0
            notes = ""
        else:
            sections[name].remove(item)
            size -= len(item) + 3 + (0 if sections[name] else len(name) + 5)
    return _render(sections, notes), notes


def merge_context(
    previous_context: str | None,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_chars: int = DEFAULT_CONTEXT_MAX_CHARS,
) -> str:
    """Merge ``previous_context`` with ``messages`` into a Markdown context document of at most ``max_chars``.

    Sections: Facts, Preferences, Decisions and plans, Timeline (dated one-line items), Open questions. Items of a
    previous document in this format are kept and de-duplicated; foreign previous text is kept, trimmed, under
    "Earlier notes". When too long, the oldest timeline items go first, then the earlier notes, then the oldest
    items of the other sections. Never empty.
    """
    sections, notes = _parse_context(previous_context or "")
    notes = _trim(notes, max(max_chars // 4, 200)) if notes else ""
    new = _message_items(messages)
    if new["Timeline"] and _speaker(str(messages[0].get("role", ""))) != "user":
        sections["Open questions"] = []  # the previous flush ended on a question this batch starts answering
    for name in CONTEXT_SECTIONS:
        sections[name] = _merge_unique(sections[name], new[name], keep_date=name == "Timeline")

    document = _render(sections, notes)
    if len(document) > max_chars:
        document, notes = _shrink(sections, notes, max_chars)
    if document == _render({n: [] for n in CONTEXT_SECTIONS}, ""):
        topics = entry_tags(" ".join(str(m.get("content") or "") for m in messages), max_topics=6)["topic"]
        covered = f"The conversation covered: {topics}." if messages else "No conversation content recorded yet."
        document = f"{CONTEXT_TITLE}\n\n{covered}\n"
    return _trim(document, max_chars)


