"""The memory agent against the real memory server, with a scripted tool-calling model.

The server runs in-process (``server="in-process"``: the same FastMCP app, tools and SQLite file, over in-memory
streams) except where the point is the whole path a user takes, which spawns the embedded server over stdio.
Transports themselves are tested in test_memory_server_transports.py.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from mycelian_agent import (
    AgentSettings,
    ControlState,
    InputError,
    MemoryServerError,
    MycelianError,
    build_agent,
)
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

#: build_agent with the server inside the test process.
in_process = partial(build_agent, server="in-process")


def entry_reply(summary: str = "The user said hello.", **tags: str) -> AIMessage:
    return tool_call_message(
        "add_entry",
        {"summary": summary, "tags": tags or {"topic": "greeting"}},
        usage={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    )


def context_reply(content: str = "## Facts\n- The user is testing.") -> AIMessage:
    return tool_call_message(
        "put_context", {"content": content}, usage={"input_tokens": 200, "output_tokens": 40, "total_tokens": 240}
    )


async def entries(invoker, memory_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    agent = invoker.agent
    if memory_id is None and agent.memory_id is None:  # nothing written yet: the invoker's own memory does not exist
        return []
    result = await invoker.connection.call_json(
        "list_entries", {"vault_id": agent.vault_id, "memory_id": memory_id or agent.memory_id, "limit": limit}
    )
    return result["entries"]


@pytest.fixture
def db(tmp_path):
    return tmp_path / "memory.db"


async def test_start_session_reads_context_and_recent_entries_without_llm(db):
    model = ScriptedChatModel(responses=[])
    async with in_process(model, db=db) as invoker:
        result = await invoker.astart_session("t1")
        assert result.control is ControlState.START_SESSION
        assert result.tool_calls == ()  # the invoker's own memory holds nothing yet: it does not exist
        assert invoker.agent.memory_id is None
        await invoker.aprocess_conversation_message("user", "I adopted a cat named Miso.", "t0")  # creates it
        calls = len(model.calls)
        result = await invoker.astart_session("t2")
        assert result.tool_calls == ("get_context", "list_entries")
        assert result.llm_calls == 0 and len(model.calls) == calls
        status = await invoker.athread_status("t2")
        assert status.context == ""  # the new memory's placeholder counts as empty
        assert status.session_open and (await invoker.athread_status("t1")).session_open


async def test_process_message_stores_verbatim_text_with_code_owned_fields(db):
    model = ScriptedChatModel(responses=[entry_reply("The user moved to Denver on 2024-03-01.", topic="moving")])
    async with in_process(model, db=db) as invoker:
        await invoker.astart_session("t1")
        text = "  I moved to Denver last week!  "
        result = await invoker.aprocess_conversation_message(
            "user", text, "t1", "2024-03-08T10:00:00Z", tags={"session_id": "s1", "turn": "0"}
        )
        assert result.tool_calls == ("add_entry",)
        assert result.message_index == 1 and len(result.entry_ids) == 1
        assert (result.llm_calls, result.prompt_tokens, result.completion_tokens) == (1, 100, 20)
        [entry] = await entries(invoker)
        assert entry["rawEntry"] == text
        assert entry["summary"] == "The user moved to Denver on 2024-03-01."
        assert entry["conversationTime"].startswith("2024-03-08T10:00:00")
        assert entry["tags"] == {
            "topic": "moving",
            "session_id": "s1",
            "turn": "0",
            "role": "user",
            "thread": "t1",
            "msg": "1",
        }
        # the model was bound to add_entry alone, with a forced choice, and saw only its own fields
        assert model.bound_tool_choice == "add_entry"
        schema = model.bound_tools[0]["function"]["parameters"]["properties"]
        assert set(schema) == {"summary", "tags"}


async def test_flush_sequence_and_end_session(db):
    replies = [entry_reply(f"Message {i}.") for i in range(1, 4)]
    replies.insert(3, context_reply("## Facts\n- Three messages so far."))
    replies += [entry_reply("Message 4."), context_reply("## Facts\n- Four messages.")]
    model = ScriptedChatModel(responses=replies)
    async with in_process(model, db=db, flush_every=3) as invoker:
        await invoker.astart_session("t1")
        controls = []
        for i in range(1, 5):
            r = await invoker.aprocess_conversation_message("user" if i % 2 else "assistant", f"message {i}", "t1")
            controls.append((r.control, r.tool_calls))
        assert controls[2] == (
            ControlState.PROCESS_MESSAGE_AND_FLUSH,
            ("add_entry", "await_consistency", "put_context"),
        )
        assert [c for c, _ in controls].count(ControlState.PROCESS_MESSAGE) == 3
        agent = invoker.agent
        args = {"vault_id": agent.vault_id, "memory_id": agent.memory_id}
        assert await invoker.connection.call("get_context", args) == "## Facts\n- Three messages so far."
        end = await invoker.aend_session("t1")
        assert end.tool_calls == ("await_consistency", "put_context") and end.context_written
        assert await invoker.connection.call("get_context", args) == "## Facts\n- Four messages."
        # the put_context prompt carried the messages since the last flush only
        context_prompt = model.calls[-1][-1].content
        assert "message 4" in context_prompt and "message 2" not in context_prompt
        # a second end with nothing new writes no context (and calls no model)
        again = await invoker.aend_session("t1")
        assert again.tool_calls == ("await_consistency",) and not again.context_written
        status = await invoker.athread_status("t1")
        assert status.progress.flushes == 2 and status.progress.sessions_ended == 2
        assert status.usage.llm_calls == 6 and status.usage.prompt_tokens == 4 * 100 + 2 * 200


async def test_identifiers_written_by_the_model_never_reach_the_server(db):
    bogus = {
        "summary": "ok",
        "tags": {"role": "system", "msg": "999", "topic": "x"},
        "vault_id": "00000000-0000-0000-0000-000000000000",
        "memory_id": "not-a-memory",
        "raw_entry": "forged text",
        "conversation_time": "1999-01-01T00:00:00Z",
    }
    model = ScriptedChatModel(responses=[tool_call_message("add_entry", bogus)])
    async with in_process(model, db=db, memory="first") as invoker:
        result = await invoker.aprocess_conversation_message("assistant", "the real text", "t1")
        [entry] = await entries(invoker)
        assert entry["rawEntry"] == "the real text"
        assert entry["tags"]["role"] == "assistant" and entry["tags"]["msg"] == "1"
        assert entry.get("conversationTime") in (None, "")
        assert result.entry_ids == (entry["entryId"],)


async def test_reply_without_tool_call_is_reprompted_then_falls_back(db):
    model = ScriptedChatModel(responses=[AIMessage(content="Sure, I will remember that!")] * 3)
    async with in_process(model, db=db) as invoker:
        result = await invoker.aprocess_conversation_message("user", "My sister Ana lives in Porto.", "t1")
        assert result.corrections == 2 and result.fallbacks == 1 and result.llm_calls == 3
        assert any("no add_entry tool call" in e for e in result.errors)
        [entry] = await entries(invoker)
        assert entry["rawEntry"] == "My sister Ana lives in Porto."
        assert "Ana" in entry["summary"] and "Porto" in entry["summary"]
        # the corrective re-prompt told the model what was wrong
        assert "no add_entry tool call" in model.calls[1][-1].content


async def test_corrective_reprompt_recovers(db):
    model = ScriptedChatModel(
        responses=[tool_call_message("add_entry", {"summary": "", "tags": {}}), entry_reply("Recovered summary.")]
    )
    async with in_process(model, db=db) as invoker:
        result = await invoker.aprocess_conversation_message("user", "hello", "t1")
        assert (result.corrections, result.fallbacks) == (1, 0)
        assert (await entries(invoker))[0]["summary"] == "Recovered summary."


async def test_model_exception_falls_back_and_is_reported(db):
    class Broken(ScriptedChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any):
            raise ConnectionError("LLM endpoint unreachable")

    async with in_process(Broken(responses=[]), db=db) as invoker:
        result = await invoker.aprocess_conversation_message("user", "I prefer window seats.", "t1")
        assert result.fallbacks == 1 and any("LLM endpoint unreachable" in e for e in result.errors)
        assert len(await entries(invoker)) == 1


async def test_tool_error_surfaces_and_leaves_the_thread_unchanged(db):
    model = ScriptedChatModel(responses=[entry_reply()], cycle=True)
    async with in_process(model, db=db) as invoker:
        await invoker.aprocess_conversation_message("user", "first", "t1")
        agent = invoker.agent
        await invoker.connection.call_json("delete_memory", {"vault_id": agent.vault_id, "memory_id": agent.memory_id})
        with pytest.raises(MemoryServerError, match="add_entry failed") as info:
            await invoker.aprocess_conversation_message("user", "second", "t1")
        assert "not found" in str(info.value)
        assert (await invoker.athread_status("t1")).messages == 1


async def test_bad_inputs_are_refused_before_anything_is_written(db):
    model = ScriptedChatModel(responses=[entry_reply()], cycle=True)
    async with in_process(model, db=db) as invoker:
        with pytest.raises(InputError, match="unknown role 'robot'"):
            await invoker.aprocess_conversation_message("robot", "hi", "t1")
        with pytest.raises(InputError, match="empty"):
            await invoker.aprocess_conversation_message("user", "   ", "t1")
        with pytest.raises(InputError, match="RFC 3339"):
            await invoker.aprocess_conversation_message("user", "hi", "t1", conversation_time="last tuesday")
        with pytest.raises(InputError, match="needs a message"):
            await invoker.agent.ainvoke(ControlState.PROCESS_MESSAGE, "t1")
        with pytest.raises(InputError, match="thread_id"):
            await invoker.aprocess_conversation_message("user", "hi", "")
        assert await entries(invoker) == []
        assert (await invoker.athread_status("t1")).messages == 0


async def test_oversize_message_is_stored_as_ordered_parts(db):
    text = ("A long paragraph about the user's research on coral reefs. " * 400).strip()
    assert len(text) > 18000
    async with in_process("extractive", db=db) as invoker:
        result = await invoker.aprocess_conversation_message("assistant", text, "t1")
        assert result.tool_calls == ("add_entry",) * 3 and len(result.entry_ids) == 3
        stored = sorted(await entries(invoker), key=lambda e: e["tags"]["part"])
        assert [e["tags"]["part"] for e in stored] == ["1/3", "2/3", "3/3"]
        assert "".join(e["rawEntry"] for e in stored) == text
        assert (await invoker.athread_status("t1")).messages == 1


async def test_retried_message_is_stored_once(db, tmp_path):
    # Two processes' worth of checkpoints (the second lost the first's progress) write the same message.
    async with in_process("extractive", db=db, checkpointer=f"sqlite:{tmp_path / 'a.db'}") as invoker:
        first = await invoker.aprocess_conversation_message("user", "I adopted a cat named Miso.", "t1")
    async with in_process("extractive", db=db, checkpointer=f"sqlite:{tmp_path / 'b.db'}") as invoker:
        again = await invoker.aprocess_conversation_message("user", "I adopted a cat named Miso.", "t1")
        other = await invoker.aprocess_conversation_message("user", "A different second message.", "t1")
        assert again.deduplicated == 1 and again.entry_ids == first.entry_ids
        assert other.deduplicated == 0
        assert len(await entries(invoker)) == 2


async def test_flush_cadence_is_per_thread_with_interleaved_threads(db):
    async with in_process("extractive", db=db, flush_every=3) as invoker:
        flushed: dict[str, list[int]] = {"a": [], "b": []}
        order = ["a", "b", "b", "a", "a", "b", "b", "a", "b", "a", "a", "b"]
        seen = {"a": 0, "b": 0}
        for thread in order:
            seen[thread] += 1
            r = await invoker.aprocess_conversation_message("user", f"{thread} message {seen[thread]}", thread)
            if r.control is ControlState.PROCESS_MESSAGE_AND_FLUSH:
                flushed[thread].append(r.message_index)
        assert flushed == {"a": [3, 6], "b": [3, 6]}


async def test_sync_api_outside_and_inside_an_event_loop(db, tmp_path):
    import asyncio

    def use_sync() -> tuple[int, str]:
        with build_agent("extractive", db=db) as invoker:
            invoker.start_session("t1")
            invoker.process_conversation_message("user", "sync hello", "t1")
            result = invoker.end_session("t1")
            return invoker.thread_status("t1").messages, result.tool_calls[-1]

    assert await asyncio.to_thread(use_sync) == (1, "put_context")
    async with build_agent("extractive", db=db) as invoker:
        with pytest.raises(MycelianError, match="inside a running event loop"):
            invoker.process_conversation_message("user", "hi", "t2")


async def test_prompts_are_bounded_by_the_window(db):
    model = ScriptedChatModel(responses=[entry_reply()], cycle=True)
    settings = AgentSettings(history_window=4, recent_message_chars=50)
    async with in_process(model, db=db, settings=settings, flush_every=1000) as invoker:
        for i in range(10):
            await invoker.aprocess_conversation_message("user", f"msg-{i} " + "x" * 200, "t1")
        last_task = model.calls[-1][-1]
        payload = last_task.additional_kwargs["mycelian_task"]
        assert [m["content"][:5] for m in payload["recent"]] == ["msg-5", "msg-6", "msg-7", "msg-8"]
        assert all(len(m["content"]) <= 50 + 40 for m in payload["recent"])
        assert "msg-4" not in last_task.content


async def test_server_prompts_option_uses_get_default_prompts(db):
    async with build_agent("extractive", db=db, prompts="server") as invoker:
        served = await invoker.connection.call_json("get_default_prompts", {"memory_type": "chat"})
        assert invoker.agent.prompts.summary_prompt == served["templates"]["summary_prompt"]


def test_result_as_dict_is_plain_json_with_usage_flattened():
    from mycelian_agent import InvocationResult
    from mycelian_agent.agent.report import Usage

    result = InvocationResult(
        control=ControlState.END_SESSION,
        thread_id="t",
        tool_calls=("await_consistency",),
        usage=Usage(llm_calls=2, prompt_tokens=30),
        duration_s=0.5,
        tool_s=0.1,
        model_s=0.2,
    )
    data = json.loads(json.dumps(result.as_dict()))  # no default=: every value must be JSON as it is
    assert data["control"] == "end_session" and data["thread_id"] == "t"
    assert data["tool_calls"] == ["await_consistency"]
    assert (data["llm_calls"], data["prompt_tokens"], data["fallbacks"]) == (2, 30, 0)
    assert data["framework_s"] == pytest.approx(0.2)
    assert result.llm_calls == 2 and result.usage.prompt_tokens == 30


async def test_a_new_session_starts_from_the_stored_context_and_recent_entries(db):
    model = ScriptedChatModel(
        responses=[
            entry_reply("Ana moved to Porto."),
            context_reply("## Facts\n- Ana lives in Porto. " + "x" * 3000),
            entry_reply("Ana asked about trains."),
        ]
    )
    settings = AgentSettings(entry_context_chars=100)
    async with in_process(model, db=db, settings=settings) as invoker:
        await invoker.astart_session("t1")
        await invoker.aprocess_conversation_message("user", "My sister Ana moved to Porto.", "t1")
        await invoker.aend_session("t1")
    async with in_process(
        model, db=db, settings=settings
    ) as invoker:  # a new process: nothing in memory but the server
        await invoker.astart_session("t2")
        await invoker.aprocess_conversation_message("user", "Which train goes there?", "t2")
        payload = model.calls[-1][-1].additional_kwargs["mycelian_task"]
        assert payload["context"].startswith("## Facts\n- Ana lives in Porto.")
        assert len(payload["context"]) < 200  # clipped to entry_context_chars for the add_entry prompt
        [note] = payload["recent"]
        assert note["role"] == "system" and "Ana moved to Porto." in note["content"]
