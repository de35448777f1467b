"""Usage per model: every report that shows model usage breaks it down by model name, and the rows add up to the
totals (which keep their keys). The model is scripted (or the local OpenAI-compatible stub); the server is real."""

from __future__ import annotations

import json
from functools import partial

from langchain_core.messages import AIMessage
from openai_stub import OpenAIStub, text_reply, tool_call_reply

from mycelian_agent import AgentSettings, build_agent
from mycelian_agent.agent.control import ControlState
from mycelian_agent.agent.report import InvocationResult, ModelUsage, Usage
from mycelian_agent.cli import main
from mycelian_agent.conversations.replay import ReplayStats
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

in_process = partial(build_agent, server="in-process")

SHARED = ("llm_calls", "prompt_tokens", "completion_tokens", "corrections", "fallbacks", "model_retries")


def entry_reply(summary: str, tokens: tuple[int, int] = (100, 20)) -> AIMessage:
    return tool_call_message("add_entry", {"summary": summary, "tags": {"topic": "test"}}, usage=tokens)


def assert_rows_add_up(usage: Usage) -> None:
    for name in SHARED:
        assert getattr(usage, name) == sum(getattr(row, name) for row in usage.by_model.values()), name


def test_usage_adds_up_per_model_and_survives_its_dict_form():
    a = Usage.of("openai:a", llm_calls=2, prompt_tokens=50, corrections=1) + Usage(retries=1)
    b = Usage.of("openai:a", llm_calls=1, fallbacks=1, fallback_entries=3) + Usage.of(
        "extractive", stand_ins=1, stand_in_entries=3
    )
    total = a + b
    assert (total.llm_calls, total.prompt_tokens, total.corrections, total.fallbacks, total.retries) == (3, 50, 1, 1, 1)
    assert total.by_model == {
        "openai:a": ModelUsage(llm_calls=3, prompt_tokens=50, corrections=1, fallbacks=1, fallback_entries=3),
        "extractive": ModelUsage(stand_ins=1, stand_in_entries=3),
    }
    assert_rows_add_up(total)
    data = total.as_dict()
    assert Usage.from_mapping(json.loads(json.dumps(data))) == total
    assert [name for name, _ in total.rows()] == ["openai:a", "extractive"]
    # a checkpoint written before the breakdown existed: the totals, no rows
    legacy = Usage.from_mapping({"llm_calls": 4, "prompt_tokens": 9})
    assert (legacy.llm_calls, legacy.prompt_tokens, legacy.by_model) == (4, 9, {})
    assert "3 steps" not in total.by_model["openai:a"].describe()
    assert "1 steps to the fallback (3 entries)" in total.by_model["openai:a"].describe()
    assert "wrote 1 steps as the fallback (3 entries)" in total.by_model["extractive"].describe()


async def test_a_correction_and_a_fallback_are_counted_against_the_model_that_needed_them(tmp_path):
    model = ScriptedChatModel(
        responses=[
            AIMessage(content="I will remember that."),  # message 1: corrected ...
            entry_reply("Ana said she lives in Porto."),  # ... then written
            *[AIMessage(content="No.")] * 3,  # message 2: two corrections, then the fallback writes it
        ]
    )
    async with in_process(model, db=tmp_path / "m.db", settings=AgentSettings(max_corrections=2)) as invoker:
        first = await invoker.aprocess_conversation_message("user", "I live in Porto.", "t1")
        second = await invoker.aprocess_conversation_message("user", "My sister is Rita.", "t1")
        status = await invoker.athread_status("t1")
    assert first.by_model == {
        "scripted": ModelUsage(llm_calls=2, prompt_tokens=100, completion_tokens=20, corrections=1)
    }
    assert second.by_model == {
        "scripted": ModelUsage(llm_calls=3, corrections=2, fallbacks=1, fallback_entries=1),
        "extractive": ModelUsage(stand_ins=1, stand_in_entries=1),
    }
    assert (second.llm_calls, second.corrections, second.fallbacks) == (3, 2, 1)  # the totals as before
    data = second.as_dict()
    assert data["by_model"]["extractive"]["stand_in_entries"] == 1 and data["fallbacks"] == 1
    # the thread's checkpointed totals carry the rows too
    assert status.usage == first.usage + second.usage
    assert status.usage.by_model["scripted"].llm_calls == 5
    assert_rows_add_up(status.usage)


async def test_a_batch_fallback_counts_the_entries_it_wrote(tmp_path):
    batch = AIMessage(content="nothing useful")
    model = ScriptedChatModel(responses=[batch] * 3)
    settings = AgentSettings(batch_size=3, max_corrections=2)
    async with in_process(model, db=tmp_path / "m.db", settings=settings) as invoker:
        results = [await invoker.aprocess_conversation_message("user", f"Fact number {i}.", "t1") for i in range(3)]
    written = results[-1]
    assert written.written == (1, 2, 3)
    assert written.by_model["scripted"].fallbacks == 1 and written.by_model["scripted"].fallback_entries == 3
    assert written.by_model["extractive"] == ModelUsage(stand_ins=1, stand_in_entries=3)


def test_replay_summary_shows_the_rows_in_json_and_text(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    data = tmp_path / "conv.json"
    data.write_text(
        json.dumps(
            {
                "conversation_id": "c1",
                "messages": [
                    {"role": "user", "content": "I adopted a cat called Miso."},
                    {"role": "assistant", "content": "Congratulations on Miso!"},
                ],
            }
        )
    )
    replies = [
        text_reply("Sure.", usage=(50, 3)),
        tool_call_reply(
            "add_entry", {"summary": "The user adopted a cat called Miso.", "tags": {"topic": "cat"}}, usage=(60, 10)
        ),
        *[text_reply("No.", usage=(40, 2))] * 3,
    ]
    with OpenAIStub(responses=replies, cycle=False) as stub:
        args = [
            "replay",
            str(data),
            "--db",
            str(tmp_path / "m.db"),
            "--model",
            "openai:stub",
            "--api-key",
            "k",
            "--base-url",
            stub.base_url,
            "--flush-every",
            "100",
        ]
        capsys.readouterr()
        main([*args, "--json"])
        summary = json.loads(capsys.readouterr().out)
    # the second message and the session end's context document (the stub has no reply left: HTTP 400) fell back
    assert (summary["llm_calls"], summary["corrections"], summary["fallbacks"]) == (5, 3, 2)
    assert summary["by_model"]["openai:stub"] == {
        "llm_calls": 5,
        "prompt_tokens": 230,
        "completion_tokens": 19,
        "corrections": 3,
        "fallbacks": 2,
        "fallback_entries": 1,
        "model_retries": 0,
        "stand_ins": 0,
        "stand_in_entries": 0,
    }
    assert summary["by_model"]["extractive"] == {
        **dict.fromkeys(summary["by_model"]["openai:stub"], 0),
        "stand_ins": 2,
        "stand_in_entries": 1,
    }
    stats = ReplayStats(usage=Usage.from_mapping(summary))
    assert stats.as_dict()["by_model"] == summary["by_model"]
    with OpenAIStub(responses=[text_reply("No.", usage=(40, 2))], cycle=True) as stub:
        args[-3] = stub.base_url
        main([*args[:3], str(tmp_path / "m2.db"), *args[4:]])
        text = capsys.readouterr().out
    assert "openai:stub" in text and "steps to the fallback (2 entries)" in text
    assert "extractive" in text and "as the fallback" in text


def test_invocation_result_keeps_its_keys_and_adds_the_breakdown():
    result = InvocationResult(
        control=ControlState.PROCESS_MESSAGE, thread_id="t", usage=Usage.of("openai:x", llm_calls=1, prompt_tokens=7)
    )
    data = result.as_dict()
    assert (data["llm_calls"], data["prompt_tokens"], data["retries"]) == (1, 7, 0)
    assert data["by_model"] == {"openai:x": ModelUsage(llm_calls=1, prompt_tokens=7).as_dict()}
