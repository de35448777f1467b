"""SingleQuestionRunner (LongMemEval) end to end on the real embedded server with the extractive model."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mycelian_agent.builder import connect
from mycelian_agent.conversations.formats import valid_title
from mycelian_agent.conversations.replay import replay_conversation
from mycelian_agent.conversations.selection import parse_shard, select_items
from mycelian_agent.errors import ConfigError
from mycelian_agent.testing import ScriptedChatModel, text_message
from mycelian_bench import read_jsonl
from mycelian_bench.cli import bench
from mycelian_bench.longmemeval import RETRIEVAL_ONLY_MARK, SingleQuestionRunner, load_longmemeval

REPO = Path(__file__).resolve().parent.parent


def _turn(role: str, content: str, has_answer: bool = False) -> dict:
    return {"role": role, "content": content, **({"has_answer": True} if has_answer else {})}


QUESTIONS = [
    {  # three sessions, the middle one holds the answer (turn 0)
        "question_id": "q1-lisbon",
        "question_type": "single-session-user",
        "question": "Which city did I relocate to for the bakery job?",
        "answer": "Lisbon",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s_cooking", "s_move", "s_garden"],
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/10 (Wed) 18:30", "2023/05/20 (Sat) 08:15"],
        "haystack_sessions": [
            [
                _turn("user", "Can you suggest a pasta recipe with tomatoes?"),
                _turn("assistant", "Try a simple marinara with garlic and basil."),
            ],
            [
                _turn("user", "I relocated to Lisbon last week for my bakery job.", True),
                _turn("assistant", "Congratulations! Lisbon is a lovely place."),
            ],
            [
                _turn("user", "My tomatoes in the garden are wilting."),
                _turn("assistant", "Water them early in the morning."),
            ],
        ],
        "answer_session_ids": ["s_move"],
    },
    {  # a session dated after the question must not be retrieved
        "question_id": "q2-future",
        "question_type": "knowledge-update",
        "question": "What color is my bicycle?",
        "answer": "red",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s_bike", "s_later"],
        "haystack_dates": ["2023/05/02 (Tue) 12:00", "2023/07/01 (Sat) 12:00"],
        "haystack_sessions": [
            [_turn("user", "I bought a bicycle, it is red.", True), _turn("assistant", "Red is a cheerful color.")],
            [_turn("user", "I painted my bicycle blue."), _turn("assistant", "Blue suits it.")],
        ],
        "answer_session_ids": ["s_bike"],
    },
    {  # abstention: kept, answered, excluded from recall
        "question_id": "q3_abs",
        "question_type": "single-session-user",
        "question": "What is the name of my cat?",
        "answer": "unknown",
        "question_date": None,
        "haystack_session_ids": ["s_dog"],
        "haystack_dates": ["2023/05/03 (Wed) 07:00"],
        "haystack_sessions": [[_turn("user", "My dog Rex loves walks."), _turn("assistant", "Rex sounds happy.")]],
        "answer_session_ids": ["s_dog"],
    },
]
MESSAGES = {"q1-lisbon": 6, "q2-future": 4, "q3_abs": 2}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "lme_tiny.json"
    path.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return path


def runner(out: Path, **options) -> SingleQuestionRunner:
    return SingleQuestionRunner(out=out, **options)


async def entry_counts(db: Path, vault: str = "longmemeval") -> dict[str, int]:
    """Entries stored per memory title, counted through list_entries (paged)."""
    counts: dict[str, int] = {}
    async with connect("embedded", db=db) as memory:
        vault_id = next(v["vaultId"] for v in await memory.call_json("list_vaults") if v["title"] == vault)
        for item in await memory.call_json("list_memories", {"vault_id": vault_id}):
            args = {"vault_id": vault_id, "memory_id": item["memoryId"], "limit": 50}
            total = 0
            while True:
                page = await memory.call_json("list_entries", args)
                total += page["count"]
                if not page["next_before"]:
                    break
                args["before"] = page["next_before"]
            counts[item["title"]] = total
    return counts


async def test_outputs_recall_and_date_bound(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    report = await runner(out).arun([data])
    assert report.failures == {}

    lines = (out / "hypotheses.jsonl").read_text(encoding="utf-8").splitlines()
    hypotheses = [json.loads(line) for line in lines]
    assert [set(h) for h in hypotheses] == [{"question_id", "hypothesis"}] * 3
    assert sorted(h["question_id"] for h in hypotheses) == sorted(MESSAGES)
    assert all(h["hypothesis"].startswith(RETRIEVAL_ONLY_MARK) for h in hypotheses)

    records = {r["question_id"]: r for r in read_jsonl(out / "records.jsonl")}
    q1 = records["q1-lisbon"]
    # Only the answer session shares words with the question; its answer turn (3 shared terms) ranks first (the
    # others come after it, found by meaning: hybrid search is the default).
    assert q1["retrieved_sessions"][0] == "s_move"
    assert q1["retrieved_turns"][0] == "s_move:0"
    assert q1["evidence_turns"] == ["s_move:0"]
    assert q1["recall"]["session"] == {f"{m}@{k}": True for k in (1, 5, 10) for m in ("any", "all")}
    assert q1["recall"]["turn"]["any@1"] is True
    assert "[2023-05-10 (Wed) 18:30] user: I relocated to Lisbon" in q1["hypothesis"]  # the recall block
    assert q1["ingestion"]["messages"] == 6 and q1["ingestion"]["entries"] == 6
    assert q1["ingestion"]["messages_per_s"] > 0 and q1["usage"]["ingestion"]["llm_calls"] >= 6

    q2 = records["q2-future"]
    assert q2["retrieved_sessions"] == ["s_bike"]  # "I painted my bicycle blue" is dated after the question
    # Nor shown in the recall block: as the turn after a hit (a bounded recall's neighbours are bounded too), or as
    # a note (the newest context document holds it; items dated after the bound are left out).
    assert "I bought a bicycle, it is red." in q2["hypothesis"] and "painted" not in q2["hypothesis"]
    assert records["q3_abs"]["recall"] == {"session": None, "turn": None}

    summary = json.loads((out / "summary.json").read_text())
    session = summary["recall"]["session"]["overall"]
    assert (session["count"], session["excluded"], session["recall_all@1"]) == (2, 1, 1.0)
    assert summary["ingestion"]["messages"] == 12 and summary["questions"] == 3
    assert "session recall" in report.format() and "messages/s" in report.format()


async def test_qa_model_answers_from_the_evidence(data: Path, tmp_path: Path):
    qa = ScriptedChatModel(responses=[text_message("You moved to Lisbon.", usage=(120, 7))])
    report = await runner(tmp_path / "out", qa_model=qa, limit=1).arun([data])
    record = read_jsonl(tmp_path / "out" / "records.jsonl")[0]
    assert record["hypothesis"] == "You moved to Lisbon."
    assert record["usage"]["qa"] == {"llm_calls": 1, "prompt_tokens": 120, "completion_tokens": 7}
    prompt = qa.calls[0][-1].content
    assert "Question: Which city did I relocate to" in prompt and "I relocated to Lisbon" in prompt
    assert "Question date: 2023-06-01 10:00" in prompt and "[2023-05-10 (Wed) 18:30] user" in prompt
    assert "Long-term memory relevant to: Which city did I relocate to" in prompt  # what invoker.arecall gives
    assert report.summary["usage"]["qa"]["prompt_tokens"] == 120
    rows = report.summary["usage_by_model"]
    assert rows["scripted (QA)"]["llm_calls"] == 1 and rows["extractive"]["llm_calls"] >= 6
    assert "  extractive: " in report.format() and "  scripted (QA): 1 calls, 120 / 7 tokens" in report.format()


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shards_are_disjoint_and_cover(count: int):
    ids = [f"q{i:03d}" for i in range(17)][::-1]
    shards = [select_items(ids, str, shard=(i, count)) for i in range(count)]
    flat = [x for shard in shards for x in shard]
    assert len(flat) == len(set(flat)) == 17 and set(flat) == set(ids)
    assert select_items(ids, str, limit=5, shard=(0, 2)) == [x for x in ids[:5] if sorted(ids[:5]).index(x) % 2 == 0]


def test_shard_spec_is_checked():
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "1", "a/b", "-1/2"):
        with pytest.raises(ConfigError):
            parse_shard(bad)


async def test_sharded_runs_partition_the_questions(data: Path, tmp_path: Path):
    done = []
    for i in range(2):
        await runner(tmp_path / f"shard{i}", shard=f"{i}/2").arun([data])
        done.append({r["question_id"] for r in read_jsonl(tmp_path / f"shard{i}" / "records.jsonl")})
    assert done == [{"q1-lisbon", "q3_abs"}, {"q2-future"}]  # sorted ids, position modulo 2


async def test_resume_skips_done_questions_and_stores_each_message_once(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    # An ingestion interrupted after 3 messages of q1 (the process dies mid-session).
    first = runner(out)
    conversation = load_longmemeval([data])[0]
    stored = []

    class Crash(Exception):
        pass

    def crash_after_three(result) -> None:
        stored.append(result)
        if len(stored) == 3:
            raise Crash

    async with first.open_harness(valid_title("q1-lisbon")) as harness:
        _memory_id, invoker = await harness.invoker_for(valid_title("q1-lisbon"))
        with pytest.raises(Crash):
            await replay_conversation(invoker, conversation, thread_id="q1-lisbon", on_message=crash_after_three)

    report = await runner(out, limit=1).arun([data])
    q1 = read_jsonl(out / "records.jsonl")[0]
    assert (q1["ingestion"]["skipped"], q1["ingestion"]["messages"]) == (3, 3)
    assert report.summary["this_run"]["questions"] == 1

    report = await runner(out, workers=2).arun([data])
    assert report.summary["this_run"]["questions"] == 2  # q1 was skipped
    report = await runner(out, workers=2).arun([data])
    assert report.summary["this_run"] == {
        "questions": 0,
        "messages": 0,
        "selected": 3,
        "messages_per_s": None,
        "wall_s": report.summary["this_run"]["wall_s"],
    }
    assert sorted(r["question_id"] for r in read_jsonl(out / "records.jsonl")) == sorted(MESSAGES)
    assert len((out / "hypotheses.jsonl").read_text().splitlines()) == 3
    assert await entry_counts(out / "memory.db") == {valid_title(q): n for q, n in MESSAGES.items()}


def test_torn_last_record_line_is_dropped(tmp_path: Path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"question_id": "a"}\n{"question_id": "b", "hyp', encoding="utf-8")
    assert read_jsonl(path) == [{"question_id": "a"}]
    assert path.read_text() == '{"question_id": "a"}\n'


def test_command_reads_its_environment_and_rejects_extractive_qa(data: Path, tmp_path: Path):
    cli = CliRunner()
    bad = cli.invoke(
        bench,
        ["longmemeval", str(data), "--out", str(tmp_path / "bad"), "--no-progress"],
        env={"MYCELIAN_QA_MODEL": "extractive"},
    )
    assert bad.exit_code == 1 and "cannot answer" in bad.stderr and bad.stderr.count("\n") == 1
    done = cli.invoke(
        bench,
        ["longmemeval", str(data), "--out", str(tmp_path / "o"), "--limit", "2", "--no-progress"],
        env={"MYCELIAN_QA_MODEL": None, "MYCELIAN_MODEL": "extractive"},
    )
    assert done.exit_code == 0, done.output
    assert "| overall | 2 | 0 |" in done.stdout and "questions recorded: 2" in done.stdout
    report = cli.invoke(bench, ["longmemeval", "--out", str(tmp_path / "o"), "--report-only", "--json"])
    assert report.exit_code == 0 and json.loads(report.stdout)["questions"] == 2


def test_command_usage_errors(data: Path, tmp_path: Path):
    cli = CliRunner()
    no_files = cli.invoke(bench, ["longmemeval", "--out", str(tmp_path / "o")])
    assert no_files.exit_code == 2 and "give at least one data file (or --report-only)" in no_files.stderr
    bad_shard = cli.invoke(bench, ["longmemeval", str(data), "--out", str(tmp_path / "o"), "--shard", "2/2"])
    assert bad_shard.exit_code == 2 and "shard i/n needs 0 <= i < n" in bad_shard.stderr
    assert not (tmp_path / "o").exists()


def test_real_oracle_sample_as_a_script(shared_data: Path, tmp_path: Path):
    path = shared_data / "longmemeval" / "longmemeval_oracle_6q.json"
    if not path.exists():
        pytest.skip(f"{path} missing")
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "runners" / "single_question_runner.py"),
            str(path),
            "--out",
            str(tmp_path / "o"),
            "--limit",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["questions"] == 2 and summary["ingestion"]["messages"] > 0
    assert summary["recall"]["session"]["overall"]["count"] == 2
    assert time.perf_counter() - started < 60
