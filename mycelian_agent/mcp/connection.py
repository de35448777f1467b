"""One persistent MCP session to a memory server, and its tools: :class:`MemoryConnection`.

It opens one session (spawning the server for stdio), keeps it in a task of its own (anyio requires a session to be
closed by the task that opened it), loads the tools on it once, and calls through it with a deadline on every call;
over HTTP it replaces a broken session with a new one. How each kind of session sees its end is in
:mod:`.stdio_session` and :mod:`.http_session`; where the servers are, in :mod:`.endpoints`.

The class is most of this module's length: its session task, reconnection and call rules share the same state (the
current session, its end, its generation) and read best together.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import anyio
from langchain_mcp_adapters.sessions import Connection, create_session
from mcp import ClientSession
from mcp.types import CONNECTION_CLOSED, CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest

if TYPE_CHECKING:  # LangChain (~1.5 s to import) only when the tools are asked for: not by list/show/export
    from langchain_core.tools import BaseTool

from ..errors import ConfigError, MemoryServerError, MycelianError, describe_cause, is_transient_text
from .endpoints import SessionFactory
from .http_session import HTTP_TRANSPORTS, WATCHED_HTTP_KEYS, http_session
from .session_end import ServerEnded, SessionEnd
from .stdio_session import ServerLog, stdio_session

__all__ = ["MemoryConnection", "call_tool_unchecked"]


def _settled(requests: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback that forgets a finished request and takes its exception (a caller that was cancelled never
    reads it)."""

    def done(request: asyncio.Future[Any]) -> None:
        requests.discard(request)
        if not request.cancelled():
            request.exception()

    return done


async def _list_tools(session: ClientSession) -> list[Any]:
    tools, cursor = [], None
    while True:
        page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


async def call_tool_unchecked(session: ClientSession, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """``session.call_tool(name, arguments)`` without the SDK's check of the structured content against the tool's
    output schema: what reads the JSON text (this connection, the benchmarks) does not need it, and it costs more
    than the call (mcp 1.30 checks the schema itself too, every call: ~11 ms more an add_entry, ~34 ms more a page of
    50 entries, measured over stdio on a loaded machine)."""
    request = ClientRequest(CallToolRequest(params=CallToolRequestParams(name=name, arguments=arguments)))
    return await session.send_request(request, CallToolResult)


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
    if isinstance(
        exc,
        (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            anyio.EndOfStream,
            EOFError,
            BrokenPipeError,
            ConnectionError,
        ),
    ):
        return True
    error = getattr(exc, "error", None)  # mcp.shared.exceptions.McpError carries an ErrorData
    return (
        getattr(error, "code", None) == CONNECTION_CLOSED
        or "connection closed" in str(exc).lower()
        or "session terminated" in str(exc).lower()
    )


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

    def __init__(
        self,
        connection: Connection | SessionFactory | None = None,
        *,
        open_timeout: float = 60.0,
        call_timeout: float | None = 60.0,
        reconnect_wait: float = 30.0,
        reconnect: bool | None = None,
    ) -> None:
        self._connection = connection
        self._open_timeout = open_timeout
        self._call_timeout = call_timeout
        self._reconnect_wait = reconnect_wait
        if reconnect is None:
            reconnect = (
                not callable(connection)
                and isinstance(connection, Mapping)
                and connection.get("transport") in ("streamable_http", "http", "sse")
            )
        self._reconnect = reconnect
        self._session: ClientSession | None = None
        self._mcp_tools: dict[str, Any] = {}  # the server's tool definitions
        self._tools: dict[str, BaseTool] = {}  # as LangChain tools, made on first use
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None  # why the session's task ended on its own
        self._broken = False
        self._ended: SessionEnd | None = None  # the current session's end (server exited, connection lost)
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
            # Third-party boundary: the adapter is annotated with ClientSession and calls only its call_tool.
            self._tools = {
                name: convert_mcp_tool_to_langchain_tool(proxy, tool)  # type: ignore[arg-type]
                for name, tool in self._mcp_tools.items()
            }
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

    async def open(self) -> MemoryConnection:
        """Open the session (spawning the server for stdio) and load its tools."""
        if self._session is not None:
            return self
        if self._connection is None:
            raise ConfigError("MemoryConnection needs a connection (see embedded_connection / http_connection)")
        if not callable(self._connection) and "transport" not in self._connection:
            keys = ", ".join(map(repr, self._connection)) or "none"  # not the values: headers may hold a token
            raise ConfigError(
                f"the connection has no 'transport' key (keys: {keys}; see embedded_connection / http_connection)"
            )
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
        except TimeoutError:
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
        connection, stop = self._connection, self._stop
        assert connection is not None and stop is not None
        ended = self._ended = SessionEnd()
        log: ServerLog | None = None
        try:
            opened: AbstractAsyncContextManager[ClientSession]
            if callable(connection):
                opened = connection()
            elif connection["transport"] == "stdio":
                log = ServerLog()
                opened = stdio_session(connection, ended, log)
            elif connection["transport"] in HTTP_TRANSPORTS and set(connection) <= WATCHED_HTTP_KEYS:
                opened = http_session(connection, ended)
            else:
                opened = create_session(connection)
            async with opened as session:
                if not callable(connection):  # a factory's session comes initialised
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
        except BaseException as exc:
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

    def _connect_error(self, exc: BaseException, log: ServerLog | None = None) -> MemoryServerError:
        """Why a session could not be opened, in the user's terms (a refused token is not a network problem; a
        spawned server that exited says why in its last words)."""
        last = log.tail() if log is not None else ""
        if last and log is not None:
            log.told = True
            return MemoryServerError(f"the embedded memory server did not start: {last}")
        status = _http_status(exc)
        where = self._describe()
        if status == 401:
            return MemoryServerError(
                f"invalid token: the memory server ({where}) refused the bearer token. Check "
                "--token (or MYCELIAN_TOKEN) against the token the server was started with"
            )
        if status == 403:
            return MemoryServerError(f"the memory server ({where}) refused access (HTTP 403)")
        if status == 404:
            return MemoryServerError(
                f"no MCP endpoint at {where} (HTTP 404): the URL should end in /mcp, e.g. http://127.0.0.1:11546/mcp"
            )
        if status == 421:
            return MemoryServerError(
                f"the memory server ({where}) refused the Host header (HTTP 421): start it with "
                "--allowed-host NAME for the name used in this URL"
            )
        return MemoryServerError(
            f"could not connect to the memory server ({where}): {describe_cause(exc)}", transient=True
        )

    def _describe(self) -> str:
        connection = self._connection
        if connection is None:
            return "no connection"
        if callable(connection):
            return "in-process server"
        if connection["transport"] == "stdio":
            return "embedded server: " + " ".join([connection.get("command", ""), *connection.get("args", [])])
        return f"{connection['transport']} {connection.get('url')}"

    async def _stop_task(self, wait: float) -> None:
        if self._task is None:
            return
        assert self._stop is not None
        self._stop.set()
        task, self._task = self._task, None
        try:
            await asyncio.wait_for(asyncio.shield(task), wait)
        except TimeoutError:
            task.cancel()
            try:
                await task
            except BaseException:
                pass
        except Exception:
            pass
        self._session = None

    async def aclose(self) -> None:
        """Close the session (and stop a spawned server). Safe to call twice."""
        self._opened = False
        await self._stop_task(wait=10.0)

    async def __aenter__(self) -> MemoryConnection:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _live(self) -> ClientSession | None:
        """The current session while it is usable (open, not marked broken, its task running), else None."""
        if self._broken or self._task is None or self._task.done():
            return None
        return self._session

    def _alive(self) -> bool:
        return self._live() is not None

    async def _usable_session(self, name: str) -> tuple[ClientSession, int]:
        """The current session; over HTTP a broken one is replaced first (waiting for the server to return)."""
        if (session := self._live()) is not None:
            return session, self._generation
        if not self._opened:
            raise MemoryServerError("the memory server connection is not open (use 'async with' first)", tool=name)
        cause = f": {describe_cause(self._failure)}" if self._failure else ""
        if not self._reconnect:
            raise MemoryServerError(
                f"{name} failed: the connection to the memory server is closed ({self._describe()}){cause}. "
                "The server exited or was stopped; check its log, then run again (stored messages are not "
                "stored twice)",
                tool=name,
            )
        assert self._lock is not None
        given_up = self._given_up
        async with self._lock:
            if (session := self._live()) is not None:  # another call reconnected meanwhile
                return session, self._generation
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
                    return self.session, self._generation
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
                "not stored twice"
            )
            self._given_up += 1
        raise MemoryServerError(f"{name} failed: {self._give_up_reason}", tool=name)

    async def _watched_call(
        self, session: ClientSession, ended: SessionEnd | None, name: str, arguments: dict[str, Any]
    ) -> Any:
        """``session.call_tool`` in a task of its own, ended early when the session ends: the stdio server's output
        ends, or an HTTP request finds the server gone (refused, reset). A request in flight then, or sent just
        after, would otherwise wait for its deadline.

        A caller cancelled meanwhile (a web request timing out, the call timeout) leaves the request running until
        its answer comes: the MCP client's receive loop hands an answer to its request's stream after a yield, and
        a request cancelled in that yield closes the stream under it; the loop takes that for the connection
        closing and ends, which closes the session for every later call (mcp 1.30, stdio and in-memory alike)."""
        if ended is not None and ended.is_set():
            raise ServerEnded(ended.reason)
        call = asyncio.ensure_future(call_tool_unchecked(session, name, arguments))
        self._requests.add(call)
        call.add_done_callback(_settled(self._requests))
        # One future woken by the answer or by the session's end (no task per call for the race); cancelling this
        # caller cancels only the future, never the request.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def answered(_: asyncio.Future[Any]) -> None:
            if not waiter.done():
                waiter.set_result(None)

        call.add_done_callback(answered)
        if ended is not None:
            ended.wake(waiter)
        try:
            await waiter
        finally:
            call.remove_done_callback(answered)
            if ended is not None:
                ended.forget(waiter)
        if call.done() and not call.cancelled():
            return call.result()
        if not call.done():
            call.cancel()  # the session ended: its receive loop is over, so nothing can race this
            await asyncio.gather(call, return_exceptions=True)
        if ended is None:
            return call.result()  # cancelled with its session (raises CancelledError)
        raise ServerEnded(ended.reason)

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
            raise MemoryServerError(
                f"{name}: arguments cannot be sent as JSON text: {describe_cause(exc)}", tool=name
            ) from None
        session, generation = await self._usable_session(name)
        ended = self._ended
        try:
            # asyncio.timeout, not wait_for: no task of its own per call
            async with asyncio.timeout(self._call_timeout):
                return await self._watched_call(session, ended, name, arguments)
        except TimeoutError:
            if self._reconnect:
                self._mark_broken(generation)
            raise MemoryServerError(
                f"{name} failed: no answer from the memory server within {self._call_timeout:g}s ({self._describe()})",
                tool=name,
                transient=True,
            ) from None
        except MycelianError:
            raise
        except Exception as exc:  # transport failures surface as many exception types
            closed = isinstance(exc, ServerEnded) or _is_closed(exc) or not self._alive()
            if self._reconnect:
                self._mark_broken(generation)
                raise MemoryServerError(
                    f"{name} failed: {describe_cause(exc)} (connection to {self._describe()} lost; reconnecting)",
                    tool=name,
                    transient=True,
                ) from exc
            if closed:
                # The session's end says why (the server's exit status, its last words) better than the SDK's
                # "Connection closed" that the calls in flight get.
                why = await ended.explained() if ended is not None and ended.is_set() else describe_cause(exc)
                raise MemoryServerError(
                    f"{name} failed: the connection to the memory server closed ({self._describe()}): "
                    f"{why}. The server exited or was stopped; check its log, then run again "
                    "(stored messages are not stored twice)",
                    tool=name,
                ) from exc
            raise MemoryServerError(f"{name} failed: {describe_cause(exc)}", tool=name, transient=True) from exc

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Call tool ``name`` directly and return its text; an error result raises :class:`MemoryServerError`."""
        result = await self.call_tool_result(name, arguments)
        text = _result_text(result)
        if result.isError:
            raise MemoryServerError(
                f"{name} failed: {text or 'error with no message'}", tool=name, transient=is_transient_text(text)
            )
        return text

    async def call_json(self, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """Call tool ``name`` and parse its JSON result."""
        text = await self.call(name, arguments)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise MemoryServerError(f"{name} returned non-JSON text: {text[:200]!r}", tool=name) from None
