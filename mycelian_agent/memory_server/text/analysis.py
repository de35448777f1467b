"""How an entry's text is read, by writes and searches alike: word tokens, stems, the derived index columns, the
terms BM25 weighs and the words query feedback may borrow.

Storage needs these at write time (the index columns, the term statistics, the entry cache), retrieval at search
time (the same stems for the query); both read them from here, so the two sides cannot tokenise differently. Tokens
are FTS5's: ``unicode61 remove_diacritics 2`` words, Porter-stemmed (``porter.py``, checked against FTS5). What a
word is, the stop words and a query's terms are ``mycelian_agent/words.py``'s, shared with the recall side.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mycelian_agent.memory_server.text.porter import stem
from mycelian_agent.words import STOPWORDS, WORD_RE

__all__ = [
    "CONTEXT_GAP_DAYS",
    "CONVERSATION_TAGS",
    "ENTRY_WEIGHTS",
    "QUESTION_MARKS",
    "REVISION_WORDS",
    "EntryTerms",
    "content_stems",
    "entry_dated",
    "entry_fields",
    "entry_labels",
    "entry_terms",
    "feedback_words",
    "index_words",
    "query_stems",
    "revises",
    "tokens",
]

#: Weights of an entry's indexed fields ``(raw_entry, summary, labels, dated)``: the summary is written for
#: retrieval; ``labels`` (tag values such as the speaker's name) weighs like the text, so a question naming a
#: person finds that person's own turns, which rarely contain their name; ``dated`` (the entry's date in words)
#: weighs half, a tie-breaker for questions that name a day or month. SQLite passes them to ``bm25()``; PostgreSQL
#: maps them to the tsvector weights A (summary), B (raw_entry, labels) and C (dated); BM25 (``bm25.py``) weighs
#: each field's term frequency by them.
ENTRY_WEIGHTS = (1.0, 1.5, 1.0, 0.5)
#: Characters that make an entry a question (``ranking.CONTEXT_AFTER_QUESTION``; ASCII, full-width, Arabic).
QUESTION_MARKS = "?\uff1f\u061f"
#: Neighbours further apart in time (conversation time, else creation time) than this are another conversation.
CONTEXT_GAP_DAYS = 1 / 24
#: Words by which a person says that something they said before has changed ("Quick update: I moved, my new
#: address is ...", "The dinner is cancelled", "The dentist moved my appointment to May 10"). General English, not
#: the evaluation data's vocabulary; matched as whole words of the entry's own text (not its summary), in the
#: forms that report a change: "changes" and "change" also name things ("positive changes"), "changed" rarely does.
REVISION_WORDS = frozenset(
    "update updated changed moved cancelled canceled rescheduled postpone postponed instead switched anymore delayed "
    "replaced raised lowered correction".split()
)
# (PostgreSQL keeps each entry's flag with its terms, written with the entry: entries stored before a word joined
# this list keep the flag they were written with until they are written again.)
#: Tags naming the conversation an entry belongs to, not what it says: the same words on every entry of a thread
#: ("quickstart-lisbon-trip"), they are not scored as labels. In the quickstart's 16-entry memory they put "lisbon"
#: and "trip" in every entry, so the IDF of both was ~0 and the order noise.
CONVERSATION_TAGS = frozenset({"thread"})

_MONTHS = "January February March April May June July August September October November December".split()
_DIGIT = re.compile(r"\d")


def revises(text: str) -> bool:
    """Whether ``text`` says that something changed (one of :data:`REVISION_WORDS`)."""
    return any(word in REVISION_WORDS for word in WORD_RE.findall(text.casefold()))


def index_words(text: str) -> str:
    """The word tokens of ``text`` (:data:`WORD_RE`, the queries' own rule), space-joined: what the PostgreSQL store
    hands to ``to_tsvector``. Under ``lc_ctype=C`` PostgreSQL's parser counts every non-ASCII character as a
    letter, gluing curly quotes, dashes, ellipses and full-width punctuation to the words beside them
    ("\u201ckayak\u201d" would be one token that a search for kayak never finds); split here, the index holds the
    same words whatever the cluster's locale."""
    return " ".join(WORD_RE.findall(text))


def entry_labels(tags: Mapping[str, str] | str) -> str:
    """The ``labels`` column of an entry: its tag values without digits (speaker names, topics), space-joined.

    Identifiers and counters (ids, turn numbers, session keys) carry digits and would only add noise. Same rule as
    SQLite's migration 3 (``json_each(tags) ... NOT GLOB '*[0-9]*'``). ``tags`` may be the stored JSON text.
    """
    values = json.loads(tags) if isinstance(tags, str) else tags
    return " ".join(v for v in values.values() if isinstance(v, str) and not _DIGIT.search(v))


def entry_dated(moment: str) -> str:
    """The ``dated`` column: a normalised timestamp's date in words (``2023-05-08T...`` -> ``8 May 2023``)."""
    month = int(moment[5:7])
    name = _MONTHS[month - 1] if 1 <= month <= 12 else ""
    return f"{int(moment[8:10])} {name} {moment[:4]}"


def _fold_char(char: str) -> str:
    # remove_diacritics 2: Latin letters lose their marks ("é" -> "e"); other scripts keep theirs, as in FTS5.
    if char.isascii() or not ("\u00c0" <= char <= "\u024f" or "\u1e00" <= char <= "\u1eff"):
        return char
    return "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    """The stems FTS5 indexes ``text`` as (lower-cased words, Latin diacritics removed, Porter-stemmed)."""
    lowered = text.lower().replace("\u03c2", "\u03c3")  # final sigma folds to sigma, as in unicode61
    if not lowered.isascii():
        lowered = "".join(_fold_char(c) for c in lowered)
    return [stem(word) for word in WORD_RE.findall(lowered)]


def content_stems(text: str) -> set[str]:
    """The distinct stems of ``text``'s words that are not :data:`STOPWORDS`: how much a turn says of its own
    ("Understood." one, "Lovely instrument! Is it at a music school?" four)."""
    words = WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
    return {stem for word in dict.fromkeys(words) if word not in STOPWORDS for stem in tokens(word)}


def query_stems(terms: Iterable[str]) -> list[str]:
    """The stems of query ``terms`` (:func:`query_terms`: distinct words), in order, one per word: two words of one
    stem ("dogs", "dog") give it twice (``bm25.rank`` weighs it twice)."""
    return [s for term in terms for s in tokens(term)]


@dataclass(frozen=True)
class EntryTerms:
    """An entry as BM25 sees it: weighted frequency of each stem over its fields, token count; who said it (the
    ``speaker`` tag, else the ``role``) and whether its own text says something changed (:func:`revises`)."""

    frequencies: Mapping[str, float]
    length: int
    author: str | None = None
    revises: bool = False


def entry_fields(
    raw_entry: str, summary: str, tags: Mapping[str, str] | str, moment: str | None
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The stems of an entry's indexed fields, in index order (raw_entry, summary, labels, dated): what the SQLite
    index holds (``storage/sqlite/postings.py``) and BM25 weighs (:func:`entry_terms`). ``moment``: conversation
    time, else creation time."""
    values = json.loads(tags) if isinstance(tags, str) else tags
    labels = entry_labels({k: v for k, v in values.items() if k not in CONVERSATION_TAGS})
    return tokens(raw_entry), tokens(summary), tokens(labels), tokens(entry_dated(moment)) if moment else []


def entry_terms(
    raw_entry: str,
    summary: str,
    tags: Mapping[str, str] | str,
    moment: str | None,
    *,
    weights: Sequence[float] | None = None,
    fields: Sequence[Sequence[str]] | None = None,
) -> EntryTerms:
    """How BM25 sees an entry (:class:`EntryTerms`) from its stored fields. ``weights`` replaces the field weights
    ``ENTRY_WEIGHTS`` (raw_entry, summary, labels, dated; the ablation benchmark turns fields off with it); the
    length counts every field's tokens whatever their weight, as FTS5's does. ``fields``: the entry's
    :func:`entry_fields`, when the caller has them already."""
    values = json.loads(tags) if isinstance(tags, str) else tags
    if fields is None:
        fields = entry_fields(raw_entry, summary, values, moment)
    frequencies: dict[str, float] = {}
    length = 0
    for words, weight in zip(fields, ENTRY_WEIGHTS if weights is None else weights, strict=True):
        length += len(words)
        for word in words:
            frequencies[word] = frequencies.get(word, 0.0) + weight
    author = values.get("speaker") or values.get("role")
    return EntryTerms(frequencies, length, author if isinstance(author, str) else None, revises(raw_entry))


def feedback_words(text: str) -> list[str]:
    """The words of ``text`` that may join a query (``feedback.py``): case-folded, no stop words, no words under 3
    letters or with digits (ids, times and counters say nothing about a topic)."""
    words = WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
    return [w for w in words if len(w) > 2 and w not in STOPWORDS and not _DIGIT.search(w)]
