"""The store LangGraph's tests get: a MycelianStore over an invoker on a real database, the server in process: a
SQLite file, and an emptied PostgreSQL database of the throwaway cluster (skipped where PostgreSQL is missing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mycelian_agent import build_agent
from mycelian_agent.integrations import MycelianStore


@pytest.fixture(params=["sqlite", "postgres"])
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[MycelianStore]:
    db = str(tmp_path / "memory.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    async with build_agent("extractive", server="in-process", db=db, embeddings=False) as invoker:
        yield MycelianStore(invoker)
