"""The runner scripts of the repository's ``runners/`` folder as ``bench`` commands: ``bench longmemeval`` is
``runners/single_question_runner.py``'s command, ``bench locomo`` is ``runners/locomo_runner.py``'s.

The scripts are what a user runs (``python runners/locomo_runner.py --help``); the ``bench`` group loads a script's
module from its file when its command is asked for, so each command is written once. The benchmarks are installed
from a clone (``pip install -e '.[bench]'``), so ``runners/`` is always beside ``bench/``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import click

from mycelian_agent.errors import ConfigError

__all__ = ["RUNNERS", "RUNNER_SCRIPTS", "runner_command"]

#: The repository's runners/ folder (this file is bench/mycelian_bench/cli/scripts.py).
RUNNERS = Path(__file__).resolve().parents[3] / "runners"

#: ``bench`` command -> (script in runners/, the click command it defines).
RUNNER_SCRIPTS = {
    "longmemeval": ("single_question_runner.py", "longmemeval_command"),
    "locomo": ("locomo_runner.py", "locomo_command"),
}


def _load(script: str) -> ModuleType:
    name = f"mycelian_bench.runners.{Path(script).stem}"
    if name in sys.modules:
        return sys.modules[name]
    path = RUNNERS / script
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ConfigError(f"{path} is missing: the bench commands run the runner scripts of a clone's runners/ folder")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def runner_command(name: str) -> click.Command:
    """The click command of ``bench NAME`` (a key of :data:`RUNNER_SCRIPTS`), from its script."""
    script, attribute = RUNNER_SCRIPTS[name]
    command = getattr(_load(script), attribute)
    assert isinstance(command, click.Command)
    return command
