"""Per-memory term statistics, kept in the database by each write: what BM25 and the query feedback weigh with.

BM25 (``bm25.py``) needs a memory's entry count ``N``, the entries containing each index stem ``n(t)`` and the
tokens over all entries (for the mean length); the query feedback (``feedback.py``) needs the entries containing
each :func:`~mycelian_agent.memory_server.text.analysis.feedback_words` word. Both backends keep them in two tables,
written in the same transaction as the entries they count, so a search reads only the rows of its own terms:

- ``memory_stats (memory_id, entries, tokens)``: one row per memory holding entries;
- ``term_stats (memory_id, kind, term, entries)``: one row per (memory, :data:`STEM` or :data:`WORD`, term) with
  ``entries > 0``, primary key ``(memory_id, kind, term)``.

A write adds each inserted entry's :class:`EntryCounts` to the transaction's :class:`Delta` (an idempotent retry
inserts nothing, so counts nothing); a deleted entry is subtracted; the delta is written as one upsert per term
just before the transaction commits (a bulk ``add_entries`` writes each of its terms once). Rows that reach zero
are deleted, and a deleted memory's rows go with it (foreign keys, ``ON DELETE CASCADE``), so the tables always
equal :func:`recount` of the entries: tests compare the two.

The counts depend on the tokenisers (``text.analysis.entry_terms``, ``feedback_words``): a change to either needs a
migration that recounts (the backfill of SQLite migration 4 / PostgreSQL migration 3 is :func:`recount`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from mycelian_agent.memory_server.text import analysis
from mycelian_agent.memory_server.text.analysis import EntryTerms, feedback_words

__all__ = ["STEM", "WORD", "Delta", "EntryCounts", "MemoryDelta", "TermCounts", "entry_counts", "recount"]

#: ``term_stats.kind`` of a BM25 index stem (``analysis.entry_terms``: every field, Porter-stemmed).
STEM = 0
#: ``term_stats.kind`` of a query-feedback word (``feedback.feedback_words`` of summary and raw entry).
WORD = 1


class EntryCounts(NamedTuple):
    """What one entry adds to its memory's statistics: its BM25 token count, distinct stems and feedback words;
    its BM25 terms (for the search's entry cache) and its fields' stems (for a backend's own index: the write
    tokenised the entry once)."""

    tokens: int
    stems: frozenset[str]
    words: frozenset[str]
    terms: EntryTerms
    fields: tuple[list[str], list[str], list[str], list[str]]


class TermCounts(NamedTuple):
    """A memory's statistics for some terms: entries, tokens over them, entries containing each stem / word (0 for
    a term in none)."""

    entries: int
    tokens: int
    stems: dict[str, int]
    words: dict[str, int]


def entry_counts(raw_entry: str, summary: str, tags: Mapping[str, str] | str, moment: str | None) -> EntryCounts:
    """The :class:`EntryCounts` of an entry from its stored fields (``moment``: conversation time, else creation
    time), exactly as search would see it."""
    values = json.loads(tags) if isinstance(tags, str) else tags
    fields = analysis.entry_fields(raw_entry, summary, values, moment)
    terms = analysis.entry_terms(raw_entry, summary, values, moment, fields=fields)
    words = frozenset(feedback_words(f"{summary} {raw_entry}"))
    return EntryCounts(terms.length, frozenset(terms.frequencies), words, terms, fields)


@dataclass
class MemoryDelta:
    """The change to one memory's statistics: entries, tokens and per-``(kind, term)`` entry counts."""

    entries: int = 0
    tokens: int = 0
    terms: Counter[tuple[int, str]] = field(default_factory=Counter)

    def add(self, counts: EntryCounts, sign: int = 1) -> None:
        """Count one entry in (``sign`` 1) or out (-1)."""
        self.entries += sign
        self.tokens += sign * counts.tokens
        terms = self.terms
        for stem in counts.stems:
            terms[(STEM, stem)] += sign
        for word in counts.words:
            terms[(WORD, word)] += sign

    def rows(self) -> list[tuple[int, str, int]]:
        """``(kind, term, change)`` of every term that changes, sorted (a stable lock order)."""
        return sorted((kind, term, n) for (kind, term), n in self.terms.items() if n)


class Delta:
    """The statistics changes of one write transaction, by memory (see the module docstring); and the BM25 terms
    of the entries it inserted (``written``: ``(seq, terms)``, for the entry cache once the transaction commits)."""

    def __init__(self) -> None:
        self.memories: dict[str, MemoryDelta] = {}
        self.written: list[tuple[int, EntryTerms]] = []

    def add(self, memory_id: str, counts: EntryCounts, sign: int = 1, seq: int | None = None) -> None:
        """Count one entry of ``memory_id`` in (``sign`` 1; ``seq``: the inserted entry's) or out (-1)."""
        delta = self.memories.get(memory_id)
        if delta is None:
            delta = self.memories[memory_id] = MemoryDelta()
        delta.add(counts, sign)
        if seq is not None and sign > 0:
            self.written.append((seq, counts.terms))

    def drop(self, memory_id: str) -> None:
        """Forget the changes to a memory deleted in this transaction (its rows go with it)."""
        self.memories.pop(memory_id, None)
        self.written.clear()  # (only the entry cache loses: the deleted memory's seqs are never candidates)

    def take(self) -> list[tuple[str, MemoryDelta]]:
        """The memories' changes, sorted by memory, and forget them (``written`` stays)."""
        taken = [(memory_id, self.memories[memory_id]) for memory_id in sorted(self.memories)]
        self.memories = {}
        return [(memory_id, delta) for memory_id, delta in taken if delta.entries or delta.rows()]


def recount(entries: Iterable[tuple[str, str, Mapping[str, str] | str, str | None]]) -> MemoryDelta:
    """A memory's statistics counted from scratch from its entries' ``(raw_entry, summary, tags, moment)``: what
    the tables must hold (the migrations' backfill; tests)."""
    total = MemoryDelta()
    for raw_entry, summary, tags, moment in entries:
        total.add(entry_counts(raw_entry, summary, tags, moment))
    return total
