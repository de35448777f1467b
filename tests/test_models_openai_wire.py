"""resolve_model / model_name, the real langchain-openai HTTP path against a local stub, and ScriptedChatModel."""

from __future__ import annotations

import json

import openai
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from openai_stub import OpenAIStub, error_reply, text_reply, tool_call_reply

from mycelian_agent.agent.model_tools import tool_schema
from mycelian_agent.errors import ConfigError
from mycelian_agent.models.extractive import TASK_KEY, ExtractiveChatModel
from mycelian_agent.models.resolve import model_name, resolve_model
from mycelian_agent.testing import (
    ScriptedChatModel,
    ScriptExhaustedError,
    invalid_tool_call_message,
    text_message,
    tool_call_message,
)

ADD_ENTRY_SCHEMA = tool_schema("add_entry")  # the schema the agent binds
PROMPT = [
    SystemMessage("You write memory entries."),
    HumanMessage("Record: I moved to Denver.", additional_kwargs={TASK_KEY: {"operation": "add_entry"}}),
]
ARGS = {"summary": "The user moved to Denver.", "tags": {"topic": "moving", "kind": "fact"}}


def openai_model(stub: OpenAIStub, **settings):
    return resolve_model("openai:gpt-4o-mini", api_key="test", base_url=stub.base_url, **settings)


# --- resolve_model ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [None, "extractive", " Extractive "])
def test_extractive_specs(spec):
    assert isinstance(resolve_model(spec), ExtractiveChatModel)


def test_chat_model_instance_is_returned_as_is():
    model = ScriptedChatModel(responses=[])
    assert resolve_model(model) is model


@pytest.mark.parametrize("spec", ["gpt-4o-mini", "anthropic:claude-3", "openai:", "openai: ", 42, ""])
def test_unknown_specs_list_the_accepted_forms(spec):
    with pytest.raises(ConfigError, match=r'"extractive".*"openai:<model>".*BaseChatModel'):
        resolve_model(spec)


def test_missing_api_key_says_how_to_fix_it(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="set OPENAI_API_KEY or pass api_key"):
        resolve_model("openai:gpt-4o-mini")


def test_openai_settings_are_passed_through():
    model = resolve_model(
        "openai:gpt-4o-mini",
        api_key="k",
        base_url="http://127.0.0.1:9/v1",
        temperature=0.3,
        max_tokens=77,
        timeout=12.5,
        max_retries=5,
    )
    assert (model.model_name, model.temperature, model.max_tokens) == ("gpt-4o-mini", 0.3, 77)
    assert (model.openai_api_base, model.request_timeout, model.max_retries) == ("http://127.0.0.1:9/v1", 12.5, 5)
    with pytest.raises(ConfigError, match="max_tokens_field"):
        resolve_model("openai:gpt-4o-mini", api_key="k", max_tokens_field="tokens")  # type: ignore[arg-type]


def test_model_name():
    openai_chat = resolve_model("openai:gpt-4o-mini", api_key="k")
    assert model_name(openai_chat) == "openai:gpt-4o-mini"
    assert model_name(openai_chat.bind_tools([ADD_ENTRY_SCHEMA])) == "openai:gpt-4o-mini"
    assert model_name(ExtractiveChatModel()) == "extractive"
    assert model_name(ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA])) == "extractive"
    assert model_name(None) == "extractive" and model_name("openai:gpt-4o") == "openai:gpt-4o"
    assert model_name(ScriptedChatModel(responses=[])) == "scripted"


# --- the wire ---------------------------------------------------------------------------------------------------------
async def test_forced_tool_call_and_usage_through_http():
    with OpenAIStub([tool_call_reply("add_entry", ARGS, usage=(120, 30))]) as stub:
        model = openai_model(stub).bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
        reply = await model.ainvoke(PROMPT)
    (call,) = reply.tool_calls
    assert (call["name"], call["args"]) == ("add_entry", ARGS)
    assert reply.usage_metadata["input_tokens"] == 120 and reply.usage_metadata["output_tokens"] == 30
    (body,) = stub.requests
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.0 and not body["stream"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add_entry"}}
    assert [t["function"]["name"] for t in body["tools"]] == ["add_entry"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert TASK_KEY not in json.dumps(body)  # the structured task stays local
    assert stub.headers[0]["authorization"] == "Bearer test"


def test_max_tokens_field_option():
    with OpenAIStub([text_reply("a"), text_reply("b")]) as stub:
        openai_model(stub, max_tokens=64).invoke("hi")
        openai_model(stub, max_tokens=64, max_tokens_field="max_tokens", temperature=None).invoke("hi")
    default, legacy = stub.requests
    assert default["max_completion_tokens"] == 64 and "max_tokens" not in default
    assert legacy["max_tokens"] == 64 and "max_completion_tokens" not in legacy and "temperature" not in legacy


def test_streaming_keeps_tool_call_and_usage():
    with OpenAIStub([tool_call_reply("add_entry", ARGS, usage=(50, 9))]) as stub:
        model = openai_model(stub).bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
        chunks = list(model.stream(PROMPT))
    reply = chunks[0]
    for chunk in chunks[1:]:
        reply += chunk
    assert reply.tool_calls[0]["args"] == ARGS and reply.usage_metadata["input_tokens"] == 50
    assert stub.requests[0]["stream"] is True


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, openai.InternalServerError), (400, openai.BadRequestError), (429, openai.RateLimitError)],
)
async def test_endpoint_errors_surface_as_exceptions(status, error):
    with OpenAIStub([error_reply(status, f"boom {status}")]) as stub:
        model = openai_model(stub, max_retries=0).bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
        with pytest.raises(error, match=f"boom {status}"):
            await model.ainvoke(PROMPT)


def test_malformed_arguments_become_invalid_tool_calls():
    with OpenAIStub([tool_call_reply("add_entry", '{"summary": "cut off')]) as stub:
        reply = openai_model(stub).bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry").invoke(PROMPT)
    assert reply.tool_calls == [] and reply.invalid_tool_calls[0]["name"] == "add_entry"


def test_stub_script_exhaustion_and_dynamic_replies():
    def echo_model(body):
        return text_reply(f"you asked {body['model']}")

    with OpenAIStub([echo_model]) as stub:
        assert openai_model(stub).invoke("hi").content == "you asked gpt-4o-mini"
        with pytest.raises(openai.BadRequestError, match="no scripted response left for request #2"):
            openai_model(stub, max_retries=0).invoke("hi")


# --- ScriptedChatModel ------------------------------------------------------------------------------------------------
async def test_scripted_model_replays_records_and_stops():
    script = [tool_call_message("add_entry", ARGS, (100, 20)), text_message("no tool"), ValueError("model down")]
    model = ScriptedChatModel(responses=script)
    bound = model.bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
    assert bound is model and model.bound_tool_choice == "add_entry"
    assert model.bound_tools[0]["function"]["name"] == "add_entry"

    first = await bound.ainvoke(PROMPT)
    assert first.tool_calls[0]["args"] == ARGS and first.usage_metadata["total_tokens"] == 120
    assert (await bound.ainvoke(PROMPT)).tool_calls == []
    with pytest.raises(ValueError, match="model down"):
        bound.invoke(PROMPT)
    with pytest.raises(ScriptExhaustedError, match="call #4 but only 3 scripted"):
        bound.invoke(PROMPT)
    assert len(model.calls) == 4 and model.calls[0][1].content == "Record: I moved to Denver."
    assert script[0].id is None  # the script itself is not mutated by langchain


def test_scripted_model_cycles_on_request_and_streams_tool_calls():
    model = ScriptedChatModel(responses=[tool_call_message("add_entry", ARGS)], cycle=True)
    for _ in range(3):
        assert model.invoke(PROMPT).tool_calls[0]["name"] == "add_entry"
    streamed = list(model.stream(PROMPT))
    assert streamed[-1].tool_calls[0]["args"] == ARGS
    malformed = invalid_tool_call_message("add_entry", "{not json")
    assert malformed.invalid_tool_calls[0]["args"] == "{not json" and malformed.tool_calls == []
