"""Each entry's BM25 terms (``text.analysis.EntryTerms``) as the write computed them, kept in its row (``entries.terms``,
migration 6), so a search reads the terms of candidates its process has not seen instead of tokenising their text.

A server starts with an empty entry cache (``storage/entry_cache.py``), and in a large memory most of a search's
candidates are entries no search of this process has scored: each took ~60 µs to analyse (2-3 ms a search in a
100,000-entry memory), decoding the stored form takes a tenth of that. The form is compact JSON,
``[length, author, revises, {stem: weighted frequency}]``: floats round-trip exactly, and the dict keeps its order.
Rows written before migration 6 hold NULL and are analysed from their text as before (no backfill: it would rewrite
every row). Like the term statistics (``term_stats.py``), the stored terms depend on the tokeniser: a change to
``text.analysis`` needs a migration that rewrites or clears them.
"""

from __future__ import annotations

import json

from mycelian_agent.memory_server.text.analysis import EntryTerms

__all__ = ["decode", "encode"]


def encode(terms: EntryTerms) -> str:
    """The stored form of ``terms`` (see the module docstring)."""
    return json.dumps([terms.length, terms.author, terms.revises, terms.frequencies],
                      ensure_ascii=False, separators=(",", ":"))


def decode(stored: str) -> EntryTerms:
    """The :class:`EntryTerms` that :func:`encode` stored."""
    length, author, revises, frequencies = json.loads(stored)
    return EntryTerms(frequencies, length, author, revises)
