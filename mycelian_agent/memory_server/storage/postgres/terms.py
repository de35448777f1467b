"""Each entry's BM25 terms (``text.analysis.EntryTerms``) as its write computed them, kept in its row
(``entries.terms``, migration 6), so a search reads the terms of candidates its process has not seen instead of
tokenising their text.

A server starts with an empty entry cache (``storage/entry_cache.py``), and in a large memory most of a search's
candidates are entries no search of this process has scored (~40 a search in a 100,000-entry memory): decoding
the stored form takes about half the time of analysing the text (15 against 30-38 µs an entry), and the read
returns the short form instead of the texts (in process, a fresh store: 0.3-1.1 ms less a search, p50 of 200, four
query sets). The form is a JSON header
``[length, author, revises]``, a newline, then ``stem frequency`` pairs separated by spaces in the dict's order
(a stem is a word token: no white space; a frequency is its float's ``repr``, ``.0`` left off, so it reads back
exactly): ~250 bytes an entry of the chat benchmark, two thirds of the dict as JSON.
Rows written before migration 6 hold NULL and are analysed from their text as before (no backfill: it would rewrite
every row). Like the term statistics (``term_stats.py``), the stored terms depend on the tokeniser: a change to
``text.analysis`` needs a migration that rewrites or clears them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mycelian_agent.memory_server.text.analysis import EntryTerms, entry_terms

__all__ = ["decode", "encode", "read"]

# An older row's fields, read only where it has no stored terms.
_TEXT = ", ".join(
    f"CASE WHEN terms IS NULL THEN {column} END AS {column}"
    for column in ("raw_entry", "summary", "tags", "conversation_time", "creation_time")
)


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


def read(conn: Any, memory_id: str, seqs: Sequence[int]) -> dict[int, EntryTerms]:
    """The terms of the memory's entries ``seqs`` (seqs not in the memory left out), by seq: as stored, else (a row
    written before migration 6) analysed from its text. By key, then the memory checked behind a fence, as
    ``PostgresStore.entry_rows`` reads (a memory loaded since the last ``ANALYZE`` was planned as one row)."""
    rows = conn.execute(
        f"SELECT * FROM (SELECT seq, memory_id, terms, {_TEXT} FROM entries WHERE seq = ANY(%s) OFFSET 0) e "
        "WHERE e.memory_id = %s",
        (list(seqs), memory_id),
    ).fetchall()
    return {
        int(row["seq"]): decode(row["terms"])
        if row["terms"] is not None
        else entry_terms(
            row["raw_entry"], row["summary"], row["tags"], row["conversation_time"] or row["creation_time"]
        )
        for row in rows
    }
