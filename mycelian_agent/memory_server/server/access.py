"""Per-token vaults over HTTP: which vaults a bearer token may see and change.

A tokens file maps each token to the vault titles it is limited to, or to ``"*"`` for every vault::

    {"tokens": {"3a9c…": ["alice"], "77e1…": ["bob", "shared"], "admin-…": "*"}}

Titles rather than ids, because a vault's id exists only once it is created: a limited token may create the vaults
it names and no other. ``mycelian-memory-server --tokens-file FILE`` loads it (with ``--token``, that token has
every vault). How it is enforced is in ``app.MemoryServer.call_tool`` and docs/ARCHITECTURE.md ("Access model").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mycelian_agent.errors import ConfigError, InputError
from mycelian_agent.memory_server.storage.validation import check_title

__all__ = ["ALL_VAULTS", "SCOPE_KEY", "TokenScopes", "load_tokens_file", "vaults_of"]

#: The tokens file's value for a token that may use every vault.
ALL_VAULTS = "*"
#: The ASGI scope key where the bearer middleware leaves the vault titles of the request's token (None: all).
SCOPE_KEY = "mycelian.vaults"
#: Token -> the vault titles it is limited to (None: every vault).
TokenScopes = Mapping[str, frozenset[str] | None]


def load_tokens_file(path: str | Path) -> dict[str, frozenset[str] | None]:
    """Read a tokens file (see the module docstring); :class:`ConfigError` naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the tokens file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, dict) or not tokens:
        raise ConfigError(
            f'{path}: expected {{"tokens": {{"TOKEN": ["vault title", ...] or "*"}}}} with at least one token'
        )
    scopes: dict[str, frozenset[str] | None] = {}
    for token, vaults in tokens.items():
        where = f"{path}: tokens[{token[:4]}…]"
        if len(token) < 16 or token != token.strip():
            raise ConfigError(f"{where}: a token must be at least 16 characters without surrounding spaces")
        if vaults == ALL_VAULTS:
            scopes[token] = None
            continue
        if not isinstance(vaults, list) or not vaults:
            raise ConfigError(f'{where}: expected a non-empty list of vault titles or "*" (got {_kind(vaults)})')
        try:
            scopes[token] = frozenset(check_title("vault title", title) for title in vaults)
        except InputError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return scopes


def vaults_of(scope: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The vault titles an HTTP request's token is limited to (None: every vault, or no HTTP request)."""
    if scope is None:
        return None
    return scope.get(SCOPE_KEY)


def _kind(value: Any) -> str:
    return type(value).__name__
