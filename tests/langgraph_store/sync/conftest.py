"""The sync ``store`` of LangGraph's sync tests: a MycelianStore on a SQLite file and on an emptied PostgreSQL
database of the throwaway cluster (skipped where PostgreSQL is missing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mycelian_build import mycelian_store

from mycelian_agent.integrations import MycelianStore


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[MycelianStore]:
    db = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with mycelian_store(db) as built:
        yield built
