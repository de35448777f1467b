"""Neighbouring-turn context: each hit's score shared with the turns around it, echoes kept below their source, a
stated change lifted above what it revises.

Both backends find candidates (``storage``) and score them with ``bm25.py``; the pipeline (``pipeline.py``) feeds
the hits through :func:`with_context` and :func:`current_first` here, so the neighbour shares are one piece of code.
The text rules these lean on (question marks, the conversation gap, revision words) are in ``text/analysis.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from mycelian_agent.memory_server.storage.rows import Link

__all__ = [
    "CONTEXT_AFTER_QUESTION",
    "CONTEXT_BEFORE",
    "CONTEXT_DEPTH",
    "CONTEXT_FAR_AFTER",
    "CONTEXT_FAR_BEFORE",
    "CONTEXT_WEIGHT",
    "ECHO_BELOW",
    "REVISION_LIFT",
    "Link",
    "current_first",
    "revisions_first",
    "with_context",
]

#: Share of an entry's lexical score given to the entry that follows it in its memory when the entry asks something
#: (its text holds one of :data:`QUESTION_MARKS`): the next turn is then most often the answer, which rarely
#: repeats the question's words ("What inspired you?" -> "I painted this after I visited a LGBTQ center").
CONTEXT_AFTER_QUESTION = 0.8
#: Share given to the entry that follows an entry asking nothing (:data:`CONTEXT_BEFORE`: to the entry before any
#: entry). Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
CONTEXT_WEIGHT = 0.3
CONTEXT_BEFORE = 0.25
#: Shares given to the entries two turns after and two turns before an entry (through its neighbours, each step
#: within :data:`CONTEXT_GAP_DAYS`). A topic runs over several turns: in a two-person chat the teller goes on two
#: turns later, after the other's reply or follow-up question ("How did you feel?" -> "I felt tiny and in awe").
#: Tuned on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants".
CONTEXT_FAR_AFTER = 0.25
CONTEXT_FAR_BEFORE = 0.1
#: An echo of a statement (see :func:`with_context`) scores at most this share of the statement's score.
ECHO_BELOW = 0.99
#: A revision (see :func:`current_first`) is lifted to this multiple of the score of the statement it revises.
REVISION_LIFT = 1.01
#: Lexical hits whose neighbours are considered (the re-ranked pool; at least the requested limit).
CONTEXT_DEPTH = 50


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

    ``outer`` gives the same links for the hits' neighbours that are not hits themselves: through them each hit also
    passes
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
        if (
            matched is not None
            and not asks
            and following is not None
            and following in matched
            and matched[following] <= matched.get(seq, frozenset())
        ):
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

    @property
    def author(self) -> str | None:
        """Who wrote the entry (its ``speaker`` tag, else its ``role``)."""

    @property
    def revises(self) -> bool:
        """Whether the entry's own text says something changed."""


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
        for earlier in scores:
            if scores[earlier] >= scores[later] and _revises(later, earlier, entries, matched):
                scores[later] = REVISION_LIFT * scores[earlier]
    return sorted(scores.items(), key=lambda pair: (-pair[1], -pair[0]))


def revisions_first(
    hits: Sequence[tuple[int, float]],
    entries: Mapping[int, Revisable],
    matched: Mapping[int, frozenset[str]],
) -> list[tuple[int, float]]:
    """:func:`current_first` as an order, for a ranking whose scores are no longer BM25's: each stated change is
    moved just above the first (best-ranked) earlier entry it revises, the rest keeping their places. The hybrid
    search applies it after the fusion, where the dense side can reorder a revision and what it revises by less
    than :data:`REVISION_LIFT` ("The landlord raised the rent to 480 euros" below "The rent is 450 euros a month").
    A moved revision takes the score of the entry it passed."""
    scores = dict(hits)
    order = [seq for seq, _ in hits]
    for later in sorted(scores):
        place = order.index(later)
        stale = next((earlier for earlier in order[:place] if _revises(later, earlier, entries, matched)), None)
        if stale is not None:
            order.remove(later)
            order.insert(order.index(stale), later)
            scores[later] = max(scores[later], scores[stale])
    return [(seq, scores[seq]) for seq in order]


def _revises(later: int, earlier: int, entries: Mapping[int, Revisable], matched: Mapping[int, frozenset[str]]) -> bool:
    """Whether entry ``later`` states a change of what ``earlier`` (an older entry of the same author) said: its
    own text says something changed, and it matches every query stem ``earlier`` matches."""
    entry, before = entries.get(later), entries.get(earlier)
    covered, stale = matched.get(later, frozenset()), matched.get(earlier, frozenset())
    return (
        earlier < later
        and entry is not None
        and before is not None
        and entry.revises
        and entry.author is not None
        and before.author == entry.author
        and bool(covered)
        and bool(stale)
        and stale <= covered
    )
