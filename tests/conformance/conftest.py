"""The backends the conformance suite runs on: one factory fixture per backend, ``backend`` parametrised over them.

A new backend adds a ``<name>_backend`` fixture returning a :class:`conformance.Backend` and its name to
:data:`BACKENDS`; every test of this folder then runs on it.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conformance import Backend

from mycelian_agent.memory_server import MemoryStore

if TYPE_CHECKING:
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster

#: The backends every conformance test runs on (each has a ``<name>_backend`` fixture below).
BACKENDS = ["sqlite", "postgres"]


# -- SQLite: a real file in the test's temporary directory ---------------------------------------------------------


def _sqlite_version(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _sqlite_mark(path: str, version: int) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {int(version)}")


def _sqlite_integrity(store: MemoryStore) -> None:
    # FTS5's own check of its index against the content (a contentless table's delete trigger must recompute
    # exactly what it indexed).
    with store.maintenance_connection() as conn:
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        conn.execute("INSERT INTO contexts_fts (contexts_fts) VALUES ('integrity-check')")


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Backend:
    from mycelian_agent.memory_server.storage.sqlite.migrations import SCHEMA_VERSION

    numbers = itertools.count()
    return Backend(
        name="sqlite",
        target=str(tmp_path / "memory.db"),
        fresh=lambda: str(tmp_path / f"fresh{next(numbers)}.db"),
        schema_version=_sqlite_version,
        current_version=SCHEMA_VERSION,
        mark_version=_sqlite_mark,
        check_integrity=_sqlite_integrity,
    )


# -- PostgreSQL: the session's throwaway cluster (tests/conftest.py), an emptied database per test ------------------


def _pg_version(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(max(version), 0) FROM mycelian_schema").fetchone()
        return int(row[0]) if row else 0


def _pg_mark(url: str, version: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO mycelian_schema (version) VALUES (%s)", (version,))


@pytest.fixture
def postgres_backend(request: pytest.FixtureRequest, pg_cluster: TemporaryCluster) -> Backend:
    from mycelian_agent.memory_server.storage.postgres.migrations import SCHEMA_VERSION

    url: str = request.getfixturevalue("pg_url")
    stem = "conf_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[-40:].lower()
    numbers = itertools.count()

    def fresh() -> str:
        return pg_cluster.create_database(f"{stem}_{next(numbers)}")

    return Backend(
        name="postgres",
        target=url,
        fresh=fresh,
        schema_version=_pg_version,
        current_version=SCHEMA_VERSION,
        mark_version=_pg_mark,
    )


# -- the suite's fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    chosen: Backend = request.getfixturevalue(f"{request.param}_backend")
    return chosen


@pytest.fixture
def store(backend: Backend) -> Iterator[MemoryStore]:
    """A store on this test's (empty) database."""
    opened = backend.open()
    yield opened
    opened.close()
