"""Every public async method of the invoker, the agent, the store and the retriever has a sync twin with the same
parameters (names, kinds, defaults and annotations) and the same return type, so the twins cannot drift apart again
(issue 42: ``search`` / ``recall`` had dropped ``by_meaning``, ``aflush_all`` had no twin, the agent's ``invoke`` /
``accept_messages`` had dropped ``memory=``)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from mycelian_agent._sync import sync_twin
from mycelian_agent.agent.graph import MycelianMemoryAgent
from mycelian_agent.agent.invoker import MycelianAgentInvoker
from mycelian_agent.errors import MycelianError
from mycelian_agent.integrations.retriever import MycelianRetriever
from mycelian_agent.integrations.store import MycelianStore


def _async_methods(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction)
        if name.startswith("a") and not name.startswith("_")
    }


def test_every_async_method_of_the_invoker_has_a_sync_twin_with_the_same_parameters() -> None:
    methods = _async_methods(MycelianAgentInvoker)
    assert {
        "aget_all",
        "aget",
        "aupdate",
        "ahistory",
        "adelete",
        "adelete_user",
        "asearch",
        "arecall",
        "aflush_all",
    } <= set(methods)
    drifted = []
    for name, method in sorted(methods.items()):
        twin = getattr(MycelianAgentInvoker, name[1:], None)
        if twin is None or inspect.iscoroutinefunction(twin):
            drifted.append(f"{name}: no sync twin {name[1:]}")
            continue
        wanted, got = inspect.signature(method), inspect.signature(twin)
        if list(wanted.parameters.values()) != list(got.parameters.values()):
            drifted.append(f"{name[1:]}{got} differs from {name}{wanted}")
        elif wanted.return_annotation != got.return_annotation:
            drifted.append(f"{name[1:]} returns {got.return_annotation}, {name} {wanted.return_annotation}")
    assert not drifted, "\n".join(drifted)


#: Public coroutines that have no sync twin on purpose, and why.
NO_TWIN = {
    "MycelianMemoryAgent.wait_for_cancelled_save": "the invoker's bookkeeping between two calls, on the agent's loop",
}


def _public_coroutines(cls: type) -> dict[str, Any]:
    """The public coroutine methods of ``cls`` defined by this package (its own classes and mixins; the twins of
    LangChain's and LangGraph's base classes are theirs)."""
    found = {}
    for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction):
        owner = next(klass for klass in cls.__mro__ if name in vars(klass))
        if not name.startswith("_") and owner.__module__.startswith("mycelian_agent."):
            found[name] = member
    return found


def _drift(cls: type) -> list[str]:
    drifted = []
    for name, method in sorted(_public_coroutines(cls).items()):
        key = f"{cls.__name__}.{name}"
        if key in NO_TWIN:
            continue
        twin = getattr(cls, name[1:], None) if name.startswith("a") else None
        if twin is None or inspect.iscoroutinefunction(twin):
            drifted.append(f"{key}: no sync twin {name[1:]}")
            continue
        if getattr(twin, "__wrapped__", method) is not method:
            drifted.append(f"{cls.__name__}.{name[1:]} is the twin of {twin.__wrapped__.__name__}, not of {name}")
        wanted, got = inspect.signature(method), inspect.signature(twin)
        if list(wanted.parameters.values()) != list(got.parameters.values()):
            drifted.append(f"{cls.__name__}.{name[1:]}{got} differs from {name}{wanted}")
        elif wanted.return_annotation != got.return_annotation:
            drifted.append(
                f"{cls.__name__}.{name[1:]} returns {got.return_annotation}, {name} {wanted.return_annotation}"
            )
    return drifted


@pytest.mark.parametrize(
    "cls", [MycelianAgentInvoker, MycelianMemoryAgent, MycelianStore, MycelianRetriever], ids=lambda cls: cls.__name__
)
def test_every_public_async_method_has_its_own_sync_twin_with_the_same_parameters(cls: type) -> None:
    assert _public_coroutines(cls), f"{cls.__name__}: no async method found (the test would check nothing)"
    assert not _drift(cls), "\n".join(_drift(cls))


def test_the_agents_sync_invoke_and_accept_messages_take_a_memory() -> None:
    for method in (MycelianMemoryAgent.invoke, MycelianMemoryAgent.accept_messages):
        assert inspect.signature(method).parameters["memory"].kind is inspect.Parameter.KEYWORD_ONLY


class _Counter:
    """A loop-bound object with one async method and its twin, as the package's classes make them."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop

    async def aadd(self, a: int, b: int = 1, *, times: int = 1) -> int:
        """Add ``b`` to ``a``, ``times`` times."""
        await asyncio.sleep(0)
        return a + b * times

    add = sync_twin(aadd)


def test_a_sync_twin_is_named_and_documented_after_its_async_method_and_runs_it() -> None:
    assert (_Counter.add.__name__, _Counter.add.__qualname__) == ("add", "_Counter.add")
    assert _Counter.add.__doc__ is not None and _Counter.add.__doc__.startswith("Synchronous :meth:`aadd`")
    assert "Add ``b`` to ``a``" in _Counter.add.__doc__
    assert _Counter().add(2, times=3) == 5  # no loop: a fresh one

    async def total(counter: _Counter) -> int:
        return 0

    with pytest.raises(TypeError, match="named a<name>"):
        sync_twin(total)


def test_a_sync_twin_runs_on_its_owners_loop_and_refuses_inside_a_running_one() -> None:
    from mycelian_agent._sync import LoopThread

    portal = LoopThread()
    try:
        assert _Counter(portal.loop).add(40, 2) == 42

        async def inside() -> None:
            with pytest.raises(MycelianError, match="await its async twin"):
                _Counter(portal.loop).add(1)

        asyncio.run(inside())
    finally:
        portal.close()
