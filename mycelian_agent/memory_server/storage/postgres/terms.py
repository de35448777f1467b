"""Each entry's BM25 terms (``text.analysis.EntryTerms``) as the write computed them, kept in its row (``entries.terms``,
migration 6), so a search reads the terms of candidates its process has not seen instead of tokenising their text.

A server starts with an empty entry cache (``storage/entry_cache.py``), and in a large memory most of a search's
candidates are entries no search of this process has scored: each took ~60 µs to analyse (2-3 ms a search in a
100,000-entry memory), decoding the stored form takes a tenth of that. The form is a JSON header
``[length, author, revises]``, a newline, then ``stem frequency`` pairs separated by spaces in the dict's order
(a stem is a word token: no white space; a frequency is its float's ``repr``, ``.0`` left off, so it reads back
exactly): ~250 bytes an entry of the chat benchmark, two thirds of the dict as JSON.
Rows written before migration 6 hold NULL and are analysed from their text as before (no backfill: it would rewrite
every row). Like the term statistics (``term_stats.py``), the stored terms depend on the tokeniser: a change to
``text.analysis`` needs a migration that rewrites or clears them.
"""

from __future__ import annotations

import json

from mycelian_agent.memory_server.text.analysis import EntryTerms

__all__ = ["decode", "encode"]


def _number(value: float) -> str:
    shown = repr(value)
    return shown[:-2] if shown.endswith(".0") else shown


def encode(terms: EntryTerms) -> str:
    """The stored form of ``terms`` (see the module docstring)."""
    header = json.dumps([terms.length, terms.author, terms.revises], ensure_ascii=False, separators=(",", ":"))
    return header + "\n" + " ".join(f"{stem} {_number(tf)}" for stem, tf in terms.frequencies.items())


def decode(stored: str) -> EntryTerms:
    """The :class:`EntryTerms` that :func:`encode` stored."""
    header, _, pairs = stored.partition("\n")
    length, author, revises = json.loads(header)
    parts = pairs.split(" ") if pairs else []
    return EntryTerms(dict(zip(parts[::2], map(float, parts[1::2]), strict=True)), length, author, revises)
