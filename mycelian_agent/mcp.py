"""One persistent MCP session to a memory server, and its tools.

``langchain-mcp-adapters``' ``client.get_tools()`` opens a new session per tool call: over stdio that spawns a
server process every time (~574 ms a call measured, against ~3.5 ms on a persistent session). A
:class:`MemoryConnection` opens one session, keeps it in a task of its own (anyio requires a session to be closed
by the task that opened it) and loads the tools on it once. The tools call through the connection, which puts a
deadline on every call and, over HTTP, replaces a broken session with a new one (python-sdk issue 1577: a request
whose server died is otherwise never answered).

A dead server is seen at once, not after a call's deadline: over stdio the session's read stream is watched (the
server's output ends), over HTTP its transport (a refused or reset connection), and every call waiting on a session
that ended fails then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from contextvars import ContextVar
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import anyio
import httpx
from typing import TYPE_CHECKING

from langchain_mcp_adapters.sessions import Connection, create_session
from mcp import ClientSession
from mcp.types import CONNECTION_CLOSED

if TYPE_CHECKING:  # LangChain (~1.5 s to import) only when the tools are asked for: not by list/show/export
    from langchain_core.tools import BaseTool

from .errors import ConfigError, MemoryServerError, MycelianError, describe_cause, is_transient_text

__all__ = ["MemoryConnection", "SessionFactory", "embedded_connection", "http_connection", "in_process_connection"]

#: Opens an initialised client session (an in-process server); the alternative to a langchain-mcp-adapters Connection.
SessionFactory = Callable[[], AbstractAsyncContextManager[ClientSession]]


def embedded_connection(db: str | None = None, *, extra_args: Sequence[str] = (),
                        env: Mapping[str, str] | None = None) -> Connection:
    """A stdio connection that spawns our embedded memory server on SQLite file ``db`` (None: its default)."""
    args = ["-m", "mycelian_agent.memory_server", "--transport", "stdio", *(["--db", str(db)] if db else []), *extra_args]
    connection: dict[str, Any] = {"transport": "stdio", "command": sys.executable, "args": args}
    # The MCP SDK gives a server only a few variables (HOME, PATH, ...): PYTHONPATH is passed on so that the server
    # imports the same package as this process (a source checkout on PYTHONPATH, not another installed copy).
    inherited = {name: os.environ[name] for name in ("PYTHONPATH",) if os.environ.get(name)}
    if env is not None or inherited:
        connection["env"] = {**inherited, **(env or {})}
    return connection  # type: ignore[return-value]


def http_connection(url: str, *, token: str | None = None, timeout: float = 30.0) -> Connection:
    """A streamable-HTTP connection to a memory server at ``url`` (e.g. ``http://127.0.0.1:11546/mcp``)."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"memory server URL must start with http:// or https://, got {url!r}")
    connection: dict[str, Any] = {"transport": "streamable_http", "url": url, "timeout": timeout}
    if token:
        connection["headers"] = {"Authorization": f"Bearer {token}"}
    return connection  # type: ignore[return-value]


def in_process_connection(db: str, *, embeddings: bool | str | None = None,
                          embeddings_model: str | None = None) -> SessionFactory:
    """Our memory server inside this process on SQLite file ``db``, over in-memory streams: the same tools and
    checks as the embedded stdio server, without a subprocess (notebooks, tests, single-process apps).
    ``embeddings``: None (the server's default: on when a dense model is installed), False, or how vectors are
    written (True or ``"behind"``, ``"inline"``); ``embeddings_model``: the dense model (None: auto)."""

    def open_session() -> AbstractAsyncContextManager[ClientSession]:
        from mcp.shared.memory import create_connected_server_and_client_session

        from .memory_server import create_server

        writes = embeddings if embeddings in ("behind", "inline") else "behind"
        return create_connected_server_and_client_session(
            create_server(db, embeddings=None if embeddings is None else bool(embeddings), embeddings_writes=writes,
                          embeddings_model=embeddings_model))

    return open_session


def _settled(requests: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback that forgets a finished request and takes its exception (a caller that was cancelled never
    reads it)."""

    def done(request: asyncio.Future[Any]) -> None:
        requests.discard(request)
        if not request.cancelled():
            request.exception()

    return done


_OUTPUT_ENDED = "the server process exited (its output ended)"


class _ServerEnded(ConnectionError):
    """The session ended (the stdio server's output ended, an HTTP request found the server gone) while a call
    waited for its answer, or before it was sent."""


class _SessionEnd:
    """Set once a session is over, with why: what a waiting call races against (:meth:`MemoryConnection._watched_call`)
    so it fails at once instead of waiting out its deadline."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason = "the session ended"
        self.processes: list[Any] = []  # stdio: the spawned server (see _watch_spawns), for its exit status

    def set(self, reason: str | None = None) -> None:
        if not self.event.is_set():
            if reason:
                self.reason = reason
            self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()

    async def explained(self) -> str:
        """The reason, with a spawned server's exit status (waiting up to :data:`EXIT_STATUS_WAIT` for the process
        to be reaped: its output ends a moment before)."""
        if not self.processes or self.reason != _OUTPUT_ENDED and not self.reason.startswith(_OUTPUT_ENDED + ";"):
            return self.reason
        process = self.processes[-1]
        code = None
        with anyio.move_on_after(EXIT_STATUS_WAIT):
            while code is None:
                code = _peek_exit(process.pid)
                if code is None:
                    if process.returncode is not None:
                        code = process.returncode
                    else:
                        await anyio.sleep(0.02)
        status = _exit_status(code)
        return self.reason.replace("exited", f"exited ({status})", 1) if status else self.reason


def _peek_exit(pid: int) -> int | None:
    """The exit status of child ``pid`` if it has exited, read without reaping it (``waitid`` with ``WNOWAIT``, so
    asyncio's own waiter still gets it): a negative signal number if it was killed; None while it runs, or where
    ``waitid`` is missing. Read as soon as the output ends because asyncio reports 255 for a child reaped before its
    waiter thread gets to it."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return None
    try:
        info = waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


class _ServerLog:
    """Where a spawned server's stderr goes: a temporary file, so that a server that fails to start or dies is
    reported in the client's one error line (its last words) instead of as lines of its own before it. What the
    server wrote is passed on to this process's stderr when the session closes, unless an error already told it."""

    def __init__(self) -> None:
        import tempfile

        self.file = tempfile.TemporaryFile(mode="w+b")
        self.told = False

    def tail(self, lines: int = 1) -> str:
        """The last ``lines`` non-empty lines the server wrote, joined with " | " ("" if none)."""
        try:
            self.file.flush()
            size = self.file.seek(0, 2)
            self.file.seek(max(0, size - 8192))
            text = self.file.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""
        return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-lines:])

    def close(self) -> None:
        """Pass on what the server wrote (unless an error told it), then drop the file."""
        try:
            if not self.told:
                self.file.seek(0)
                text = self.file.read().decode("utf-8", errors="replace")
                if text:
                    sys.stderr.write(text)
                    sys.stderr.flush()
        except (OSError, ValueError):
            pass
        finally:
            self.file.close()


#: The server processes spawned by the stdio sessions opened in this context (see :func:`_watch_spawns`).
_SPAWNED: ContextVar[list[Any] | None] = ContextVar("mycelian_spawned", default=None)
#: How long a stdio server whose output ended is given to be reaped, so that its exit status can be reported.
EXIT_STATUS_WAIT = 1.0


def _watch_spawns() -> None:
    """Let :func:`_stdio_session` see the process the MCP SDK spawns (the SDK keeps it to itself), so a server that
    dies is reported with its exit status. Wraps the SDK's spawn function once; a future SDK without it leaves the
    report without the status."""
    from mcp.client import stdio as sdk

    spawn = getattr(sdk, "_create_platform_compatible_process", None)
    if spawn is None or getattr(spawn, "mycelian_watched", False):
        return

    async def watched(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        spawned = _SPAWNED.get()
        if spawned is not None:
            spawned.append(process)
        return process

    watched.mycelian_watched = True  # type: ignore[attr-defined]
    sdk._create_platform_compatible_process = watched


def _exit_status(code: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"`` (a negative code is the signal), or "" when unknown."""
    if code is None:
        return ""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class _WatchedStream:
    """The read stream of a stdio session that sets ``ended`` when the server's output ends (the process exited):
    the MCP client fails the requests in flight then, but a request sent afterwards would wait for its deadline."""

    def __init__(self, stream: Any, ended: _SessionEnd, log: _ServerLog | None = None) -> None:
        self._stream = stream
        self._ended = ended
        self._log = log

    def _end(self) -> None:
        if self._ended.is_set():
            return
        last = self._log.tail(3) if self._log is not None else ""
        self._ended.set(_OUTPUT_ENDED + (f"; its last words: {last}" if last else ""))

    async def __aenter__(self) -> "_WatchedStream":
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        self._end()
        return await self._stream.__aexit__(*exc_info)

    def __aiter__(self) -> "_WatchedStream":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._end()
            raise

    async def receive(self) -> Any:
        return await self._stream.receive()

    async def aclose(self) -> None:
        self._end()
        await self._stream.aclose()


@asynccontextmanager
async def _stdio_session(connection: Mapping[str, Any], ended: _SessionEnd,
                         log: _ServerLog) -> AsyncIterator[ClientSession]:
    """A session with a server spawned over stdio (as langchain-mcp-adapters opens it), whose end is watched and
    whose stderr goes to ``log``."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=connection["command"], args=list(connection.get("args", [])),
                                   env=connection.get("env"))
    _watch_spawns()
    async with contextlib.AsyncExitStack() as stack:
        token = _SPAWNED.set(ended.processes)  # only while the SDK spawns the server
        try:
            read, write = await stack.enter_async_context(stdio_client(params, errlog=log.file))
        finally:
            _SPAWNED.reset(token)
        watched = _WatchedStream(read, ended, log)
        yield await stack.enter_async_context(ClientSession(watched, write))  # type: ignore[arg-type]


class _WatchedBody(httpx.AsyncByteStream):
    """A response body whose transport failure (the server died while answering) ends the session."""

    def __init__(self, stream: Any, ended: _SessionEnd, url: str) -> None:
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
            self._ended.set(_connection_lost(self._url, exc))
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()


class _WatchedTransport(httpx.AsyncBaseTransport):
    """The HTTP session's transport: a refused or broken connection (not a timeout) ends the session at once.

    The MCP SDK swallows a response stream that breaks before its answer (the request then waits for its deadline)
    and fails its whole task group on a refused POST without answering the requests in flight; watching the
    transport sees both."""

    def __init__(self, inner: httpx.AsyncBaseTransport, ended: _SessionEnd, url: str) -> None:
        self._inner = inner
        self._ended = ended
        self._url = url

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TimeoutException:
            raise
        except httpx.TransportError as exc:
            self._ended.set(_connection_lost(self._url, exc))
            raise
        response.stream = _WatchedBody(response.stream, self._ended, self._url)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


#: The keys of a streamable-HTTP connection :func:`_http_session` honours; a connection with others (an
#: ``httpx_client_factory``, ``session_kwargs``) is opened by langchain-mcp-adapters as given, unwatched.
_WATCHED_HTTP_KEYS = frozenset({"transport", "url", "headers", "timeout", "sse_read_timeout", "auth"})


def _connection_lost(url: str, exc: BaseException) -> str:
    return f"the connection to {url} was lost or refused ({describe_cause(exc)})"


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@asynccontextmanager
async def _http_session(connection: Mapping[str, Any], ended: _SessionEnd) -> AsyncIterator[ClientSession]:
    """A streamable-HTTP session (as langchain-mcp-adapters opens it) whose transport is watched: a server that
    dies or refuses connections ends the session at once. The session is closed on the server (HTTP DELETE) only
    while it is healthy: a dead server is not waited for again on the way out."""
    from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

    url = connection["url"]
    timeout = httpx.Timeout(_seconds(connection.get("timeout"), 30.0),
                            read=_seconds(connection.get("sse_read_timeout"), 300.0))
    client = httpx.AsyncClient(transport=_WatchedTransport(httpx.AsyncHTTPTransport(), ended, url), timeout=timeout,
                               headers=connection.get("headers"), auth=connection.get("auth"))
    async with client, streamable_http_client(url, http_client=client, terminate_on_close=False) \
            as (read, write, session_id), ClientSession(read, write) as session:
        try:
            yield session
        finally:
            if (sid := session_id()) and not ended.is_set():
                with contextlib.suppress(Exception):
                    with anyio.fail_after(2.0):
                        await client.delete(url, headers={MCP_SESSION_ID: sid})


async def _list_tools(session: ClientSession) -> list[Any]:
    tools, cursor = [], None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


def _result_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in getattr(result, "content", []) or []]
    return "\n".join(p for p in parts if p)


class _SessionProxy:
    """What the LangChain tools call (``session.call_tool``): the connection's current session, with its timeout,
    reconnection and error rules, so the tools outlive a reconnect."""

    def __init__(self, connection: MemoryConnection) -> None:
        self._connection = connection

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *_: Any, **__: Any) -> Any:
        return await self._connection.call_tool_result(name, arguments)


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of the first httpx status error inside ``exc`` (exception groups and causes searched)."""
    seen: list[BaseException | None] = [exc]
    visited: set[int] = set()
    while seen:
        current = seen.pop()
        if current is None or id(current) in visited:
            continue
        visited.add(id(current))
        response = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        if isinstance(current, BaseExceptionGroup):
            seen.extend(current.exceptions)
        seen.extend((current.__cause__, current.__context__))
    return None


def _is_closed(exc: BaseException) -> bool:
    """Whether a transport exception says the session is gone (as opposed to one slow or failed request)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, EOFError,
                        BrokenPipeError, ConnectionError)):
        return True
    error = getattr(exc, "error", None)  # mcp.shared.exceptions.McpError carries an ErrorData
    return getattr(error, "code", None) == CONNECTION_CLOSED or "connection closed" in str(exc).lower() \
        or "session terminated" in str(exc).lower()


class MemoryConnection:
    """A persistent MCP session to a memory server.

    Use as ``async with MemoryConnection(conn) as memory: ...`` with a connection from :func:`embedded_connection`,
    :func:`http_connection` or :func:`in_process_connection`.

    Every tool call has a deadline (``call_timeout`` seconds; None: none). Over HTTP a call that times out or loses
    the connection (the server refuses or resets it: seen at once, also for calls in flight) marks the session
    broken and fails as transient; the next call opens a new session, trying to connect for ``reconnect_wait``
    seconds (every 0.1 to 1 s, the last try at the end of the window) before it fails with an error naming the URL,
    and the agent retries the failed call with the same arguments (so the same idempotency key: nothing is stored
    twice). Calls queued behind a window that ran out fail with it instead of waiting another. So a server that dies
    for good is reported about ``reconnect_wait`` seconds after it died. A stdio or in-process session that closed
    (the server exited) is not retried: the error says so at once.
    """

    def __init__(self, connection: Connection | SessionFactory | None = None, *, open_timeout: float = 60.0,
                 call_timeout: float | None = 60.0, reconnect_wait: float = 30.0,
                 reconnect: bool | None = None) -> None:
        self._connection = connection
        self._open_timeout = open_timeout
        self._call_timeout = call_timeout
        self._reconnect_wait = reconnect_wait
        if reconnect is None:
            reconnect = not callable(connection) and isinstance(connection, Mapping) \
                and connection.get("transport") in ("streamable_http", "http", "sse")
        self._reconnect = reconnect
        self._session: ClientSession | None = None
        self._mcp_tools: dict[str, Any] = {}  # the server's tool definitions
        self._tools: dict[str, BaseTool] = {}  # as LangChain tools, made on first use
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None  # why the session's task ended on its own
        self._broken = False
        self._ended: _SessionEnd | None = None  # the current session's end (server exited, connection lost)
        self._given_up = 0  # reconnection windows that ran out, so calls queued behind one fail with it
        self._give_up_reason = ""
        self._requests: set[asyncio.Future[Any]] = set()  # tool calls in flight (kept until their answer comes)
        self._generation = 0
        self._lock: asyncio.Lock | None = None
        self._opened = False
        #: Sessions opened after the first (reconnections), for reports and tests.
        self.reconnects = 0

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            raise MemoryServerError("the memory server connection is not open (use 'async with' first)")
        return self._session

    def _langchain_tools(self) -> dict[str, BaseTool]:
        if len(self._tools) != len(self._mcp_tools):
            from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool

            proxy = _SessionProxy(self)
            self._tools = {name: convert_mcp_tool_to_langchain_tool(proxy, tool)  # type: ignore[arg-type]
                           for name, tool in self._mcp_tools.items()}
        return self._tools

    @property
    def tools(self) -> list[BaseTool]:
        """The server's tools as LangChain tools bound to this connection (they survive reconnections)."""
        return list(self._langchain_tools().values())

    def tool(self, name: str) -> BaseTool:
        """The tool called ``name``; a clear error if the server does not offer it."""
        try:
            return self._langchain_tools()[name]
        except KeyError:
            offered = ", ".join(sorted(self._mcp_tools)) or "none"
            raise MemoryServerError(
                f"the memory server has no tool {name!r} (it offers: {offered}); is it a Mycelian memory server?",
                tool=name,
            ) from None

    def parameters(self, name: str) -> set[str]:
        """The parameter names tool ``name`` declares (empty for a tool the server does not offer): how a client
        tells our server's extras (``vault_id``, time bounds) from upstream Mycelian's surface."""
        tool = self._mcp_tools.get(name)
        schema = getattr(tool, "inputSchema", None) or {}
        return set(schema.get("properties", {})) if isinstance(schema, Mapping) else set()

    async def open(self) -> "MemoryConnection":
        """Open the session (spawning the server for stdio) and load its tools."""
        if self._session is not None:
            return self
        if self._connection is None:
            raise ConfigError("MemoryConnection needs a connection (see embedded_connection / http_connection)")
        self._lock = asyncio.Lock()
        await self._start(self._open_timeout, load_tools=True)
        self._opened = True
        return self

    async def _start(self, timeout: float, *, load_tools: bool) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._failure = None
        self._task = asyncio.create_task(self._keep_session(ready, load_tools), name="mycelian-mcp-session")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except asyncio.TimeoutError:
            await self._stop_task(wait=1.0)
            raise MemoryServerError(
                f"the memory server did not answer within {timeout:.0f}s ({self._describe()})", transient=True
            ) from None
        except MemoryServerError:
            await self._stop_task(wait=1.0)
            raise
        self._broken = False
        self._generation += 1

    async def _keep_session(self, ready: asyncio.Future[None], load_tools: bool) -> None:
        assert self._connection is not None and self._stop is not None
        stop = self._stop
        ended = self._ended = _SessionEnd()
        log: _ServerLog | None = None
        try:
            factory = self._connection if callable(self._connection) else None
            transport = None if factory is not None else self._connection.get("transport")  # type: ignore[union-attr]
            if factory is not None:
                opened = factory()
            elif transport == "stdio":
                log = _ServerLog()
                opened = _stdio_session(self._connection, ended, log)  # type: ignore[arg-type]
            elif transport in ("streamable_http", "streamable-http", "http") \
                    and set(self._connection) <= _WATCHED_HTTP_KEYS:  # type: ignore[arg-type]
                opened = _http_session(self._connection, ended)  # type: ignore[arg-type]
            else:
                opened = create_session(self._connection)  # type: ignore[arg-type]
            async with opened as session:
                if factory is None:  # a factory's session comes initialised
                    await session.initialize()
                if load_tools:
                    self._mcp_tools = {tool.name: tool for tool in await _list_tools(session)}
                    self._tools = {}
                self._session = session
                ready.set_result(None)
                stopping = asyncio.ensure_future(stop.wait())
                ending = asyncio.ensure_future(ended.wait())
                try:
                    await asyncio.wait({stopping, ending}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                    ending.cancel()
                if ended.is_set() and not stop.is_set():
                    # Seen at once: later calls fail now instead of waiting for their deadline.
                    self._failure = MemoryServerError(ended.reason)
                    self._session = None
                    if log is not None:
                        log.told = True  # its last words are in the reason
        except BaseException as exc:  # noqa: BLE001 - reported to open() or to the next call
            if not ready.done():
                ready.set_exception(self._connect_error(exc, log))
            elif not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                self._failure = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            ended.set()  # calls still waiting on this session fail now
            if log is not None:
                log.close()
            if self._stop is stop:
                self._session = None

    def _connect_error(self, exc: BaseException, log: _ServerLog | None = None) -> MemoryServerError:
        """Why a session could not be opened, in the user's terms (a refused token is not a network problem; a
        spawned server that exited says why in its last words)."""
        last = log.tail() if log is not None else ""
        if last and log is not None:
            log.told = True
            return MemoryServerError(f"the embedded memory server did not start: {last}")
        status = _http_status(exc)
        where = self._describe()
        if status == 401:
            return MemoryServerError(f"invalid token: the memory server ({where}) refused the bearer token. Check "
                                     "--token (or MYCELIAN_TOKEN) against the token the server was started with")
        if status == 403:
            return MemoryServerError(f"the memory server ({where}) refused access (HTTP 403)")
        if status == 404:
            return MemoryServerError(f"no MCP endpoint at {where} (HTTP 404): the URL should end in /mcp, e.g. "
                                     "http://127.0.0.1:11546/mcp")
        if status == 421:
            return MemoryServerError(f"the memory server ({where}) refused the Host header (HTTP 421): start it with "
                                     "--allowed-host NAME for the name used in this URL")
        return MemoryServerError(f"could not connect to the memory server ({where}): {describe_cause(exc)}",
                                 transient=True)

    def _describe(self) -> str:
        if callable(self._connection):
            return "in-process server"
        conn = self._connection or {}
        if conn.get("transport") == "stdio":
            return "embedded server: " + " ".join([conn.get("command", ""), *conn.get("args", [])])
        return f"{conn.get('transport')} {conn.get('url')}"

    async def _stop_task(self, wait: float) -> None:
        if self._task is None:
            return
        assert self._stop is not None
        self._stop.set()
        task, self._task = self._task, None
        try:
            await asyncio.wait_for(asyncio.shield(task), wait)
        except asyncio.TimeoutError:
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - a broken session's teardown has nothing left to report
                pass
        except Exception:  # noqa: BLE001 - closing must not mask the caller's own error
            pass
        self._session = None

    async def aclose(self) -> None:
        """Close the session (and stop a spawned server). Safe to call twice."""
        self._opened = False
        await self._stop_task(wait=10.0)

    async def __aenter__(self) -> "MemoryConnection":
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _alive(self) -> bool:
        return (self._session is not None and not self._broken and self._task is not None
                and not self._task.done())

    async def _usable_session(self, name: str) -> tuple[ClientSession, int]:
        """The current session; over HTTP a broken one is replaced first (waiting for the server to return)."""
        if self._alive():
            return self._session, self._generation  # type: ignore[return-value]
        if not self._opened:
            raise MemoryServerError("the memory server connection is not open (use 'async with' first)", tool=name)
        cause = f": {describe_cause(self._failure)}" if self._failure else ""
        if not self._reconnect:
            raise MemoryServerError(
                f"{name} failed: the connection to the memory server is closed ({self._describe()}){cause}. "
                "The server exited or was stopped; check its log, then run again (stored messages are not "
                "stored twice)", tool=name)
        assert self._lock is not None
        given_up = self._given_up
        async with self._lock:
            if self._alive():  # another call reconnected meanwhile
                return self._session, self._generation  # type: ignore[return-value]
            if self._given_up != given_up:
                # Another call waited the whole window while this one queued: waiting again would double it.
                raise MemoryServerError(f"{name} failed: {self._give_up_reason}", tool=name)
            await self._stop_task(wait=1.0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._reconnect_wait
            delay, last = 0.1, None
            while True:  # attempts until the window closes, the last one at its end
                left = deadline - loop.time()
                try:  # a refused connection fails at once; a server that accepts but never answers, within 1 s
                    await self._start(max(1.0, min(self._open_timeout, left)), load_tools=False)
                    self.reconnects += 1
                    return self._session, self._generation  # type: ignore[return-value]
                except MemoryServerError as exc:
                    if not exc.transient:  # e.g. the token is refused: waiting will not help
                        raise
                    last = exc
                left = deadline - loop.time()
                if left <= 0:
                    break
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, 1.0)
            self._give_up_reason = (
                f"the memory server has been unreachable for {self._reconnect_wait:g}s ({self._describe()}; last "
                f"error: {last}). Start it (or check --server and the network), then run again: stored messages are "
                "not stored twice")
            self._given_up += 1
        raise MemoryServerError(f"{name} failed: {self._give_up_reason}", tool=name)

    async def _watched_call(self, session: ClientSession, ended: _SessionEnd | None, name: str,
                            arguments: dict[str, Any]) -> Any:
        """``session.call_tool`` in a task of its own, ended early when the session ends: the stdio server's output
        ends, or an HTTP request finds the server gone (refused, reset). A request in flight then, or sent just
        after, would otherwise wait for its deadline.

        A caller cancelled meanwhile (a web request timing out, the call timeout) leaves the request running until
        its answer comes: the MCP client's receive loop hands an answer to its request's stream after a yield, and
        a request cancelled in that yield closes the stream under it; the loop takes that for the connection
        closing and ends, which closes the session for every later call (mcp 1.30, stdio and in-memory alike)."""
        if ended is not None and ended.is_set():
            raise _ServerEnded(ended.reason)
        call = asyncio.ensure_future(session.call_tool(name, arguments))
        self._requests.add(call)
        call.add_done_callback(_settled(self._requests))
        ending = asyncio.ensure_future(ended.wait()) if ended is not None else None
        try:
            await asyncio.wait({call} if ending is None else {call, ending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if ending is not None:
                ending.cancel()
        if call.done() and not call.cancelled():
            return call.result()
        if not call.done():
            call.cancel()  # the session ended: its receive loop is over, so nothing can race this
            await asyncio.gather(call, return_exceptions=True)
        if ended is None:
            return call.result()  # cancelled with its session (raises CancelledError)
        raise _ServerEnded(ended.reason)

    def _mark_broken(self, generation: int) -> None:
        if generation == self._generation:
            self._broken = True

    async def call_tool_result(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call tool ``name`` and return the MCP ``CallToolResult`` (error results included); a transport failure
        or timeout raises :class:`MemoryServerError` (``transient`` when a retry may cure it)."""
        arguments = dict(arguments or {})
        try:
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:  # a lone surrogate would make the transport fail, or hang
            raise MemoryServerError(f"{name}: arguments cannot be sent as JSON text: {describe_cause(exc)}",
                                    tool=name) from None
        session, generation = await self._usable_session(name)
        ended = self._ended
        try:
            if self._call_timeout is None:
                return await self._watched_call(session, ended, name, arguments)
            return await asyncio.wait_for(self._watched_call(session, ended, name, arguments), self._call_timeout)
        except asyncio.TimeoutError:
            if self._reconnect:
                self._mark_broken(generation)
            raise MemoryServerError(
                f"{name} failed: no answer from the memory server within {self._call_timeout:g}s "
                f"({self._describe()})", tool=name, transient=True) from None
        except MycelianError:
            raise
        except Exception as exc:  # transport failures surface as many exception types
            closed = isinstance(exc, _ServerEnded) or _is_closed(exc) or not self._alive()
            if self._reconnect:
                self._mark_broken(generation)
                raise MemoryServerError(f"{name} failed: {describe_cause(exc)} (connection to {self._describe()} "
                                        "lost; reconnecting)", tool=name, transient=True) from exc
            if closed:
                # The session's end says why (the server's exit status, its last words) better than the SDK's
                # "Connection closed" that the calls in flight get.
                why = await ended.explained() if ended is not None and ended.is_set() else describe_cause(exc)
                raise MemoryServerError(
                    f"{name} failed: the connection to the memory server closed ({self._describe()}): "
                    f"{why}. The server exited or was stopped; check its log, then run again "
                    "(stored messages are not stored twice)", tool=name) from exc
            raise MemoryServerError(f"{name} failed: {describe_cause(exc)}", tool=name, transient=True) from exc

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Call tool ``name`` directly and return its text; an error result raises :class:`MemoryServerError`."""
        result = await self.call_tool_result(name, arguments)
        text = _result_text(result)
        if result.isError:
            raise MemoryServerError(f"{name} failed: {text or 'error with no message'}", tool=name,
                                    transient=is_transient_text(text))
        return text

    async def call_json(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call tool ``name`` and parse its JSON result."""
        text = await self.call(name, arguments)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise MemoryServerError(f"{name} returned non-JSON text: {text[:200]!r}", tool=name) from None

