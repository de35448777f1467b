"""What the ``bench`` commands share: click settings, option types and callbacks, and how a run's errors reach the
terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from mycelian_agent.errors import MycelianError

__all__ = ["CONTEXT", "COUNT", "FILE", "levels", "reported", "warmup_option", "worker_counts"]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}
FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
COUNT = click.IntRange(min=1)


def levels(_ctx: click.Context, _param: click.Parameter, text: str | None) -> tuple[int, ...] | None:
    """``1,4,16`` → ``(1, 4, 16)``: positive integers (None stays None)."""
    if text is None:
        return None
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"must look like 1,4,16,64, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"must be positive integers, got {text!r}")
    return counts


def worker_counts(_ctx: click.Context, _param: click.Parameter, text: str) -> tuple[int, ...]:
    """``1,2,4`` → ``(1, 2, 4)``; a 0 is dropped (``0`` alone: no ingestion run)."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"must look like 1,2,4 (or 0: no ingestion), got {text!r}") from None
    if any(c < 0 for c in counts):
        raise click.BadParameter(f"must be positive integers (or 0: no ingestion), got {text!r}")
    return tuple(c for c in counts if c > 0)


def warmup_option(default: int) -> Any:
    """``--warmup N``: unmeasured calls before each timed measurement."""
    return click.option(
        "--warmup",
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        help="Unmeasured calls before each measurement.",
    )


@contextmanager
def reported(interrupted: str = "interrupted") -> Iterator[None]:
    """Run a benchmark: a :class:`MycelianError` (bad input or setting) becomes click's one-line error, an
    interruption the message ``interrupted`` and exit status 130."""
    try:
        yield
    except MycelianError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo(interrupted, err=True)
        sys.exit(130)
