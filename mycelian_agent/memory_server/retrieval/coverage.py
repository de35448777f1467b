"""Coverage for questions about a person: the turns of a speaker the question names rank above other turns.

A question that names someone ("What activities has Melanie done with her family?") is asked about what that person
said or did, and the evidence is mostly their own turns. BM25 barely sees the name: a speaker's name is in about half
a two-person conversation's entries (the summary says "On <date> Melanie said: ..."), so its IDF is ~ln 2 against
~5 for a rare word, and the other person's turns that address them ("Wow, Melanie, ...") or ask about the topic
("What's your best camping memory?") fill the top places. So, after the lexical ranking, its neighbour shares and the
query feedback, each entry whose author is named in the question (a query stem equal to a stem of its ``speaker``
tag, else of its ``role``: "What did the assistant suggest?") scores :data:`NAME_BOOST` more (a factor of
1 + NAME_BOOST). A question naming nobody, or naming every speaker of the
ranked entries, keeps its order; the scores stay BM25 scores scaled by the one factor.

Set on LoCoMo dev (BENCHMARKS.md §3; in process, any@1 / any@10 / all@10 of categories 1-4, lexical 0.444 / 0.820 /
0.705): boost 0.2 0.473 / 0.833 / 0.723, 0.3 0.483 / 0.841 / 0.731, **0.5 0.499 / 0.843 / 0.736**, 0.8 0.499 /
0.838 / 0.734, 1.2 0.499 / 0.838 / 0.736. Applied to BM25 scores before the neighbour shares instead (so a question
turn of the other person passes its unboosted share to the answer): 0.3 0.462 / 0.817 / 0.715, single-hop lower.
The adversarial questions (category 5, reported apart) lose: they name the wrong person by design ("What did
Caroline realize after her charity race?" when Melanie ran it), any@10 0.911 -> 0.857 at 0.5 (0.884 at 0.3).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache

from mycelian_agent.memory_server.retrieval.bm25 import tokens

__all__ = ["NAME_BOOST", "author_stems", "boost_named_speakers"]

#: Extra share of an entry's score when the question names its speaker (the factor is 1 + NAME_BOOST).
NAME_BOOST = 0.5


@lru_cache(maxsize=4096)
def author_stems(author: str | None) -> frozenset[str]:
    """The stems of an entry's author (``bm25.EntryTerms.author``: its ``speaker`` tag, else its ``role``), as
    query stems are made; a memory has a few authors, so they are cached."""
    return frozenset(tokens(author)) if author else frozenset()


def boost_named_speakers(
    hits: Sequence[tuple[int, float]],
    speakers: Mapping[int, Collection[str]],
    stems: Collection[str],
    boost: float = NAME_BOOST,
) -> list[tuple[int, float]]:
    """``hits`` (``(seq, score)``, best first) with the score of each entry whose speaker is named in the question
    multiplied by ``1 + boost``, best first again (ties: newer). ``speakers``: each entry's author stems
    (:func:`author_stems`); ``stems``: the query's stems. Unchanged when no ranked entry's speaker is named
    or every one is."""
    wanted = set(stems)
    named = {seq for seq, _ in hits if wanted.intersection(speakers.get(seq, ()))}
    if boost <= 0 or not named or len(named) == len(hits):
        return list(hits)
    factor = 1.0 + boost
    boosted = [(seq, score * factor if seq in named else score) for seq, score in hits]
    return sorted(boosted, key=lambda pair: (-pair[1], -pair[0]))
