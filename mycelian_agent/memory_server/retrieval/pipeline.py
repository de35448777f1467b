"""The search pipeline: the order in which a question's ranking is built, from a store's reads, on either backend.

Named for what it holds: each step is its own module (``bm25.py`` scores, ``ranking.py`` shares scores with
neighbouring turns, ``feedback.py`` searches again with the best hits' words, ``query_time.py`` lifts a time the
question names, ``coverage.py`` raises a named speaker's turns, ``fusion.py`` mixes in the dense side,
``dense_feedback.py`` places entries like the best hits); this module only chains them, and shapes the
``search_memories`` result, whose ``score`` is the 0-1 relevance of ``relevance.py`` (computed after the ranking,
which it does not change). It takes any
:class:`~mycelian_agent.memory_server.storage.base.MemoryStore` and asks it only through the store's search reads
(``storage.base.SEARCH_READS``: candidates, term statistics, entry rows and terms, neighbour links, time bounds,
contexts, dense hits), so the way down is server -> retrieval -> storage and a new backend needs no code here.

:func:`search` is the ``search_memories`` tool (arguments checked, results shaped); :func:`rank_entries` the entry
ranking under it, whose switches (``context``, ``feedback``, ``named_time``, ``names``, ``weights``,
``dense_feedback``) turn steps off for the ablation benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from mycelian_agent.errors import InputError
from mycelian_agent.limits import SEARCH_DEPTH_MAX
from mycelian_agent.memory_server.retrieval import bm25, coverage, exchanges, fusion, query_time, relevance
from mycelian_agent.memory_server.retrieval import dense_feedback as dense_feedback_module
from mycelian_agent.memory_server.retrieval import feedback as feedback_module
from mycelian_agent.memory_server.retrieval.ranking import CONTEXT_DEPTH, current_first, revisions_first, with_context
from mycelian_agent.memory_server.storage import term_stats
from mycelian_agent.memory_server.storage.base import MemoryStore, Row
from mycelian_agent.memory_server.storage.rows import DenseHits, Link
from mycelian_agent.memory_server.storage.validation import LIMITS, check_text, check_uuid, parse_rfc3339
from mycelian_agent.memory_server.text.analysis import QUESTION_MARKS, content_stems, query_stems
from mycelian_agent.placeholder import PLACEHOLDER_CONTEXT
from mycelian_agent.words import query_terms

__all__ = ["MATCH_MEANING", "MATCH_WORDS", "RankedEntry", "Ranking", "rank_entries", "search"]

Hits = list[tuple[int, float]]

#: How a search found an entry (each ``search_memories`` entry's ``match``): through words, in the entry or in the
#: turns beside it (BM25 and the steps on it: a neighbour's share, query feedback, a named time or speaker).
MATCH_WORDS = "words"
#: Only the dense side found it (one of the query's nearest entries by meaning): no word of the question, nor of
#: the turns around the entry, led to it. A search whose entries are all such found nothing that shares a word
#: with the question; they may be unrelated (a dense side always returns the nearest entries).
MATCH_MEANING = "meaning"


class Ranking(list["RankedEntry"]):
    """:func:`rank_entries`' entries, best first (a list), and :attr:`pending_vectors`: how many of the memory's
    entries the dense side ranked without a vector yet (written behind; they were found by their words only)."""

    def __init__(self, entries: Iterable[RankedEntry] = (), *, pending_vectors: int = 0) -> None:
        super().__init__(entries)
        self.pending_vectors = pending_vectors


class RankedEntry(NamedTuple):
    """One entry of :func:`rank_entries`: its row, its score (higher is better) and how it was found (``match``:
    :data:`MATCH_WORDS` or :data:`MATCH_MEANING`)."""

    row: Row
    score: float
    match: str


def _score(value: float) -> float:
    # Six significant digits: what a person reads, without float noise (the relevance is already 0-1).
    return float(f"{value:.6g}")


def search(
    store: MemoryStore,
    memory_id: str,
    query: str,
    top_ke: int = 5,
    top_kc: int = 2,
    include_raw_entries: bool = False,
    *,
    after: str | None = None,
    before: str | None = None,
    vault_id: str | None = None,
    offset: int = 0,
) -> dict[str, Any]:
    """Entries and context snapshots of one memory ranked against ``query`` (the ``search_memories`` tool).

    ``offset`` skips the first entries of the ranking (paging: ``offset + top_ke`` at most
    :data:`~mycelian_agent.limits.SEARCH_DEPTH_MAX`); the context snapshots are the same on every page.
    All pages join into one ranking, each entry once: the first ``ranking.CONTEXT_DEPTH`` (50) places are the
    ranking of a 50-deep pool (what every ordinary search returns a prefix of), and deeper places continue with
    the rest of a ``SEARCH_DEPTH_MAX``-deep ranking (scores there may exceed the 50th's: neighbour shares and
    query feedback see more candidates). With a dense index the dense side's nearest entries join as candidates
    in proportion to the page (``fusion.DENSE_CANDIDATES`` per result), so an entry near a page's cut can move
    between a short page and a longer one.

    Each entry's ``score`` is its relevance (``relevance.py``): 0 to 1, absolute (one threshold means the same in
    every search), never above a better-ranked entry's; a hit found by meaning alone scores at most
    ``relevance.MEANING_CEILING``. Each context's ``score`` is the share of the question's word weight it holds,
    non-increasing down the list.
    With vectors written behind, the dense side ranks with the vectors present: when some of the memory's entries
    had none yet, the result says how many (``pendingVectors``, absent when none; those entries were ranked by
    their words alone).
    """
    memory_id = check_uuid("memory_id", memory_id)
    if vault_id is not None:
        vault_id = check_uuid("vault_id", vault_id)
    query = check_text("query", query, LIMITS["query"], stored=False)
    for name, value, low, high in (
        ("top_ke", top_ke, 0, 25),
        ("top_kc", top_kc, 1, 10),
        ("offset", offset, 0, SEARCH_DEPTH_MAX - 25),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InputError(f"{name} must be an integer from {low} to {high} (got {value!r})")
    if not isinstance(include_raw_entries, bool):
        raise InputError(f"include_raw_entries must be a boolean (got {include_raw_entries!r})")
    after = parse_rfc3339("after", after)
    before = parse_rfc3339("before", before)
    store.check_memory(memory_id, vault_id)
    terms = query_terms(query)
    entries = []
    depth = offset + top_ke if top_ke else 0
    seen = relevance.DenseSeen(store)  # keeps the dense side the ranking used, for the relevance below
    ranked = rank_entries(seen.view, memory_id, query, terms, min(depth, CONTEXT_DEPTH), after=after, before=before)
    pending = ranked.pending_vectors
    if depth > CONTEXT_DEPTH:
        # A pool as deep as this page would reorder the first places (and one as deep as the next page would
        # reorder this one), so deep pages continue the 50-deep ranking from one fixed, deepest pool.
        shown = {found.row["seq"] for found in ranked}
        deeper = rank_entries(seen.view, memory_id, query, terms, SEARCH_DEPTH_MAX, after=after, before=before)
        pending = deeper.pending_vectors
        ranked += [found for found in deeper if found.row["seq"] not in shown]
    weights: dict[str, float] = {}
    if ranked[:depth]:
        weights = relevance.stem_weights(store, memory_id, terms)
    scores = _relevances(store, memory_id, terms, ranked[:depth], seen.dense, weights)
    for (row, _, match), score in zip(ranked[offset:depth], scores[offset:depth], strict=True):
        item: dict[str, Any] = {"entryId": row["entry_id"], "summary": row["summary"]}
        if include_raw_entries:
            item["rawEntry"] = row["raw_entry"]
        item["score"] = _score(score)
        item["match"] = match
        item["creationTime"] = row["creation_time"]
        if row["conversation_time"] is not None:
            item["conversationTime"] = row["conversation_time"]
        item["tags"] = json.loads(row["tags"])
        entries.append(item)
    ranked_contexts, latest = store.search_contexts(memory_id, terms, top_kc)
    if ranked_contexts and not weights:
        weights = relevance.stem_weights(store, memory_id, terms)
    context_scores = relevance.non_increasing(
        relevance.text_relevance(weights, row["content"]) for row, _ in ranked_contexts
    )
    contexts = [
        {"context": row["content"], "timestamp": row["creation_time"], "score": _score(score)}
        for (row, _), score in zip(ranked_contexts, context_scores, strict=True)
    ]
    result = {
        "entries": entries,
        "count": len(entries),
        "latestContext": PLACEHOLDER_CONTEXT if latest is None else latest["content"],
        "latestContextTimestamp": None if latest is None else latest["creation_time"],
        "contexts": contexts,
    }
    if pending:
        result["pendingVectors"] = pending
    return result


def _relevances(
    store: MemoryStore,
    memory_id: str,
    terms: list[str],
    ranked: Sequence[RankedEntry],
    dense: DenseHits | None,
    weights: dict[str, float],
) -> list[float]:
    """The wire ``score`` of each of ``ranked`` (the ranking from its first place): the 0-1 relevance of
    ``relevance.py``, non-increasing down the ranking. Computed after the ranking, which it does not change."""
    seqs = [found.row["seq"] for found in ranked]
    values = relevance.entry_relevance(store, memory_id, terms, seqs, dense, weights)
    return relevance.non_increasing(_exchange_relevances(store, memory_id, ranked, values))


def _exchange_relevances(
    store: MemoryStore, memory_id: str, ranked: Sequence[RankedEntry], values: list[float]
) -> list[float]:
    """``values`` with each statement placed just above its reaction (``exchanges.statements_first``) as relevant
    as that reaction: the exchange was found through the reaction's words or meaning ("Lovely instrument!" for
    "What musical instrument am I learning?"), and the statement's own low score would otherwise cap the reaction
    below it (scores never rise down the list)."""
    if len(ranked) < 2:
        return values
    previous = {
        seq: before
        for seq, before, _, _ in store.neighbour_links(memory_id, [found.row["seq"] for found in ranked[1:]])
    }
    values = list(values)
    for i in range(len(ranked) - 1):
        statement, reply = ranked[i].row, ranked[i + 1].row
        if previous.get(reply["seq"]) == statement["seq"] and exchanges.reacts_to(_turn(reply), _turn(statement)):
            values[i] = max(values[i], values[i + 1])
    return values


def _turn(row: Row) -> exchanges.Turn:
    """What ``exchanges.reacts_to`` reads of an entry's row."""
    tags = json.loads(row["tags"])
    role, speaker = tags.get("role"), tags.get("speaker")
    raw = row["raw_entry"]
    return exchanges.Turn(
        speaker or role,
        role == "assistant" and not speaker,
        any(mark in raw for mark in QUESTION_MARKS),
        len(content_stems(raw)),
    )


def rank_entries(
    store: MemoryStore,
    memory_id: str,
    query: str,
    terms: list[str],
    limit: int,
    *,
    after: str | None = None,
    before: str | None = None,
    context: bool = True,
    feedback: bool = True,
    named_time: bool = True,
    names: bool = True,
    weights: Sequence[float] | None = None,
    dense_feedback: bool = True,
    statements: bool = True,
    answer_type: bool = True,
) -> Ranking:
    """The memory's entries ranked for ``query`` (``terms`` from ``query_terms``), best first, ``limit`` at most:
    lexical hits scored by BM25, re-ranked with their neighbours' scores (``context``), joined by a second search
    with words of the best hits (``feedback``, see ``feedback.py``), those inside a time the query names lifted
    (``named_time``, see ``query_time.py``), the turns of a speaker the query names raised (``names``, see
    ``coverage.py``), fused with dense similarities when the store has an index, and the entries nearest to the
    query moved towards the best fused hits placed after the first ones (``dense_feedback``, see
    ``dense_feedback.py``). For a question asking when, the entries that tell a time are then lifted
    (``answer_type``, ``query_time.lift_told_times``). Last, a stated change is placed above what it revises
    (``ranking.revisions_first``) and an assistant's reaction just below the statement it follows (``statements``,
    see ``exchanges.py``).
    ``weights`` replaces the index column weights BM25 weighs each field's terms by
    (``ENTRY_WEIGHTS``; the ablation turns fields off with it). Each entry says whether words led to it
    (:data:`MATCH_WORDS`) or only the dense side did (:data:`MATCH_MEANING`); the list's ``pending_vectors`` says
    how many of the memory's entries the dense side ranked without a vector (0 without a dense index)."""
    if limit <= 0 or not terms:
        return Ranking()
    # The dense side first: its catch-up embeds a small gap of entries without a vector, which the lexical steps
    # then see as any other entry. (Encoding the query on another thread while the
    # lexical steps run was measured and dropped: on two cores the encoder slowed by what the overlap saved,
    # BENCHMARKS.md §3 "Hybrid search latency".)
    dense = store.dense_hits(memory_id, query, limit * fusion.DENSE_CANDIDATES, after, before)
    depth = max(limit, CONTEXT_DEPTH) if context else limit
    if store.has_dense:
        # Fusion needs a lexical list deeper than the final cut so that an entry the dense side favours can
        # rise past weaker lexical hits. Not deeper than that: the neighbour shares and the query feedback then
        # work on the same pool as without dense (a deeper pool lowered recall: BENCHMARKS.md §3 "Tuned constants").
        depth = max(depth, limit * 2)
    hits = _lexical_ranking(store, memory_id, terms, depth, after, before, context, weights)
    if feedback and hits:
        extra = _feedback_terms(store, memory_id, terms, hits)
        if extra:
            second = _lexical_ranking(store, memory_id, extra, depth, after, before, context, weights)
            # The hits the words came from would match them best: no second score for them, or the second
            # search would only reshuffle the top (recall@1 fell on LoCoMo dev: BENCHMARKS.md §3 "Tuned constants").
            sources = {seq for seq, _ in hits[: feedback_module.FEEDBACK_DOCS]}
            hits = feedback_module.combine(hits, [hit for hit in second if hit[0] not in sources])
    if named_time and hits:
        hits = _time_named(store, memory_id, query, terms, hits, depth, after, before, context, weights)
    if names and hits:
        hits = _boost_named(store, memory_id, terms, hits)
    worded = {seq for seq, _ in hits}
    if store.has_dense:
        hits = dense_feedback_module.fuse(hits, dense, limit) if dense_feedback else fusion.fuse(hits, dense, limit)
    if answer_type and hits and query_time.asks_time(query):
        hits = _times_told_first(store, memory_id, hits[:limit])
    if store.has_dense and hits:
        hits = _revisions_first(store, memory_id, terms, hits)
    if statements and hits:
        hits, reactions = _statements_first(store, memory_id, hits, after, before)
        # A statement brought in by its reaction was found through the turn beside it: by words if the reaction was.
        worded |= {statement for reply, statement in reactions.items() if reply in worded}
    hits = hits[:limit]
    rows = store.entry_rows(memory_id, [seq for seq, _ in hits])
    return Ranking(
        (
            RankedEntry(rows[seq], score, MATCH_WORDS if seq in worded else MATCH_MEANING)
            for seq, score in hits
            if seq in rows
        ),
        pending_vectors=dense.pending if dense is not None else 0,
    )


def _revisions_first(store: MemoryStore, memory_id: str, terms: list[str], hits: Hits) -> Hits:
    """``ranking.revisions_first`` on the final ``hits``. An entry's matched stems are the query's stems in its own
    words (raw text), not in its summary or labels: there every entry of a speaker holds the speaker's name, which
    a question naming that speaker matches ("What sparked John's interest ..."), so any later entry of John's
    saying "changed" would count as revising any earlier one."""
    stems = set(query_stems(terms))
    seqs = [seq for seq, _ in hits]
    entries = store.entry_terms(memory_id, seqs)
    rows = store.entry_rows(memory_id, seqs)
    matched = {seq: frozenset(stems & content_stems(row["raw_entry"])) for seq, row in rows.items()}
    return revisions_first(hits, entries, matched)


def _times_told_first(store: MemoryStore, memory_id: str, hits: Hits) -> Hits:
    """``query_time.lift_told_times`` on ``hits``: the entries whose own words tell a time (``query_time.tells_time``
    of the raw text, seen from the entry's time) lifted."""
    rows = store.entry_rows(memory_id, [seq for seq, _ in hits])
    told = {
        seq
        for seq, row in rows.items()
        if query_time.tells_time(row["raw_entry"], row["conversation_time"] or row["creation_time"])
    }
    return query_time.lift_told_times(hits, told)


def _statements_first(
    store: MemoryStore, memory_id: str, hits: Hits, after: str | None, before: str | None
) -> tuple[Hits, dict[int, int]]:
    """``exchanges.statements_first`` on ``hits`` (each hit's previous turn inside the bounds, and what
    ``exchanges.reacts_to`` reads of both, from the entries' rows), and the reactions among the hits: reply seq ->
    the statement it reacts to."""
    seqs = [seq for seq, _ in hits]
    links = store.neighbour_links(memory_id, seqs)
    previous = {seq: before_seq for seq, before_seq, _, _ in links if before_seq is not None}
    if not previous:
        return hits, {}
    allowed = _allowed(store, memory_id, seqs, links, after, before)
    previous = {seq: statement for seq, statement in previous.items() if statement in allowed}
    rows = store.entry_rows(memory_id, sorted(set(seqs) | set(previous.values())))
    turns = {seq: _turn(row) for seq, row in rows.items()}
    reactions = {
        reply: statement
        for reply, statement in previous.items()
        if reply in turns and statement in turns and exchanges.reacts_to(turns[reply], turns[statement])
    }
    return exchanges.statements_first(hits, previous, turns), reactions


def _lexical_ranking(
    store: MemoryStore,
    memory_id: str,
    terms: list[str],
    depth: int,
    after: str | None,
    before: str | None,
    context: bool,
    weights: Sequence[float] | None = None,
) -> Hits:
    """BM25 hits (``bm25.py``), re-ranked with their neighbours' scores when ``context``: up to ``depth``, best
    first."""
    stems = query_stems(terms)
    read: list[term_stats.TermCounts] = []  # the memory's counts of ``stems``, read once when first needed

    def statistics(wanted: Sequence[str]) -> tuple[int, dict[str, int], int]:
        if not read:
            read.append(store.term_counts(memory_id, sorted(set(stems) | set(wanted)), ()))
        known = read[0]
        missing = [stem for stem in wanted if stem not in known.stems]
        if missing:
            known.stems.update(store.term_counts(memory_id, missing, ()).stems)
        return known.entries, {stem: known.stems[stem] for stem in wanted}, known.tokens

    candidates = store.lexical_candidates(
        memory_id, terms, depth * bm25.CANDIDATES, after, before, statistics=statistics
    )
    if not candidates:
        return []
    count, frequencies, length = statistics(stems)
    entries = store.entry_terms(memory_id, [seq for seq, _ in candidates], weights=weights)
    scored = bm25.rank(list(entries.items()), stems, count, frequencies, length)
    hits = [(seq, value) for seq, value, _ in scored[:depth]]
    if context and hits:
        seqs = [seq for seq, _ in hits]
        links, around = store.neighbourhood(memory_id, seqs)  # the hits' links and their neighbours'
        allowed = _allowed(store, memory_id, seqs, links, after, before)
        # The neighbours' own neighbours: the turns two steps from each hit (ranking.CONTEXT_FAR_AFTER).
        outer = [around[seq] for seq in sorted(allowed.difference(seqs)) if seq in around]
        further = _allowed(store, memory_id, [link[0] for link in outer], outer, after, before)
        matched = {seq: frozenset(by_stem) for seq, _, by_stem in scored}
        hits = with_context(hits, links, allowed | further, depth, matched, outer)
        hits = current_first(hits, entries, matched)
    return hits


def _allowed(
    store: MemoryStore,
    memory_id: str,
    seqs: Sequence[int],
    links: Sequence[Link],
    after: str | None,
    before: str | None,
) -> set[int]:
    """The seqs :func:`ranking.with_context` may return around ``seqs`` (whose ``links`` are given): the given ones,
    and their neighbours inside the time bounds."""
    given = set(seqs)
    allowed = given | {n for _, previous, following, _ in links for n in (previous, following) if n is not None}
    outside = allowed - given
    if (after is not None or before is not None) and outside:  # neighbours outside the time bounds do not count
        allowed = given | store.entries_within(memory_id, outside, after, before)
    return allowed


def _time_named(
    store: MemoryStore,
    memory_id: str,
    query: str,
    terms: list[str],
    hits: Hits,
    depth: int,
    after: str | None,
    before: str | None,
    context: bool,
    weights: Sequence[float] | None,
) -> Hits:
    """``hits`` with the entries inside the times ``query`` names lifted (``query_time.py``), seen from the
    question's date: ``before`` (exclusive) when given, else today; an entry is inside a time when it was told
    then or when its own words name it ("yesterday", seen from its time). A single named span is also searched on its
    own (the same ``terms``), so that its entries compete even when the whole memory's pool missed them."""
    named = query_time.parse_query_time(query, query_time.reference_date(before))
    if not named:
        return hits
    pooled = dict(hits)
    if len(named.spans) == 1 and query_time.SPAN_SEARCH:
        span_after, span_before = query_time.span_bounds(named.spans[0], after, before)
        if span_after < span_before:  # (else the span lies outside the search's own bounds)
            for seq, score in _lexical_ranking(
                store, memory_id, terms, depth, span_after, span_before, context, weights
            ):
                pooled[seq] = max(score, pooled.get(seq, 0.0))
    rows = store.entry_rows(memory_id, list(pooled))
    moments = {seq: query_time.moment(row["conversation_time"] or row["creation_time"]) for seq, row in rows.items()}
    # A turn's own relative dates, resolved from its time: "yesterday I ran my first 10k", told on May 10, is
    # about May 9 (the held-out misses of questions naming a day had this shape, issue 38).
    referenced = {
        seq: query_time.referenced_spans(row["raw_entry"], row["conversation_time"] or row["creation_time"])
        for seq, row in rows.items()
    }
    return query_time.boost(list(pooled.items()), moments, named, referenced)[:depth]


def _boost_named(store: MemoryStore, memory_id: str, terms: list[str], hits: Hits) -> Hits:
    """``coverage.boost_named_speakers`` on ``hits``, with each entry's author from the store's entry terms (entries
    not in its cache, such as neighbours the lexical search did not find, are read once and kept)."""
    entries = store.entry_terms(memory_id, [seq for seq, _ in hits])
    authors = {seq: coverage.author_stems(terms_of.author) for seq, terms_of in entries.items()}
    return coverage.boost_named_speakers(hits, authors, query_stems(terms))


def _feedback_terms(
    store: MemoryStore, memory_id: str, terms: list[str], hits: Sequence[tuple[int, float]]
) -> list[str]:
    """The words of the best ``hits`` to search for next (``feedback.expansion_terms``); none in a memory of
    fewer than ``FEEDBACK_MIN_ENTRIES`` entries."""
    top = hits[: feedback_module.FEEDBACK_DOCS]
    rows = store.entry_rows(memory_id, [seq for seq, _ in top])
    docs = [
        (feedback_module.feedback_words(f"{rows[seq]['summary']} {rows[seq]['raw_entry']}"), score)
        for seq, score in top
        if seq in rows
    ]
    words = {word for doc, _ in docs for word in doc}
    entries, _, _, frequencies = store.term_counts(memory_id, (), words)
    if entries < feedback_module.FEEDBACK_MIN_ENTRIES:
        return []
    return feedback_module.expansion_terms(docs, entries, frequencies, exclude=set(terms))
