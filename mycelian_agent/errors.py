"""The one error family users of the package catch.

Every failure the package reports is a :class:`MycelianError`; subclasses say which part failed.
Messages name the problem and, where possible, how to fix it.
"""

from __future__ import annotations

import os

__all__ = [
    "ConfigError",
    "InputError",
    "MemoryServerError",
    "MycelianError",
    "PromptError",
    "ThreadBusyError",
    "ToolCallError",
    "describe_cause",
    "is_transient",
    "is_transient_text",
    "make_folder",
    "make_parent_folder",
    "one_line",
]

_TRANSIENT_MARKERS = ("database is locked", "database is busy", "timed out", "timeout", "temporarily unavailable")


class MycelianError(Exception):
    """Base class of every error raised by mycelian-agent."""


class ConfigError(MycelianError):
    """A setting is missing or malformed (model spec, server URL, checkpointer spec, ...)."""


class InputError(MycelianError):
    """A conversation input (file, message, role, id) is invalid. The message names where and what."""


class PromptError(MycelianError):
    """A prompt file is missing or a template variable was not supplied."""


class MemoryServerError(MycelianError):
    """The memory server refused a call or could not be reached.

    ``tool`` is the MCP tool that failed; ``transient`` tells whether retrying may help.
    """

    def __init__(self, message: str, *, tool: str | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.tool = tool
        self.transient = transient


class ToolCallError(MycelianError):
    """The model did not produce a usable tool call and no fallback was allowed."""


class ThreadBusyError(MycelianError):
    """Another process is writing the thread (``holder`` says which)."""

    def __init__(self, thread_id: str, holder: str) -> None:
        super().__init__(
            f"thread {thread_id!r} is being written by another process ({holder}); two writers of one "
            "thread would store its messages twice. Wait for it to finish (or pass a wait: "
            "build_agent(thread_wait=SECONDS), replay --thread-wait SECONDS), or use another thread id"
        )
        self.thread_id = thread_id
        self.holder = holder


def describe_cause(exc: BaseException) -> str:
    """The innermost useful message of an exception, as ``Type: message`` (unwrapping anyio exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's messages carry newlines and tabs)."""
    return " ".join(str(exc).split())


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a memory server failure that a retry may cure (a :class:`MemoryServerError` so marked)."""
    return isinstance(exc, MemoryServerError) and exc.transient


def is_transient_text(text: str) -> bool:
    """Whether a memory server's error message describes a failure that a retry may cure."""
    lowered = text.lower()
    return any(marker in lowered for marker in _TRANSIENT_MARKERS)


def _mkdir_problem(folder: str | os.PathLike[str]) -> str | None:
    """Create ``folder`` and its parents if missing; what went wrong, or None."""
    from pathlib import Path

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "a file of that name is in the way"
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def make_folder(path: str | os.PathLike[str], what: str) -> None:
    """Create folder ``path`` (and its parents) if missing; a :class:`ConfigError` naming ``what`` (an option such as
    ``--out``) and the path when it cannot be (a file stands in the way, no permission, a read-only place)."""
    if problem := _mkdir_problem(path):
        raise ConfigError(f"{what} {path}: cannot create the folder: {problem}")


def make_parent_folder(path: str | os.PathLike[str], what: str) -> None:
    """Create the folder file ``path`` goes in, as :func:`make_folder` does."""
    from pathlib import Path

    if problem := _mkdir_problem(Path(path).parent):
        raise ConfigError(f"{what} {path}: cannot create its folder {Path(path).parent}: {problem}")
