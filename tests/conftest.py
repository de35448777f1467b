"""Shared fixtures: the real embedded memory server over stdio, scripted models, checkpointers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# mcp binds ``sys.stderr`` as the default ``errlog`` of ``stdio_client`` when the module is first imported, and every
# stdio server spawned afterwards gets that object's file descriptor as its stderr. Import it now, under pytest's
# session-wide capture, so that a stdio server first spawned inside a ``capsys`` test (no file descriptor there)
# does not leave a dead ``errlog`` behind for every later test.
import mcp.client.stdio  # noqa: F401  (imported for that side effect)

# Property-based tests (tests/test_properties.py): "ci" (the default) runs 2,500 cases per property test, ~10k in all
# within about a minute; HYPOTHESIS_PROFILE=thorough runs ten times more. No example database (hypothesis still
# keeps a small .hypothesis/ cache, which git ignores through its own .gitignore).
settings.register_profile("ci", max_examples=2500, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=25000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MYCELIAN_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-live-llm", action="store_true",
                     help="run tests that call a real LLM (needs OPENAI_API_KEY)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-live-llm"):
        return
    skip = pytest.mark.skip(reason="live LLM test: pass --run-live-llm and set OPENAI_API_KEY")
    for item in items:
        if "live_llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def shared_data() -> Path:
    """The evaluation data directory beside the repository (skips when it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"evaluation data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def python() -> str:
    return sys.executable
