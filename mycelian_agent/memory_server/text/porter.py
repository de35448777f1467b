"""The Porter stemmer (Martin Porter's 1980 algorithm, as in his ANSI C reference and SQLite FTS5's ``porter``
tokenizer), so that Python sees the same word stems as the SQLite index.

The entry ranking (``bm25.py``) counts query terms in candidate entries in Python, on both backends; its stems must
be those FTS5 found the candidates with. ``tests/test_bm25.py`` checks this module against FTS5 itself.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["stem"]

_VOWELS = frozenset("aeiou")


def _consonant(word: str, i: int) -> bool:
    c = word[i]
    if c in _VOWELS:
        return False
    if c == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: the number of vowel-consonant sequences of ``stem``."""
    m, i, n = 0, 0, len(stem)
    while i < n and _consonant(stem, i):
        i += 1
    while i < n:
        while i < n and not _consonant(stem, i):
            i += 1
        if i >= n:
            break
        while i < n and _consonant(stem, i):
            i += 1
        m += 1
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (hop -> hope, but not snow)."""
    n = len(word)
    if n < 3 or not _consonant(word, n - 1) or _consonant(word, n - 2) or not _consonant(word, n - 3):
        return False
    return word[-1] not in "wxy"


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""), ("ness", ""))
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _replace(word: str, rules: tuple[tuple[str, str], ...], minimum: int) -> str:
    # The longest matching suffix decides (no two rules of a step share a word's ending but in length).
    best = None
    for suffix, replacement in rules:
        if word.endswith(suffix) and (best is None or len(suffix) > len(best[0])):
            best = (suffix, replacement)
    if best is not None:
        stem = word[: len(word) - len(best[0])]
        if _measure(stem) > minimum:
            return stem + best[1]
    return word


def _step4(word: str) -> str:
    best = max((s for s in _STEP4 if word.endswith(s)), key=len, default=None)
    if best is None:
        return word
    stem = word[: len(word) - len(best)]
    if best == "ion" and not stem.endswith(("s", "t")):
        return word
    return stem if _measure(stem) > 1 else word


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter stem of a lower-case token (as FTS5 stems it: over its UTF-8 bytes, any byte that is not an ASCII
    vowel counting as a consonant; tokens under 3 or over 64 bytes unchanged)."""
    if word.isascii():
        return _stem(word) if 2 < len(word) <= 64 else word
    data = word.encode()
    if not 2 < len(data) <= 64:
        return word
    # Suffixes are ASCII, so a byte string cut or extended by the rules is still valid UTF-8.
    return _stem(data.decode("latin-1")).encode("latin-1").decode()


def _stem(word: str) -> str:
    # Step 1a
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # Step 1b
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif _double_consonant(word) and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _cvc(word):
                    word += "e"
                break
    # Step 1c
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    word = _step4(word)
    # Step 5
    if word.endswith("e"):
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _cvc(word[:-1])):
            word = word[:-1]
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word
