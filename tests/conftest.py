"""Shared fixtures: the real embedded memory server over stdio, scripted models, checkpointers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MYCELIAN_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-live-llm", action="store_true", help="run tests that call a real LLM (needs OPENAI_API_KEY)")


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
