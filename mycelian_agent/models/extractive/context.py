"""The extractive model's context document: parse the previous document, merge new messages, cap the size."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .facts import (
    about_person,
    earlier_note,
    is_dependent,
    is_future,
    named_people,
    profile_kind,
    relation_facts,
    reports_change,
    split_item,
    strip_discourse,
    supersedes,
    we_words,
)
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

__all__ = ["CONTEXT_SECTIONS", "DEFAULT_CONTEXT_MAX_CHARS", "merge_context"]

DEFAULT_CONTEXT_MAX_CHARS = 5000
CONTEXT_TITLE = "# Conversation context"
CONTEXT_SECTIONS = ("Facts", "Preferences", "Decisions and plans", "Timeline", "Open questions")
EARLIER_NOTES = "Earlier notes"

# --- put_context --------------------------------------------------------------------------------------------------
_HEADING = re.compile(r"^##\s+(.+?)\s*$")
_ITEM_DATE = re.compile(r"(?:^|\()(\d{4}-\d{2}-\d{2})\b")
_OUR_HEADINGS = frozenset(CONTEXT_SECTIONS) | {EARLIER_NOTES}
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
# A limit or wish about what the user does not want: a preference ("I really don't want any flight before 9 am").
_CONSTRAINT = re.compile(r"\b(?:don't|do not|never) want\b|\b(?:would|'d) rather\b|\b(?:I|we) avoid\b", re.I)
_SUBJECT_WORD = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|we|we're|we've|we'd|we'll|my|our)\b", re.I)
_FACT_SECTIONS = ("Facts", "Preferences", "Decisions and plans")


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


def _merge_fact(sections: dict[str, list[str]], name: str, item: str, people: frozenset[str]) -> None:
    """Add ``item`` to section ``name`` unless it is already there (in any of the fact sections) or out of date;
    an earlier item it updates is replaced in place, with a note of what that said."""
    key = _dedupe_key(item, False)
    if not key:
        return
    for section in _FACT_SECTIONS:
        for i, old in enumerate(sections[section]):
            old_key = _dedupe_key(old, False)
            if key == old_key or (min(len(key), len(old_key)) >= 30 and key in old_key):
                return
            if min(len(key), len(old_key)) >= 30 and old_key in key and section == name:
                sections[section][i] = item  # the longer wording of the same item
                return
    day = split_item(item)[1]
    # A replay of an older message: an item a later one (or an update the same day) replaced stays out.
    for section in _FACT_SECTIONS:
        for old in sections[section]:
            _, old_day, noted = split_item(old)
            if (old_day > day or (old_day == day and noted)) and supersedes(old, item, section, name, people):
                return
    replaced = False
    for section in _FACT_SECTIONS:
        for old in list(sections[section]):
            if split_item(old)[1] <= day and supersedes(item, old, name, section, people):
                if replaced:  # one item updating two: the second goes, the first keeps the note
                    sections[section].remove(old)
                    continue
                annotated = f"{split_item(item)[0]} ({day + '; ' if day else ''}earlier: {earlier_note(old)})"
                sections[section][sections[section].index(old)] = annotated
                replaced = True
    if not replaced:
        sections[name].append(item)


def _units(sentences: Sequence[str]) -> list[str]:
    """Sentences, each one that only makes sense after the one before ("We're thinking June 14 to June 21.")
    joined to it."""
    units: list[str] = []
    for sentence in sentences:
        if units and not units[-1].endswith("?") and is_dependent(sentence):
            units[-1] = f"{units[-1]} {sentence}"
        else:
            units.append(sentence)
    return units


def _section(sentence: str, f: Any, kind: str | None, day: str) -> str | None:
    """Where a user's statement belongs: a lasting fact about them first, then preferences, plans, other facts."""
    future = is_future(sentence, day)
    if kind and kind != "ending" and not future:
        return "Facts"
    if f.preference or _CONSTRAINT.search(sentence):
        return "Preferences"
    if f.plan or future:
        return "Decisions and plans"
    if kind:
        return "Facts"
    if not f.request and (f.number or f.date or f.proper_nouns or _MY_WORD.search(sentence)):
        return "Facts"
    return None


def _message_items(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(section, item)`` pairs in the order said: facts, preferences, plans, timeline lines and unanswered
    questions found in ``messages``."""
    found: list[tuple[str, str]] = []
    open_questions = 0
    people = named_people([str(m.get("content") or "") for m in messages if _speaker(str(m.get("role", ""))) == "user"])
    for index, message in enumerate(messages):
        speaker = _speaker(str(message.get("role", "")))
        day = conversation_date(message.get("conversation_time"))
        sentences, _ = _split_units(str(message.get("content") or ""))
        if not sentences:
            continue
        is_user = speaker == "user"
        snippet = " ".join(_select(sentences, is_user, 150 if is_user else 110))
        name = message.get("name")
        name = " ".join(name.split()) if isinstance(name, str) and name.strip() else ""
        label = name or speaker.capitalize()
        found.append(("Timeline", f"{day + ': ' if day else ''}{label}: {snippet}"))
        if not is_user:
            continue
        subject = name or "the user"
        suffix = f" ({day})" if day else ""
        answered = any(_speaker(str(m.get("role", ""))) != "user" for m in messages[index + 1 :])
        previous = messages[index - 1] if index else None
        question = ""  # what the assistant just asked, when this message answers it with a fragment
        if previous is not None and _speaker(str(previous.get("role", ""))) != "user":
            asked, _ = _split_units(str(previous.get("content") or ""))
            question = asked[-1] if asked and asked[-1].endswith("?") else ""
        profile, candidates = [], []
        for position, sentence in enumerate(_units(sentences)):
            f = _features(sentence)
            if sentence.endswith("?") and not _STATEMENT_START.match(sentence):
                if not answered and open_questions < 3:
                    found.append(("Open questions", _trim(sentence, 200) + suffix))
                    open_questions += 1
                if f.first_person and (f.number or f.date or f.proper_nouns):  # "..., given my commute is 40 min?"
                    candidates.append((-_score(sentence, True, position), position, "Facts", sentence))
                continue
            if sentence.endswith("?"):  # "I'm planning X, any tips?": keep the statement
                sentence = _QUESTION_TAIL.sub("", sentence).rstrip(" ,;?") + "."
                f = _features(sentence)
            for fact in relation_facts(sentence, subject):  # "Dana's partner is Marco.": kept even when the
                profile.append((position, "Facts", fact, True))  # sentence naming him is later updated
            stated = strip_discourse(sentence)
            if not (f.first_person or we_words(sentence)):
                if about_person(stated, people) and not f.request and f.words >= 3 and not f.filler:
                    profile.append(
                        (position, "Preferences" if f.preference else "Facts", stated, True)
                    )  # already third person
                elif f.date and reports_change(sentence) and not f.request:  # "The Rome trip moved to May 10."
                    profile.append((position, "Decisions and plans", sentence, False))
                continue
            kind = profile_kind(sentence, name)
            if kind is None and (f.words < 4 or f.filler):
                continue
            section = _section(sentence, f, kind, day)
            if section is None:
                continue
            if kind:
                profile.append((position, section, sentence, False))
            else:
                candidates.append((-_score(sentence, True, position), position, section, sentence))
        # Lasting statements about the user are all kept (a few per message); other statements by their score.
        chosen = profile[:6] + [(p, s, t, False) for _, p, s, t in sorted(candidates)[:3]]
        for position, section, sentence, verbatim in sorted(chosen, key=lambda c: c[0]):
            said = None if sentence.endswith("?") else third_person(sentence, subject)
            verb = "asked" if sentence.endswith("?") else "said"
            readable = (
                said and subject.lower() in said.lower() and not _SECOND_PERSON.search(said) and not we_words(said)
            )  # "we"/"our" would lose their referent
            if verbatim:
                text = sentence
            elif said and readable:
                text = said
            else:
                text = f'{subject[0].upper()}{subject[1:]} {verb}: "{sentence}"'
            text = _trim(text, 220)
            if position == 0 and question and text.endswith('"') and not _SUBJECT_WORD.search(sentence):
                # a fragment answering the assistant ("About 2,400 euros.") needs the question it answers
                text += f" (answering: {_trim(question, 80)})"
            found.append((section, text + suffix))
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
    if new and _speaker(str(messages[0].get("role", ""))) != "user":
        sections["Open questions"] = []  # the previous flush ended on a question this batch starts answering
    people = frozenset(
        p.lower()
        for p in named_people(
            [item for name in _FACT_SECTIONS for item in sections[name]] + [item for name, item in new]
        )
    )
    for name, item in new:  # in the order said: a later item may update an earlier one
        if name in _FACT_SECTIONS:
            _merge_fact(sections, name, item, people)
        else:
            sections[name] = _merge_unique(sections[name], [item], keep_date=name == "Timeline")

    document = _render(sections, notes)
    if len(document) > max_chars:
        document, notes = _shrink(sections, notes, max_chars)
    if document == _render({n: [] for n in CONTEXT_SECTIONS}, ""):
        topics = entry_tags(" ".join(str(m.get("content") or "") for m in messages), max_topics=6)["topic"]
        covered = f"The conversation covered: {topics}." if messages else "No conversation content recorded yet."
        document = f"{CONTEXT_TITLE}\n\n{covered}\n"
    return _trim(document, max_chars)
