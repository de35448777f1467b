"""Retrieval: how a question finds entries — the search pipeline (:mod:`.pipeline`: :func:`search`, the
``search_memories`` tool, and :func:`rank_entries`), BM25 scoring, neighbouring-turn context, query feedback, names,
time in the question, and fusion with dense similarities (:mod:`.dense`). It reads a store only through the store's
search reads (``storage.base.SEARCH_READS``)."""

from __future__ import annotations

from mycelian_agent.memory_server.retrieval.pipeline import (
    MATCH_MEANING,
    MATCH_WORDS,
    RankedEntry,
    rank_entries,
    search,
)

__all__ = ["MATCH_MEANING", "MATCH_WORDS", "RankedEntry", "rank_entries", "search"]
