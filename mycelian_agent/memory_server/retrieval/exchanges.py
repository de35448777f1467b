"""An assistant's reaction ranked just below the statement it reacts to: the user's own words come first.

In a chat with an AI assistant the assistant speaks in reply. "Lovely instrument! Is it at a music school?" follows
"I've started taking cello lessons on Thursdays", "Understood." follows "I work as a nurse on the cardiac ward".
Such a reaction can match a question better than the statement it follows: through words it brings in itself
("What musical instrument am I learning?" shares "instrument" and "music" with the reaction, nothing with the
statement), or on the dense side, where the summary the writer gives a short reply quotes what it replies to
("Understood. (replying to Priya: I work as a nurse ...)"), so the reply's vector is the statement's plus a frame.
Yet the fact is the statement's. :func:`statements_first` ranks the statement and its reaction as one exchange: the
exchange takes the place of its best-ranked turn, the statement first and the reaction just below it
(``ranking.ECHO_BELOW`` of the statement's score, as a lexical echo).

A turn is a reaction (:func:`reacts_to`) when all of these hold:

- it is the assistant's (role ``assistant``) and names no speaker: an AI assistant, whose turns are replies rather
  than facts about anyone. A conversation between two people replayed with roles (LoCoMo's) names both speakers,
  and their turns keep their own places: there the reply is often the evidence;
- it directly follows, within the conversation (``text.analysis.CONTEXT_GAP_DAYS``), a turn of another author that is a
  statement: a reply to a question is its answer ("Ramen." to "What's your favourite food?");
- it says less of its own than that statement (fewer distinct content stems, ``text.analysis.content_stems``): an
  assistant turn that adds more than it was told (a worked-out budget, a recommendation) keeps its own place.

Order-preserving: nothing moves unless a reaction ranks above its statement, and then only those two turns move.
Measured (BENCHMARKS.md §3, "Issue 38: the stated fact first"): LoCoMo dev unchanged in every cell (its assistant is
a named person), the small-memory suite's first hits +9 of 43.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from mycelian_agent.memory_server.retrieval.ranking import ECHO_BELOW

__all__ = ["Turn", "reacts_to", "statements_first"]


class Turn(NamedTuple):
    """What :func:`reacts_to` reads of an entry: who wrote it (``speaker`` tag, else role), whether it is an unnamed
    assistant's, whether it asks something, and how many distinct content stems its own text holds."""

    author: str | None
    assistant: bool
    asks: bool
    content: int


def reacts_to(reply: Turn, statement: Turn) -> bool:
    """Whether ``reply``, the turn right after ``statement``, is a reaction to it (see the module docstring)."""
    return (
        reply.assistant
        and reply.author != statement.author
        and not statement.asks
        and reply.content < statement.content
    )


def statements_first(
    hits: Sequence[tuple[int, float]],
    previous: Mapping[int, int],
    turns: Mapping[int, Turn],
) -> list[tuple[int, float]]:
    """``hits`` (``(seq, score)``, best first) with every reaction placed just below the statement it reacts to.

    ``previous`` maps a hit to the turn right before it in its conversation (where there is one, inside the
    search's bounds); ``turns`` describes the hits and those turns. A statement the ranking did not hold is brought
    in at its reaction's place; one ranked below its reaction moves up to it. The statement's score becomes the
    higher of the two, the reaction's at most ``ECHO_BELOW`` of it.
    """
    scores = dict(hits)
    order = [seq for seq, _ in hits]
    for seq, _ in hits:
        statement = previous.get(seq)
        if statement is None or seq not in turns or statement not in turns:
            continue
        if not reacts_to(turns[seq], turns[statement]):
            continue
        place = order.index(seq)
        if statement in scores:
            if order.index(statement) < place:
                continue  # already above its reaction
            order.remove(statement)
        order.insert(place, statement)
        scores[statement] = max(scores.get(statement, 0.0), scores[seq])
        scores[seq] = min(scores[seq], ECHO_BELOW * scores[statement])
    return [(seq, scores[seq]) for seq in order]
