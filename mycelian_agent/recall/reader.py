"""MemoryReader: what a chat pipeline asks memory before it answers (``asearch``, ``arecall``).

Only Mycelian tools are called (``search_memories``, ``get_context``, ``list_entries``, and through
:class:`~mycelian_agent.recall.users.UserDirectory` ``list_memories`` / ``create_memory_in_vault``), so the reader
works against our embedded server and a remote Mycelian server alike. Our server's extras (``vault_id`` and the
``after`` / ``before`` bounds of ``search_memories``) are sent only where the server declares them; without the
bounds, the reader filters the hits by time itself.

A recall is built in four steps: one search (the hits and the newest context document), the turn before and after
each of the best hits (``list_entries`` with a one-entry page on each side, concurrently; same thread only), the
context document's items that bear on the query (:mod:`~mycelian_agent.recall.notes`), and a greedy fill of the
token budget: the best hit, the notes (at most :data:`NOTES_SHARE` + :data:`STANDING_SHARE` of the budget), then
the hits in rank order, the best three each followed by their neighbours; what was chosen is shown in time order.
Read calls are retried when their failure is transient (:mod:`~mycelian_agent.recall.retry`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..dates import normalise_time, resolve_relative_dates
from ..errors import InputError, MemoryServerError
from ..limits import QUERY_MAX_CHARS, SEARCH_DEPTH_MAX, unicode_problem
from ..words import WORD_RE
from .hits import MemoryHit, MemoryHits, Recall, RecalledTurn, estimate_tokens, render_recall
from .notes import select_notes
from .retry import read_call
from .users import Connection, UserDirectory

__all__ = [
    "MIN_BUDGET_TOKENS",
    "SEARCH_TOP_K_MAX",
    "TOP_K_MAX",
    "MemoryReader",
    "check_min_score",
    "check_query",
    "check_top_k",
]

#: The most hits one ``search_memories`` call returns (its ``top_ke`` limit, upstream's too).
SEARCH_TOP_K_MAX = 25
#: The most hits ``asearch`` / ``arecall`` return: pages of :data:`SEARCH_TOP_K_MAX` (``offset``) on a server that
#: pages; a server that does not (upstream Mycelian) gives its first page only.
TOP_K_MAX = 100
#: The smallest budget a recall accepts: a heading and one short line.
MIN_BUDGET_TOKENS = 40
#: Best hits whose neighbouring turns a recall shows.
NEIGHBOUR_HITS = 3
#: Neighbouring turns are context: longer ones are clipped to this many characters.
NEIGHBOUR_MAX_CHARS = 600
#: Shares of the budget the context document's notes may take when there are turns to show: those that bear on the
#: query, then (on top) the standing facts that do not (an allergy, for "what should I cook?").
NOTES_SHARE = 0.3
STANDING_SHARE = 0.1


def check_query(query: object, *, empty: bool = False) -> str:
    """``query`` stripped, as every read checks it: a string of at most :data:`QUERY_MAX_CHARS` characters, not
    empty (unless ``empty``: then "" asks for no ranking), with no lone surrogate (it cannot be sent); else
    :class:`InputError`."""
    if not isinstance(query, str) or not (empty or query.strip()):
        raise InputError(f"query is empty: say what to look for (got {query!r})")
    if len(query) > QUERY_MAX_CHARS:
        raise InputError(
            f"query has {len(query)} characters; a search takes at most {QUERY_MAX_CHARS} "
            "(search with the question, not the whole conversation)"
        )
    if problem := unicode_problem(query, stored=False):
        raise InputError(f"query: {problem}")
    return query.strip()


def _check_read(
    query: object,
    top_k: object,
    min_score: object,
    by_meaning: object,
    after: str | datetime | None,
    before: str | datetime | None,
) -> tuple[str, float | None, str | None, str | None]:
    """The inputs a search and a recall share, checked up front: the query, ``min_score`` and the bounds as used."""
    query = check_query(query)
    check_top_k(top_k)
    score = check_min_score(min_score)
    _check_flag("by_meaning", by_meaning)
    start, end = _bound("after", after), _bound("before", before)
    if start and end and start >= end:
        raise InputError(f"after ({start}) must be earlier than before ({end})")
    return query, score, start, end


def _check_count(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_top_k(value: object, name: str = "top_k") -> int:
    """``value`` as the number of hits to return: an integer from 1 to :data:`TOP_K_MAX`, else :class:`InputError`
    naming ``name``."""
    return _check_count(name, value, 1, TOP_K_MAX)


def check_min_score(value: object, name: str = "min_score") -> float | None:
    """``value`` as the least score a hit must have (None: no threshold): a number from 0 to 1, else
    :class:`InputError` naming ``name`` (a bool, NaN or a string are refused, not read as numbers)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InputError(f"{name} must be a number from 0 to 1 (a hit's relevance score), got {value!r}")
    return float(value)


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r}")
    return value


def _bound(name: str, value: str | datetime | None) -> str | None:
    try:
        return normalise_time(value)
    except (InputError, ValueError, TypeError) as exc:
        raise InputError(f"{name}: {exc}") from None


def _within(hit: MemoryHit, after: str | None, before: str | None) -> bool:
    """Whether ``hit``'s time (conversation time, else stored time; normalised RFC 3339, so strings compare as
    times) lies after ``after`` and before ``before``."""
    return (not after or (hit.time or "") > after) and (not before or (hit.time or "") < before)


def _clip(text: str, max_chars: int) -> tuple[str, bool]:
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars].rsplit(" ", 1)[0] if " " in text[:max_chars] else text[:max_chars]
    return cut.rstrip() + " [...]", True


class MemoryReader:
    """Search and recall over one vault's memories, one memory per user.

    ``users`` maps user names to memories; ``default_memory_id`` is the memory read when no user is named (the one
    ``build_agent(memory=...)`` names), ``default_user`` its user. With ``default_memory_id=None`` that memory is
    ``default_user``'s, found when first read and created by the first write (:meth:`default_memory`).
    """

    def __init__(
        self,
        connection: Connection,
        users: UserDirectory,
        *,
        default_memory_id: str | None,
        default_user: str | None = None,
    ) -> None:
        self.connection = connection
        self.users = users
        self.default_memory_id = default_memory_id
        self.default_user = default_user
        self._declared: set[str] | None = None

    @property
    def vault_id(self) -> str:
        return self.users.vault_id

    async def default_memory(self, *, create: bool = False) -> str | None:
        """The id of the memory of reads and threads that name no user: None while it does not exist, unless
        ``create`` (a write), which creates it (also when the invoker's user creation is off)."""
        if self.default_memory_id is None and self.default_user is not None:
            if create:
                self.default_memory_id = await self.users.memory_id(self.default_user, create=True)
            else:
                self.default_memory_id = await self.users.find(self.default_user)
        return self.default_memory_id

    async def memory_of(self, user: str | None) -> tuple[str | None, str | None]:
        """``(memory id, user)`` read for ``user`` (None: the default memory); the id is None when ``user`` has no
        memory in the vault. A read never creates one."""
        if user is None:
            return await self.default_memory(), self.default_user
        return await self.users.find(user), user

    def _search_params(self) -> set[str]:
        if self._declared is None:
            parameters = getattr(self.connection, "parameters", None)
            self._declared = parameters("search_memories") if parameters is not None else set()
        return self._declared

    async def _search(
        self,
        memory_id: str,
        user: str | None,
        query: str,
        top_k: int,
        after: str | None,
        before: str | None,
        min_score: float | None = None,
    ) -> tuple[MemoryHits, str | None]:
        """The ``top_k`` best hits (at least ``min_score``) and the newest context document. Past
        :data:`SEARCH_TOP_K_MAX`, pages of the ranking are read with ``offset`` where the server declares it; the
        pages join into one ranking (the server returns each entry once), and paging stops at a short page or
        one whose last score is below ``min_score`` (scores do not rise down the ranking). The hits'
        ``pending_vectors`` is the first page's ``pendingVectors``."""
        declared = self._search_params()
        bounded = (after or before) and not {"after", "before"} <= declared
        pages = "offset" in declared and not bounded
        base: dict[str, Any] = {"memory_id": memory_id, "query": query, "top_kc": 1, "include_raw_entries": True}
        if "vault_id" in declared:
            base["vault_id"] = self.vault_id
        if not bounded:
            base |= {key: value for key, value in (("after", after), ("before", before)) if value}
        hits: list[MemoryHit] = []
        seen: set[str] = set()
        document: str | None = None
        pending: Any = 0
        offset = 0
        while True:
            size = SEARCH_TOP_K_MAX if bounded else min(top_k - len(hits), SEARCH_TOP_K_MAX)
            args = base | {"top_ke": size} | ({"offset": offset} if offset else {})
            found = await read_call(self.connection, "search_memories", args)
            if offset == 0:
                document = found.get("latestContext")
                pending = found.get("pendingVectors")
            page = [MemoryHit.from_entry(entry, memory_id=memory_id, user=user) for entry in found.get("entries") or []]
            hits += [hit for hit in page if hit.entry_id not in seen]
            seen.update(hit.entry_id for hit in page)
            offset += size
            # An entry near a page's cut may move between pages (vectors written in between, the dense side's
            # candidates growing with the page): one seen twice is kept once, and paging goes on to top_k.
            if (
                not pages
                or len(page) < size
                or len(hits) >= top_k
                or offset + SEARCH_TOP_K_MAX > SEARCH_DEPTH_MAX
                or (min_score is not None and page[-1].score < min_score)
            ):
                break
        if bounded:  # a server without time bounds: keep the hits inside them (the best 25 searched)
            hits = [hit for hit in hits if _within(hit, after, before)]
        if min_score is not None:
            hits = [hit for hit in hits if hit.score >= min_score]
        counted = pending if isinstance(pending, int) and not isinstance(pending, bool) else 0
        return MemoryHits(hits[:top_k], pending_vectors=counted), document

    async def _user_search(
        self,
        user: str | None,
        query: str,
        top_k: int,
        after: str | None,
        before: str | None,
        min_score: float | None = None,
    ) -> tuple[str | None, str | None, MemoryHits, str | None]:
        """``(memory id, user, hits, context document)``; no hits and no memory id for a user without a memory. A
        user's memory deleted since it was cached (by another process: its id is gone) is looked up again: found
        anew when it was created again, else the user has none; never another memory, never a new one."""
        memory_id, user = await self.memory_of(user)
        if memory_id is None:
            return None, user, MemoryHits(), None
        try:
            hits, document = await self._search(memory_id, user, query, top_k, after, before, min_score)
        except MemoryServerError as exc:
            if user is None or user == self.default_user or "not found" not in str(exc):
                raise
            self.users.forget(user)
            memory_id, user = await self.memory_of(user)
            if memory_id is None:
                return None, user, MemoryHits(), None
            hits, document = await self._search(memory_id, user, query, top_k, after, before, min_score)
        return memory_id, user, hits, document

    async def asearch(
        self,
        query: str,
        *,
        user: str | None = None,
        top_k: int = 10,
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        by_meaning: bool = True,
        min_score: float | None = None,
    ) -> MemoryHits:
        """The ``top_k`` (1-100) entries of ``user``'s memory best matching ``query``, best first (a list whose
        ``pending_vectors`` says how many of the memory's entries were ranked without a vector yet).

        ``after`` / ``before`` (RFC 3339 or datetime) keep entries whose conversation time lies between them. Each
        hit's ``match`` says how it was found: a server with embeddings (the default) also returns the entries
        nearest by meaning, so a query no entry shares a word with gives hits that are all ``"meaning"``
        (:attr:`MemoryHit.by_meaning`) and may be unrelated; ``by_meaning=False`` leaves those out (then fewer than
        ``top_k`` may come back, and an empty list means no entry shares a word with the query).

        Each hit's ``score`` is its relevance (:attr:`MemoryHit.score`: 0 to 1 from our server, the same scale in
        every search, non-increasing down the list); ``min_score`` keeps only hits scoring at least that (compared
        with what the server sends: another server's scale may differ). More than 25 hits are read as pages of
        the ranking on a server that pages (ours); another gives at most its 25. An empty or over-long query, a
        bad ``top_k``, ``min_score`` or bound raise :class:`InputError`; a user without a memory gets no hits (and
        no memory is created: reads have no side effects).
        """
        query, min_score, after, before = _check_read(query, top_k, min_score, by_meaning, after, before)
        _, _, hits, _ = await self._user_search(user, query, top_k, after, before, min_score)
        if by_meaning:
            return hits
        return MemoryHits((hit for hit in hits if not hit.by_meaning), pending_vectors=hits.pending_vectors)

    async def _neighbours(
        self, memory_id: str, user: str | None, hit: MemoryHit, after: str | None = None, before: str | None = None
    ) -> tuple[MemoryHit | None, MemoryHit | None]:
        """The turns stored just before and just after ``hit`` in its thread (None where there is none, or where
        the turn's time lies outside ``after`` / ``before``: a bounded recall shows nothing said after its bound)."""
        if not hit.created:
            return None, None
        base = {"vault_id": self.vault_id, "memory_id": memory_id, "limit": 1}
        pages = await asyncio.gather(
            read_call(self.connection, "list_entries", {**base, "before": hit.created}),
            read_call(self.connection, "list_entries", {**base, "after": hit.created}),
        )
        found: list[MemoryHit | None] = []
        for page in pages:
            entries = page.get("entries") or []
            turn = MemoryHit.from_entry(entries[0], memory_id=memory_id, user=user) if entries else None
            found.append(
                turn if turn is not None and turn.thread == hit.thread and _within(turn, after, before) else None
            )
        return found[0], found[1]

    async def arecall(
        self,
        query: str,
        *,
        user: str | None = None,
        budget_tokens: int = 1500,
        top_k: int = 10,
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        by_meaning: bool = True,
        min_score: float | None = None,
    ) -> Recall:
        """What ``user``'s memory holds for ``query``, within ``budget_tokens`` (estimated): the context
        document's items that bear on it and the ``top_k`` best entries with the turns before and after the best
        three, deduplicated, in time order, each with its date and speaker, and its relative dates followed by the
        day they meant ("yesterday (2023-07-02)", from the turn's time). ``.as_prompt()`` is the text block.

        When no entry shares a word with the query, a server with embeddings still finds the nearest turns by
        meaning: the recall is then :attr:`Recall.by_meaning_only` and its block says they may be unrelated.
        ``by_meaning=False`` leaves out every hit found by meaning alone; ``min_score`` every hit scoring below it
        and ``top_k`` is 1-100 (see :meth:`asearch`).

        Raises :class:`InputError` for an empty query, a budget too small to hold one entry, a bad ``top_k``,
        ``min_score`` or bound (``after`` not earlier than ``before``); a memory with nothing relevant, or a user
        without a memory (none is created), gives an empty recall whose block says so.
        """
        query, min_score, after, before = _check_read(query, top_k, min_score, by_meaning, after, before)
        _check_count("budget_tokens", budget_tokens, MIN_BUDGET_TOKENS, 1_000_000)
        memory_id, user, hits, document = await self._user_search(user, query, top_k, after, before, min_score)
        if memory_id is None:  # the user has no memory: nothing to recall, and nothing created
            return Recall(
                query=query,
                user=user,
                memory_id=None,
                notes=(),
                turns=(),
                hits=(),
                budget_tokens=budget_tokens,
                tokens=estimate_tokens(render_recall(query, (), ())),
            )
        pending = hits.pending_vectors
        if not by_meaning:
            hits = MemoryHits(hit for hit in hits if not hit.by_meaning)
        if document is None:  # a server whose search leaves out the newest context
            document = await read_call(
                self.connection, "get_context", {"vault_id": self.vault_id, "memory_id": memory_id}, parse=False
            )
        neighbours = await asyncio.gather(
            *(self._neighbours(memory_id, user, hit, after, before) for hit in hits[:NEIGHBOUR_HITS])
        )
        notes = select_notes(document or "", query, after=after, before=before)
        return replace(_fill(query, user, memory_id, budget_tokens, hits, neighbours, notes), pending_vectors=pending)

    # -- sync twins -----------------------------------------------------------------------------------------

    def search(self, query: str, **options: Any) -> list[MemoryHit]:
        """Synchronous :meth:`asearch` (outside a running event loop)."""
        from .._sync import run_sync

        return run_sync(self.asearch(query, **options))

    def recall(self, query: str, **options: Any) -> Recall:
        """Synchronous :meth:`arecall` (outside a running event loop)."""
        from .._sync import run_sync

        return run_sync(self.arecall(query, **options))


def _adjacent(first: MemoryHit, second: MemoryHit, links: set[tuple[str, str]]) -> bool:
    """Whether ``second`` directly follows ``first`` in the memory: a neighbour lookup said so, or the agent's tags
    do (same thread, the next message number, or the next part of one message)."""
    if (first.entry_id, second.entry_id) in links:
        return True
    if first.thread is None or first.thread != second.thread:
        return False
    try:
        one, two = int(first.tags.get("msg", "")), int(second.tags.get("msg", ""))
        (part, parts), (next_part, _) = _part(first), _part(second)
    except ValueError:
        return False
    if two == one + 1:
        return part == parts and next_part == 1
    return two == one and next_part == part + 1


def _part(hit: MemoryHit) -> tuple[int, int]:
    """``(part, parts)`` of an entry: ``tags["part"]`` is ``"2/3"`` for the second part of a long message."""
    number, _, count = hit.tags.get("part", "1/1").partition("/")
    return int(number), int(count)


def _words(text: str) -> set[str]:
    return {word[:5] for word in WORD_RE.findall(text.casefold()) if len(word) > 2}


def _repeats(note: str, chosen: Iterable[tuple[MemoryHit, RecalledTurn]]) -> bool:
    """Whether a note only repeats a turn the block shows (a timeline line of that very message): four in five of
    its words are in one turn (its date, speaker and text)."""
    words = _words(note)
    return bool(words) and any(
        len(words & _words(f"{(turn.time or '')[:10]} {turn.speaker or ''} {turn.text}")) >= 0.8 * len(words)
        for _, turn in chosen
    )


class _Block:
    """The recall block being filled: notes, chosen turns (kept in memory order) and the budget check."""

    def __init__(self, query: str, budget: int, links: set[tuple[str, str]], by_meaning_only: bool) -> None:
        self.query = query
        self.by_meaning_only = by_meaning_only
        self.budget = budget
        self.links = links
        self.notes: list[str] = []
        self.chosen: dict[str, tuple[MemoryHit, RecalledTurn]] = {}

    def turns(self) -> list[RecalledTurn]:
        ordered = sorted(self.chosen.values(), key=lambda pair: (pair[0].created or "", pair[0].entry_id))
        return [
            replace(turn, adjacent=index > 0 and _adjacent(ordered[index - 1][0], source, self.links))
            for index, (source, turn) in enumerate(ordered)
        ]

    def tokens(self) -> int:
        return estimate_tokens(
            render_recall(self.query, self.notes, self.turns(), by_meaning_only=self.by_meaning_only)
        )

    def try_note(self, note: str, limit: int) -> bool:
        self.notes.append(note)
        if self.tokens() <= limit:
            return True
        self.notes.pop()
        return False

    def try_turn(self, source: MemoryHit, rank: int | None, max_chars: int) -> bool:
        known = self.chosen.get(source.entry_id)
        if known is not None:
            if rank is not None and not known[1].hit:  # shown as a neighbour first: it is a hit too
                self.chosen[source.entry_id] = (source, replace(known[1], hit=True, rank=rank))
            return True
        # A reader sees the turn out of its day: "yesterday" is resolved against the turn's own time, next to the
        # words ("yesterday (2023-05-07)"), as a small reader does not work it out from the line's date.
        text, clipped = _clip(resolve_relative_dates(source.text or source.summary, source.time), max_chars)
        self.chosen[source.entry_id] = (
            source,
            RecalledTurn(
                entry_id=source.entry_id,
                text=text,
                speaker=source.speaker,
                role=source.role,
                time=source.time,
                thread=source.thread,
                hit=rank is not None,
                rank=rank,
                clipped=clipped,
            ),
        )
        if self.tokens() <= self.budget:
            return True
        del self.chosen[source.entry_id]
        return False


def _fill(
    query: str,
    user: str | None,
    memory_id: str,
    budget: int,
    hits: Sequence[MemoryHit],
    neighbours: Sequence[tuple[MemoryHit | None, MemoryHit | None]],
    notes: tuple[Sequence[str], Sequence[str]],
) -> Recall:
    """Choose what fits ``budget``: the best hit first (clipped to fit if it must), then the notes (``notes`` is
    ``(matched, standing)``: while there are hits, the matched ones up to :data:`NOTES_SHARE` of the budget, the
    standing ones up to :data:`STANDING_SHARE` more), then the hits in rank order, the best ones each followed by
    their neighbouring turns."""
    links = {(before.entry_id, hit.entry_id) for hit, (before, _) in zip(hits, neighbours) if before}
    links |= {(hit.entry_id, after.entry_id) for hit, (_, after) in zip(hits, neighbours) if after}
    block = _Block(query, budget, links, bool(hits) and all(hit.by_meaning for hit in hits))
    hit_chars = max(200, budget * 2)  # one entry takes at most about half the budget
    if hits:
        room = (budget - block.tokens()) * 4 - 80  # the line's date and speaker
        if room < 40 or not block.try_turn(hits[0], 1, min(hit_chars, room)):
            raise InputError(
                f"budget_tokens={budget} is too small to hold one entry of this memory with the "
                f"block's headings; give at least {budget + max(0, 40 - room) // 4 + 30}"
            )
    matched, standing = notes
    for share, group in ((NOTES_SHARE, matched), (STANDING_SHARE, standing)):
        limit = budget if not hits else block.tokens() + int(budget * share)
        for note in group:
            block.try_note(note, limit)
    plan: list[tuple[MemoryHit, int | None]] = []
    for rank, hit in enumerate(hits, 1):
        plan.append((hit, rank))
        if rank <= len(neighbours):
            plan += [(turn, None) for turn in neighbours[rank - 1] if turn is not None]
    for source, hit_rank in plan:
        block.try_turn(source, hit_rank, hit_chars if hit_rank is not None else min(hit_chars, NEIGHBOUR_MAX_CHARS))
    block.notes = [note for note in block.notes if not _repeats(note, block.chosen.values())]
    return Recall(
        query=query,
        user=user,
        memory_id=memory_id,
        notes=tuple(block.notes),
        turns=tuple(block.turns()),
        hits=tuple(hits),
        budget_tokens=budget,
        tokens=block.tokens(),
    )
