"""Text heuristics of the extractive model: sentence splitting and scoring, third-person rewriting, dates,
summaries and tags. Pure string work, no I/O."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date
from functools import lru_cache
from typing import Any, NamedTuple

from ...dates import month_number, resolve_relative_dates
from ...limits import SUMMARY_TARGET_CHARS

__all__ = ["conversation_date", "entry_tags", "summarize_message", "third_person"]


# --- sentence splitting -------------------------------------------------------------------------------------------
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")
_MARKUP = re.compile(r"^\s*(?:#{1,6}\s+|>\s*)|[*`]+")
_SPACES = re.compile(r"\s+")
_LIST_MARKER = re.compile(r"^\s*(?:[-+•*]|\d{1,3}[.)])\s+")
_SENTENCE_BREAK = re.compile(r"([.!?]+[\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})  # curly quotes

# --- what makes a sentence worth keeping -----------------------------------------------------------------------------
# Word sets and plain substring tests rather than large regex alternations: this runs on every sentence of every
# message, and set lookups are ~10x faster than scanning with a many-branch pattern.
_PUNCTUATION = ".,!?;:()[]{}\"'*-—…/"


def _phrases(*phrases: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """Phrases to look for, with their first words: a cheap set test decides whether to scan for them at all."""
    return phrases, frozenset(p.split()[0] for p in phrases)


_NUMBER = re.compile(r"\d")
_FIRST_PERSON_WORDS = frozenset("i i'm i've i'll i'd my me mine myself".split())
_MONEY_SIGN = re.compile(r"[$€£¥]")
_MONEY_WORDS = frozenset("dollars dollar euros euro pounds bucks usd eur".split())
_DATE_WORDS = frozenset(
    """january february march april june july august september october november december jan feb apr jun jul aug
    sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays
    thursdays fridays saturdays sundays yesterday today tonight tomorrow weekend weekends ago""".split()
)
_RELATIVE = (frozenset("last next this".split()), frozenset("week month year night summer winter spring fall".split()))
_MAY_MONTH = re.compile(r"(?<!^)\bMay\b")  # the month, not the sentence-initial modal
_PREFERENCE_WORDS = frozenset(
    """likes liked love loves loved adore adores prefer prefers preferred preference preferences hate hates hated
    dislike dislikes disliked favorite favourite favorites favourites enjoy enjoys enjoyed enjoying""".split()
)
_PREFERENCE_PHRASES = _phrases("fan of", "can't stand", "interested in", "passionate about", "obsessed with")
_LIKE_VERB = re.compile(r"\b(?:I|we)(?: really| also| just| especially| \w+ly)? like\b", re.I)
_PLAN_WORDS = frozenset(
    "decided decide will gonna plan plans planning planned intend intends intending scheduled booked i'll we'll".split()
)
_PLAN_PHRASES = _phrases(
    "going to", "signed up", "hoping to", "about to", "thinking of", "thinking about", "considering"
)
_FILLER_WORDS = frozenset("thanks congratulations certainly absolutely".split())
_FILLER_PHRASES = _phrases(
    "thank you",
    "you're welcome",
    "hope this helps",
    "hope that helps",
    "hope it helps",
    "let me know",
    "feel free",
    "happy to help",
    "glad to",
    "glad you",
    "great question",
    "good question",
    "of course",
    "sounds great",
    "sounds good",
    "no problem",
    "good luck",
    "have fun",
    "hope you",
    "enjoy your",
)
_REQUEST_PHRASES = _phrases("can you", "could you", "would you", "help me", "looking for", "was wondering")
_STATEMENT_START = re.compile(r"(?:By the way, |Also, |Actually, |So )?(?:I\b|My\b)")  # "I'm X, any tips?"
_QUESTION_TAIL = re.compile(
    r"(?:,\s*|\s+and\s+|\s+-\s+)(?:I was wondering|I'm wondering|do you|does|can you|could you|would you|what|how"
    r"|any|is there|are there|should I)\b.*$",
    re.I,
)
_ABBREVIATIONS = frozenset("mr. mrs. ms. dr. prof. st. jr. sr. vs. etc. e.g. i.e. approx. a.m. p.m.".split())
_NOT_PROPER = frozenset({"I", "I'm", "I've", "I'll", "I'd", "The", "A", "An", "AM", "PM", "OK"})
_WORD = re.compile(r"[a-z][a-z'-]*[a-z]")
_STOPWORDS = frozenset(  # only words longer than 3 letters can be topics
    """about above after again against also always another anything around because been before being below
    between both cannot could couldn't does doesn't doing done down during each either else enough even every
    everything from further gets getting give going good great hasn't have haven't having help here hers herself
    himself hope however i'll i've into isn't it's itself just know last like little look looking lots made make
    many maybe might more most much must myself need needs never next nice often once only other others ours
    over perhaps please pretty provide quite rather really recommend same should shouldn't since some something
    soon specific still such suggest sure take than thank thanks that that's their theirs them themselves then
    there there's these they they're thing things think this those though through under until very want wants
    wasn't well were what what's when where which while whom will with within without won't would wouldn't you'd
    you'll you're you've your yours yourself able used using days time times tips idea ideas ways best better
    helps sounds particularly interested recently started definitely actually usually different important
    information find ones especially considering wondering feel feels felt wanted keep kind sort stuff start
    whether anyway okay awesome amazing exciting""".split()
)

# --- third-person rewriting of the user's sentences ("I" -> "the user"), only where it is certainly grammatical ------
_ADVERBS = (
    r"also|just|still|never|always|usually|often|really|actually|only|recently|finally|already|sometimes"
    r"|generally|typically|mostly|even|ever|currently|normally|definitely|probably|mainly|personally"
)
_I_INVERTED = re.compile(r"\b(do|am|have|was|did|can|could|should|would|will|might|must) I\b", re.I)
_I_CONTRACTED = re.compile(r"\bI'(m|ve|ll|d)\b(\s+\w+)?")
_I_SUBJECT = re.compile(rf"\bI((?:\s+(?:{_ADVERBS}))*)\s+([a-z]+(?:'t)?)\b")
# "my wife and I love ..." takes a plural verb; ", and I love ..." starts a new clause and does not.
_SECOND_PERSON = re.compile(r"\b[Yy]ou(?:r|rs|'re|'ve|'ll|'d)?\b")
_MY_WORD = re.compile(r"\b[Mm]y\b")
_COORDINATED = re.compile(r"(?:^|[^,;\s])\s*\b(?:and|or|nor)\s+$")
_MY = re.compile(r"\b([Mm])(y|ine|e)\b")
_INVERTED_AUX = {"do": "does", "am": "is", "have": "has"}
_KEEP_AFTER_I = frozenset(
    """can could should would will may might must shall did was can't couldn't shouldn't wouldn't won't didn't
    wasn't got went made bought saw took had came found gave knew left met paid put read said sent spent told
    thought felt kept lost ran sat sold began became brought built caught chose drove ate fell flew forgot grew
    heard held hurt meant rode spoke stood swam taught threw understood woke won wrote quit""".split()
)
_PRESENT_VERBS = frozenset(
    """like love prefer hate enjoy want need think live work own play watch eat drink cook run walk drive ride
    take make use know feel believe plan hope try study teach visit travel wake sleep go get keep buy collect
    write listen spend save earn practice train attend volunteer miss wish guess remember forget mean agree find
    see say tell call leave move stay struggle manage prepare follow belong tend care worry wonder suppose
    understand recall mention have do am don't haven't dislike adore""".split()
)
_PAST_PARTICIPLES = frozenset(
    "been gone done seen had known taken given made got gotten heard told said left found".split()
)


def _third_person_verb(verb: str) -> str | None:
    if verb in _KEEP_AFTER_I or verb.endswith("ed"):
        return verb
    if verb not in _PRESENT_VERBS:
        return None
    special = {"am": "is", "have": "has", "do": "does", "don't": "doesn't", "haven't": "hasn't"}
    if verb in special:
        return special[verb]
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def third_person(sentence: str, subject: str = "the user") -> str | None:
    """Rewrite a first-person sentence to third person ("I've moved" -> "the user has moved").

    ``subject`` names the speaker ("the user", or a name: "I've moved" -> "Caroline has moved"). Returns None when
    some first-person word cannot be rewritten with certainty (the caller then keeps the original words and
    attributes them instead): correctness matters more than coverage here.
    """
    if "myself" in sentence or "Myself" in sentence:
        return None

    def inverted(m: re.Match[str]) -> str:
        aux = _INVERTED_AUX.get(m[1].lower(), m[1].lower())
        return f"{aux.capitalize() if m[1][0].isupper() else aux} {subject}"

    text = _I_INVERTED.sub(inverted, sentence)

    failed = False

    def contracted(m: re.Match[str]) -> str:
        nonlocal failed
        following = m[2] or ""
        if m[1] in ("m", "ve") and _COORDINATED.search(m.string, 0, m.start()):
            failed = True
        if m[1] == "d":
            word = following.strip()
            aux = "had" if word.endswith("ed") or word in _PAST_PARTICIPLES else "would"
        else:
            aux = {"m": "is", "ve": "has", "ll": "will"}[m[1]]
        return f"{subject} {aux}{following}"

    text = _I_CONTRACTED.sub(contracted, text)

    def i_subject(m: re.Match[str]) -> str:
        nonlocal failed
        verb = _third_person_verb(m[2])
        if verb is None or (verb != m[2] and _COORDINATED.search(m.string, 0, m.start())):
            failed = True
            return m[0]
        return f"{subject}{m[1]} {verb}"

    text = _I_SUBJECT.sub(i_subject, text)
    if failed or re.search(r"\bI\b", text):
        return None
    text = _MY.sub(lambda m: subject if m[2] == "e" else f"{subject}'s", text)
    return text[0].upper() + text[1:] if text.startswith(subject) else text


# --- helpers ------------------------------------------------------------------------------------------------------
def _trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 0)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _clean(line: str) -> str:
    # The list marker is removed before and after the markup: "- **Oats**" and "**1. Oats:**" are both items.
    text = _SPACES.sub(" ", _MARKUP.sub("", _LIST_MARKER.sub("", line))).strip()
    return _LIST_MARKER.sub("", text).replace(" :", ":")


@lru_cache(maxsize=256)  # add_entry splits a message for its summary and again for its tags
def _split_units(content: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Sentences of ``content`` (Markdown stripped) and the short heads of its list items ("Overnight Oats")."""
    sentences: list[str] = []
    heads: list[str] = []
    for raw in content.translate(_APOSTROPHES).splitlines():
        line = _clean(raw)
        if not line:
            continue
        bold = _BOLD.match(raw.strip())
        if _LIST_MARKER.match(raw) or (bold and _LIST_MARKER.match(bold[1] or bold[2])):
            bold = bold or _BOLD.search(raw)
            head = (bold[1] or bold[2]) if bold else line.split(":", 1)[0] if ":" in line[:60] else ""
            head = _LIST_MARKER.sub("", head).strip(" :")
            if head and len(head.split()) <= 6:
                heads.append(head)
        parts = _SENTENCE_BREAK.split(line)
        pending = ""
        for text, end in zip(parts[0::2], [*parts[1::2], ""], strict=True):
            pending += text + end
            if not any(c.isalpha() for c in pending):
                continue  # "1." or "---": keep it with the next words rather than as a sentence
            last_word = pending.rsplit(None, 1)[-1] if pending.strip() else ""
            if last_word.lstrip("(\"'").lower() not in _ABBREVIATIONS:
                sentences.append(pending.strip())
                pending = ""
            else:
                pending += " "
        if any(c.isalpha() for c in pending):
            sentences.append(pending.strip())
        if sentences and sentences[-1][-1] not in ".!?:;…\"'":
            sentences[-1] += "."  # a heading or list line: end it so joined sentences stay readable
    return tuple(sentences), tuple(heads)


def _proper_nouns(tokens: list[str]) -> tuple[str, ...]:
    found = [w for w in (t.strip(_PUNCTUATION) for t in tokens[1:] if t[:1].isupper()) if w and w not in _NOT_PROPER]
    return () if len(found) * 2 > len(tokens) else tuple(found)  # Title Case headings name nothing


def _has_phrase(lower: str, words: set[str], phrases: tuple[str, ...], first_words: frozenset[str]) -> bool:
    return not words.isdisjoint(first_words) and any(p in lower for p in phrases)


class _Features(NamedTuple):
    words: int
    first_person: bool
    number: bool
    money: bool
    date: bool
    preference: bool
    plan: bool
    filler: bool
    request: bool
    proper_nouns: tuple[str, ...]


@lru_cache(maxsize=4096)
def _features(sentence: str) -> _Features:
    lower = sentence.lower()
    tokens = sentence.split()
    words = {w.strip(_PUNCTUATION) for w in lower.split()}
    return _Features(
        words=len(tokens),
        first_person=not words.isdisjoint(_FIRST_PERSON_WORDS),
        number=bool(_NUMBER.search(sentence)),
        money=not words.isdisjoint(_MONEY_WORDS) or bool(_MONEY_SIGN.search(sentence)),
        date=not words.isdisjoint(_DATE_WORDS)
        or ("may" in words and bool(_MAY_MONTH.search(sentence)))
        or (not words.isdisjoint(_RELATIVE[0]) and not words.isdisjoint(_RELATIVE[1])),
        preference=not words.isdisjoint(_PREFERENCE_WORDS)
        or _has_phrase(lower, words, *_PREFERENCE_PHRASES)
        or ("like" in words and bool(_LIKE_VERB.search(sentence))),
        plan=not words.isdisjoint(_PLAN_WORDS) or _has_phrase(lower, words, *_PLAN_PHRASES),
        filler=not words.isdisjoint(_FILLER_WORDS) or _has_phrase(lower, words, *_FILLER_PHRASES),
        request=_has_phrase(lower, words, *_REQUEST_PHRASES),
        proper_nouns=_proper_nouns(tokens),
    )


def _score(sentence: str, is_user: bool, position: int) -> float:
    f = _features(sentence)
    first_person = is_user and f.first_person
    score = 3.0 if first_person else 0.0
    score -= 2 if f.words < 4 else 1 if f.words > 60 else 0
    score += (2 if f.number else 0) + (1 if f.money else 0) + (2 if f.date else 0) + min(len(f.proper_nouns), 3)
    score += (3 if first_person else 1) if f.preference else 0
    score += (2 if first_person else 0.5) if f.plan else 0
    score -= 3 if f.filler else 0
    score += (1 if is_user else 2) if position == 0 else 0  # an assistant's first sentence usually names the topic
    score += 1 if is_user and sentence.endswith("?") else 0
    return score


def _select(sentences: Sequence[str], is_user: bool, budget: int) -> list[str]:
    """The highest-scoring sentences that fit ``budget`` characters, in their original order."""
    if not sentences:
        return []
    scores = [_score(s, is_user, i) for i, s in enumerate(sentences)]
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    used = 0
    if len(sentences[ranked[0]]) >= budget:  # the best sentence alone is too long: keep its beginning
        return [_trim(sentences[ranked[0]], budget)]
    for i in ranked:
        if chosen and scores[i] < 0:
            break
        if used + len(sentences[i]) + 1 <= budget:
            chosen.append(i)
            used += len(sentences[i]) + 1
    return [sentences[i] for i in sorted(chosen)]


_ISO_DATE = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})")
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Z][a-z]+),?\s+(\d{4})")
_MONTH_DAY_YEAR = re.compile(r"\b([A-Z][a-z]+)\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})")


def conversation_date(conversation_time: Any) -> str:
    """``YYYY-MM-DD`` from an RFC 3339 / LongMemEval ("2023/05/30 (Tue) 21:48") / LoCoMo time, or ``''``."""
    if isinstance(conversation_time, date):
        return conversation_time.isoformat()[:10]
    if not isinstance(conversation_time, str) or not conversation_time:
        return ""
    if m := _ISO_DATE.search(conversation_time):
        return f"{m[1]}-{int(m[2]):02d}-{int(m[3]):02d}"
    for pattern, (d, mo, y) in ((_DAY_MONTH_YEAR, (1, 2, 3)), (_MONTH_DAY_YEAR, (2, 1, 3))):
        m = pattern.search(conversation_time)
        if m and (month := month_number(m[mo])):
            return f"{m[y]}-{month:02d}-{int(m[d]):02d}"
    return ""


def _speaker(role: str) -> str:
    role = (role or "").strip().lower()
    return {"human": "user", "ai": "assistant", "": "speaker"}.get(role, role)


def _label(role: str, name: Any = None) -> str:
    """How a summary names a speaker: the name when known ("Caroline"), else the role ("the user")."""
    name = " ".join(name.split()) if isinstance(name, str) else ""
    return name or f"the {_speaker(role)}"


# --- add_entry ----------------------------------------------------------------------------------------------------
def summarize_message(
    content: str,
    *,
    role: str = "user",
    conversation_time: Any = None,
    recent: Sequence[Mapping[str, Any]] = (),
    max_chars: int = SUMMARY_TARGET_CHARS,
    name: str | None = None,
) -> str:
    """A retrieval-oriented summary of one message: speaker, absolute date and its most informative sentences.

    The speaker is named by ``name`` when given ("Caroline moved to Denver", "Melanie said: ..."), else by the role
    ("The user moved ...", "The assistant said: ..."); the role alone decides how sentences are chosen. User
    sentences stating facts, numbers, dates, names, preferences or plans are preferred and kept verbatim (or
    rewritten to third person where that is certainly grammatical). Relative dates get the absolute date beside them,
    seen from ``conversation_time``
    ("yesterday (2023-05-07)"; :func:`~mycelian_agent.dates.resolve_relative_dates`). A very short reply ("Yes,
    please") says what it answers, using the previous message of ``recent``. Never empty; at most ``max_chars``
    characters.
    """
    speaker = _speaker(role)
    who = _label(role, name)
    personal = speaker == "user"  # the role decides what is selected and rewritten; the name only who is named
    day = conversation_date(conversation_time)
    on_day = f"On {day}" if day else ""
    sentences, heads = _split_units(content or "")
    if not sentences:
        text = (content or "").strip()
        body = " ".join(text.split()) if text else "(an empty message)"
        return _trim(f"{on_day} {who} said: {body}" if day else f"{who[0].upper()}{who[1:]} said: {body}", max_chars)

    reply_to = ""
    if sum(s.count(" ") + 1 for s in sentences) < 6:
        for prev in reversed(list(recent)):
            prev_text = str(prev.get("content") or "")
            if prev_text.strip() and prev_text.strip() != content.strip():
                prev_sentences, _ = _split_units(prev_text)
                prev_who = _label(str(prev.get("role")), prev.get("name"))
                best = _select(prev_sentences, _speaker(str(prev.get("role"))) == "user", 120)
                quoted = resolve_relative_dates(" ".join(best), prev.get("conversation_time"))
                reply_to = f" (replying to {prev_who}: {quoted})"
                break

    heads_text = ""
    if not personal and len(heads) >= 2:
        heads_text = _trim(" Items: " + "; ".join(dict.fromkeys(heads)) + ".", max_chars // 3)
    budget = max_chars - len(on_day) - len(heads_text) - len(reply_to) - 25 - max(0, len(who) - len("the assistant"))
    chosen = _select(sentences, personal, max(budget, 60))

    rewritten = [third_person(s, who) for s in chosen] if personal else []
    readable = [
        r for r in rewritten if r and who.lower() in r.lower() and not r.endswith("?") and not _SECOND_PERSON.search(r)
    ]  # "you" would lose its referent without "<who> said:"
    if rewritten and len(readable) == len(rewritten):
        body = " ".join(readable)
        if day and not body.startswith(who):  # "The user ..." / "Last week, the user ...": mid-sentence now
            body = body[0].lower() + body[1:]
        text = f"{on_day}, {body}" if day else body
    else:
        text = f"{on_day} {who} said: " if day else f"{who[0].upper()}{who[1:]} said: "
        text += " ".join(chosen)
    text = resolve_relative_dates(text, conversation_time)
    return _trim(text + heads_text + reply_to, max_chars)


def entry_tags(content: str, *, role: str = "user", max_topics: int = 3) -> dict[str, str]:
    """``{"topic": "a, b, c", "kind": fact|preference|plan|question|other}`` for one message."""
    sentences, heads = _split_units(content or "")

    def keywords(text: str) -> list[str]:
        return [w for w in _WORD.findall(text.lower()) if len(w) > 3 and w not in _STOPWORDS and "'" not in w]

    # Frequency, plus a bonus for names, for words of the opening sentence and for list-item heads.
    counts: dict[str, float] = dict(Counter(keywords(" ".join(sentences))))
    for word in keywords(" ".join(w for s in sentences for w in _features(s).proper_nouns)):
        counts[word] = counts.get(word, 0) + 1
    for word in keywords(" ".join(heads) + " " + (sentences[0] if sentences else "")):
        counts[word] = counts.get(word, 0) + 0.5
    topics = sorted(counts, key=lambda w: (-counts[w], w))[:max_topics]
    is_user = _speaker(role) == "user"
    statements = [s for s in sentences if not s.endswith("?")]
    own = [_features(s) for s in statements if _features(s).first_person] if is_user else []
    if any(f.preference for f in own):
        kind = "preference"
    elif any(f.plan for f in own):
        kind = "plan"
    elif own:
        kind = "fact"
    elif is_user and any(s.endswith("?") for s in sentences):
        kind = "question"
    elif not is_user and (heads or any(_features(s).number or _features(s).proper_nouns for s in statements)):
        kind = "fact"
    else:
        kind = "other"
    return {"topic": ", ".join(topics) or "general", "kind": kind}
