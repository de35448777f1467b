"""``mycelian-agent bench qa``: slicing, question picking, scoring, resume, and end-to-end runs through the real
in-process memory server with a scripted reader (a fake chat model, or the local OpenAI stub). No network, no API
key, no local model."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from openai_stub import OpenAIStub, text_reply

from mycelian_agent.errors import ConfigError
from mycelian_agent.recall import estimate_tokens
from mycelian_bench.bench_qa import (
    CONDITIONS,
    QABench,
    bm25_block,
    evidence_shown,
    exact_match,
    full_block,
    make_slices,
    markdown_tables,
    pick_questions,
    reader_prompt,
    slice_conversation,
    slice_turns,
    summarize,
)
from mycelian_bench.cli import bench
from mycelian_bench.locomo import load_locomo


def _session(n: int, turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"speaker": who, "dia_id": f"D{n}:{i + 1}", "text": text} for i, (who, text) in enumerate(turns)]


PAD = " and we talked about the weather for a long while" * 3  # ~40 tokens a turn: sessions of ~130 tokens

LOCOMO = [
    {
        "sample_id": "tiny-qa",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": _session(
                1,
                [
                    ("Caroline", "I adopted a golden retriever puppy named Biscuit" + PAD),
                    ("Melanie", "Congratulations, golden retrievers are lovely" + PAD),
                    ("Caroline", "I also started pottery classes on Tuesdays" + PAD),
                ],
            ),
            "session_2_date_time": "10:00 am on 20 May, 2023",
            "session_2": _session(
                2,
                [
                    ("Melanie", "How is the pottery going?" + PAD),
                    ("Caroline", "Great, I made a blue vase for my mother in Lisbon" + PAD),
                    ("Melanie", "Lisbon is beautiful in spring" + PAD),
                ],
            ),
            "session_3_date_time": "9:00 am on 2 June, 2023",
            "session_3": _session(
                3,
                [("Caroline", "Biscuit learned to fetch the newspaper" + PAD), ("Melanie", "What a clever dog" + PAD)],
            ),
        },
        "qa": [
            {"question": "What breed is Biscuit?", "answer": "golden retriever", "evidence": ["D1:1"], "category": 4},
            {
                "question": "What did Caroline make and for whom?",
                "answer": "a blue vase for her mother",
                "evidence": ["D1:3", "D2:2"],
                "category": 1,
            },  # spans two slices at the small size: dropped there
            {"question": "When did Caroline adopt Biscuit?", "answer": "May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "Where does Caroline's mother live?", "answer": "Lisbon", "evidence": ["D2:2"], "category": 3},
            {
                "question": "What breed is Melanie's cat?",
                "adversarial_answer": "none",
                "evidence": ["D1:1"],
                "category": 5,
            },
            {
                "question": "What trick did Biscuit learn?",
                "answer": "fetch the newspaper",
                "evidence": ["D3:1"],
                "category": 4,
            },
        ],
    }
]


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_tiny.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    return path


class Reader(BaseChatModel):
    """A scripted reader: the first key phrase of ``answers`` found in the prompt's memory gives the answer;
    otherwise "no idea". Counts its calls."""

    answers: dict[str, str] = {
        "golden retriever puppy": "golden retriever",
        "blue vase": "Lisbon",
        "fetch the newspaper": "fetch the newspaper",
    }
    calls: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "scripted-reader"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        prompt = str(messages[-1].content)
        self.calls.append(prompt)
        memory, _, question = prompt.partition("\n\nQuestion date:")
        answer = "no idea"
        for phrase, reply in self.answers.items():
            if phrase in memory and reply.split()[0].lower() in _expected(question):
                answer = reply
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"Answer: {answer}\nbecause..."))])


def _expected(question: str) -> str:
    """Which answer a question wants (the scripted reader answers only the question asked)."""
    q = question.lower()
    return "golden" if "breed" in q else "lisbon" if "mother live" in q else "fetch" if "trick" in q else "-"


# ------------------------------------------------------------------------------------------------ slicing


def test_slices_are_whole_sessions_with_the_questions_whose_evidence_lies_inside(locomo_file: Path) -> None:
    (conversation,) = load_locomo([locomo_file])
    sizes = [
        sum(
            estimate_tokens(t.line) + 1
            for t in slice_turns(
                conversation.__class__(conversation.conversation_id, (s,), conversation.source, "locomo")
            )
        )
        for s in conversation.sessions
    ]
    # One session per slice: the category-1 question (evidence in sessions 1 and 2) fits in no slice.
    slices = slice_conversation(conversation, max(sizes))
    assert [[s.session_id for s in piece.conversation.sessions] for piece in slices] == [
        ["session_1"],
        ["session_2"],
        ["session_3"],
    ]
    kept = [[q.question for q in piece.conversation.questions] for piece in slices]
    assert kept == [
        ["What breed is Biscuit?", "When did Caroline adopt Biscuit?"],
        ["Where does Caroline's mother live?"],
        ["What trick did Biscuit learn?"],
    ]
    # Asked on the date of the session after the slice; the last slice has none.
    assert [piece.question_date for piece in slices] == ["2023-05-20T10:00:00Z", "2023-06-02T09:00:00Z", None]
    assert [piece.slice_id for piece in slices] == ["tiny-qa/s1-1", "tiny-qa/s2-2", "tiny-qa/s3-3"]
    # Two sessions fit: the category-1 question comes in; category 5 never does.
    (first, second) = slice_conversation(conversation, sizes[0] + sizes[1])
    assert [q.category for q in first.conversation.questions] == ["4", "1", "2", "3"]
    assert all(q.category != "5" for piece in (first, second) for q in piece.conversation.questions)
    assert first.tokens <= sizes[0] + sizes[1]
    # A session larger than the size is a slice of its own.
    assert len(slice_conversation(conversation, 1)) == 3


def test_questions_are_picked_round_robin_over_slices_and_categories(locomo_file: Path) -> None:
    slices = make_slices([locomo_file], 1)
    plan = pick_questions(slices, 3)
    assert [(piece.slice_id, [q.category for q in qs]) for piece, qs in plan] == [
        ("tiny-qa/s1-1", ["2"]),
        ("tiny-qa/s2-2", ["3"]),
        ("tiny-qa/s3-3", ["4"]),
    ]
    assert sum(len(qs) for _, qs in pick_questions(slices, None)) == 4
    assert sum(len(qs) for _, qs in pick_questions(slices, 100)) == 4
    with pytest.raises(ConfigError, match="no questions"):
        pick_questions([], None)


def test_memory_blocks(locomo_file: Path) -> None:
    (piece,) = make_slices([locomo_file], 10_000)
    turns = slice_turns(piece.conversation)
    assert turns[0].line.startswith("[2023-05-08 (Mon) 13:56] Caroline: I adopted a golden retriever")
    block = bm25_block(turns, "What did Caroline make for her mother?", k=2)
    lines = block.splitlines()[1:]
    assert len(lines) == 2 and "blue vase" in block
    assert lines == sorted(lines, key=lambda line: [t.line for t in turns].index(line))  # time order
    whole = full_block(turns, 100_000)
    assert all(t.line in whole for t in turns)
    clipped = full_block(turns, 200)
    assert "earlier turns left out" in clipped and turns[-1].line in clipped and turns[0].line not in clipped
    assert estimate_tokens(clipped) <= 200
    texts = {t.dia_id: t.text for t in turns}
    assert evidence_shown(whole, ["D1:1", "D2:2"], texts) and not evidence_shown(clipped, ["D1:1"], texts)
    assert not evidence_shown(None, ["D1:1"], texts)
    # A recall block puts the dates beside relative ones ("yesterday (2023-05-07)"): still the turn's words.
    said = {"D9:9": "I went to a support group yesterday and it was so powerful."}
    assert evidence_shown(
        "[2023-05-08 (Mon) 13:56] Caroline: I went to a support group yesterday (2023-05-07) and it was so powerful.",
        ["D9:9"],
        said,
    )
    system, human = reader_prompt(block, "Where?", "2023-05-20T10:00:00Z")
    assert "conversation date of each line" in system
    assert human.startswith("Memory:\n" + block) and "Question date: 2023-05-20 (Sat)" in human
    assert "(no memory is available)" in reader_prompt(None, "Where?", None)[1]


# ------------------------------------------------------------------------------------------------ scoring


def _record(qid: str, condition: str, f1: float, tokens: int, category: str = "4", em: bool = False) -> dict:
    return {
        "question_id": qid,
        "condition": condition,
        "category": category,
        "f1": f1,
        "em": em,
        "prompt_tokens": tokens,
        "prompt_tokens_source": "endpoint",
        "block_tokens": tokens - 100,
        "evidence_shown": True,
        "seconds": 1.0,
    }


def test_scoring_exact_match_and_summary() -> None:
    assert exact_match("The Golden Retriever.", "golden retriever")
    assert not exact_match("a golden retriever puppy", "golden retriever") and not exact_match("", "")
    records = [
        _record("q1", "recall", 1.0, 1000, em=True),
        _record("q1", "full", 0.5, 6000),
        _record("q2", "recall", 0.5, 1000, category="2"),
        _record("q2", "full", 0.5, 6000, category="2"),
        _record("q3", "recall", 0.0, 1000),
    ]  # q3 has no full answer: not paired
    summary = summarize(records, ("recall", "full"))
    assert summary["questions_paired"] == 2 and summary["records"] == {"recall": 3, "full": 2}
    recall, full = summary["conditions"]["recall"], summary["conditions"]["full"]
    assert (recall["n"], recall["f1"], recall["em"], recall["prompt_tokens"]) == (2, 0.75, 0.5, 1000)
    assert recall["f1_per_1k_prompt_tokens"] == 0.75 and full["f1_per_1k_prompt_tokens"] == round(0.5 / 6, 4)
    assert summary["categories"]["4 single-hop"]["full"]["f1"] == 0.5
    assert summary["categories"]["2 temporal"]["recall"]["n"] == 1
    target = summary["target"]
    assert target["f1_met"] and target["tokens_met"] and target["met"] and target["prompt_token_share"] == 0.1667
    missed = summarize([_record("q1", "recall", 0.4, 2000), _record("q1", "full", 0.5, 6000)], ("recall", "full"))
    assert not missed["target"]["met"] and not missed["target"]["f1_met"] and not missed["target"]["tokens_met"]
    assert summarize(records, ("recall",))["target"] is None
    table = markdown_tables(summary)
    assert "| recall | 2 | 0.750 | 0.500 | 1000 |" in table and "-> MET" in table


# ------------------------------------------------------------------------------------------------ runs


def test_end_to_end_with_a_scripted_reader_and_resume(locomo_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "qa"
    reader = Reader(calls=[])
    summary = QABench(out=out, locomo=[locomo_file], reader=reader, questions=None, slice_tokens=1).run()
    records = [json.loads(line) for line in (out / "qa_records.jsonl").read_text().splitlines()]
    assert len(records) == 4 * 4 == len(reader.calls) and not summary["failed"]
    by = {(r["question_id"], r["condition"]): r for r in records}
    breed = "tiny-qa:0"
    # The memory (recall), BM25 and the whole slice show the evidence: the reader answers; with nothing it cannot.
    for condition in ("recall", "bm25", "full"):
        assert by[breed, condition]["evidence_shown"] and by[breed, condition]["f1"] == 1.0, condition
        assert by[breed, condition]["hypothesis"] == "golden retriever"
    assert by[breed, "none"]["f1"] == 0.0 and not by[breed, "none"]["evidence_shown"]
    recall = by[breed, "recall"]
    assert recall["prompt_tokens_source"] == "estimate" and recall["block_tokens"] <= 1500
    assert (
        recall["recall_hits"] >= 1
        and "golden retriever puppy"
        in reader.calls[[r["question_id"] + r["condition"] for r in records].index(breed + "recall")]
    )
    assert summary["questions_paired"] == 4 and set(summary["conditions"]) == set(CONDITIONS)
    assert summary["conditions"]["none"]["f1"] < summary["conditions"]["full"]["f1"]
    assert json.loads((out / "qa_summary.json").read_text())["questions_paired"] == 4
    # usage per model: the extractive model wrote the slices' memories, the reader answered every record
    rows = summary["usage_by_model"]
    assert rows[f"{summary['reader']} (QA)"]["llm_calls"] == 16 and rows["extractive"]["llm_calls"] > 0
    # A killed run: the last two answers are lost (one torn line). The re-run asks exactly those two.
    lines = (out / "qa_records.jsonl").read_text().splitlines(keepends=True)
    (out / "qa_records.jsonl").write_text("".join(lines[:-2]) + lines[-2][:20])
    again = Reader(calls=[])
    summary = QABench(out=out, locomo=[locomo_file], reader=again, questions=None, slice_tokens=1).run()
    assert len(again.calls) == 2 and summary["this_run"]["answers"] == 2
    keys = [
        (r["question_id"], r["condition"]) for r in map(json.loads, (out / "qa_records.jsonl").read_text().splitlines())
    ]
    assert len(keys) == len(set(keys)) == 16
    # Nothing left: no reader call (and no endpoint needed).
    assert (
        QABench(out=out, locomo=[locomo_file], reader=Reader(calls=[]), questions=None, slice_tokens=1).run()[
            "this_run"
        ]["answers"]
        == 0
    )
    with pytest.raises(ConfigError, match="other settings.*slice_tokens"):
        QABench(out=out, locomo=[locomo_file], reader=Reader(calls=[]), slice_tokens=2).run()


def test_reader_over_an_openai_compatible_endpoint_reports_usage(locomo_file: Path, tmp_path: Path) -> None:
    with OpenAIStub([text_reply("golden retriever", usage=(321, 3))], cycle=True) as stub:
        summary = QABench(
            out=tmp_path / "qa",
            locomo=[locomo_file],
            reader="openai:stub",
            api_key="test",
            base_url=stub.base_url,
            questions=1,
            slice_tokens=1,
            conditions=("bm25", "none"),
        ).run()
        assert len(stub.requests) == 2
        assert stub.requests[0]["max_completion_tokens"] == 64
    row = summary["conditions"]["bm25"]
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (321, "endpoint")
    assert summary["target"] is None and summary["reader"] == "openai:stub"
    reader = summary["usage_by_model"]["openai:stub (QA)"]
    assert (reader["llm_calls"], reader["prompt_tokens"], reader["completion_tokens"]) == (2, 642, 6)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_reader_endpoint_is_named(locomo_file: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ConfigError, match=f"reader endpoint {url} unreachable"):
        QABench(
            out=tmp_path / "qa",
            locomo=[locomo_file],
            reader="openai:x",
            api_key="k",
            base_url=url,
            conditions=("none",),
        ).run()
    with pytest.raises(ConfigError, match="reader must be"):
        QABench(out=tmp_path / "qa2", locomo=[locomo_file], reader="extractive", conditions=("none",)).run()
    with pytest.raises(ConfigError, match="conditions must be"):
        QABench(out=tmp_path / "qa3", locomo=[locomo_file], reader="openai:x", conditions=("everything",))


def test_command_line(locomo_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    assert "qa" in runner.invoke(bench, ["--help"]).output
    missing = runner.invoke(bench, ["qa", "--reader", "openai:x", "--data", str(tmp_path / "nowhere")])
    assert missing.exit_code != 0 and "locomo/locomo_dev3.json" in missing.output
    assert "--data DIR" in runner.invoke(bench, ["qa", "--reader", "openai:x"], env={"MYCELIAN_DATA": None}).output
    bad = runner.invoke(bench, ["qa", "--reader", "openai:x", "--locomo", str(locomo_file), "--conditions", "all"])
    assert bad.exit_code != 0 and "recall,bm25,full,none" in bad.output
    with OpenAIStub([text_reply("golden retriever")], cycle=True) as stub:
        done = runner.invoke(
            bench,
            [
                "qa",
                "--locomo",
                str(locomo_file),
                "--out",
                str(tmp_path / "qa"),
                "--reader",
                "openai:stub",
                "--base-url",
                stub.base_url,
                "--api-key",
                "k",
                "--questions",
                "2",
                "--slice-tokens",
                "1",
                "--quiet",
            ],
            env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": None},
        )
    assert done.exit_code == 0, done.output
    assert "questions answered under every condition" in done.output and "F1 per category" in done.output
    assert "model usage: openai:stub (QA): 8 calls" in done.output
    assert len((tmp_path / "qa" / "qa_records.jsonl").read_text().splitlines()) == 2 * 4
