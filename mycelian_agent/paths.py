"""Where stores live: the default memory database, which locations are PostgreSQL URLs (and how one is shown without
its password), and early checks of the locations a command is given (``--db``, ``--state``): one that cannot work is
refused in one line before the agent's modules load (~1.5 s) or a server starts, instead of deep inside them.

Both sides of the memory server use these (the agent's checkpointer and commands, the server's stores), so they
live below both."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard
from urllib.parse import urlsplit, urlunsplit

from .errors import ConfigError, make_parent_folder

__all__ = ["POSTGRES_SCHEMES", "check_store_location", "default_db_path", "is_postgres_url", "redact_url"]

#: URL prefixes that name a PostgreSQL database (a memory store or a checkpointer).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: What a postgresql:// memory database or checkpointer imports (the postgres extra).
_POSTGRES_MODULES = ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres")


def default_db_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/mycelian/memory.db``, or ``~/.local/share/mycelian/memory.db`` without XDG_DATA_HOME.

    ``env`` None reads the process environment. XDG_DATA_HOME is the platform's answer to where a user's data goes,
    as HOME is for ``Path.home()``, not a setting of ours: every caller (the commands, a program calling
    ``build_agent()`` without ``db``) must resolve it the same way, or a program and the CLI would use two files.
    """
    base = (os.environ if env is None else env).get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mycelian" / "memory.db"


def is_postgres_url(target: object) -> TypeGuard[str]:
    """Whether ``target`` names a PostgreSQL database (a ``postgresql://`` or ``postgres://`` URL)."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _missing_module(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def check_store_location(location: str | Path | None, option: str, what: str, example: str) -> None:
    """Refuse ``location`` (given as ``option``, holding a ``what``: "memory database", "checkpoint") when it cannot
    be one: a folder (``example`` names a file to use instead), a device, a path under a file, or a postgresql://
    URL without the postgres extra. A missing folder it goes in is created. None and ":memory:" pass."""
    if location is None or str(location) in ("", ":memory:"):
        return
    text = str(location)
    if is_postgres_url(text):
        if missing := _missing_module(_POSTGRES_MODULES):
            raise ConfigError(
                f"{option}: a postgresql:// {what} needs the postgres extra (no module {missing!r}): "
                "pip install 'mycelian-agent[postgres]'"
            )
        return
    file = Path(text).expanduser()
    if file.is_dir():
        raise ConfigError(f"{option} {file} is a folder, not a {what} file (e.g. {option} {file / example})")
    if file.exists() and not file.is_file():
        raise ConfigError(f"{option} {file} is not a regular file, so it cannot be a {what} file")
    make_parent_folder(file, option)
