"""LoCoMoRunner end to end on a tiny LoCoMo-format sample (real embedded server, extractive model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mycelian_agent.builder import connect
from mycelian_agent.conversations.formats import valid_title
from mycelian_bench import read_jsonl
from mycelian_bench.locomo import LoCoMoRunner

REPO = Path(__file__).resolve().parent.parent

SAMPLE = {
    "sample_id": "tiny-1",
    "conversation": {
        "speaker_a": "Alice",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Alice", "dia_id": "D1:1", "text": "I adopted a greyhound named Comet yesterday."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Congratulations! Those dogs are gentle."},
            {"speaker": "Alice", "dia_id": "D1:3", "text": "I also started pottery classes on Tuesdays."},
        ],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "I took up sailing on the lake."},
            {"speaker": "Alice", "dia_id": "D2:2", "text": "Comet loves running on the beach."},
        ],
    },
    "qa": [
        {
            "question": "What is the name of the greyhound Alice adopted?",
            "answer": "Comet",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {
            "question": "When did Alice start pottery classes, and where does Comet love running?",
            "answer": "May 2023; the beach",
            "evidence": ["D1:3; D2:2"],
            "category": 1,
        },
        {
            "question": "Which sport did Bob take up on the lake?",
            "answer": "sailing",
            "evidence": ["D2:1"],
            "category": 2,
        },
        {
            "question": "What boat did Alice buy for sailing?",
            "adversarial_answer": "a dinghy",
            "evidence": ["D2:1"],
            "category": 5,
        },
    ],
    "observation": {"never": "ingested"},
}


async def entry_counts(db: Path, vault: str) -> dict[str, int]:
    """Entries stored per memory title (one list_entries page of 50 is plenty here)."""
    async with connect("embedded", db=db) as memory:
        vault_id = next(v["vaultId"] for v in await memory.call_json("list_vaults") if v["title"] == vault)
        counts = {}
        for item in await memory.call_json("list_memories", {"vault_id": vault_id}):
            page = await memory.call_json(
                "list_entries", {"vault_id": vault_id, "memory_id": item["memoryId"], "limit": 50}
            )
            assert page["next_before"] is None
            counts[item["title"]] = page["count"]
    return counts


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_tiny.json"
    path.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    return path


async def test_evidence_recall_per_category_and_adversarial_apart(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    report = await LoCoMoRunner(out=out).arun([data])
    assert report.failures == {}
    records = {r["question_id"]: r for r in read_jsonl(out / "records.jsonl")}
    assert list(records) == ["tiny-1:0", "tiny-1:1", "tiny-1:2", "tiny-1:3"]

    breed = records["tiny-1:0"]
    # D1:2's summary quotes D1:1 (the message it replies to) and search lends a reply a share of the score of the
    # message before it (memory_server/storage/sqlite/lexical.py, neighbour context): in this five-entry memory both
    # lead.
    assert set(breed["retrieved_dia_ids"][:2]) == {"D1:1", "D1:2"}
    assert breed["recall"]["any@5"] and breed["recall"]["all@5"]
    both = records["tiny-1:1"]
    assert both["evidence"] == ["D1:3", "D2:2"]  # the packed "D1:3; D2:2" is split by the loader
    assert both["recall"]["any@1"] is True and both["recall"]["all@1"] is False  # one id cannot hold two
    assert both["recall"]["all@5"] is True
    assert records["tiny-1:3"]["adversarial"] is True

    summary = json.loads((out / "summary.json").read_text())
    main = summary["recall"]["categories_1_4"]
    assert main["overall"]["count"] == 3 and set(main["categories"]) == {"1 multi-hop", "2 temporal", "4 single-hop"}
    assert main["categories"]["1 multi-hop"]["recall_all@1"] == 0.0
    assert summary["recall"]["adversarial"]["overall"]["count"] == 1
    assert summary["ingestion"]["messages"] == 5 and summary["ingestion"]["entries"] == 5
    assert summary["evidence_ids_missing_from_conversation"] == 0
    text = report.format()
    assert "adversarial (category 5, reported apart)" in text and "messages/s" in text


async def test_resume_ingests_once_and_scores_only_new_questions(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    first = await LoCoMoRunner(out=out, limit_questions=2).arun([data])
    assert first.summary["this_run"]["questions"] == 2 and first.summary["this_run"]["messages"] == 5
    run = first.summary["this_run"]  # the rate is the run's: messages over its wall time
    assert run["messages_per_s"] == pytest.approx(5 / run["wall_s"], rel=0.01)
    assert first.summary["ingestion"]["messages"] == 5 and "messages_per_s" not in first.summary["ingestion"]
    second = await LoCoMoRunner(out=out).arun([data])
    assert second.summary["this_run"]["questions"] == 2 and second.summary["this_run"]["messages"] == 0
    third = await LoCoMoRunner(out=out).arun([data])
    assert third.summary["this_run"]["samples"] == 0
    assert len(read_jsonl(out / "records.jsonl")) == 4 and len(read_jsonl(out / "samples.jsonl")) == 1
    assert await entry_counts(out / "memory.db", vault="locomo") == {valid_title("tiny-1"): 5}


def test_script_runs(data: Path, tmp_path: Path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "runners" / "locomo_runner.py"),
            str(data),
            "--out",
            str(tmp_path / "o"),
            "--limit-questions",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| 4 single-hop | 1 | 0 |" in done.stdout and "questions recorded: 1" in done.stdout
    assert len(read_jsonl(tmp_path / "o" / "records.jsonl")) == 1


async def test_a_slice_of_sessions_with_qa_scored_by_token_f1(data: Path, tmp_path: Path):
    from mycelian_agent.testing import ScriptedChatModel, text_message

    qa = ScriptedChatModel(responses=[text_message("Her greyhound is called Comet.", usage=(90, 6))])
    out = tmp_path / "out"
    report = await LoCoMoRunner(out=out, sessions=1, qa_model=qa).arun([data])
    # Session 1 only: its 3 turns, and the one question whose evidence all lies there (D1:1); the question that
    # also needs D2:2 and those about session 2 are left out.
    assert (await entry_counts(out / "memory.db", "locomo")) == {valid_title("tiny-1"): 3}
    [record] = read_jsonl(out / "records.jsonl")
    assert record["evidence"] == ["D1:1"] and record["recall"]["any@5"] is True
    assert record["qa"]["hypothesis"] == "Her greyhound is called Comet."
    assert record["qa"]["f1"] == pytest.approx(1 / 3, abs=1e-3)  # precision 1/5 words, recall 1: F1 = 1/3
    assert "Question: What is the name of the greyhound Alice adopted?" in qa.calls[0][-1].content
    summary = report.summary
    assert summary["sessions"] == 1 and summary["qa"]["questions"] == 1
    assert summary["qa"]["usage"] == {"llm_calls": 1, "prompt_tokens": 90, "completion_tokens": 6}
    assert "token F1" in summary["qa"]["judge"] and "mean F1 0.333" in report.format()
    # usage per model: the extractive model wrote the memory, the QA model answered
    assert summary["usage_by_model"]["scripted (QA)"] == {
        **dict.fromkeys(summary["usage_by_model"]["extractive"], 0),
        "llm_calls": 1,
        "prompt_tokens": 90,
        "completion_tokens": 6,
    }
    assert summary["usage"]["by_model"]["extractive"]["llm_calls"] == summary["usage"]["llm_calls"] > 0
    assert "  scripted (QA): 1 calls, 90 / 6 tokens" in report.format()


def test_token_f1_follows_locomo():
    from mycelian_bench.metrics import token_f1

    assert token_f1("The beach, May 2023.", "May 2023; the beach") == 1.0  # order, articles, punctuation
    assert token_f1("sailing", "Sailing") == 1.0
    assert token_f1("I do not know", "sailing") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "sailing") == 0.0
