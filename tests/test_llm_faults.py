"""LLM faults over a whole replay: a local OpenAI-compatible endpoint answers 30% of the calls with HTTP 429, 500,
503, a timeout or a reply without a tool call. Every message is still stored exactly once, the retries are bounded
and the replay's summary reports them."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, error_reply, slow_reply, text_reply, tool_call_reply

from mycelian_agent.cli import main

MESSAGES = 24
FAULT_RATE = 0.3


def faulty_model(seed: int):
    """A reply for each request: the tool call it asks for, or (30%) one of the faults, counted by kind."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}

    def reply(body: dict) -> object:
        tool = body["tools"][0]["function"]["name"]
        if rng.random() < FAULT_RATE:
            kind = rng.choice(["429", "500", "503", "timeout", "no-tool-call"])
            counts[kind] = counts.get(kind, 0) + 1
            good = tool_call_reply(tool, {"summary": "late", "tags": {}})
            return {
                "429": error_reply(429, "rate limited", "rate_limit_error"),
                "500": error_reply(500, "boom"),
                "503": error_reply(503, "overloaded"),
                "timeout": slow_reply(2.0, good),
                "no-tool-call": text_reply("Sure, noted!"),
            }[kind]
        counts["ok"] = counts.get("ok", 0) + 1
        if tool == "add_entry":
            text = body["messages"][-1]["content"]
            return tool_call_reply(tool, {"summary": f"summary of a message ({len(text)} chars)", "tags": {"k": "v"}})
        return tool_call_reply(tool, {"content": "## Facts\n- the conversation goes on."})

    return reply, counts


@pytest.mark.timeout(240)
def test_a_replay_through_a_faulty_llm_stores_everything_once_with_bounded_reported_retries(
    tmp_path: Path, capsys
) -> None:
    texts = [f"Message {i}: a fact numbered {i} about topic {i % 5}." for i in range(MESSAGES)]
    data, db = tmp_path / "c.json", tmp_path / "m.db"
    data.write_text(
        json.dumps(
            {
                "conversation_id": "llm-faults",
                "messages": [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)
                ],
            }
        )
    )
    reply, counts = faulty_model(seed=13)
    with OpenAIStub(responses=[reply], cycle=True) as stub:
        capsys.readouterr()
        try:
            main(
                [
                    "replay",
                    str(data),
                    "--db",
                    str(db),
                    "--model",
                    "openai:stub",
                    "--api-key",
                    "k",
                    "--base-url",
                    stub.base_url,
                    "--model-timeout",
                    "0.5",
                    "--flush-every",
                    "6",
                    "--json",
                ]
            )
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr().err
        out = capsys.readouterr().out
        requests = len(stub.requests)
    summary = json.loads(out)
    conn = sqlite3.connect(db)
    try:
        stored = [row[0] for row in conn.execute("SELECT raw_entry FROM entries")]
    finally:
        conn.close()
    assert sorted(stored) == sorted(texts)  # 0 lost, 0 duplicated
    assert summary["messages"] == MESSAGES and summary["entries"] == MESSAGES
    faults = sum(v for k, v in counts.items() if k != "ok")
    assert faults >= 0.15 * requests  # the faults really were injected
    # Totals reported: every transient fault is a model retry, every reply without a call a correction, and the
    # steps that ran out of both were written by the fallback model.
    transient = sum(counts.get(kind, 0) for kind in ("429", "500", "503", "timeout"))
    assert summary["model_retries"] > 0 and summary["corrections"] > 0
    # each transient fault was retried, or was a step's last attempt: then the fallback model wrote the step
    assert 0 <= transient - summary["model_retries"] <= summary["fallbacks"]
    assert summary["llm_calls"] == counts["ok"] + counts.get("no-tool-call", 0)
    # Bounded: each step asks at most (1 + 2 corrections) × 3 attempts times.
    steps = MESSAGES + summary["contexts"]
    assert requests <= steps * 3 * 3
