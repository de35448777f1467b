"""Ranking pieces shared by every storage backend: query terms, neighbouring-turn context, derived index columns.

The SQLite store finds candidates with FTS5 (``search.py``), the PostgreSQL store with ``tsvector`` (``pg_store.py``);
both score them with ``bm25.py`` and feed the hits through :func:`with_context` here, so the scoring and the
neighbour shares are one piece of code.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

__all__ = [
    "CONTEXT_AFTER_QUESTION",
    "CONTEXT_BEFORE",
    "CONTEXT_DEPTH",
    "CONTEXT_FAR_AFTER",
    "CONTEXT_FAR_BEFORE",
    "CONTEXT_GAP_DAYS",
    "CONTEXT_WEIGHT",
    "ECHO_BELOW",
    "REVISION_LIFT",
    "REVISION_WORDS",
    "ENTRY_WEIGHTS",
    "MAX_QUERY_TERMS",
    "QUESTION_MARKS",
    "STOPWORDS",
    "WORD_RE",
    "entry_dated",
    "entry_labels",
    "index_words",
    "current_first",
    "query_terms",
    "revises",
    "with_context",
]

#: At most this many distinct terms of a query are searched (long queries stay fast).
MAX_QUERY_TERMS = 48
#: Column weights of the entry index ``(mkey, raw_entry, summary, labels, dated)``: the summary is written for
#: retrieval; ``labels`` (tag values such as the speaker's name) weighs like the text, so a question naming a
#: person finds that person's own turns, which rarely contain their name; ``dated`` (the entry's date in words)
#: weighs half, a tie-breaker for questions that name a day or month. SQLite passes them to ``bm25()``; PostgreSQL
#: maps them to the tsvector weights A (summary), B (raw_entry, labels) and C (dated).
ENTRY_WEIGHTS = (0.0, 1.0, 1.5, 1.0, 0.5)
#: Share of an entry's lexical score given to the entry that follows it in its memory when the entry asks something
#: (its text holds one of :data:`QUESTION_MARKS`): the next turn is then most often the answer, which rarely
#: repeats the question's words ("What inspired you?" -> "I painted this after I visited a LGBTQ center").
CONTEXT_AFTER_QUESTION = 0.8
#: Share given to the entry that follows an entry asking nothing (:data:`CONTEXT_BEFORE`: to the entry before any
#: entry). Set on the LoCoMo recall benchmark (BENCHMARKS.md §3): with one follower share for every entry (0.5,
#: flat from 0.5 to 0.6) recall any@1 / any@10 / all@10 was 0.358 / 0.796 / 0.687; split 0.8 after questions, 0.3
#: after the rest, it is 0.428 / 0.812 / 0.708; all 12 splits tried (0.6-0.9 after questions, 0.3-0.5 after the
#: rest) gained at any@1, any@10 and all@10.
CONTEXT_WEIGHT = 0.3
CONTEXT_BEFORE = 0.25
#: Shares given to the entries two turns after and two turns before an entry (through its neighbours, each step
#: within :data:`CONTEXT_GAP_DAYS`). A topic runs over several turns: in a two-person chat the teller goes on two
#: turns later, after the other's reply or follow-up question ("How did you feel?" -> "I felt tiny and in awe").
#: On LoCoMo dev (in process, on the name boost) any@10 / all@10 rose on each of the three conversations: overall
#: 0.846 / 0.739 -> 0.869 / 0.752 at 0.25 / 0.1 (0.867 / 0.749 at 0.2 / 0.1, 0.875 / 0.757 at 0.3 / 0.15 with
#: any@1 lower, 0.869 / 0.744 at 0.25 / 0); BENCHMARKS.md section 3.
CONTEXT_FAR_AFTER = 0.25
CONTEXT_FAR_BEFORE = 0.1
#: Characters that make an entry a question for :data:`CONTEXT_AFTER_QUESTION` (ASCII, full-width, Arabic).
QUESTION_MARKS = "?\uff1f\u061f"
#: Neighbours further apart in time (conversation time, else creation time) than this are another conversation.
CONTEXT_GAP_DAYS = 1 / 24
#: An echo of a statement (see :func:`with_context`) scores at most this share of the statement's score.
ECHO_BELOW = 0.99
#: Words by which a person says that something they said before has changed ("Quick update: I moved, my new
#: address is ...", "The dinner is cancelled", "The dentist moved my appointment to May 10"). General English, not
#: the evaluation data's vocabulary; matched as whole words of the entry's own text (not its summary), in the
#: forms that report a change: "changes" and "change" also name things ("positive changes"), "changed" rarely does.
REVISION_WORDS = frozenset(
    "update updated changed moved cancelled canceled rescheduled postponed instead switched anymore delayed "
    "replaced".split()  # noqa: SIM905
)
#: A revision (see :func:`current_first`) is lifted to this multiple of the score of the statement it revises.
REVISION_LIFT = 1.01
#: Lexical hits whose neighbours are considered (the re-ranked pool; at least the requested limit).
CONTEXT_DEPTH = 50

# Letters and digits only: operators, quotes and punctuation can never reach an index's query language.
WORD_RE = re.compile(r"[^\W_]+")

#: Dropped from a query only when it has other terms: OR-ing them matches nearly every entry, which costs time and
#: adds almost nothing to BM25 (their IDF is tiny). Never feedback words either (``feedback.py``).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    of off on once only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself yourselves s t d ll
    m re ve""".split()  # noqa: SIM905 (a list literal would be 60 lines)
)
_MONTHS = "January February March April May June July August September October November December".split()
_DIGIT = re.compile(r"\d")


def query_terms(query: str) -> list[str]:
    """The distinct word tokens of ``query`` (case-folded, stop words dropped when others remain), in order."""
    words = WORD_RE.findall(unicodedata.normalize("NFKC", query).casefold())
    seen: dict[str, None] = dict.fromkeys(words)
    content = [w for w in seen if w not in STOPWORDS]
    return (content or list(seen))[:MAX_QUERY_TERMS]


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


Link = tuple[int, int | None, int | None, bool]


def with_context(
    hits: Sequence[tuple[int, float]],
    links: Iterable[Link],
    allowed: set[int],
    limit: int,
    matched: Mapping[int, frozenset[str]] | None = None,
    outer: Iterable[Link] | None = None,
) -> list[tuple[int, float]]:
    """Re-rank lexical ``hits`` (``(seq, score)``, score > 0) with the scores of each entry's neighbours:
    score(e) = lex(e) + follower share of previous * lex(previous) + CONTEXT_BEFORE * lex(next), the follower share
    being :data:`CONTEXT_AFTER_QUESTION` when the previous entry asks something, else :data:`CONTEXT_WEIGHT`.

    ``links`` gives ``(seq, previous seq, next seq, asks)`` for each hit: its neighbours in the memory within
    :data:`CONTEXT_GAP_DAYS` (None where there is none) and whether its text holds a question mark; ``allowed`` the
    seqs that may be returned (the hits and the neighbours inside the search's time bounds). In a conversation a
    turn's meaning is spread over its neighbours: the answer ("Three times a week.") follows the question that
    carries the query's words, so such an answer can be found though it shares no query word. Ties go to the newer
    entry.

    With ``matched`` (the query stems each scored entry contains, ``bm25.rank``) an echo stays below its source: a
    turn that follows a statement (not a question) within the conversation and matches the query only with words
    that statement also holds repeats it ("I'm allergic to peanuts." -> "Noted: you're allergic to peanuts."). It
    borrows nothing from the statement, and ranks just below it (its score is capped at the statement's, times
    :data:`ECHO_BELOW`): the statement is the person's own word and came first.

    ``outer`` gives the same links for the hits' neighbours that are not hits themselves: through them each hit also passes
    :data:`CONTEXT_FAR_AFTER` of its score to the entry two turns later and :data:`CONTEXT_FAR_BEFORE` to the entry
    two turns earlier (when those are in ``allowed``).
    """
    scores = dict(hits)
    combined: dict[int, float] = dict(scores)
    echoes: dict[int, int] = {}
    links = list(links)
    steps = {seq: (previous, following) for seq, previous, following, _ in (*links, *(outer or ()))}
    for seq, previous, following, _ in links if outer is not None else ():
        far_before = steps.get(previous, (None, None))[0] if previous is not None else None
        far_after = steps.get(following, (None, None))[1] if following is not None else None
        for far, share in ((far_before, CONTEXT_FAR_BEFORE), (far_after, CONTEXT_FAR_AFTER)):
            if far is not None and far != seq and far in allowed:
                combined[far] = combined.get(far, 0.0) + share * scores[seq]
    for seq, previous, following, asks in links:
        after = CONTEXT_AFTER_QUESTION if asks else CONTEXT_WEIGHT
        if (matched is not None and not asks and following is not None and following in matched
                and matched[following] <= matched.get(seq, frozenset())):
            echoes[following] = seq
            after = 0.0
        for neighbour, share in ((previous, CONTEXT_BEFORE), (following, after)):
            if share and neighbour is not None and neighbour in allowed:
                combined[neighbour] = combined.get(neighbour, 0.0) + share * scores[seq]
    for echo, source in echoes.items():
        if echo in combined:
            combined[echo] = min(combined[echo], ECHO_BELOW * combined[source])
    return sorted(combined.items(), key=lambda pair: (-pair[1], -pair[0]))[:limit]



class Revisable(Protocol):
    """What :func:`current_first` reads of an entry (``bm25.EntryTerms`` has it)."""

    author: str | None
    revises: bool


def current_first(
    hits: Sequence[tuple[int, float]],
    entries: Mapping[int, Revisable],
    matched: Mapping[int, frozenset[str]],
) -> list[tuple[int, float]]:
    """Put a fact's latest word above the stale one: an entry that says something changed (``revises``) ranks just
    above (:data:`REVISION_LIFT`) every earlier entry of the same author that it covers, i.e. whose matched query
    stems it matches too. "The dentist moved my appointment to May 10" then answers "When is the dentist
    appointment?" before "The dentist appointment is on May 3", which BM25 prefers for being shorter.

    Narrow on purpose: a general recency preference (every later hit lifted a little) cost LoCoMo recall, whose
    questions often ask about the first mention; here only a stated change moves, and only past what it revises.
    ``hits`` are ``(seq, score)`` best first (seq order is time order within a memory); the result is too.
    """
    scores = dict(hits)
    for later in sorted(scores):
        entry = entries.get(later)
        covered = matched.get(later)
        if entry is None or not entry.revises or entry.author is None or not covered:
            continue
        for earlier in scores:
            if earlier >= later or scores[earlier] < scores[later]:
                continue
            before = entries.get(earlier)
            stale = matched.get(earlier)
            if before is not None and before.author == entry.author and stale and stale <= covered:
                scores[later] = REVISION_LIFT * scores[earlier]
    return sorted(scores.items(), key=lambda pair: (-pair[1], -pair[0]))
