"""Which items of a context document come from an entry, so that deleting the entry takes them out of every snapshot.

A context document is free text the agent writes (the extractive model's Markdown sections of ``- `` items, an LLM's
paraphrases), and it does not say which entries an item came from. So the rule reads the text: an **item** is a list
line (``-``, ``*``, ``+`` or ``1.``) or, in a prose line, one sentence; headings and blank lines are never removed.
Each item and each entry text is reduced to its **content words** in order (``text.analysis``: words that are not
stop words, stemmed as the index stems them, so "allergic"/"Allergic," and "peanuts"/"peanut" match).

An item is **derived from** the deleted entry when it quotes it: it shares, in the same order, a run of at least
:data:`MIN_RUN` content words with one of the entry's texts (its raw entry or summary, in any of its versions), or
the whole of a shorter such text of at least two content words ("I'm allergic to peanuts" is quoted by "Alice is
allergic to peanuts"). It is removed unless a **remaining entry supports it equally**: quotes of the same length
from an entry still in the memory keep it, since the fact is still held there.

Limits (docs/LIFECYCLE.md, docs/ARCHITECTURE.md "Versions and forgetting"): an item that restates the entry in other
words (an LLM's paraphrase, a translation, a summary merging several entries into new wording) shares no such run and
stays; and a client that read the document before the delete may write the item back with its next ``put_context``.
After a delete the user can read the document (``get_context``) and write a corrected one with ``put_context``, or
delete the memory, which removes every snapshot.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from mycelian_agent.errors import MemoryServerError
from mycelian_agent.memory_server.storage.rows import Row
from mycelian_agent.memory_server.text.analysis import tokens
from mycelian_agent.words import STOPWORDS, WORD_RE, query_terms

__all__ = [
    "MIN_RUN",
    "SUPPORT_CANDIDATES",
    "content_changed",
    "content_words",
    "quote_length",
    "remove_derived",
    "rewrites",
    "supporting_texts",
]

#: Content words in a row, in the same order, that make an item a quote of an entry's text.
MIN_RUN = 3
#: Remaining entries read, best match first, to see whether one still supports an item of a deleted entry.
SUPPORT_CANDIDATES = 20


class _Reads(Protocol):
    """The two search reads of a store (``storage.base.MemoryStore``) that :func:`supporting_texts` uses."""

    def lexical_candidates(
        self, memory_id: str, terms: list[str], limit: int, after: str | None, before: str | None
    ) -> list[tuple[int, float]]: ...

    def entry_rows(self, memory_id: str, seqs: Sequence[int]) -> Mapping[int, Row]: ...


_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_HEADING = re.compile(r"^\s*#")
# A sentence ends at . ! ? (or their full-width forms) followed by space; a decimal point or "e.g." inside a word stays.
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+")


def content_changed(memory_id: str) -> MemoryServerError:
    """The error when a snapshot being rewritten changed meanwhile (another client's ``put_context``): the whole
    delete or update is rolled back, and a retry reads the new snapshot."""
    return MemoryServerError(
        f"a context snapshot of memory {memory_id} changed while it was being rewritten; nothing was changed: try again"
    )


def content_words(text: str) -> list[str]:
    """``text``'s words that are not stop words, stemmed as the index stems them, in order (repeats kept)."""
    words = WORD_RE.findall(unicodedata.normalize("NFKC", text).casefold())
    return [stem for word in words if word not in STOPWORDS for stem in tokens(word)]


def _longest_run(item: Sequence[str], text: Sequence[str]) -> int:
    """The longest run of words ``item`` and ``text`` share in the same order (dynamic programming; both short)."""
    best = 0
    previous = [0] * (len(text) + 1)
    for word in item:
        current = [0] * (len(text) + 1)
        for j, other in enumerate(text, start=1):
            if word == other:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def quote_length(item: Sequence[str], texts: Iterable[Sequence[str]]) -> int:
    """How much ``item`` (content words) quotes the best of ``texts`` (each an entry text's content words): the
    length of their longest shared run when it is at least :data:`MIN_RUN`, or the whole of a text of two words or
    more; 0 when it quotes none."""
    best = 0
    for text in texts:
        run = _longest_run(item, text)
        if run >= MIN_RUN or (run >= 2 and run == len(text)):
            best = max(best, run)
    return best


def _split_items(line: str) -> list[str]:
    """The items of one line: the line itself for a list item, else its sentences."""
    if _LIST_ITEM.match(line):
        return [line]
    return [part for part in _SENTENCE_END.split(line) if part]


def remove_derived(content: str, gone: Sequence[str], support: Callable[[str], Sequence[str]]) -> tuple[str, int]:
    """``content`` without the items derived from the texts ``gone`` (the deleted entry's raw entries and
    summaries), and how many were removed. ``support(item)`` gives the texts of remaining entries that may quote
    an item as much (called only for items that quote a gone text). A line whose items all go is dropped; a prose
    line keeps its other sentences."""
    gone_words = [words for words in (content_words(text) for text in gone) if words]
    removed = 0
    lines: list[str] = []
    for line in content.splitlines():
        if not line.strip() or _HEADING.match(line):
            lines.append(line)
            continue
        kept: list[str] = []
        for item in _split_items(line):
            words = content_words(item)
            quoted = quote_length(words, gone_words) if words else 0
            if quoted and quote_length(words, (content_words(t) for t in support(item))) < quoted:
                removed += 1
            else:
                kept.append(item)
        if kept:
            lines.append(" ".join(kept) if not _LIST_ITEM.match(line) else line)
    if not removed:
        return content, 0
    return "\n".join(lines), removed


def rewrites(
    contexts: Iterable[tuple[int, str]], gone: Sequence[str], support: Callable[[str], Sequence[str]]
) -> list[tuple[int, str, str, int]]:
    """``(seq, old content, new content, items removed)`` of each snapshot ``(seq, content)`` that holds items
    derived from the texts ``gone`` (:func:`remove_derived`)."""
    support = functools.cache(support)  # snapshots repeat their items: look each one's support up once
    changed = []
    for seq, content in contexts:
        rewritten, removed = remove_derived(content, gone, support)
        if removed:
            changed.append((seq, content, rewritten, removed))
    return changed


def supporting_texts(store: _Reads, memory_id: str, item: str, deleted: int) -> list[str]:
    """The raw entries and summaries of the memory's entries other than ``deleted`` that best match ``item``'s
    words (the index's own ranking, at most :data:`SUPPORT_CANDIDATES`): those that may still hold its fact."""
    terms = query_terms(item)
    if not terms:
        return []
    seqs = [
        seq
        for seq, _ in store.lexical_candidates(memory_id, terms, SUPPORT_CANDIDATES + 1, None, None)
        if seq != deleted
    ][:SUPPORT_CANDIDATES]
    return [text for row in store.entry_rows(memory_id, seqs).values() for text in (row["raw_entry"], row["summary"])]
