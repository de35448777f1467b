"""How LangGraph's sync store tests build their store: a MycelianStore over a sync invoker (its event loop runs in a
thread of its own, so the store's sync methods work from the test's thread), the server in process."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mycelian_agent import build_agent
from mycelian_agent.integrations import MycelianStore


@contextmanager
def mycelian_store(db: str | None = None) -> Iterator[MycelianStore]:
    """A MycelianStore on ``db`` (a SQLite file or a PostgreSQL URL; None: a SQLite file in a temporary folder)."""
    with tempfile.TemporaryDirectory() as folder:
        target = db or str(Path(folder) / "memory.db")
        with build_agent("extractive", server="in-process", db=target, embeddings=False) as invoker:
            yield MycelianStore(invoker)
