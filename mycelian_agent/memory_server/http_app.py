"""The streamable HTTP app (``/mcp``) of the memory server, with optional bearer-token authentication."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .app import MemoryServer

__all__ = ["BearerTokenMiddleware", "create_http_app"]


class BearerTokenMiddleware:
    """ASGI middleware answering 401 to any HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("token must be a non-empty string")
        self.app = app
        self._token = token.encode()

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                # Constant-time comparison: the token must not leak through response timing.
                return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self._token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            response = JSONResponse(
                {"error": "unauthorized", "error_description": "missing or invalid bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="mycelian-memory"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_http_app(server: MemoryServer, *, token: str | None = None) -> Starlette:
    """The Starlette ASGI app serving ``server`` over streamable HTTP at ``/mcp``.

    ``token`` (default: the server's own) turns on bearer authentication. The app's lifespan keeps the database
    open from startup to shutdown, so all HTTP sessions share it (a ``:memory:`` database included). Build one
    app per server: FastMCP's session manager runs once.
    """
    app = server.streamable_http_app()
    inner_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(asgi_app: Any) -> AsyncIterator[None]:
        async with server.hold(), inner_lifespan(asgi_app):
            yield

    app.router.lifespan_context = lifespan
    secret = token if token is not None else server.token
    if secret:
        app.add_middleware(BearerTokenMiddleware, token=secret)
    return app
