"""Every public async method of the invoker has a sync twin with the same parameters (names, kinds, defaults and
annotations) and the same return type, so the twins cannot drift apart again (issue 42: ``search`` / ``recall``
had dropped ``by_meaning``, ``aflush_all`` had no twin)."""

from __future__ import annotations

import inspect

from mycelian_agent.agent.invoker import MycelianAgentInvoker


def _async_methods(cls: type) -> dict[str, object]:
    return {name: member for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction)
            if name.startswith("a") and not name.startswith("_")}


def test_every_async_method_of_the_invoker_has_a_sync_twin_with_the_same_parameters() -> None:
    methods = _async_methods(MycelianAgentInvoker)
    assert {"aget_all", "aget", "aupdate", "ahistory", "adelete", "adelete_user", "asearch", "arecall",
            "aflush_all"} <= set(methods)
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
