"""The streamable HTTP app (``/mcp``) of the memory server, with optional bearer-token authentication."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mycelian_agent.memory_server.server.access import SCOPE_KEY, TokenScopes
from mycelian_agent.memory_server.server.app import MemoryServer

__all__ = ["BearerTokenMiddleware", "JsonBodyMiddleware", "create_http_app"]

# Bodies up to this size are checked for JSON here; larger ones go on to the SDK, which refuses them (413).
_CHECKED_BODY_BYTES = 8 * 1024 * 1024
_DISCONNECTS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ClientDisconnect)


class _QuietDisconnects(logging.Filter):
    """Drops the SDK's ERROR tracebacks for a client that hung up (a closed stream is how every session ends)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        return not isinstance(exc, _DISCONNECTS)


def _quiet_disconnect_logs() -> None:
    logger = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _QuietDisconnects) for f in logger.filters):
        logger.addFilter(_QuietDisconnects())


def _message_problem(parsed: object) -> str | None:
    """What makes ``parsed`` (a request body) no JSON-RPC message, in one line, or None."""
    items = parsed if isinstance(parsed, list) and parsed else [parsed]
    for item in items:
        if not isinstance(item, dict):
            return f'a JSON-RPC message is a JSON object with "jsonrpc": "2.0", not {type(item).__name__}'
        if item.get("jsonrpc") != "2.0":
            return f'"jsonrpc" must be "2.0" (got {item.get("jsonrpc")!r})'
        if "method" in item and not isinstance(item["method"], str):
            return f'"method" must be a string (got {type(item["method"]).__name__})'
        if "method" not in item and "result" not in item and "error" not in item:
            return 'a message needs "method" (a request or notification) or "result" / "error" (a response)'
        if "params" in item and not isinstance(item["params"], (dict, list)):
            return f'"params" must be an object (got {type(item["params"]).__name__})'
    return None


def _rpc_error(code: int, message: str) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status_code=400)


class JsonBodyMiddleware:
    """POST bodies that are not JSON text get JSON-RPC's parse error (HTTP 400, code -32700) instead of the SDK's
    HTTP 500 and traceback; a client that hangs up before its body arrived is dropped without a log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size, complete = 0, False
        while size <= _CHECKED_BODY_BYTES:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # nobody is left to answer
            messages.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                complete = True
                break
        if complete:
            body = b"".join(m.get("body", b"") for m in messages)
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, invalid UTF-8, too deep
                problem = (
                    "invalid UTF-8"
                    if isinstance(exc, UnicodeDecodeError)
                    else "nested too deep"
                    if isinstance(exc, RecursionError)
                    else str(exc)
                )
                await _rpc_error(-32700, f"Parse error: the request body is not JSON text ({problem})")(
                    scope, receive, send
                )
                return
            invalid = _message_problem(parsed)
            if invalid is not None:  # the SDK answers these with a multi-line pydantic dump
                await _rpc_error(-32600, f"Invalid Request: {invalid}")(scope, receive, send)
                return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


class BearerTokenMiddleware:
    """ASGI middleware answering 401 to any HTTP request without ``Authorization: Bearer <token>`` of a known
    token; it leaves the token's vault titles (None: all) in the scope under ``access.SCOPE_KEY``."""

    def __init__(self, app: ASGIApp, tokens: TokenScopes) -> None:
        if not tokens or not all(tokens):
            raise ValueError("tokens must hold at least one non-empty token")
        self.app = app
        self._tokens = [(token.encode(), vaults) for token, vaults in tokens.items()]

    def _vaults(self, scope: Scope) -> tuple[bool, frozenset[str] | None]:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() != b"bearer":
                    return False, None
                # Constant-time comparison against every token: no token leaks through response timing.
                found = [vaults for token, vaults in self._tokens if hmac.compare_digest(credentials.strip(), token)]
                return (True, found[0]) if found else (False, None)
        return False, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            known, vaults = self._vaults(scope)
            if not known:
                response = JSONResponse(
                    {"error": "unauthorized", "error_description": "missing or invalid bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="mycelian-memory"'},
                )
                await response(scope, receive, send)
                return
            scope[SCOPE_KEY] = vaults
        await self.app(scope, receive, send)


def create_http_app(server: MemoryServer, *, token: str | None = None, tokens: TokenScopes | None = None) -> Starlette:
    """The Starlette ASGI app serving ``server`` over streamable HTTP at ``/mcp``.

    ``token`` (default: the server's own) turns on bearer authentication; that token may use every vault.
    ``tokens`` adds tokens limited to some vaults (``access.load_tokens_file``). Over HTTP ``search_memories`` must name
    its vault (``vault_id``): the access model is in docs/ARCHITECTURE.md ("Access model"). The app's lifespan keeps
    the database
    open from startup to shutdown, so all HTTP sessions share it (a ``:memory:`` database included). Build one
    app per server: FastMCP's session manager runs once.
    """
    server.require_vault = True  # several clients share an HTTP server: a search must name its vault
    app = server.streamable_http_app()
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(asgi_app: Any) -> AsyncIterator[None]:
        async with server.hold(), inner_lifespan(asgi_app):
            yield

    app.router.lifespan_context = lifespan
    _quiet_disconnect_logs()
    app.add_middleware(JsonBodyMiddleware)
    secret = token if token is not None else server.token
    scopes: dict[str, frozenset[str] | None] = dict(tokens or {})
    if secret:
        scopes[secret] = None
    if scopes:
        app.add_middleware(BearerTokenMiddleware, tokens=scopes)
    return app
