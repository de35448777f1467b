"""Endpoints that do not honour OpenAI's named tool choice (llama.cpp's server, small local models): the
``tool_choice`` sent in each mode, replies carrying the call as JSON text, and the bounded re-prompt + fallback.
All over the real langchain-openai HTTP path, against the local stub (no model, no network)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage
from openai_stub import OpenAIStub, text_reply, tool_call_reply

from mycelian_agent import build_agent, resolve_model
from mycelian_agent.agent.model_tools import tool_choice
from mycelian_agent.agent.replies import TEXT_CALL_NOTE, call_from_text, validate_reply
from mycelian_agent.agent.settings import AgentSettings
from mycelian_agent.errors import ConfigError

SUMMARY = "Ana moved to Porto in May 2024."
ARGS = {"summary": SUMMARY, "tags": {"topic": "moving"}}

TEXT_FORMS = {
    "bare wrapper": json.dumps({"name": "add_entry", "arguments": ARGS}),
    "fenced wrapper": "```json\n" + json.dumps({"name": "add_entry", "arguments": ARGS}, indent=2) + "\n```",
    "parameters wrapper": json.dumps({"name": "add_entry", "parameters": ARGS}),
    "arguments as a string": json.dumps({"name": "add_entry", "arguments": json.dumps(ARGS)}),
    "arguments only": json.dumps(ARGS),
    "fenced arguments with prose": "Here is the call:\n```\n" + json.dumps(ARGS) + "\n```\nDone.",
    "tool_call tags": "<tool_call>\n" + json.dumps({"name": "add_entry", "arguments": ARGS}) + "\n</tool_call>",
}


# --- parsing, no HTTP -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", sorted(TEXT_FORMS))
def test_each_text_form_is_read_as_the_call(form):
    args, problem = validate_reply("add_entry", AIMessage(content=TEXT_FORMS[form]), 5000)
    assert problem is None and args == {"summary": SUMMARY, "tags": {"topic": "moving"}}


def test_text_calls_are_validated_like_tool_calls():
    # the same pydantic model: empty summary refused, list tags coerced, code-owned tags dropped
    assert validate_reply("add_entry", AIMessage(content='{"summary": " ", "tags": {}}'), 5000) == (
        None,
        "the summary was missing or empty",
    )
    args, _ = validate_reply("add_entry", AIMessage(content='{"summary": "s", "tags": ["a", "b"], "role": "x"}'), 5000)
    assert args == {"summary": "s", "tags": {"topic": "a, b"}}
    args, _ = validate_reply("add_entry", AIMessage(content='{"summary": "s", "tags": {"role": "x", "k": "v"}}'), 5000)
    assert args == {"summary": "s", "tags": {"k": "v"}}
    _, problem = validate_reply("put_context", AIMessage(content='{"content": "' + "x" * 50 + '"}'), 10)
    assert problem == "the document has 50 characters; the limit is 10"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I cannot do that.", "it contained no add_entry tool call"),
        ('{"name": "put_context", "arguments": {"content": "x"}}', "it called put_context instead of add_entry"),
        ('{"name": "add_entry", "arguments": "not json"}', "the add_entry arguments were not JSON"),
        ('{"unrelated": 1}', "it contained no add_entry tool call"),
        ('```json\n{"summary": \n```', "it contained no add_entry tool call"),
        ('{"tags": {"a": "b"}}', "the summary was missing"),
    ],
)
def test_unusable_text_names_the_problem(text, problem):
    assert validate_reply("add_entry", AIMessage(content=text), 5000) == (None, problem)


def test_call_from_text_ignores_text_without_json():
    assert call_from_text("add_entry", "no braces here") == (None, None)


def test_tool_choice_forms():
    assert [tool_choice("add_entry", m) for m in ("named", "required", "auto")] == ["add_entry", "required", "auto"]
    with pytest.raises(ValueError, match="tool_choice_mode"):
        tool_choice("add_entry", "any")
    with pytest.raises(ConfigError, match="tool_choice_mode"):
        AgentSettings(tool_choice_mode="any")  # type: ignore[arg-type]


# --- over the wire ----------------------------------------------------------------------------------------------------
WIRE_CHOICE = {
    "named": {"type": "function", "function": {"name": "add_entry"}},
    "required": "required",
    "auto": "auto",
}


@pytest.mark.parametrize("mode", sorted(WIRE_CHOICE))
async def test_tool_choice_sent_in_each_mode(tmp_path, mode):
    replies = [tool_call_reply("add_entry", ARGS), tool_call_reply("put_context", {"content": "## Facts\n- Porto"})]
    with OpenAIStub(responses=replies) as stub:
        async with build_agent(
            "openai:qwen",
            "in-process",
            db=tmp_path / "m.db",
            api_key="k",
            base_url=stub.base_url,
            flush_every=1,
            tool_choice_mode=mode,
        ) as invoker:
            result = await invoker.aprocess_conversation_message(
                "user", "I moved to Porto.", "t1", "2024-05-02T10:00:00Z", name="Ana"
            )
    assert result.fallbacks == 0 and result.corrections == 0 and result.context_written
    assert stub.requests[0]["tool_choice"] == WIRE_CHOICE[mode]
    put_choice = stub.requests[1]["tool_choice"]
    assert put_choice == ({"type": "function", "function": {"name": "put_context"}} if mode == "named" else mode)
    assert [t["function"]["name"] for t in stub.requests[0]["tools"]] == ["add_entry"]


@pytest.mark.parametrize("form", sorted(TEXT_FORMS))
async def test_text_replies_over_the_wire_are_stored_and_counted(tmp_path, form):
    context_doc = "## Facts\n- Ana lives in Porto."
    replies = [
        text_reply(TEXT_FORMS[form]),
        text_reply("```json\n" + json.dumps({"name": "put_context", "arguments": {"content": context_doc}}) + "\n```"),
    ]
    with OpenAIStub(responses=replies) as stub:
        async with build_agent(
            "openai:qwen",
            "in-process",
            db=tmp_path / "m.db",
            api_key="k",
            base_url=stub.base_url,
            flush_every=1,
            tool_choice_mode="auto",
        ) as invoker:
            result = await invoker.aprocess_conversation_message(
                "user", "I moved to Porto.", "t1", "2024-05-02T10:00:00Z"
            )
            ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
            [entry] = (await invoker.connection.call_json("list_entries", ids))["entries"]
            stored_context = await invoker.connection.call("get_context", ids)
    assert (result.corrections, result.fallbacks, result.errors) == (0, 0, ())
    assert result.notes.count(f"add_entry: {TEXT_CALL_NOTE}") == 1
    assert result.notes.count(f"put_context: {TEXT_CALL_NOTE}") == 1
    assert entry["summary"] == SUMMARY and entry["rawEntry"] == "I moved to Porto."
    assert entry["tags"]["topic"] == "moving" and entry["tags"]["role"] == "user"
    assert stored_context == context_doc
    assert stub.requests[0]["tool_choice"] == "auto"


async def test_garbage_is_reprompted_then_a_text_call_is_accepted(tmp_path):
    with OpenAIStub(
        responses=[text_reply("Sure! I will remember that."), text_reply(TEXT_FORMS["fenced wrapper"])]
    ) as stub:
        async with build_agent(
            "openai:qwen",
            "in-process",
            db=tmp_path / "m.db",
            api_key="k",
            base_url=stub.base_url,
            tool_choice_mode="required",
        ) as invoker:
            result = await invoker.aprocess_conversation_message("user", "I moved to Porto.", "t1")
    assert (result.corrections, result.fallbacks) == (1, 0)
    assert result.errors == ("add_entry: reply unusable: it contained no add_entry tool call",)
    retry = stub.requests[1]
    assert retry["tool_choice"] == "required"
    assert [m["role"] for m in retry["messages"]] == ["system", "user", "assistant", "user"]
    assert retry["messages"][2]["content"] == "Sure! I will remember that."
    assert '{"name": "add_entry", "arguments": {...}}' in retry["messages"][3]["content"]


async def test_garbage_every_time_falls_back_to_the_extractive_model(tmp_path):
    garbage = [text_reply('```json\n{"summary": \n```'), text_reply("I remember."), text_reply("{}")]
    with OpenAIStub(responses=garbage) as stub:
        model = resolve_model("openai:qwen", api_key="k", base_url=stub.base_url, max_retries=0)
        async with build_agent(model, "in-process", db=tmp_path / "m.db", tool_choice_mode="required") as invoker:
            result = await invoker.aprocess_conversation_message("user", "Marco is vegetarian.", "t1")
            ids = {"vault_id": invoker.agent.vault_id, "memory_id": invoker.agent.memory_id}
            [entry] = (await invoker.connection.call_json("list_entries", ids))["entries"]
    assert (result.llm_calls, result.corrections, result.fallbacks) == (3, 2, 1)
    assert len(result.errors) == 3 and all("reply unusable" in e for e in result.errors)
    assert len(stub.requests) == 3 and all(r["tool_choice"] == "required" for r in stub.requests)
    assert entry["rawEntry"] == "Marco is vegetarian." and entry["summary"]  # written by the fallback


def test_replay_cli_sends_the_tool_choice_from_the_environment(tmp_path):
    from mycelian_agent.cli import cli

    conversation = tmp_path / "c.json"
    conversation.write_text(
        json.dumps({"conversation_id": "c1", "messages": [{"role": "user", "content": "I moved to Porto."}]})
    )
    replies = [text_reply(TEXT_FORMS["bare wrapper"]), tool_call_reply("put_context", {"content": "## Facts\n- Porto"})]
    with OpenAIStub(responses=replies) as stub:
        result = CliRunner().invoke(
            cli,
            [
                "replay",
                str(conversation),
                "--server",
                "in-process",
                "--db",
                str(tmp_path / "m.db"),
                "--model",
                "openai:qwen",
                "--api-key",
                "k",
                "--base-url",
                stub.base_url,
                "--max-tokens",
                "300",
                "--json",
            ],
            env={"MYCELIAN_TOOL_CHOICE": "required"},
        )
    assert result.exit_code == 0, result.output
    assert '"fallbacks": 0' in result.output and '"messages": 1' in result.output
    assert [r["tool_choice"] for r in stub.requests] == ["required", "required"]
    assert stub.requests[0]["max_completion_tokens"] == 300


async def test_server_parse_failure_is_reprompted_not_fallen_back(tmp_path):
    from openai_stub import error_reply

    replies = [
        error_reply(500, "output does not match the expected peg-native format", "server_error"),
        tool_call_reply("add_entry", ARGS),
    ]
    with OpenAIStub(responses=replies) as stub:
        model = resolve_model("openai:qwen", api_key="k", base_url=stub.base_url, max_retries=0)
        async with build_agent(model, "in-process", db=tmp_path / "m.db", tool_choice_mode="required") as invoker:
            result = await invoker.aprocess_conversation_message("user", "I moved to Porto.", "t1")
    assert (result.llm_calls, result.corrections, result.fallbacks) == (2, 1, 0)
    assert "could not read it as a call" in result.errors[0]
    assert [m["role"] for m in stub.requests[1]["messages"]] == ["system", "user", "user"]
    assert "no code fence" in stub.requests[1]["messages"][-1]["content"]


async def test_other_server_errors_are_retried_a_bounded_number_of_times_then_fall_back(tmp_path):
    from openai_stub import error_reply

    from mycelian_agent import AgentSettings

    with OpenAIStub(responses=[error_reply(500, "out of memory", "server_error")] * 3) as stub:
        model = resolve_model("openai:qwen", api_key="k", base_url=stub.base_url, max_retries=0)
        async with build_agent(
            model,
            "in-process",
            db=tmp_path / "m.db",
            tool_choice_mode="required",
            settings=AgentSettings(model_backoff_s=0.01),
        ) as invoker:
            result = await invoker.aprocess_conversation_message("user", "I moved to Porto.", "t1")
    assert (result.corrections, result.fallbacks, len(stub.requests)) == (0, 1, 3)
    assert result.usage.model_retries == 2
