"""A streamable-HTTP session with a memory server whose transport is watched: a server that dies, refuses or resets
the connection ends the session at once (its :class:`~.session_end.SessionEnd`), where the MCP SDK would leave the
requests in flight waiting for their deadline.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import httpx
from mcp import ClientSession

from ..errors import describe_cause
from .session_end import SessionEnd

__all__ = [
    "HTTP_TRANSPORTS",
    "WATCHED_HTTP_KEYS",
    "WatchedBody",
    "WatchedTransport",
    "connection_lost",
    "http_session",
    "seconds",
]


class WatchedBody(httpx.AsyncByteStream):
    """A response body whose transport failure (the server died while answering) ends the session."""

    def __init__(self, stream: httpx.AsyncByteStream, ended: SessionEnd, url: str) -> None:
        self._stream = stream
        self._ended = ended
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TimeoutException:  # a slow answer is the call deadline's business, not a dead server
            raise
        except httpx.TransportError as exc:
            self._ended.set(connection_lost(self._url, exc))
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()


class WatchedTransport(httpx.AsyncBaseTransport):
    """The HTTP session's transport: a refused or broken connection (not a timeout) ends the session at once.

    The MCP SDK swallows a response stream that breaks before its answer (the request then waits for its deadline)
    and fails its whole task group on a refused POST without answering the requests in flight; watching the
    transport sees both."""

    def __init__(self, inner: httpx.AsyncBaseTransport, ended: SessionEnd, url: str) -> None:
        self._inner = inner
        self._ended = ended
        self._url = url

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TimeoutException:
            raise
        except httpx.TransportError as exc:
            self._ended.set(connection_lost(self._url, exc))
            raise
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = WatchedBody(response.stream, self._ended, self._url)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


#: The spellings of the streamable-HTTP transport that langchain-mcp-adapters accepts.
HTTP_TRANSPORTS = frozenset({"streamable_http", "streamable-http", "http"})
#: The keys of a streamable-HTTP connection :func:`http_session` honours; a connection with others (an
#: ``httpx_client_factory``, ``session_kwargs``) is opened by langchain-mcp-adapters as given, unwatched.
WATCHED_HTTP_KEYS = frozenset({"transport", "url", "headers", "timeout", "sse_read_timeout", "auth"})


def connection_lost(url: str, exc: BaseException) -> str:
    return f"the connection to {url} was lost or refused ({describe_cause(exc)})"


def seconds(value: float | timedelta | None, default: float) -> float:
    if value is None:
        return default
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@asynccontextmanager
async def http_session(connection: Mapping[str, Any], ended: SessionEnd) -> AsyncIterator[ClientSession]:
    """A streamable-HTTP session (as langchain-mcp-adapters opens it) whose transport is watched: a server that
    dies or refuses connections ends the session at once. The session is closed on the server (HTTP DELETE) only
    while it is healthy: a dead server is not waited for again on the way out."""
    from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

    url = connection["url"]
    timeout = httpx.Timeout(
        seconds(connection.get("timeout"), 30.0), read=seconds(connection.get("sse_read_timeout"), 300.0)
    )
    client = httpx.AsyncClient(
        transport=WatchedTransport(httpx.AsyncHTTPTransport(), ended, url),
        timeout=timeout,
        headers=connection.get("headers"),
        auth=connection.get("auth"),
    )
    async with (
        client,
        streamable_http_client(url, http_client=client, terminate_on_close=False) as (read, write, session_id),
        ClientSession(read, write) as session,
    ):
        try:
            yield session
        finally:
            if (sid := session_id()) and not ended.is_set():
                with contextlib.suppress(Exception):
                    with anyio.fail_after(2.0):
                        await client.delete(url, headers={MCP_SESSION_ID: sid})
