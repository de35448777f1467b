"""The SQLite backend's lexical SQL: FTS5 candidates for entries, ranked context snapshots, neighbouring entries.

The entry search takes only its candidates from here (:func:`rank_entries`, FTS5's ``bm25()`` order, cut at the
pool); retrieval scores them (``retrieval/bm25.py``: per-memory statistics, an IDF that never reaches zero).
:func:`search_contexts` ranks the context snapshots with FTS5's own scores.

Entries are indexed (migration 3) with the porter stemmer over ``unicode61 remove_diacritics 2``, in columns
``raw_entry``, ``summary``, ``labels`` (tag values without digits: speaker names, topics) and ``dated`` (the entry's
date in words, "8 May 2023"), weighted by :data:`ENTRY_WEIGHTS`.

Any user text is a valid query: the FTS5 expression is built here from word tokens only, each one quoted, so FTS5
operators and SQL fragments in the query are just words (or nothing). Both FTS tables carry a ``mkey`` column —
one token naming the memory — so a search touches only that memory's postings; the join on ``memory_id``
re-checks exactly.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from mycelian_agent.memory_server.storage.moments import time_bounds
from mycelian_agent.memory_server.storage.query import prune_common
from mycelian_agent.memory_server.storage.rows import Link
from mycelian_agent.memory_server.text.analysis import CONTEXT_GAP_DAYS, ENTRY_WEIGHTS, QUESTION_MARKS

__all__ = [
    "ENTRY_WEIGHTS",
    "UNRANKED",
    "PlanCounts",
    "entries_within",
    "indexed_rows",
    "match_expression",
    "memory_key",
    "neighbour_links",
    "prune_common_terms",
    "rank_entries",
    "search_contexts",
    "time_bounds",
]

def memory_key(memory_id: str) -> str:
    """The single FTS token naming a memory; must match the ``'m' || replace(memory_id, '-', '')`` triggers."""
    return "m" + memory_id.replace("-", "")


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


def _count(conn: sqlite3.Connection, table: str, expression: str, counts: PlanCounts | None = None) -> int:
    if counts is not None:
        return counts.count(conn, table, expression)
    return conn.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (expression,)).fetchone()[0]


class PlanCounts:
    """The match counts that plan a search (rows of the memory's key, rows of each query term), kept until the
    database changes, for one connection: a search of an unchanged database repeats none of them (~5 FTS5 counts,
    ~0.5 ms at 10,000 entries). Exact: any change by this connection (``total_changes``) or commit by another
    (``PRAGMA data_version``) drops them all."""

    #: Counts kept at most (all dropped past it).
    CAPACITY = 10_000

    def __init__(self) -> None:
        self._version: tuple[int, int] | None = None
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def count(self, conn: sqlite3.Connection, table: str, expression: str) -> int:
        version = (conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0])
        key = (table, expression)
        with self._lock:
            if version != self._version:
                self._version, self._counts = version, {}
            found = self._counts.get(key)
        if found is None:
            found = _count(conn, table, expression)
            with self._lock:
                if self._version == version:
                    if len(self._counts) >= self.CAPACITY:
                        self._counts.clear()
                    self._counts[key] = found
        return found


def prune_common_terms(
    conn: sqlite3.Connection, table: str, terms: Sequence[str], total: int, counts: PlanCounts | None = None
) -> list[str]:
    """``storage.query.prune_common`` with FTS5's counts: the terms in fewer than half of the ``total`` indexed
    rows (FTS5's bm25 clamps the IDF of the others to 1e-6, so they cannot change the order of rows that match
    another term)."""
    return prune_common(terms, lambda term: _count(conn, table, f'"{term}"', counts), total)


def match_expression(memory_id: str | None, terms: Sequence[str], columns: str) -> str:
    """The FTS5 MATCH text: any of ``terms`` in ``columns`` (e.g. ``"raw_entry summary"``), AND the memory's key
    unless ``memory_id`` is None."""
    quoted = " OR ".join(f'"{term}"' for term in terms)
    alternatives = f"{{{columns}}} : ({quoted})"
    return alternatives if memory_id is None else f'mkey : "{memory_key(memory_id)}" AND {alternatives}'


@dataclass(frozen=True)
class _Index:
    fts: str
    table: str
    columns: str
    weights: tuple[float, ...]


_ENTRIES = _Index("entries_fts", "entries", "raw_entry summary labels dated", ENTRY_WEIGHTS)
_CONTEXTS = _Index("contexts_fts", "contexts", "content", (0.0, 1.0))
#: The score of a candidate returned without ranking (:func:`rank_entries`).
UNRANKED = 1.0
# Below this many indexed rows every query is cheap: skip the planning counts.
_PLAN_MIN_ROWS = 1000


#: FTS5 bm25()'s term-frequency saturation: a term adds less than ``idf * (k1 + 1)`` to any row's score.
_FTS5_K1 = 1.2
#: A memory that fills most of the file is ranked by parts (:class:`_Query`) when its query's terms have at least
#: this many postings and at most :data:`_PARTS_MAX_TERMS` terms (2**n - 1 parts at most).
_PARTS_MIN_POSTINGS = 2000
_PARTS_MAX_TERMS = 4

Ranker = Callable[[str, int], list[tuple[int, float]]]


@dataclass(frozen=True)
class _Query:
    """One FTS5 query of a search: the terms (any of them, in ``columns``), ANDed with the memory's ``key`` unless
    None; with ``bounds`` (each term's upper bound on its share of FTS5's bm25 score) it is ranked by parts.

    FTS5's bm25 of a row depends only on the query's phrases and the row, not on how the query combines them, and
    a phrase the row lacks adds exactly 0.0. So the rows holding exactly the terms ``S`` (``AND(S) NOT OR(others)``)
    get from a query of that shape the very scores, bit for bit, that the whole OR query gives them; and none of
    them scores above the sum of the bounds of ``S``. Parts are ranked from the highest such sum down, and the
    rest is skipped once a part's sum is below the ``limit``-th score found: the same top rows, without scoring
    every row that holds only a common term (in a memory of 100,000 entries most of a query's matches)."""

    key: str | None
    terms: tuple[str, ...]
    columns: str
    bounds: tuple[float, ...] | None = None

    def expression(self) -> str:
        """The whole query's MATCH text."""
        return match_expression(self.key, self.terms, self.columns)

    def _part(self, subset: Sequence[str]) -> str:
        others = [term for term in self.terms if term not in subset]
        body = f"{{{self.columns}}} : (" + " AND ".join(f'"{term}"' for term in subset) + ")"
        if others:
            body = f"({body}) NOT ({{{self.columns}}} : (" + " OR ".join(f'"{term}"' for term in others) + "))"
        return body if self.key is None else f'mkey : "{memory_key(self.key)}" AND ({body})'

    def top(self, run: Ranker, limit: int) -> list[tuple[int, float]]:
        """The first ``limit`` ``(rowid, rank)`` rows of the whole query, ordered by ``rank, rowid DESC``, where
        ``run(expression, limit)`` gives them for one MATCH expression."""
        if self.bounds is None:
            return list(run(self.expression(), limit))
        bound = dict(zip(self.terms, self.bounds, strict=True))
        parts = sorted(
            ((sum(bound[t] for t in subset), subset)
             for size in range(len(self.terms), 0, -1) for subset in combinations(self.terms, size)),
            key=lambda part: -part[0])
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


def _query(
    conn: sqlite3.Connection, index: _Index, key: str | None, terms: Sequence[str], total: int,
    counts: PlanCounts | None,
) -> _Query:
    """The FTS5 query of ``terms``, ranked by parts when the memory is most of the file (``key`` None) and the
    terms match many rows (:class:`_Query`)."""
    query = _Query(key, tuple(terms), index.columns)
    if key is not None or total < _PLAN_MIN_ROWS or not 2 <= len(terms) <= 3 * _PARTS_MAX_TERMS:
        return query
    found = {term: _count(conn, index.fts, f'{{{index.columns}}} : "{term}"', counts) for term in terms}
    # A term in no row adds exactly 0.0 to every score and matches nothing: leaving it out changes no result.
    live = tuple(term for term in terms if found[term])
    if not 2 <= len(live) <= _PARTS_MAX_TERMS or sum(found[t] for t in live) < _PARTS_MIN_POSTINGS:
        return query
    bounds = tuple(_fts5_idf(total, found[term]) * (_FTS5_K1 + 1.0) for term in live)
    return _Query(key, live, index.columns, bounds)


def _rank(
    conn: sqlite3.Connection,
    index: _Index,
    memory_id: str,
    query: _Query,
    limit: int,
    by_key: bool,
    where: str,
    params: Sequence[str],
    ordered: bool = True,
) -> list[tuple[int, float]]:
    if not ordered:
        # When the memory has no more matches than places, all of them are the answer: no bm25(), whose IDF reads
        # every posting of every query term in the whole file (most of a search's time in a large file).
        # CROSS JOIN: the matches drive (SQLite would otherwise walk the memory's rows and re-run the match per row).
        sql = (f"SELECT t.seq FROM {index.fts} CROSS JOIN {index.table} t ON t.seq = {index.fts}.rowid "
               f"WHERE {index.fts} MATCH ? AND t.memory_id = ?{where} LIMIT ?")
        found = conn.execute(sql, [query.expression(), memory_id, *params, limit + 1]).fetchall()
        if len(found) <= limit:
            return [(seq, UNRANKED) for seq in sorted((row[0] for row in found), reverse=True)]
    weights = ", ".join(str(w) for w in index.weights)
    if not where:
        # Rank inside FTS5 alone, then check only the winners' memory (from the (memory_id, seq) index; rows are
        # read later, for the final list only): joining every match to its row costs more than the ranking.
        # Without the key filter other memories' rows may take places, so fetch extra and fall back to the exact
        # join below if too few of this memory's rows remain.
        depth = limit if by_key else limit * 4
        sql = (f"SELECT rowid, bm25({index.fts}, {weights}) AS rank FROM {index.fts} WHERE {index.fts} MATCH ? "
               "ORDER BY rank, rowid DESC LIMIT ?")
        ranked = query.top(lambda expr, k: conn.execute(sql, (expr, k)).fetchall(), depth)
        mine: set[int] = set()
        if ranked:
            marks = ",".join("?" * len(ranked))
            sql = f"SELECT seq FROM {index.table} WHERE memory_id = ? AND seq IN ({marks})"
            mine = {seq for (seq,) in conn.execute(sql, [memory_id, *(r[0] for r in ranked)])}
        hits = [(seq, -float(rank)) for seq, rank in ranked if seq in mine][:limit]
        if len(hits) == limit or len(ranked) < depth:
            return hits
    sql = (
        f"SELECT t.seq, bm25({index.fts}, {weights}) AS rank FROM {index.fts} "
        f"JOIN {index.table} t ON t.seq = {index.fts}.rowid "
        f"WHERE {index.fts} MATCH ? AND t.memory_id = ?{where} ORDER BY rank, t.seq DESC LIMIT ?"
    )
    ranked = query.top(lambda expr, k: conn.execute(sql, [expr, memory_id, *params, k]).fetchall(), limit)
    return [(seq, -float(rank)) for seq, rank in ranked]


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


def _search(
    conn: sqlite3.Connection,
    index: _Index,
    memory_id: str,
    terms: Sequence[str],
    limit: int,
    where: str = "",
    params: Sequence[str] = (),
    counts: PlanCounts | None = None,
    ordered: bool = True,
) -> list[tuple[int, float]]:
    if not terms or limit <= 0:
        return []
    total = indexed_rows(conn, index.fts)
    by_key, pruned = True, list(terms)
    if total >= _PLAN_MIN_ROWS:
        # The memory-key filter pays off when the memory is a minority of the index; when it holds most rows,
        # ANDing its key only adds work (the memory_id check on rows stays exact either way).
        by_key = 2 * _count(conn, index.fts, f'mkey : "{memory_key(memory_id)}"', counts) < total
        pruned = prune_common_terms(conn, index.fts, terms, total, counts)
    key = memory_id if by_key else None
    query = _query(conn, index, key, pruned, total, counts)
    hits = _rank(conn, index, memory_id, query, limit, by_key, where, params, ordered)
    if len(hits) < limit and pruned != list(terms):
        query = _query(conn, index, key, terms, total, counts)
        hits = _rank(conn, index, memory_id, query, limit, by_key, where, params, ordered)
    return hits


def rank_entries(
    conn: sqlite3.Connection, memory_id: str, terms: Sequence[str], limit: int, where: str, params: Sequence[str],
    counts: PlanCounts | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` best of one memory's entries by FTS5's BM25 within ``where`` (:func:`time_bounds`), as
    ``(seq, score > 0)``, in no particular order: when the memory has no more matches than ``limit`` they are all
    returned unranked, with score :data:`UNRANKED` (``counts``: the connection's :class:`PlanCounts`, if it keeps
    them)."""
    return _search(conn, _ENTRIES, memory_id, terms, limit, where, params, counts, ordered=False)


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
    conn: sqlite3.Connection, memory_id: str, terms: Sequence[str], limit: int, counts: PlanCounts | None = None
) -> list[tuple[sqlite3.Row, float]]:
    """Context snapshots of one memory ranked by BM25 against ``terms``, best first, as ``(row, score)``."""
    return _rows(conn, "contexts", memory_id, _search(conn, _CONTEXTS, memory_id, terms, limit, counts=counts))

