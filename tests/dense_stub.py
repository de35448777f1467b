"""A stand-in encoder for dense-vector tests: deterministic, counting, no model (test_dense, test_vector_writer)."""

from __future__ import annotations

import numpy as np

from mycelian_agent.memory_server.storage.base import MemoryStore

_GROUPS = [{"car", "automobile", "vehicle"}, {"dog", "puppy", "hound"}, {"paris", "france"}, {"bread", "bakery"}]


class CountingEncoder:
    """Words of one group share a dimension (synonyms the encoder "knows" and BM25 does not); counts texts."""

    def __init__(self) -> None:
        self.texts = 0
        self.calls: list[int] = []

    def __call__(self, texts):
        self.texts += len(texts)
        self.calls.append(len(texts))
        rows = []
        for text in texts:
            vec = np.full(len(_GROUPS) + 1, 1e-3, dtype=np.float32)
            for word in text.lower().split():
                for i, group in enumerate(_GROUPS):
                    vec[i] += word.strip(".,?!") in group
            rows.append(vec / np.linalg.norm(vec))
        return np.stack(rows)


def memory_of(store: MemoryStore) -> tuple[str, str]:
    """A new vault and memory in ``store``: ``(vault_id, memory_id)``."""
    v = store.create_vault("v")["vaultId"]
    return v, store.create_memory(v, "m", "NOTES")["memoryId"]
