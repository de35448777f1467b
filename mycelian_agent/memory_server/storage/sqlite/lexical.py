"""The SQLite backend's lexical SQL: FTS5 candidates for entries, ranked context snapshots, neighbouring entries.

The entry search takes only its candidates from here (:func:`rank_entries`, FTS5's ``bm25()`` order, cut at the
pool); retrieval scores them (``retrieval/bm25.py``: per-memory statistics, an IDF that never reaches zero).
:func:`search_contexts` ranks the context snapshots with FTS5's own scores.

The FTS5 tables are keyed by memory (``postings.py``): a query's words become the memory's keyed stems, so a search
reads only its own memory's postings, and FTS5's ``bm25()`` counts each term in the memory (its ``N`` is still the
file's row count). Entries are indexed in columns ``raw_entry``, ``summary``, ``labels`` (tag values without digits:
speaker names, topics) and ``dated`` (the entry's date in words, "8 May 2023"), weighted by
``ENTRY_WEIGHTS``.

Any user text is a valid query: the FTS5 expression is built here from stems only, each one quoted, so FTS5
operators and SQL fragments in the query are just words (or nothing).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from mycelian_agent.memory_server.storage.moments import time_bounds
from mycelian_agent.memory_server.storage.query import prune_common
from mycelian_agent.memory_server.storage.rows import Link
from mycelian_agent.memory_server.storage.sqlite.postings import keyed
from mycelian_agent.memory_server.text.analysis import (
    CONTEXT_GAP_DAYS,
    ENTRY_WEIGHTS,
    QUESTION_MARKS,
    query_stems,
)

__all__ = [
    "LARGE_MEMORY_ROWS",
    "UNRANKED",
    "Counts",
    "entries_within",
    "indexed_rows",
    "match_expression",
    "neighbour_links",
    "rank_entries",
    "search_contexts",
    "term_rows",
    "time_bounds",
]

#: The memory's rows and how many of them hold each of some stems: ``counts(stems) -> (rows, {stem: rows})`` (the
#: term statistics, or :func:`term_rows`).
Counts = Callable[[Sequence[str]], tuple[int, Mapping[str, int]]]


def _varint(data: bytes) -> int:
    # SQLite/FTS5 varint: big-endian groups of 7 bits, high bit = more; a 9th byte carries 8 bits.
    value = 0
    for index, byte in enumerate(data[:9]):
        if index == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    raise ValueError("truncated varint")


def indexed_rows(conn: sqlite3.Connection, table: str) -> int:
    """The row count FTS5's bm25 uses for IDF (the table's averages record), or 0 if it cannot be read."""
    # FTS5 keeps it as the first varint of the record with id 1 in <table>_data (part of its stable file format).
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    try:
        return _varint(bytes(row[0])) if row is not None and row[0] else 0
    except ValueError:
        return 0


def match_expression(terms: Sequence[str]) -> str:
    """The FTS5 MATCH text of any of the (keyed) ``terms``, each quoted."""
    return " OR ".join(f'"{term}"' for term in terms)


def term_rows(conn: sqlite3.Connection, table: str, key: int, stems: Sequence[str]) -> dict[str, int]:
    """How many of memory ``key``'s rows of FTS table ``table`` hold each stem (FTS5 counts of the keyed terms:
    they read only the memory's postings)."""
    sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
    return {stem: conn.execute(sql, (f'"{keyed(key, [stem])}"',)).fetchone()[0] for stem in stems}


def _entry_counts(conn: sqlite3.Connection, key: int) -> Counts:
    def counts(stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        row = conn.execute(
            "SELECT m.entries FROM memory_stats m JOIN memory_keys k USING (memory_id) WHERE k.key = ?", (key,)
        ).fetchone()
        return (row[0] if row else 0), term_rows(conn, _ENTRIES.fts, key, stems)

    return counts


def _context_counts(conn: sqlite3.Connection, key: int, memory_id: str) -> Counts:
    def counts(stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        rows = conn.execute("SELECT count(*) FROM contexts WHERE memory_id = ?", (memory_id,)).fetchone()[0]
        return rows, term_rows(conn, _CONTEXTS.fts, key, stems)

    return counts


@dataclass(frozen=True)
class _Index:
    fts: str
    table: str
    weights: tuple[float, ...]


_ENTRIES = _Index("entries_fts", "entries", ENTRY_WEIGHTS)
_CONTEXTS = _Index("contexts_fts", "contexts", (1.0,))
#: The score of a candidate returned without ranking (:func:`rank_entries`).
UNRANKED = 1.0

#: FTS5 bm25()'s term-frequency saturation: a term adds less than ``idf * (k1 + 1)`` to any row's score.
_FTS5_K1 = 1.2
#: A query is ranked by parts (:class:`_Query`) when its terms have at least this many postings in the memory and
#: it has at most :data:`_PARTS_MAX_TERMS` terms (2**n - 1 parts at most).
_PARTS_MIN_POSTINGS = 2000
_PARTS_MAX_TERMS = 4
#: In a memory of at least this many rows, terms in half of them or more (BM25's IDF in the memory below ln 2) are
#: left out of the candidate query while the others find enough rows: an approximation (a row holding only such
#: terms is not a candidate) that keeps a large memory's search from scoring most of its rows. Smaller memories
#: (every LoCoMo conversation) are searched exactly.
LARGE_MEMORY_ROWS = 20_000

Ranker = Callable[[str, int], list[tuple[int, float]]]


@dataclass(frozen=True)
class _Query:
    """One FTS5 query of a search: any of the keyed ``terms``; with ``bounds`` (each term's upper bound on its
    share of FTS5's bm25 score) it is ranked by parts.

    FTS5's bm25 of a row depends only on the query's phrases and the row, not on how the query combines them, and
    a phrase the row lacks adds exactly 0.0. So the rows holding exactly the terms ``S`` (``AND(S) NOT OR(others)``)
    get from a query of that shape the very scores, bit for bit, that the whole OR query gives them; and none of
    them scores above the sum of the bounds of ``S``. Parts are ranked from the highest such sum down, and the
    rest is skipped once a part's sum is below the ``limit``-th score found: the same top rows, without scoring
    every row that holds only a common term (in a memory of 100,000 entries most of a query's matches)."""

    terms: tuple[str, ...]
    bounds: tuple[float, ...] | None = None

    def expression(self) -> str:
        """The whole query's MATCH text."""
        return match_expression(self.terms)

    def _part(self, subset: Sequence[str]) -> str:
        others = [term for term in self.terms if term not in subset]
        body = " AND ".join(f'"{term}"' for term in subset)
        return f"({body}) NOT ({match_expression(others)})" if others else body

    def top(self, run: Ranker, limit: int) -> list[tuple[int, float]]:
        """The first ``limit`` ``(rowid, rank)`` rows of the whole query, ordered by ``rank, rowid DESC``, where
        ``run(expression, limit)`` gives them for one MATCH expression."""
        if self.bounds is None:
            return list(run(self.expression(), limit))
        bound = dict(zip(self.terms, self.bounds, strict=True))
        parts = sorted(
            (
                (sum(bound[t] for t in subset), subset)
                for size in range(len(self.terms), 0, -1)
                for subset in combinations(self.terms, size)
            ),
            key=lambda part: -part[0],
        )
        found: list[tuple[int, float]] = []
        for most, subset in parts:
            # (1e-9: the bound is summed here, the scores in C; a part is skipped only when clearly below.)
            if len(found) >= limit and most * (1 + 1e-9) < -found[limit - 1][1]:
                break
            found = sorted([*found, *run(self._part(subset), limit)], key=lambda hit: (hit[1], -hit[0]))[:limit]
        return found


def _fts5_idf(rows: int, containing: int) -> float:
    # FTS5 bm25()'s IDF (fts5_aux.c), clamped the same way.
    value = math.log((rows - containing + 0.5) / (containing + 0.5))
    return value if value > 0.0 else 1e-6


def _query(key: int, stems: Sequence[str], found: Mapping[str, int], total: int) -> _Query:
    """The FTS5 query of memory ``key``'s ``stems`` (each in ``found[stem]`` of its rows, ``total`` rows in the
    table), ranked by parts when they match many rows (:class:`_Query`)."""
    terms = tuple(keyed(key, [stem]) for stem in stems)
    if not 2 <= len(stems) <= _PARTS_MAX_TERMS or sum(found[s] for s in stems) < _PARTS_MIN_POSTINGS:
        return _Query(terms)
    return _Query(terms, tuple(_fts5_idf(total, found[s]) * (_FTS5_K1 + 1.0) for s in stems))


def _rank(
    conn: sqlite3.Connection,
    index: _Index,
    query: _Query,
    limit: int,
    where: str,
    params: Sequence[str],
    ordered: bool = True,
) -> list[tuple[int, float]]:
    # Every row of a keyed query is the memory's: the join to the rows is needed only for time bounds.
    source = f"{index.fts} CROSS JOIN {index.table} t ON t.seq = {index.fts}.rowid" if where else index.fts
    if not ordered:
        # When the memory has no more matches than places, all of them are the answer: no bm25().
        # (CROSS JOIN: the matches drive; SQLite would otherwise walk the rows and re-run the match per row.)
        sql = f"SELECT {index.fts}.rowid FROM {source} WHERE {index.fts} MATCH ?{where} LIMIT ?"
        found = conn.execute(sql, [query.expression(), *params, limit + 1]).fetchall()
        if len(found) <= limit:
            return [(seq, UNRANKED) for seq in sorted((row[0] for row in found), reverse=True)]
    weights = ", ".join(str(w) for w in index.weights)
    sql = (
        f"SELECT {index.fts}.rowid, bm25({index.fts}, {weights}) AS rank FROM {source} "
        f"WHERE {index.fts} MATCH ?{where} ORDER BY rank, {index.fts}.rowid DESC LIMIT ?"
    )
    ranked = query.top(lambda expr, k: conn.execute(sql, [expr, *params, k]).fetchall(), limit)
    return [(seq, -float(rank)) for seq, rank in ranked]


def _search(
    conn: sqlite3.Connection,
    index: _Index,
    key: int | None,
    terms: Sequence[str],
    limit: int,
    counts: Counts,
    where: str = "",
    params: Sequence[str] = (),
    ordered: bool = True,
) -> list[tuple[int, float]]:
    """The best ``limit`` rows of memory ``key`` for the query words ``terms``, as ``(seq, score)``."""
    stems = list(dict.fromkeys(query_stems(terms)))
    if key is None or not stems or limit <= 0:
        return []
    rows, found = counts(stems)
    live = [stem for stem in stems if found.get(stem)]  # a stem in none of the memory's rows matches nothing
    if not live:
        return []
    total = indexed_rows(conn, index.fts)
    # Terms in half of the table's rows or more get FTS5's clamped IDF: they need not make rows candidates (exact).
    tries = [prune_common(live, found.__getitem__, total), live]
    if rows >= LARGE_MEMORY_ROWS:
        tries.insert(0, prune_common(tries[0], found.__getitem__, rows))
    hits: list[tuple[int, float]] = []
    for number, chosen in enumerate(tries):
        if number and chosen == tries[number - 1]:
            continue
        hits = _rank(conn, index, _query(key, chosen, found, total), limit, where, params, ordered)
        if len(hits) >= limit:
            break
    return hits


def _rows(
    conn: sqlite3.Connection, table: str, memory_id: str, ranked: Sequence[tuple[int, float]]
) -> list[tuple[sqlite3.Row, float]]:
    """The rows of ranked ``(seq, score)`` pairs, in order."""
    if not ranked:
        return []
    marks = ",".join("?" * len(ranked))
    sql = f"SELECT * FROM {table} WHERE memory_id = ? AND seq IN ({marks})"
    rows = {row["seq"]: row for row in conn.execute(sql, [memory_id, *(seq for seq, _ in ranked)])}
    return [(rows[seq], score) for seq, score in ranked if seq in rows]


def rank_entries(
    conn: sqlite3.Connection,
    key: int | None,
    terms: Sequence[str],
    limit: int,
    where: str,
    params: Sequence[str],
    counts: Counts | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` best entries of the memory whose index key is ``key`` (None: no such memory) by FTS5's BM25
    within ``where`` (:func:`time_bounds`), as ``(seq, score > 0)``, in no particular order: when the memory has no
    more matches than ``limit`` they are all returned unranked, with score :data:`UNRANKED`. ``counts``: the
    memory's rows and those holding each stem, if the caller has them (the term statistics); else they are read."""
    if key is None:
        return []
    counts = counts or _entry_counts(conn, key)
    return _search(conn, _ENTRIES, key, terms, limit, counts, where, params, ordered=False)


def neighbour_links(conn: sqlite3.Connection, memory_id: str, seqs: Sequence[int]) -> list[Link]:
    """Each of the memory's entries ``seqs`` with its previous and next entry in the memory within
    ``CONTEXT_GAP_DAYS`` (the same conversation) and whether it asks something (``QUESTION_MARKS`` in its text)."""
    if not seqs:
        return []
    marks = ",".join("?" * len(seqs))
    moment = "julianday(COALESCE({0}.conversation_time, {0}.creation_time))"
    near = f"abs({moment.format('x')} - {moment.format('e')}) <= {CONTEXT_GAP_DAYS!r}"
    asks = " OR ".join("instr(e.raw_entry, ?) > 0" for _ in QUESTION_MARKS)
    rows = conn.execute(
        f"SELECT e.seq, (SELECT x.seq FROM entries x WHERE x.seq = (SELECT max(p.seq) FROM entries p "
        f"WHERE p.memory_id = e.memory_id AND p.seq < e.seq) AND {near}), "
        f"(SELECT x.seq FROM entries x WHERE x.seq = (SELECT min(n.seq) FROM entries n "
        f"WHERE n.memory_id = e.memory_id AND n.seq > e.seq) AND {near}), {asks} "
        f"FROM entries e WHERE e.seq IN ({marks}) AND e.memory_id = ?",
        [*QUESTION_MARKS, *seqs, memory_id],
    ).fetchall()
    return [(seq, previous, following, bool(asking)) for seq, previous, following, asking in rows]


def entries_within(
    conn: sqlite3.Connection, memory_id: str, seqs: Sequence[int], after: str | None, before: str | None
) -> set[int]:
    """Those of the memory's entries ``seqs`` whose moment lies inside the exclusive bounds."""
    if not seqs:
        return set()
    where, params = time_bounds(after, before)
    marks = ",".join("?" * len(seqs))
    sql = f"SELECT t.seq FROM entries t WHERE t.memory_id = ? AND t.seq IN ({marks}){where}"
    return {seq for (seq,) in conn.execute(sql, [memory_id, *seqs, *params])}


def search_contexts(
    conn: sqlite3.Connection, key: int | None, memory_id: str, terms: Sequence[str], limit: int
) -> list[tuple[sqlite3.Row, float]]:
    """Context snapshots of one memory (index key ``key``) ranked by BM25 against ``terms``, best first, as
    ``(row, score)``."""
    if key is None:
        return []
    return _rows(
        conn, "contexts", memory_id, _search(conn, _CONTEXTS, key, terms, limit, _context_counts(conn, key, memory_id))
    )
