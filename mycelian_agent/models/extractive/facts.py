"""What a user states about themselves and the people in their life, and which earlier item a later one updates.

Used by the context document (:mod:`.context`). Two kinds of rules, each a grammatical pattern rather than a list of
topics:

* *Profile statements* are first-person statements of a lasting state: "I'm/I am/I've been <condition>" ("severely
  allergic to peanuts", "vegetarian", "a nurse"), "I/we have/own/adopted <a thing or a condition>", "I/we live in /
  moved to / work at ...", "I can't/don't eat ...", "my <relation> <Name>" ("my partner Marco"), and statements
  about a person named that way ("Marco is vegetarian"). They carry no number, date or name of their own, which is
  why the generic "is it informative?" test misses them, yet they are what a person expects an assistant to know.
* *Updates*: a later item replaces an earlier one about the same subject (owner) and the same slot: the home or the
  job (a later "moved to Austin" replaces "lives in Denver"); anything the later item says has ended ("no longer",
  "anymore", "cancelled", "sold", ...) about something an earlier fact names; or a dated item that a later one
  changes ("moved", "rescheduled", "now", ...) while naming the same place or thing (the trip, Lisbon).
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from typing import NamedTuple

from ...dates import month_number
from .text import _ADVERBS, _STOPWORDS, _WORD

# --- the subject of a sentence ------------------------------------------------------------------------------------
_WE_WORDS = frozenset("we we're we've we'll we'd our ours us ourselves".split())
_SELF_SUBJECT = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|we|we're|we've|we'd|we'll|my|our)\b", re.I)
# Leading discourse words: "Also Marco is vegetarian" states "Marco is vegetarian".
_DISCOURSE = re.compile(
    r"^(?:(?:also|and|oh|plus|actually|anyway|btw|by the way|well|ps|fyi|oh and|just so you know|one more thing)"
    r"\s*[,:!-]?\s+)+",
    re.I,
)
_THIRD_PRONOUN = re.compile(r"\b(?:he|she|him|her|his|hers|he's|she's)\b", re.I)
_DATE_NAMES = frozenset(
    """January February March April May June July August September October November December Monday Tuesday
    Wednesday Thursday Friday Saturday Sunday Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec""".split()
)
_DATE_NAMES_LOWER = frozenset(n.lower() for n in _DATE_NAMES)
_TITLES = frozenset("Dr Mr Mrs Ms Mx Prof Sir St".split())
_FUNCTION_WORDS = frozenset(
    """a an the to in at for from with on of and or but is was are were has have had be been by as into onto
    about so then this that these those own way who which when where while it its than too very just also""".split()
)

# --- profile statements -------------------------------------------------------------------------------------------
_ADV = rf"(?:\s+(?:{_ADVERBS}|very|so|quite|severely|extremely|mildly|highly|slightly|pretty|now|officially|not))*"
# "I'm <complement>": a state unless the complement is a passing mood or a progressive verb ("I'm planning").
_STATE = re.compile(
    rf"\b(?:I'm|I am|I've been|I have been|we're|we are|we've been){_ADV}\s+(?:(a|an)\s+)?([\w-]+)"
    r"(?:\s+(\w+))?",
    re.I,
)
_PASSING = frozenset(
    """sorry glad happy excited sure unsure curious ready bored tired stressed worried nervous confused fine okay
    ok good great back here there done about going trying looking thinking planning wondering hoping doing getting
    new kind sort afraid free busy late early home away off out up able unable supposed thrilled pleased
    interested keen eager fan bit little lot big huge quick the in into at on to with just also still so""".split()
)
# "I/we have|own|adopted <a/two/...> <noun>" (a possession) or "I have <noun>" (a condition: "I have asthma").
_HAS = re.compile(
    rf"\b(?:I|we)(?:'ve)?{_ADV}\s+(?:have|own|adopted|rescued|got|have got)\s+(?:(a|an|one|two|three|four|five|six"
    r"|\d+|no|some|my|our)\s+)?([a-z][\w-]*)",
    re.I,
)
_NOT_POSSESSED = frozenset(  # what "I have a ..." names in conversation rather than in life
    """to been had got question questions idea ideas clue problem problems issue issues concern concerns doubt
    doubts suggestion suggestions request thought thoughts feeling time chance opinion favor favour moment minute
    few lot bit couple quick look follow-up follow never always just also""".split()
)
_DIET = re.compile(
    rf"\b(?:I|we){_ADV}\s+(?:can't|cannot|can not|don't|do not|never|must not|mustn't)\s+(?:eat|drink)\b", re.I
)
_HOME = re.compile(
    r"\b(?:live|lives|living|moved|relocated|based)\s+(?:back\s+|here\s+|now\s+)?(?:in|to|into)\s+"
    r"(?:the\s+)?[A-Z]"
)
_WORK = re.compile(
    r"\b(?:work|works|working|job|employed|hired)\s+(?:\w+\s+)?(?:as|at|for|with)\b"
    r"|\b(?:got|started|quit|left|lost)\s+(?:a\s+|my\s+|the\s+)?(?:new\s+)?job\b",
    re.I,
)

# --- updates ------------------------------------------------------------------------------------------------------
_ENDING = re.compile(
    r"\b(?:no longer|any ?more\b(?!\s+[a-z])|not any longer|passed away|died|gave away|given away|gave up"
    r"|got rid of|broke up|split up|sold|cancel(?:l?ed|s|ling)?|called off|stopped|quit)\b",
    re.I,
)
_CANCEL = re.compile(r"\b(?:cancel(?:l?ed|s|ling)?|called off|not going|won't go|no longer going)\b", re.I)
_CHANGE = re.compile(
    r"\b(?:now|moved?|changed?|rescheduled?|postponed?|pushed|delayed|shifted|instead|updated?|switched"
    r"|cancel(?:l?ed|s|ling)?|called off|brought forward)\b",
    re.I,
)
_EARLIER = re.compile(r"\s*\((?:(\d{4}-\d{2}-\d{2}); )?earlier: .*\)$")
_ITEM_SUFFIX = re.compile(r"\s*\((\d{4}-\d{2}-\d{2})\)$")
_QUOTED = re.compile(r'^(.{1,60}?) (?:said|asked): "(.*)"', re.S)
_OWNER = re.compile(
    r"\b((?i:the user)|[A-Z][a-z][\w-]*)(?='s\b|\s+(?:(?:also|really|still|now|no longer|just|never|\w+ly)\s+)*"
    r"(?:is|are|has|have|was|were|does|doesn't|can't|cannot|would|will|\w+s|\w+ed)\b)"
)
_POSSESSOR = re.compile(r"\b(?:[Tt]he user|[A-Z][a-z][\w-]*)'s\b")  # "the user's appointment": "the appointment"
_MONTH_DAY = re.compile(
    r"\b([A-Z][a-z]{2,8})\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b|\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?([A-Z][a-z]{2,8})\b"
)
_FUTURE = re.compile(r"\b(?:tomorrow|tonight|next|upcoming|coming up|in \d+ (?:days|weeks|months)|this coming)\b", re.I)
_PAST = re.compile(r"\b(?:ago|yesterday|last|earlier this|was|were|went|had)\b", re.I)
_DATED = re.compile(
    r"\b(?:tomorrow|tonight|next (?:week|month|year|weekend|monday|tuesday|wednesday|thursday|friday"
    r"|saturday|sunday)|\d{4}-\d{2}-\d{2})\b",
    re.I,
)
_NAMES = r"[A-Z][a-z][\w'-]*(?:(?:,\s*|\s+and\s+|\s*&\s*)[A-Z][a-z][\w'-]*)*"
# "my partner Marco", "our kids Emma and Leo", "my friend, Sarah, ..." (not "for my birthday, Marco got me ...").
_RELATION = re.compile(
    rf"\b([Mm]y|[Oo]ur)\s+([a-z][\w-]*(?:\s+[a-z][\w-]*)?)(?:\s+({_NAMES})(?!\s*[A-Z])|,\s+({_NAMES})"
    r"(?=\s*[,;:.!?)]|\s+and\b|$))"
)
_RELATION_ITEM = re.compile(r"'s [a-z][\w -]{0,30} (?:is|are) ([A-Z][a-z][\w'-]*(?:(?:, | and )[A-Z][a-z][\w'-]*)*)")
_DETERMINED = re.compile(
    r"\b(?:the|a|an|my|our|your|his|her|their|this|that)\s+([a-z][\w-]*)(?:\s+([a-z][\w-]*))?", re.I
)
_CONTENT_EXCLUDE = frozenset(
    """user said asked longer anymore more sold died quit stopped cancelled canceled called earlier does doesn't
    lives live living have has named moved move changed change rescheduled postponed pushed delayed shifted
    instead update updated switched""".split()
)


_NOT_NOUNS = frozenset("user bit lot few way kind sort couple".split())  # "the user", "a bit", "a lot"


def we_words(sentence: str) -> bool:
    """Whether ``sentence`` speaks of the user's household ("we", "our", "us")."""
    return any(w.strip(".,!?;:()\"'").lower() in _WE_WORDS for w in sentence.split())


def reports_change(sentence: str) -> bool:
    """Whether ``sentence`` says something was changed or called off ("the trip moved", "it's now ...")."""
    return bool(_CHANGE.search(sentence))


def strip_discourse(sentence: str) -> str:
    stripped = _DISCOURSE.sub("", sentence)
    return stripped[:1].upper() + stripped[1:] if stripped else sentence


def profile_kind(sentence: str, speaker_name: str = "") -> str | None:
    """The kind of lasting first-person statement ``sentence`` makes, or None.

    "state" ("I'm severely allergic to peanuts", "I'm a nurse"), "has" ("we adopted a dog", "I have asthma"),
    "diet" ("I can't eat gluten"), "home" ("we moved to Austin"), "work" ("I work at a bakery"), "ending" ("I no
    longer have the cat").
    """
    if _ENDING.search(sentence) and _SELF_SUBJECT.search(sentence):
        return "ending"
    if _SELF_SUBJECT.search(sentence):
        if _HOME.search(sentence):
            return "home"
        if _WORK.search(sentence):
            return "work"
    if _DIET.search(sentence):
        return "diet"
    for m in _STATE.finditer(sentence):
        article, word, following = m[1], m[2], (m[3] or "").lower()
        if (word.lower() in _PASSING and following != "of") or word.lower().endswith("ing"):
            continue
        if word == speaker_name or (word[:1].isupper() and not article and word in _DATE_NAMES):
            continue  # "I'm Dana" said by Dana; "I'm June ..." is no state
        return "state"
    for m in _HAS.finditer(sentence):
        det, noun = (m[1] or "").lower(), m[2].lower()
        if noun in _NOT_POSSESSED or noun in _FUNCTION_WORDS or (not det and noun.endswith(("ed", "en"))):
            continue
        return "has"
    return None


def relation_facts(sentence: str, subject: str) -> list[str]:
    """``"Dana's partner is Marco."`` for every "my/our <relation> <Name>" in ``sentence``."""
    facts = []
    for m in _RELATION.finditer(sentence):
        relation, names = m[2], m[3] or m[4]
        words = relation.split()
        if any(w in _FUNCTION_WORDS for w in words) or words[-1] in _STOPWORDS:
            continue
        people = [n for n in re.split(r",\s*|\s+and\s+|\s*&\s*", names) if n]
        if not people or any(p in _DATE_NAMES or p in _TITLES for p in people):
            continue
        owner = subject[0].upper() + subject[1:]
        joined = people[0] if len(people) == 1 else ", ".join(people[:-1]) + " and " + people[-1]
        facts.append(f"{owner}'s {relation} {'is' if len(people) == 1 else 'are'} {joined}.")
    return facts


def named_people(texts: list[str]) -> set[str]:
    """Names given as someone's relation ("my partner Marco", "Dana's partner is Marco")."""
    people: set[str] = set()
    for text in texts:
        for m in _RELATION.finditer(text):
            people.update(n for n in re.split(r",\s*|\s+and\s+|\s*&\s*", m[3] or m[4]) if n)
        for m in _RELATION_ITEM.finditer(text):
            people.update(n for n in re.split(r",\s*|\s+and\s+", m[1]) if n)
    return people


def about_person(sentence: str, people: set[str]) -> bool:
    """Whether ``sentence`` (discourse words stripped) states something about a named person of the user's life."""
    first = sentence.split(None, 1)
    if len(first) < 2:
        return False
    name = first[0].rstrip(",:").removesuffix("'s")
    if not name[:1].isupper() or name in _DATE_NAMES or name.lower() in _FUNCTION_WORDS | {"i", "we", "you"}:
        return False
    return name in people or bool(_THIRD_PRONOUN.search(sentence))


def is_dependent(sentence: str) -> bool:
    """A sentence that only makes sense with the one before it: "We're thinking June 14 to June 21."."""
    lower = sentence.lower()
    if not re.match(r"(?:it|it's|that|that's|this|they|they're|we|we're|we'll|he|she|there|there's)\b", lower):
        return False
    if any(w.strip(".,!?;:()\"'") not in _DATE_NAMES for w in sentence.split()[1:] if w[:1].isupper()):
        return False
    return not content_nouns(sentence)


def content_nouns(text: str) -> set[str]:
    """Nouns a text names with a determiner ("the trip", "a work deadline"), singular, lower case."""
    found = set()
    for m in _DETERMINED.finditer(text):
        for i, word in enumerate((m[1], m[2])):
            word = (word or "").lower()
            if not word or (i and word.endswith(("ed", "ing"))) or word in _FUNCTION_WORDS:
                break
            if len(word) > 2 and word.isalpha() and word not in _STOPWORDS | _NOT_NOUNS | _DATE_NAMES_LOWER:
                found.add(word.removesuffix("s"))
    return found


def is_future(sentence: str, day: str) -> bool:
    """Whether ``sentence`` names a date after the conversation ``day`` (``YYYY-MM-DD``) or an upcoming time."""
    if _PAST.search(sentence) and not re.search(r"\b(?:now|will|'ll|going to|planning)\b", sentence, re.I):
        return False
    if _FUTURE.search(sentence):
        return True
    try:
        today = date.fromisoformat(day) if day else None
    except ValueError:
        today = None
    for m in _MONTH_DAY.finditer(sentence):
        month = month_number(m[1] or m[4] or "")
        if not month:
            continue
        number = int(m[2] or m[3])
        if today is None or (month, number) > (today.month, today.day):
            return True
    return False


def has_date(text: str) -> bool:
    return bool(_DATED.search(text)) or any(month_number(m[1] or m[4] or "") for m in _MONTH_DAY.finditer(text))


# --- updates between items ----------------------------------------------------------------------------------------
def split_item(item: str) -> tuple[str, str, bool]:
    """``(core text, YYYY-MM-DD or '', has an "earlier:" note)`` of a context-document item."""
    if m := _EARLIER.search(item):
        return item[: m.start()], m[1] or "", True
    if m := _ITEM_SUFFIX.search(item):
        return item[: m.start()], m[1], False
    return item, "", False


def owner(core: str) -> str:
    """Whom an item is about: the speaker of a quoted first-person item, else its grammatical subject."""
    if m := _QUOTED.match(core):
        quoted = m[2]
        if _SELF_SUBJECT.search(quoted) or not (o := owner(quoted)):
            return m[1].lower()
        return o
    m = _OWNER.search(core)
    return m[1].lower() if m else ""


def _slot(core: str) -> str | None:
    if _HOME.search(core):
        return "home"
    if _WORK.search(core):
        return "work"
    return None


def _body(core: str) -> str:
    """An item's own words: the quotation of a "<speaker> said: ..." item, possessors made plain."""
    return _POSSESSOR.sub("the", m[2] if (m := _QUOTED.match(core)) else core)


def _content_words(core: str, who: str) -> set[str]:
    core = _body(core)
    nouns = content_nouns(core)
    words = {w.removesuffix("'s").removesuffix("s") for w in _WORD.findall(core.lower())}
    words = {w for w in words if len(w) > 3 and w not in _STOPWORDS and w not in _CONTENT_EXCLUDE and w != who}
    return words | nouns


class _Item(NamedTuple):
    core: str
    owner: str
    slot: str | None
    ending: bool
    change: bool
    cancel: bool
    dated: bool
    words: frozenset[str]  # content words
    keys: frozenset[str]  # places and things named: proper nouns (not dates) and determined nouns


@lru_cache(maxsize=4096)  # every new item is compared with every item of the document
def _analyse(item: str) -> _Item:
    core = split_item(item)[0]
    who = owner(core)
    body = _body(core)
    tokens = body.replace('"', " ").split()
    names = {
        t.strip(".,!?;:()'").removesuffix("'s")
        for prev, t in zip([".", *tokens[:-1]], tokens, strict=True)
        if t[:1].isupper() and prev[-1:] not in ".:!?"
    }
    names = {n.lower() for n in names if n and n not in _DATE_NAMES and n.lower() != who}
    return _Item(
        core,
        who,
        _slot(core),
        bool(_ENDING.search(core)),
        bool(_CHANGE.search(core)),
        bool(_CANCEL.search(core)),
        has_date(core),
        frozenset(_content_words(core, who)),
        frozenset((names | content_nouns(body)) - {"user"}),
    )


def supersedes(new: str, old: str, new_section: str, old_section: str, people: frozenset[str]) -> bool:
    """Whether item ``new`` (said later) makes item ``old`` out of date; both are context-document items and
    ``people`` the (lower-case) names of people in the user's life, which do not identify a plan."""
    n, o = _analyse(new), _analyse(old)
    if not n.owner or n.owner != o.owner or n.core == o.core:
        return False
    if n.slot and n.slot == o.slot and not n.ending and new_section == old_section == "Facts":
        return True  # the later home or job replaces the earlier one
    if n.ending and old_section in ("Facts", "Preferences") and n.words & o.words:
        return True  # "I no longer have the cat" ends "the user has a cat named Luna"
    if n.change and o.dated and (n.dated or n.cancel) and old_section != "Preferences":
        return bool((n.keys & o.keys) - people)  # the Lisbon trip moved to new dates, or was cancelled
    return False


def earlier_note(old: str) -> str:
    """What the replaced item said (its words, shortened, and the day it was said), for the "earlier:" note."""
    old_core, old_day, _ = split_item(old)
    detail = m[2] if (m := _QUOTED.match(old_core)) else old_core
    detail = detail.strip().rstrip(".")
    if len(detail) > 140:
        detail = detail[:139].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return f"{detail}{', said ' + old_day if old_day else ''}"
