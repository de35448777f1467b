"""Transient tool failures are retried with backoff; other failures raise at once and store nothing in the thread.

The memory server cannot be made flaky on demand, so these tests stand a scripted tool set in for it.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.tools import StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver

from mycelian_agent import AgentSettings, MemoryServerError, MycelianAgentInvoker, MycelianMemoryAgent
from mycelian_agent.models.extractive import ExtractiveChatModel


def tool(name: str, behaviour) -> StructuredTool:
    async def run(**kwargs):
        return behaviour(kwargs)

    return StructuredTool.from_function(
        coroutine=run,
        name=name,
        description=name,
        args_schema={"type": "object", "properties": {"idempotency_key": {}}},
        handle_tool_error=True,
    )


def make_invoker(add_entry_behaviour) -> MycelianAgentInvoker:
    tools = [
        tool("get_context", lambda _: ""),
        tool("list_entries", lambda _: json.dumps({"entries": []})),
        tool("add_entry", add_entry_behaviour),
        tool("await_consistency", lambda _: "consistent"),
        tool("put_context", lambda _: json.dumps({"status": "stored"})),
    ]
    agent = MycelianMemoryAgent(
        ExtractiveChatModel(),
        tools,
        vault_id="v",
        memory_id="m",
        checkpointer=InMemorySaver(),
        settings=AgentSettings(retry_backoff_s=0.001),
    )
    return MycelianAgentInvoker(agent)


def failing(times: int, error: Exception):
    calls = []

    def behaviour(kwargs):
        calls.append(kwargs)
        if len(calls) <= times:
            raise error
        return json.dumps({"entryId": "e1", "deduplicated": len(calls) > 1})

    behaviour.calls = calls
    return behaviour


async def test_transport_failure_is_retried_with_the_same_idempotency_key():
    behaviour = failing(2, ConnectionError("connection reset"))
    invoker = make_invoker(behaviour)
    result = await invoker.aprocess_conversation_message("user", "hello", "t1")
    assert result.retries == 2 and result.entry_ids == ("e1",)
    keys = {call["idempotency_key"] for call in behaviour.calls}
    assert len(behaviour.calls) == 3 and len(keys) == 1


async def test_transient_server_error_is_retried():
    behaviour = failing(1, ToolException("database is locked"))
    invoker = make_invoker(behaviour)
    result = await invoker.aprocess_conversation_message("user", "hello", "t1")
    assert result.retries == 1


async def test_permanent_error_raises_at_once_and_the_thread_does_not_advance():
    behaviour = failing(99, ToolException("memory m not found in vault v"))
    invoker = make_invoker(behaviour)
    with pytest.raises(MemoryServerError, match="add_entry failed: memory m not found") as info:
        await invoker.aprocess_conversation_message("user", "hello", "t1")
    assert info.value.tool == "add_entry" and not info.value.transient
    assert len(behaviour.calls) == 1
    assert (await invoker.athread_status("t1")).messages == 0


async def test_transient_error_that_persists_raises_after_the_attempts():
    behaviour = failing(99, ConnectionError("server gone"))
    invoker = make_invoker(behaviour)
    with pytest.raises(MemoryServerError, match="after 2 retries"):
        await invoker.aprocess_conversation_message("user", "hello", "t1")
    assert len(behaviour.calls) == 3


async def test_an_interrupted_invocation_counts_the_entry_the_server_acknowledged():
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver as Saver

    blocked = asyncio.Event()

    async def hang(**_kwargs):
        blocked.set()
        await asyncio.Event().wait()  # the flush never answers: the user presses Ctrl-C here

    tools = [
        tool("get_context", lambda _: ""),
        tool("list_entries", lambda _: json.dumps({"entries": []})),
        tool("add_entry", failing(0, ConnectionError())),
        tool("await_consistency", lambda _: "consistent"),
        StructuredTool.from_function(
            coroutine=hang,
            name="put_context",
            description="put_context",
            args_schema={"type": "object", "properties": {}},
        ),
    ]
    agent = MycelianMemoryAgent(ExtractiveChatModel(), tools, vault_id="v", memory_id="m", checkpointer=Saver())
    invoker = MycelianAgentInvoker(agent, flush_every=1)
    running = asyncio.create_task(invoker.aprocess_conversation_message("user", "hello", "t1"))
    await asyncio.wait_for(blocked.wait(), 30)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert agent.unfinished_writes() == 1  # stored on the server, though the invocation did not finish
    done = await invoker.aprocess_conversation_message("user", "bye", "t2")
    assert done.acknowledged_entries == 1 and agent.unfinished_writes() == 1
