"""The store LangGraph's tests get: a MycelianStore over an invoker on a real SQLite file (the server in process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mycelian_agent import build_agent
from mycelian_agent.integrations import MycelianStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MycelianStore]:
    async with build_agent("extractive", server="in-process", db=tmp_path / "memory.db", embeddings=False) as invoker:
        yield MycelianStore(invoker)
