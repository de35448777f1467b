"""The PostgreSQL backend's lexical SQL: ``tsvector`` candidates for entries, ranked context snapshots, neighbours.

Ranking (:func:`rank`): the ``tsvector`` of an entry carries the summary (weight A), the text and the labels (B) and
the date in words (C), mapped from ``ENTRY_WEIGHTS``. Each query lexeme ``t`` scores ``idf(t) * ts_rank(weights,
tsv, t, 1)`` summed over the lexemes: BM25's IDF (from the memory's document frequencies) times PostgreSQL's
saturating, length-normalised term weight — the shape of BM25, so the neighbour scoring and cut-offs tuned on SQLite
carry over (recall parity: tests/test_postgres.py). The frequencies come from one call, :func:`frequencies`: BM25's
own statistics of the memory where a query word is one Porter stem and one lexeme (no query counts them), else
counts in the index. The GIN index on ``(memory_id, tsv)`` (``btree_gin``; migrations.py) reads only the memory's
postings. ``ts_rank`` reads each scored row from the heap, so a query matching more than :data:`EXACT_ROWS` rows (a
large memory's common words) ranks a bounded part of them (:func:`rank_bounded`): every LoCoMo-sized memory is
ranked whole.

Round trips: a search's reads are each one statement where they can be (a search is ~16 statements, each ~0.1 ms of
round trip before any work): the pruned and the unpruned exact ranking together, a memory's context snapshots ranked
and read with the newest one (:func:`contexts`), the links of the hits and of their neighbours
(:func:`neighbourhood`). Statements matching lexemes in a large memory are never prepared (:func:`_prepare`).

Every function takes a psycopg connection (rows as dicts) from the store; :class:`Lexicon` is the store's cache of
query terms' lexemes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Sequence
from typing import Any

from mycelian_agent.memory_server.storage.moments import moment, time_bounds
from mycelian_agent.memory_server.storage.query import prune_common
from mycelian_agent.memory_server.storage.rows import Link
from mycelian_agent.memory_server.text.analysis import CONTEXT_GAP_DAYS, ENTRY_WEIGHTS, QUESTION_MARKS, tokens

__all__ = [
    "BOUNDED_ROWS",
    "EXACT_ROWS",
    "NEWEST_ROWS",
    "Known",
    "Lexicon",
    "contexts",
    "entries_within",
    "frequencies",
    "known",
    "neighbour_links",
    "neighbourhood",
    "rank",
    "rank_bounded",
]

# ts_rank's weights are {D, C, B, A}, each at most 1: ENTRY_WEIGHTS scaled by the summary's (the largest).
_TOP = ENTRY_WEIGHTS[1]
_RANK_WEIGHTS = f"{{0.1, {ENTRY_WEIGHTS[3] / _TOP:.4f}, {ENTRY_WEIGHTS[0] / _TOP:.4f}, 1.0}}"
#: A ranking whose candidate lexemes match at most this many of the memory's rows scores every one of them (exact:
#: every LoCoMo-sized memory); above, :func:`rank_bounded` scores a bounded part.
EXACT_ROWS = 2000
#: The bounded ranking's parts: rows holding the rarest lexemes scored at most (every row of as many of the
#: rarest as fit, else rows holding the two rarest), and the matches among the newest rows aimed at (reading at
#: most NEWEST_ROWS rows).
BOUNDED_ROWS = 400
NEWEST_ROWS = 2000
# Query terms whose lexemes a store keeps (cleared when full: a few hundred KB).
_CACHED_TERMS = 10_000
#: BM25's entry count and document frequencies, by query term (the terms that are one Porter stem).
Known = tuple[int, dict[str, int]]


def _tsquery(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _prepare(total: int | None) -> bool | None:
    """psycopg's ``prepare`` for a statement matching lexemes in a memory of ``total`` rows (None: not known): in a
    large memory never prepared, so each is planned for its own lexemes and memory (a prepared statement turns
    generic after five runs, planned for an average memory and lexeme: a 100,000-entry memory's bounded ranking
    took 41 ms instead of 4 on such a plan, reading every match of its lexemes); in a small one, psycopg's default
    (prepared from the fifth run: any plan reads only that memory's rows, and planning costs more than the run)."""
    return None if total is not None and total <= EXACT_ROWS else False


def _idf(total: int, found: int) -> float:
    # FTS5's BM25 IDF, clamped the same way: terms in half the documents or more weigh almost nothing.
    return max(1e-6, math.log((total - found + 0.5) / (found + 0.5)))


class Lexicon:
    """Each query term's lexemes (the ``mycelian`` configuration's, as the index holds them), kept per store (the
    configuration is the schema's: a term's lexemes do not change), so a search asks only for new words."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def lexemes(self, conn: Any, terms: Sequence[str]) -> dict[str, list[str]]:
        """``{term: its lexemes}`` for ``terms`` (asking the database only for terms not seen before)."""
        with self._lock:
            found = {term: self._cache[term] for term in terms if term in self._cache}
        missing = [term for term in terms if term not in found]
        if missing:
            rows = conn.execute(
                "SELECT t AS term, tsvector_to_array(to_tsvector('mycelian', t)) AS lexemes "
                "FROM unnest(%s::text[]) AS t",
                (missing,),
            ).fetchall()
            new = {row["term"]: list(row["lexemes"]) for row in rows}
            with self._lock:
                if len(self._cache) + len(new) > _CACHED_TERMS:
                    self._cache.clear()
                self._cache.update(new)
            found.update(new)
        return found


def _counted_frequencies(
    conn: Any, table: str, memory_id: str, lexemes: Sequence[str], total: int | None
) -> tuple[int, dict[str, int]]:
    """``(rows of the memory, {lexeme: rows holding it})`` counted in ``table``. Given ``total``, each count stops
    at half the memory (beyond that the IDF is clamped anyway, and the term is common either way); without, the
    memory's rows are counted in the same statement and the counts are whole (one round trip: the contexts of a
    memory, few rows)."""
    cap = "" if total is None else " LIMIT %s"
    counts = [
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE memory_id = %s AND tsv @@ %s::tsquery{cap}) x) AS d{i}"
        for i in range(len(lexemes))
    ]
    values: list[Any] = [value for lexeme in lexemes for value in (memory_id, _tsquery(lexeme))]
    if total is None:
        counts.append(f"(SELECT count(*) FROM {table} WHERE memory_id = %s) AS total")
        values.append(memory_id)
    else:
        values = [value for k in range(0, len(values), 2) for value in (*values[k : k + 2], total // 2 + 1)]
    found = conn.execute(f"SELECT {', '.join(counts)}", values, prepare=_prepare(total)).fetchone()
    total = int(found["total"]) if total is None else total
    return total, {lexeme: int(found[f"d{i}"]) for i, lexeme in enumerate(lexemes)}


def frequencies(
    conn: Any, table: str, memory_id: str, lexemes_of: dict[str, list[str]], known_counts: Known | None
) -> tuple[int, dict[str, int]]:
    """The one source of a ranking's document frequencies: ``(rows of the memory, {lexeme: rows holding it})``.
    A lexeme that is a term's only lexeme, of a term whose only stem ``known_counts`` (BM25's statistics, from
    :func:`known`) counts, takes that count (the Snowball lexeme and the Porter stem of one word name the same rows
    but for the words the two stemmers conflate differently); the others are counted in the index."""
    found: dict[str, int] = {}
    total = None
    if known_counts is not None:
        total, by_term = known_counts
        for term, lexemes in lexemes_of.items():
            if len(lexemes) == 1 and term in by_term:
                found[lexemes[0]] = max(found.get(lexemes[0], 0), by_term[term])
    missing = sorted({lexeme for lexemes in lexemes_of.values() for lexeme in lexemes} - found.keys())
    if missing or total is None:
        total, counted = _counted_frequencies(conn, table, memory_id, missing, total)
        found.update(counted)
    return total, found


def known(terms: Sequence[str], statistics: Any) -> Known | None:
    """BM25's counts of the ``terms`` that are one Porter stem each, by term, from ``statistics``
    (``storage.base.Statistics``; None: no counts). Call it before taking a connection: it may read on one."""
    if statistics is None:
        return None
    stem_of = {}
    for term in terms:
        stems = tokens(term)
        if len(stems) == 1:
            stem_of[term] = stems[0]
    entries, by_stem, _ = statistics(sorted(set(stem_of.values())))
    return entries, {term: by_stem.get(stem, 0) for term, stem in stem_of.items()}


def rank(
    conn: Any,
    lexicon: Lexicon,
    table: str,
    memory_id: str,
    terms: Sequence[str],
    limit: int,
    where: str = "",
    params: Sequence[Any] = (),
    known_counts: Known | None = None,
) -> list[tuple[int, float]]:
    """BM25-shaped ranking of a memory's rows of ``table`` (see the module docstring), within ``where``
    (``storage.moments.time_bounds`` on alias ``t``): ``(seq, score > 0)``, best first."""
    if limit <= 0:
        return []
    lexemes_of = lexicon.lexemes(conn, terms)
    lexemes = sorted({lexeme for found in lexemes_of.values() for lexeme in found})
    if not lexemes:
        return []
    total, by_lexeme = frequencies(conn, table, memory_id, lexemes_of, known_counts)
    counts = [by_lexeme[lexeme] for lexeme in lexemes]
    queries = [_tsquery(lexeme) for lexeme in lexemes]
    weights = [_idf(total, n) for n in counts]
    score = " + ".join(f"%s * ts_rank('{_RANK_WEIGHTS}', t.tsv, %s::tsquery, 1)" for _ in queries)
    scoring = [value for w, q in zip(weights, queries, strict=True) for value in (w, q)]
    # Terms in half the memory or more (IDF ~0) still score, but do not make rows candidates, unless the rarer
    # terms find too few rows.
    every = list(zip(counts, queries, strict=True))
    rare = prune_common(every, lambda pair: pair[0], total)
    candidates = [rare, every] if rare != every else [every]
    exact = (
        f"SELECT t.seq, ({score}) AS score FROM {table} t WHERE t.memory_id = %s AND t.tsv @@ %s::tsquery"
        f"{where} ORDER BY score DESC, t.seq DESC LIMIT %s"
    )
    rows: list[Any] = []
    if len(candidates) == 2 and sum(n for n, _ in every) <= EXACT_ROWS:
        # Both rankings exact: one statement, the second run only when the first found too few rows.
        rows = conn.execute(
            f"WITH r AS ({exact}) SELECT seq, score, true AS rare FROM r UNION ALL SELECT seq, score, false "
            f"FROM ({exact}) e WHERE (SELECT count(*) FROM r) < %s",
            [
                *(
                    value
                    for matching in candidates
                    for value in (*scoring, memory_id, " | ".join(q for _, q in matching), *params, limit)
                ),
                limit,
            ],
            prepare=_prepare(total),
        ).fetchall()
        first = [row for row in rows if row["rare"]]
        rows = sorted(
            first if len(first) >= limit else [row for row in rows if not row["rare"]],
            key=lambda row: (row["score"], row["seq"]),
            reverse=True,
        )
        candidates = []
    for matching in candidates:
        rows = []
        if sum(n for n, _ in matching) > EXACT_ROWS:
            rows = rank_bounded(conn, table, memory_id, matching, total, score, scoring, limit, where, params)
        # Every match when the bounded part found too few inside the time bounds (a span far from the newest
        # rows: costly on a large memory, as the time filter reads each match from the heap).
        if not rows or (where and len(rows) < limit):
            rows = conn.execute(
                exact,
                [*scoring, memory_id, " | ".join(q for _, q in matching), *params, limit],
                prepare=_prepare(total),
            ).fetchall()
        if len(rows) >= limit:
            break
    return [(int(row["seq"]), float(row["score"])) for row in rows if row["score"] > 0]


def contexts(
    conn: Any, lexicon: Lexicon, memory_id: str, terms: list[str], limit: int, *, latest: bool
) -> tuple[list[tuple[Any, float]], dict[str, Any] | None]:
    """The memory's context snapshots ranked for ``terms`` (:func:`rank`'s ranking and scores; none without terms)
    as ``(row with content, creation_time; score)``, and with ``latest`` its newest snapshot's content and
    creation_time (else None): one statement (:func:`_contexts_sql`, which ranks and reads the rows together: the
    ranks of every matching snapshot stay in the server), a second only where more than :data:`EXACT_ROWS`
    snapshots match (ranked by :func:`rank`)."""
    lexemes = sorted({lexeme for found in lexicon.lexemes(conn, terms).values() for lexeme in found}) if terms else []
    newest = "SELECT seq, content, creation_time, NULL::float8 AS score FROM contexts WHERE memory_id = %s"
    ranked: list[tuple[int, float]] = []
    if lexemes and limit > 0:
        queries = [_tsquery(lexeme) for lexeme in lexemes]
        params: dict[str, Any] = {f"q{i}": q for i, q in enumerate(queries)}
        params.update(
            memory=memory_id, anyone=" | ".join(queries), cap=EXACT_ROWS + 1, limit=limit, pruning=len(queries) > 1
        )
        rows = conn.execute(_contexts_sql(len(queries)), params).fetchall()
        if rows and (rows[0]["found"] > EXACT_ROWS or rows[0]["held"] > EXACT_ROWS):
            ranked = rank(conn, lexicon, "contexts", memory_id, terms, limit)
            rows = conn.execute(
                f"{newest} AND (seq = ANY(%s) OR seq = (SELECT max(seq) FROM contexts WHERE memory_id = %s))",
                (memory_id, [seq for seq, _ in ranked], memory_id),
            ).fetchall()
        else:
            picked = [(int(row["seq"]), float(row["score"])) for row in rows if row["score"] is not None]
            ranked = [hit for hit in sorted(picked, key=lambda hit: (hit[1], hit[0]), reverse=True) if hit[1] > 0]
    elif latest:
        rows = conn.execute(f"{newest} ORDER BY seq DESC LIMIT 1", (memory_id,)).fetchall()
    else:
        return [], None
    by_seq = {int(row["seq"]): row for row in rows}
    last = by_seq[max(by_seq)] if latest and by_seq else None
    return (
        [(by_seq[seq], score) for seq, score in ranked if seq in by_seq],
        None if last is None else {"content": last["content"], "creation_time": last["creation_time"]},
    )


def _contexts_sql(lexemes: int) -> str:
    """The statement of :func:`contexts` for ``lexemes`` query lexemes (parameters ``q0``.., ``memory``,
    ``anyone``, ``cap``, ``limit``, ``pruning``): :func:`rank`'s ranking of a memory's snapshots, computed where
    they are read, and the rows it picks with the newest snapshot.

    Every snapshot holding a lexeme (up to ``cap``, newest first) with its ``ts_rank`` per lexeme (read as float8,
    exactly what :func:`rank` adds: 0 exactly where the row lacks the lexeme, so also the match; computed in the
    scan, so no sort moves the ~5 KB tsvectors); the memory's snapshot count; per lexeme its matching rows and
    :func:`_idf` (the same float8 operations, so the same values); the scores summed in :func:`rank`'s order; the
    rare lexemes (``storage.query.prune_common``, when ``pruning``: more than one lexeme) and the best ``limit`` rows
    holding one, unless fewer than ``limit`` do, else the best ``limit`` of all. Each returned row is a picked or the
    newest snapshot (``seq``, ``content``, ``creation_time``; ``score`` NULL unless picked), with ``found`` (the
    matching rows) and ``held`` (the per-lexeme counts summed), by which the caller sees that :func:`rank` must rank
    instead (more than :data:`EXACT_ROWS`). (Before, the statement returned every matching snapshot's ranks and
    Python scored them: ~200 rows read back for a memory of 100,000 entries, then a second statement for the rows.)"""
    ranks = ", ".join(
        f"ts_rank('{_RANK_WEIGHTS}', t.tsv, %(q{i})s::tsquery, 1)::float8 AS r{i}" for i in range(lexemes)
    )
    counts = ", ".join(f"count(*) FILTER (WHERE m.r{i} > 0) AS c{i}" for i in range(lexemes))
    idfs = ", ".join(
        f"greatest(1e-6::float8, ln(((n.total - c.c{i})::float8 + 0.5::float8) / "
        f"(c.c{i}::float8 + 0.5::float8))) AS w{i}, 2 * c.c{i} < n.total AS k{i}"
        for i in range(lexemes)
    )
    score = " + ".join(f"w.w{i} * m.r{i}" for i in range(lexemes))
    rare_any = " OR ".join(f"v.k{i}" for i in range(lexemes))
    rare_all = " AND ".join(f"v.k{i}" for i in range(lexemes))
    rare_row = " OR ".join(f"(m.r{i} > 0 AND w.k{i})" for i in range(lexemes))
    held = " + ".join(f"c.c{i}" for i in range(lexemes))
    return (
        f"WITH m AS (SELECT t.seq, {ranks} FROM contexts t WHERE t.memory_id = %(memory)s "
        "AND t.tsv @@ %(anyone)s::tsquery ORDER BY t.seq DESC LIMIT %(cap)s), "
        "n AS (SELECT count(*) AS total FROM contexts WHERE memory_id = %(memory)s), "
        f"c AS (SELECT count(*) AS found, {counts} FROM m), "
        f"v AS (SELECT c.found, {held} AS held, n.total, {idfs} FROM n, c), "
        f"w AS (SELECT v.*, %(pruning)s AND ({rare_any}) AND NOT ({rare_all}) AS pruned FROM v), "
        f"s AS (SELECT m.seq, {score} AS score, NOT w.pruned OR {rare_row} AS rare FROM m, w), "
        "r AS (SELECT seq, score FROM s WHERE rare ORDER BY score DESC, seq DESC LIMIT %(limit)s), "
        "e AS (SELECT seq, score FROM s ORDER BY score DESC, seq DESC LIMIT %(limit)s), "
        "p AS (SELECT * FROM r WHERE (SELECT count(*) FROM r) >= %(limit)s "
        "UNION ALL SELECT * FROM e WHERE (SELECT count(*) FROM r) < %(limit)s) "
        "SELECT k.seq, k.content, k.creation_time, x.score, w.found, w.held FROM (SELECT seq, max(score) AS score "
        "FROM (SELECT seq, score FROM p UNION ALL SELECT max(seq), NULL FROM contexts WHERE memory_id = %(memory)s) u "
        "GROUP BY seq) x JOIN contexts k ON k.seq = x.seq CROSS JOIN w WHERE k.memory_id = %(memory)s"
    )


def rank_bounded(
    conn: Any,
    table: str,
    memory_id: str,
    matching: Sequence[tuple[int, str]],
    total: int,
    score: str,
    scoring: Sequence[Any],
    limit: int,
    where: str,
    params: Sequence[Any],
) -> list[Any]:
    """The ranking of a query matching more than :data:`EXACT_ROWS` rows, from a bounded part of them (each row
    scored is read from the heap): every row holding one of the rarest lexemes, as many of them as hold at most
    :data:`BOUNDED_ROWS` rows together (the rows a term-at-a-time ranking puts first, ranked exactly: "I'm flying
    to Lisbon" for "when is the Lisbon trip" in a memory where "trip" is common); when even the rarest is in more
    rows, up to :data:`BOUNDED_ROWS` holding both of the two rarest (the first in the table's order: an old entry
    holding both words); and those holding any lexeme among the memory's newest rows, as many rows as hold
    :data:`BOUNDED_ROWS` matches if the lexemes are spread evenly (at most :data:`NEWEST_ROWS`). A query of one
    lexeme held by more rows has only the newest part (any :data:`BOUNDED_ROWS` of its rows would be as good as
    arbitrary, and reading them cost ~1.5 ms)."""
    ordered = sorted(matching)
    rarest, held = [], 0
    for n, q in ordered:
        if held + n > BOUNDED_ROWS:
            break
        rarest.append(q)
        held += n
    anyone = " | ".join(q for _, q in ordered)
    newest = min(NEWEST_ROWS, max(limit, total * BOUNDED_ROWS // max(1, sum(n for n, _ in ordered))))
    # The newest rows: a walk down the memory's seqs (the (memory_id, seq) index, or the primary key where the
    # memory's rows are most of the newest) that stops after `newest` rows, the lexemes tested on them behind the
    # LIMIT. (It replaced a range from the oldest of those seqs, found by an InitPlan walking the same index: the
    # same rows, ~0.5 ms more.) A row in both parts counts once.
    recent = (
        f"SELECT t.seq, t.tsv FROM (SELECT r.* FROM {table} r "
        f"WHERE r.memory_id = %s ORDER BY r.seq DESC LIMIT %s) t WHERE t.tsv @@ %s::tsquery{where}"
    )
    values: list[Any] = [memory_id, newest, anyone, *params]
    if rarest or len(ordered) > 1:
        # The rarest lexemes' rows are counted to fit in BOUNDED_ROWS (the LIMIT only guards against a count
        # being off); the two rarest's are taken in the table's order, the bitmap scan's (seq scans start at the
        # table's first page on the store's connections: PostgresStore.open), so the same rows whatever the plan.
        pick = f"SELECT t.seq, t.tsv FROM {table} t WHERE t.memory_id = %s AND t.tsv @@ %s::tsquery{where} LIMIT %s"
        both = " | ".join(rarest) if rarest else " & ".join(q for _, q in ordered[:2])
        recent = f"({pick}) UNION ALL ({recent})"
        values = [memory_id, both, *params, BOUNDED_ROWS, *values]
    rows: list[Any] = conn.execute(
        f"SELECT * FROM (SELECT DISTINCT ON (t.seq) t.seq, ({score}) AS score FROM ({recent}) t "
        "ORDER BY t.seq) s ORDER BY score DESC, seq DESC LIMIT %s",
        [*scoring, *values, limit],
        prepare=False,
    ).fetchall()
    return rows


def neighbour_links(conn: Any, memory_id: str, seqs: Sequence[int]) -> list[Link]:
    """Each of the memory's entries ``seqs`` with its previous and next entry in the memory within
    ``CONTEXT_GAP_DAYS`` and whether it asks something (``QUESTION_MARKS`` in its raw text)."""
    if not seqs:
        return []
    gap = CONTEXT_GAP_DAYS * 86400.0
    asks = " OR ".join("strpos(e.raw_entry, %s) > 0" for _ in QUESTION_MARKS)
    near = f"abs(extract(epoch FROM ({moment('{0}')}::timestamptz - {moment('e')}::timestamptz))) <= {gap!r}"
    sql = (
        f"SELECT e.seq, p.seq AS previous, n.seq AS following, ({asks}) AS asks FROM entries e "
        f"LEFT JOIN LATERAL (SELECT x.seq FROM entries x WHERE x.memory_id = e.memory_id AND x.seq < e.seq "
        f"ORDER BY x.seq DESC LIMIT 1) px ON true LEFT JOIN entries p ON p.seq = px.seq AND {near.format('p')} "
        f"LEFT JOIN LATERAL (SELECT x.seq FROM entries x WHERE x.memory_id = e.memory_id AND x.seq > e.seq "
        f"ORDER BY x.seq LIMIT 1) nx ON true LEFT JOIN entries n ON n.seq = nx.seq AND {near.format('n')} "
        f"WHERE e.seq = ANY(%s) AND e.memory_id = %s"
    )
    return [
        (int(r["seq"]), r["previous"], r["following"], bool(r["asks"]))
        for r in conn.execute(sql, (*QUESTION_MARKS, list(seqs), memory_id)).fetchall()
    ]


def neighbourhood(conn: Any, memory_id: str, seqs: Sequence[int]) -> tuple[list[Link], dict[int, Link]]:
    """``(links of seqs, {seq: link} of their neighbours that are not among seqs)`` (``MemoryStore.neighbourhood``)
    in one statement: the memory's entries within two places of each given one (one walk of the ``(memory_id,
    seq)`` index each side), each once, with its question marks and its links; consecutive entries of that set are
    neighbours in the memory for every given entry and every entry next to one, and the gap test is
    :func:`neighbour_links`'s (on the moments' exact microseconds)."""
    if not seqs:
        return [], {}
    asks = " OR ".join(f"strpos(r.raw_entry, %(q{i})s) > 0" for i in range(len(QUESTION_MARKS)))
    # Each side read from the (memory_id, seq) index with its rows (the given entry and two after it, two before);
    # UNION keeps an entry in two windows once. The links are made here, so a row comes back per entry, not its
    # moment for Python to parse.
    side = (
        f"SELECT x.* FROM unnest(%(seqs)s::bigint[]) h(seq) CROSS JOIN LATERAL (SELECT r.seq, {moment('r')} "
        f"AS at, ({asks}) AS asks FROM entries r WHERE r.memory_id = %(memory)s AND r.seq {{0}} h.seq "
        "ORDER BY r.seq {1} LIMIT {2}) x"
    )
    # Timestamps subtract to an interval compared in whole microseconds: exact (numeric epochs cost 3x more). Each
    # moment is parsed once (the fence) and each gap computed once, then compared: written inline, the subquery was
    # pulled up and BETWEEN repeated its operand, so every row parsed its moment ~8 times (0.6 ms of 1.9 for the 250
    # rows around 50 hits).
    gap = f"interval '{round(CONTEXT_GAP_DAYS * 86400 * 1_000_000)} microseconds'"
    sql = (
        f"SELECT seq, asks, CASE WHEN back BETWEEN -{gap} AND {gap} THEN previous END AS previous, "
        f"CASE WHEN ahead BETWEEN -{gap} AND {gap} THEN following END AS following FROM (SELECT seq, asks, "
        "at - lag(at) OVER o AS back, lag(seq) OVER o AS previous, lead(at) OVER o - at AS ahead, "
        "lead(seq) OVER o AS following FROM (SELECT seq, asks, at::timestamptz AS at "
        f"FROM ({side.format('>=', 'ASC', 3)} UNION {side.format('<', 'DESC', 2)}) w OFFSET 0) x "
        "WINDOW o AS (ORDER BY seq)) y ORDER BY seq"
    )
    params: dict[str, Any] = {
        "seqs": list(seqs),
        "memory": memory_id,
        **{f"q{i}": mark for i, mark in enumerate(QUESTION_MARKS)},
    }
    rows = conn.execute(sql, params).fetchall()
    order = [int(r["seq"]) for r in rows]
    place = {seq: i for i, seq in enumerate(order)}

    def link(i: int) -> Link:
        row = rows[i]
        return order[i], row["previous"], row["following"], bool(row["asks"])

    given = sorted({seq for seq in seqs if seq in place})
    links = [link(place[seq]) for seq in given]
    around = sorted(
        {
            n
            for seq in given
            for n in (
                order[place[seq] - 1] if place[seq] else None,
                order[place[seq] + 1] if place[seq] + 1 < len(order) else None,
            )
            if n is not None
        }
        - set(given)
    )
    return links, {seq: link(place[seq]) for seq in around}


def entries_within(conn: Any, memory_id: str, seqs: Collection[int], after: str | None, before: str | None) -> set[int]:
    """Those of the memory's entries ``seqs`` whose moment lies inside the exclusive bounds."""
    if not seqs:
        return set()
    where, params = time_bounds(after, before, mark="%s")
    sql = f"SELECT t.seq FROM entries t WHERE t.memory_id = %s AND t.seq = ANY(%s){where}"
    rows = conn.execute(sql, [memory_id, list(seqs), *params]).fetchall()
    return {int(r["seq"]) for r in rows}
