"""Thin synchronous wrappers over the async API.

MCP sessions are bound to the event loop that opened them, so sync calls run on that loop: a background loop
thread owned by the sync builder, or the loop of the thread that built the agent. A class whose objects know that
loop (``loop``) builds each sync method from its async twin with :func:`sync_twin`, so the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from .errors import MycelianError

__all__ = ["LoopBound", "LoopThread", "run_sync", "sync_twin"]

T = TypeVar("T")
P = ParamSpec("P")


class LoopBound(Protocol):
    """An object whose async methods run on one event loop: the loop its MCP session was opened on (None: none
    yet, a sync call then runs in a fresh loop)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...


Owner = TypeVar("Owner", bound=LoopBound)


def sync_twin(method: Callable[Concatenate[Owner, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[Owner, P], T]:
    """The synchronous twin of the async method ``method`` (``aflush`` gives ``flush``): the same parameters and
    return type, running the coroutine on the owner's ``loop`` with :func:`run_sync` (so not inside a running event
    loop). Used in the class body, after the async method: ``flush = sync_twin(aflush)``."""
    name = method.__name__
    if not name.startswith("a"):
        raise TypeError(f"sync_twin takes an async method named a<name>, got {name!r}")

    def twin(self: Owner, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(method(self, *args, **kwargs), self.loop)

    functools.update_wrapper(twin, method)  # its signature (through __wrapped__), module and annotations
    twin.__name__ = name[1:]
    twin.__qualname__ = f"{method.__qualname__[: -len(name)]}{name[1:]}"
    twin.__doc__ = f"Synchronous :meth:`{name}` (not for use inside a running event loop).\n\n{inspect.getdoc(method)}"
    return twin


def run_sync(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``coro`` to completion from synchronous code.

    With ``loop`` (running in another thread) the coroutine runs there; without it, in a fresh event loop.
    Inside a running event loop this refuses: blocking there would deadlock it.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        coro.close()
        raise MycelianError(
            "a synchronous mycelian-agent method was called inside a running event loop; "
            "await its async twin instead (e.g. `await invoker.aprocess_conversation_message(...)`)"
        )
    if loop is not None and loop.is_running():
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
    if loop is not None:
        coro.close()
        raise MycelianError("the event loop this agent was built on is no longer running; build it again")
    return asyncio.run(coro)


class LoopThread:
    """An event loop running in a daemon thread, for sync use of loop-bound resources."""

    def __init__(self, name: str = "mycelian-agent-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop thread and wait for its result."""
        return run_sync(coro, self.loop)

    def close(self) -> None:
        """Stop the loop and join its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
