"""The agent with an ``openai:`` model, over HTTP to a local endpoint that speaks the OpenAI Chat Completions API."""

from __future__ import annotations

import json

import pytest
from openai_stub import OpenAIStub, error_reply, text_reply, tool_call_reply

from mycelian_agent import build_agent, resolve_model


async def test_openai_model_writes_entries_and_context_over_the_wire(tmp_path):
    replies = [
        tool_call_reply(
            "add_entry",
            {"summary": "The user booked flight AL 417 on 2024-04-10.", "tags": {"topic": "flight"}},
            usage=(321, 17),
        ),
        tool_call_reply("put_context", {"content": "## Facts\n- Flight AL 417 booked."}, usage=(400, 12)),
    ]
    with OpenAIStub(responses=replies) as stub:
        async with build_agent(
            "openai:gpt-4o-mini",
            "in-process",
            db=tmp_path / "m.db",
            api_key="test-key",
            base_url=stub.base_url,
            flush_every=1,
        ) as invoker:
            result = await invoker.aprocess_conversation_message(
                "user", "We booked flight AL 417.", "t1", "2024-04-10T08:05:00Z"
            )
            assert result.tool_calls == ("add_entry", "await_consistency", "put_context")
            assert (result.llm_calls, result.prompt_tokens, result.completion_tokens) == (2, 721, 29)
            agent = invoker.agent
            ids = {"vault_id": agent.vault_id, "memory_id": agent.memory_id}
            [entry] = (await invoker.connection.call_json("list_entries", ids))["entries"]
            assert entry["summary"] == "The user booked flight AL 417 on 2024-04-10."
            assert entry["rawEntry"] == "We booked flight AL 417."
            assert await invoker.connection.call("get_context", ids) == "## Facts\n- Flight AL 417 booked."
    first = stub.requests[0]
    assert first["model"] == "gpt-4o-mini"
    assert first["tool_choice"] == {"type": "function", "function": {"name": "add_entry"}}
    assert [t["function"]["name"] for t in first["tools"]] == ["add_entry"]
    assert set(first["tools"][0]["function"]["parameters"]["properties"]) == {"summary", "tags"}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "We booked flight AL 417." in first["messages"][1]["content"]
    assert "mycelian_task" not in json.dumps(first)  # the structured payload stays local
    assert stub.requests[1]["tool_choice"]["function"]["name"] == "put_context"


async def test_text_reply_is_corrected_over_the_wire_then_falls_back(tmp_path):
    with OpenAIStub(
        responses=[text_reply("I can't call tools."), text_reply("Still no."), error_reply(400, "boom")]
    ) as stub:
        model = resolve_model("openai:gpt-4o-mini", api_key="k", base_url=stub.base_url, max_retries=0)
        async with build_agent(model, "in-process", db=tmp_path / "m.db") as invoker:
            result = await invoker.aprocess_conversation_message("user", "Marco is vegetarian.", "t1")
            assert result.corrections == 2 and result.fallbacks == 1
            assert any("boom" in e for e in result.errors), result.errors
            assert len(stub.requests) == 3
    # the corrective turn went over the wire as an assistant message plus a user message naming the problem
    second = stub.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "no add_entry tool call" in second[-1]["content"]


@pytest.mark.live_llm
async def test_live_openai_model(tmp_path):
    import os

    model = os.environ.get("MYCELIAN_LIVE_MODEL", "openai:gpt-4o-mini")
    async with build_agent(model, db=tmp_path / "m.db", flush_every=2) as invoker:
        await invoker.aprocess_conversation_message("user", "My sister Ana moved to Porto in May 2024.", "live")
        result = await invoker.aprocess_conversation_message("assistant", "Porto is lovely in spring!", "live")
        assert result.fallbacks == 0 and result.context_written
