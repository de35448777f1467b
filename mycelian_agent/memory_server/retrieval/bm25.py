"""The entry score of both backends: BM25 with Lucene's IDF, from the memory's own statistics, computed in Python.

FTS5 (SQLite) and ``tsvector`` (PostgreSQL) only find the candidates (the backend's own ranking, cut at
:data:`CANDIDATES` x the pool); each candidate is then scored here, the same way on both backends:

    score(e) = sum over query stems t of  idf(t) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(e) / avglen))
    idf(t)   = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))

with ``tf`` the weighted count of ``t`` in the entry's fields (``ranking.ENTRY_WEIGHTS``: raw_entry 1, summary 1.5,
labels 1, dated 0.5, the weighted term frequency of BM25F), ``len(e)`` its token count over the fields, and
``N``, ``n(t)``, ``avglen`` the memory's entries, those containing ``t`` and their mean length
(``term_stats.py``, kept in the database by each write). Lucene's IDF never reaches zero: FTS5's
``ln((N - n + 0.5) / (n + 0.5))``, clamped to 1e-6, gives every word in more than half the entries the same
near-zero weight, so in a 16-entry memory every score read 5e-06 and the order was noise. Statistics per memory
(FTS5's are the whole file's) make a memory's scores independent of the other memories in the database.

Tokens are FTS5's: ``unicode61 remove_diacritics 2`` words, Porter-stemmed (``porter.py``, checked against FTS5).
"""

from __future__ import annotations

import json
import math
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mycelian_agent.memory_server.text.porter import stem
from mycelian_agent.memory_server.retrieval.ranking import ENTRY_WEIGHTS, WORD_RE, entry_dated, entry_labels, revises

__all__ = ["B", "CANDIDATES", "CONVERSATION_TAGS", "K1", "EntryCache", "EntryTerms", "entry_terms", "idf", "query_stems", "score", "tokens"]

#: BM25's term-frequency saturation and length normalisation (FTS5's and Lucene's defaults).
K1 = 1.2
B = 0.75
#: The backend's own ranking is cut at this many times the pool before the BM25 here re-scores it. On LoCoMo dev
#: (in process) 1, 2 and 4 gave any / all@10 0.822 / 0.705, 0.812 / 0.695 and 0.812 / 0.695: the index's own pool
#: (FTS5's file-wide statistics) is the better candidate set there, and 1 re-scores the fewest rows. A memory with
#: fewer matches than the pool (every small one) is scored whole.
CANDIDATES = 1

_FIELD_WEIGHTS = ENTRY_WEIGHTS[1:]  # raw_entry, summary, labels, dated (the index's mkey column weighs 0)


def _fold_char(char: str) -> str:
    # remove_diacritics 2: Latin letters lose their marks ("é" -> "e"); other scripts keep theirs, as in FTS5.
    if char.isascii() or not ("\u00c0" <= char <= "\u024f" or "\u1e00" <= char <= "\u1eff"):
        return char
    return "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    """The stems FTS5 indexes ``text`` as (lower-cased words, Latin diacritics removed, Porter-stemmed)."""
    lowered = text.lower().replace("\u03c2", "\u03c3")  # final sigma folds to sigma, as in unicode61
    if not lowered.isascii():
        lowered = "".join(_fold_char(c) for c in lowered)
    return [stem(word) for word in WORD_RE.findall(lowered)]


def query_stems(terms: Iterable[str]) -> list[str]:
    """The stems of query ``terms`` (``ranking.query_terms``: distinct words), in order, one per word: two words
    of one stem ("dogs", "dog") give it twice (see :func:`rank`)."""
    return [s for term in terms for s in tokens(term)]


@dataclass(frozen=True)
class EntryTerms:
    """An entry as BM25 sees it: weighted frequency of each stem over its fields, token count; who said it (the
    ``speaker`` tag, else the ``role``) and whether its own text says something changed (``ranking.revises``)."""

    frequencies: Mapping[str, float]
    length: int
    author: str | None = None
    revises: bool = False


#: Tags naming the conversation an entry belongs to, not what it says: the same words on every entry of a thread
#: ("quickstart-lisbon-trip"), they are not scored as labels. In the quickstart's 16-entry memory they put "lisbon"
#: and "trip" in every entry, so the IDF of both was ~0 and the order noise.
CONVERSATION_TAGS = frozenset({"thread"})


def entry_terms(raw_entry: str, summary: str, tags: Mapping[str, str] | str, moment: str | None) -> EntryTerms:
    """How BM25 sees an entry (:class:`EntryTerms`) from its stored fields."""
    values = json.loads(tags) if isinstance(tags, str) else tags
    labels = entry_labels({k: v for k, v in values.items() if k not in CONVERSATION_TAGS})
    fields = (raw_entry, summary, labels, entry_dated(moment) if moment else "")
    frequencies: dict[str, float] = {}
    length = 0
    for text, weight in zip(fields, _FIELD_WEIGHTS, strict=True):
        words = tokens(text)
        length += len(words)
        for word in words:
            frequencies[word] = frequencies.get(word, 0.0) + weight
    author = values.get("speaker") or values.get("role")
    return EntryTerms(frequencies, length, author if isinstance(author, str) else None,
                      revises(raw_entry))


def idf(entries: int, containing: int) -> float:
    """Lucene's BM25 IDF: positive for every term, ln 2 for a term in half the entries, ~1/(2N) in all of them."""
    containing = min(max(containing, 1), max(entries, 1))
    return math.log(1.0 + (entries - containing + 0.5) / (containing + 0.5))


def score(
    entry: EntryTerms, weights: Mapping[str, float], average_length: float
) -> dict[str, float]:
    """Each query stem's BM25 share in ``entry`` (``weights``: stem -> idf), for the stems it contains."""
    norm = K1 * (1.0 - B + B * entry.length / average_length) if average_length > 0 else K1
    shares = {}
    for term, weight in weights.items():
        tf = entry.frequencies.get(term)
        if tf:
            shares[term] = weight * tf * (K1 + 1.0) / (tf + norm)
    return shares


def rank(
    candidates: Sequence[tuple[int, EntryTerms]],
    stems: Sequence[str],
    entries: int,
    frequencies: Mapping[str, int],
    total_length: int,
) -> list[tuple[int, float, dict[str, float]]]:
    """``(seq, score > 0, shares per stem)`` of the candidates containing a query stem, best first (ties: newer)."""
    weights: dict[str, float] = {}
    for t in stems:  # a stem the query holds twice weighs twice (its query-term frequency, as FTS5 and Lucene sum)
        weights[t] = weights.get(t, 0.0) + idf(entries, frequencies.get(t, 0))
    average = total_length / entries if entries else 0.0
    scored = []
    for seq, entry in candidates:
        shares = score(entry, weights, average)
        if shares:
            scored.append((seq, sum(shares.values()), shares))
    scored.sort(key=lambda hit: (-hit[1], -hit[0]))
    return scored


#: Entries whose :class:`EntryTerms` stay cached (least recently scored dropped first; ~2 KB each).
CACHED_ENTRIES = 20_000


class EntryCache:
    """:class:`EntryTerms` by entry seq, least recently used dropped first. Entries never change after they are
    written (only deleted, and a deleted seq is never a candidate again, nor reused), so nothing goes stale: a
    search tokenises only the candidates it has not scored before. Thread-safe."""

    def __init__(self, capacity: int = CACHED_ENTRIES) -> None:
        self._capacity = capacity
        self._items: OrderedDict[int, EntryTerms] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, items: Iterable[tuple[int, EntryTerms]]) -> None:
        """Keep these entries' terms (the newest put are the most recently used)."""
        with self._lock:
            self._items.update(items)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def get(self, seqs: Sequence[int], load: Callable[[list[int]], Mapping[int, EntryTerms]]) -> dict[int, EntryTerms]:
        """The terms of ``seqs`` (``load(missing seqs)`` computes the others; seqs it does not return are left out)."""
        found: dict[int, EntryTerms] = {}
        with self._lock:
            for seq in seqs:
                item = self._items.get(seq)
                if item is not None:
                    self._items.move_to_end(seq)
                    found[seq] = item
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            loaded = load(missing)
            found.update(loaded)
            self.put(loaded.items())
        return {seq: found[seq] for seq in seqs if seq in found}
