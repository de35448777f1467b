"""The word rules both sides of the memory server share: what a word is, which words a query leaves out, and a query's
terms.

The server indexes and ranks with them (``memory_server/text/analysis.py`` builds its stems and index columns on
:data:`WORD_RE`); the recall side (``recall/``) finds a query's words in the hits a server returned with the same
rules, whether that server is the embedded one or a remote Mycelian server. Both import them from here, below both,
so neither reaches into the other for them.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["MAX_QUERY_TERMS", "STOPWORDS", "WORD_RE", "query_terms"]

#: At most this many distinct terms of a query are searched (long queries stay fast).
MAX_QUERY_TERMS = 48

# Letters and digits only: operators, quotes and punctuation can never reach an index's query language.
WORD_RE = re.compile(r"[^\W_]+")

#: Dropped from a query only when it has other terms: OR-ing them matches nearly every entry, which costs time and
#: adds almost nothing to BM25 (their IDF is tiny). Never feedback words either
#: (``memory_server/retrieval/feedback.py``).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    of off on once only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself yourselves s t d ll
    m re ve""".split()
)


def query_terms(query: str) -> list[str]:
    """The distinct word tokens of ``query`` (case-folded, stop words dropped when others remain), in order."""
    words = WORD_RE.findall(unicodedata.normalize("NFKC", query).casefold())
    seen: dict[str, None] = dict.fromkeys(words)
    content = [w for w in seen if w not in STOPWORDS]
    return (content or list(seen))[:MAX_QUERY_TERMS]
