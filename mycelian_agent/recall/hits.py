"""What the read side returns: typed search hits and the recall block a prompt carries.

Plain frozen dataclasses (no LangChain): :class:`MemoryHit` is one entry found by a search, :class:`RecalledTurn`
one line of a recall block (a hit or a neighbouring turn), :class:`Recall` the block itself with
:meth:`Recall.as_prompt`. Sizes are estimated with :func:`estimate_tokens` (four characters a token, the usual rule
for English with BPE tokenizers; a reader's own tokenizer differs by some percent, never by a factor).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "MATCH_MEANING",
    "MATCH_WORDS",
    "MemoryHit",
    "MemoryHits",
    "Recall",
    "RecalledTurn",
    "StoredText",
    "estimate_tokens",
    "pending_note",
    "speaker_label",
    "stored_fields",
    "when_label",
]

#: The values of :attr:`MemoryHit.match` (the ``match`` of a ``search_memories`` entry; the server's
#: ``retrieval.pipeline.MATCH_WORDS`` / ``MATCH_MEANING``, repeated here: the read side speaks only the tool contract).
MATCH_WORDS = "words"
MATCH_MEANING = "meaning"


def estimate_tokens(text: str) -> int:
    """An estimate of ``text``'s size in tokens: one per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def when_label(moment: str | None) -> str:
    """``2024-04-10T08:05:00Z`` -> ``2024-04-10 (Wed) 08:05``: the date a reader needs for "when" questions."""
    if not moment:
        return "undated"
    try:
        parsed = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return moment
    return parsed.strftime("%Y-%m-%d (%a) %H:%M")


def speaker_label(speaker: str | None, role: str | None) -> str:
    """``Dana (user)``, or the role alone when no name is known."""
    if speaker and role and speaker != role:
        return f"{speaker} ({role})"
    return speaker or role or "unknown speaker"


def _number(value: Any) -> float:
    """A server's score as a float: 0.0 for one that is missing, not a number or not finite (a server we do not
    know may send anything; a hit is not dropped for its score)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0.0
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return number if math.isfinite(number) else 0.0


@dataclass(frozen=True)
class StoredText:
    """What every entry read back carries (a search hit, a listed entry, a version): its id, verbatim text, summary,
    and the speaker, role, time and thread read from its tags and times."""

    entry_id: str
    text: str
    summary: str
    speaker: str | None
    role: str | None
    time: str | None
    thread: str | None


def stored_fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`StoredText` fields, ``created`` and ``tags`` of an entry object of the tool contract."""
    tags = dict(entry.get("tags") or {})
    role = tags.get("role")
    return {
        "entry_id": str(entry["entryId"]),
        "text": str(entry.get("rawEntry") or ""),
        "summary": str(entry.get("summary") or ""),
        "speaker": tags.get("speaker") or role,
        "role": role,
        "time": entry.get("conversationTime") or entry.get("creationTime"),
        "thread": tags.get("thread"),
        "created": entry.get("creationTime"),
        "tags": tags,
    }


@dataclass(frozen=True)
class MemoryHit(StoredText):
    """One entry a search found.

    ``text`` is the verbatim message (one part of a long message, see ``tags["part"]``), ``summary`` the
    retrieval summary written at ingestion, ``speaker`` the speaker's name when the message named one (else the
    role), ``time`` the conversation time (else the time the entry was stored), ``thread`` the chat thread that
    wrote it, ``score`` the server's relevance: from our server a number from 0 to 1, absolute (comparable across
    searches, so one threshold means the same everywhere: ``min_score``), never higher than a better-ranked hit's;
    above 0.5 the entry holds words of the query (a hit found by meaning alone scores at most 0.5); 1.0 it holds
    every informative word of the query. Another Mycelian server may send another scale (``min_score`` compares
    against what it sends); a missing or non-numeric score reads 0. ``created``
    when the server stored it (the memory's order), ``user`` whose memory it is (None: the invoker's default).
    ``match`` says how the search found it: ``"words"`` (the word search: the entry, or a turn beside it, shares
    words with the query or with its best hits), ``"meaning"`` (semantic similarity alone, so it may be unrelated),
    or None (a server that does not say).
    """

    score: float
    memory_id: str
    user: str | None = None
    created: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    match: str | None = None

    @property
    def by_meaning(self) -> bool:
        """Only semantic similarity found this entry (``match == "meaning"``): no word of the query led to it."""
        return self.match == MATCH_MEANING

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], *, memory_id: str, user: str | None, score: float = 0.0) -> MemoryHit:
        """A hit from an entry object of the tool contract (``search_memories`` or ``list_entries``)."""
        return cls(
            **stored_fields(entry),
            score=_number(entry.get("score", score)),
            memory_id=memory_id,
            user=user,
            match=entry.get("match"),
        )

    def as_dict(self) -> dict[str, Any]:
        """The hit as plain JSON-ready data."""
        return {**asdict(self), "tags": dict(self.tags)}


class MemoryHits(list[MemoryHit]):
    """The hits of one search, best first (a list), and :attr:`pending_vectors`: how many of the memory's entries
    the server ranked without a vector yet (the ``pendingVectors`` of ``search_memories``; vectors are written
    behind the entries, so those were found by their words only). 0 when none were, or the server does not say."""

    def __init__(self, hits: Iterable[MemoryHit] = (), *, pending_vectors: int = 0) -> None:
        super().__init__(hits)
        self.pending_vectors = pending_vectors


def pending_note(pending_vectors: int) -> str | None:
    """One line saying that a search ranked ``pending_vectors`` entries by their words only, or None for 0."""
    if not pending_vectors:
        return None
    return (
        f"{pending_vectors:,} entries of this memory have no vector yet (written behind): they were found by "
        "their words only"
    )


@dataclass(frozen=True)
class RecalledTurn:
    """One line of a recall block: a search hit (``hit=True``, with its ``rank`` among the hits) or a turn next to
    one, shown for its context. ``text`` is the turn's words with each relative date followed by the day it meant
    ("yesterday (2023-07-02)", from the turn's ``time``); ``clipped`` says the text was shortened to fit the budget;
    ``adjacent`` that it directly follows the line before it in the block (no turn of the memory between them)."""

    entry_id: str
    text: str
    speaker: str | None
    role: str | None
    time: str | None
    thread: str | None
    hit: bool
    rank: int | None = None
    clipped: bool = False
    adjacent: bool = False  # directly follows the block's previous line in the memory (no gap between them)

    def line(self) -> str:
        """``[2024-04-10 (Wed) 08:05] Dana (user): ...``"""
        return f"[{when_label(self.time)}] {speaker_label(self.speaker, self.role)}: {self.text}"


@dataclass(frozen=True)
class Recall:
    """What memory holds for a query, ready for a prompt: :meth:`as_prompt`.

    ``notes`` are the context document's items that bear on the query (standing facts first), ``turns`` the best
    entries and their neighbouring turns, deduplicated, in time order; ``hits`` the search's ranked hits (all of
    them, also those left out of the block for the budget). ``tokens`` is the block's estimated size, never above
    ``budget_tokens``. ``pending_vectors``: as :attr:`MemoryHits.pending_vectors` for the search behind it.
    ``memory_id`` is None when the user has no memory (a read creates none): the recall is then empty.
    """

    query: str
    user: str | None
    memory_id: str | None
    notes: tuple[str, ...]
    turns: tuple[RecalledTurn, ...]
    hits: tuple[MemoryHit, ...]
    budget_tokens: int
    tokens: int = 0
    pending_vectors: int = 0

    @property
    def empty(self) -> bool:
        """Nothing in memory bears on the query (no notes, no turns)."""
        return not self.notes and not self.turns

    @property
    def by_meaning_only(self) -> bool:
        """The block's turns were found by meaning alone: no entry shares a word with the query (see
        :attr:`MemoryHit.match`), so they are the nearest turns, maybe unrelated; the block's heading says so."""
        return bool(self.hits) and all(hit.by_meaning for hit in self.hits)

    def as_prompt(self) -> str:
        """The text block to put into a prompt (Markdown; dated lines with speakers; gaps marked ``...``)."""
        return render_recall(self.query, self.notes, self.turns, by_meaning_only=self.by_meaning_only)

    def as_dict(self) -> dict[str, Any]:
        """The recall as plain JSON-ready data (``prompt`` included)."""
        return {
            "query": self.query,
            "user": self.user,
            "memory_id": self.memory_id,
            "notes": list(self.notes),
            "turns": [asdict(turn) for turn in self.turns],
            "hits": [hit.as_dict() for hit in self.hits],
            "budget_tokens": self.budget_tokens,
            "tokens": self.tokens,
            "by_meaning_only": self.by_meaning_only,
            "pending_vectors": self.pending_vectors,
            "prompt": self.as_prompt(),
        }


NOTES_HEADING = "Known facts (from the memory's notes):"
TURNS_HEADING = "From earlier conversations (oldest first; [date] speaker: words):"
#: The turns' heading when no entry shares a word with the query (every hit found by meaning alone).
NEAREST_HEADING = (
    "No earlier turn shares a word with this; the nearest by meaning, which may be unrelated "
    "(oldest first; [date] speaker: words):"
)
GAP = "..."
NOTHING = "Memory holds nothing about this yet."


def render_recall(
    query: str,
    notes: tuple[str, ...] | list[str],
    turns: tuple[RecalledTurn, ...] | list[RecalledTurn],
    *,
    by_meaning_only: bool = False,
) -> str:
    """The prompt text of a recall: a heading, the notes, then the turns; consecutive turns of one thread stay
    together and a gap between excerpts is marked. ``by_meaning_only``: the turns share no word with the query
    (their heading says they may be unrelated)."""
    parts = [f"Long-term memory relevant to: {query}"]
    if notes:
        parts.append(NOTES_HEADING + "\n" + "\n".join(f"- {note}" for note in notes))
    if turns:
        lines = [NEAREST_HEADING if by_meaning_only else TURNS_HEADING]
        for index, turn in enumerate(turns):
            if index and not turn.adjacent:
                lines.append(GAP)
            lines.append(turn.line())
        parts.append("\n".join(lines))
    if not notes and not turns:
        parts.append(NOTHING)
    return "\n\n".join(parts) + "\n"
