"""Smoke tests of the benchmark suite (runners/bench.py): every benchmark at tiny sizes, JSON shape, sane numbers.

No timing targets here: the numbers depend on the machine and on what else runs on it. The data files are tiny
synthetic LoCoMo / LongMemEval files written into tmp_path, so the tests need no shared data.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from mycelian_agent.benchmarks.bench_common import have_module, percentile
from mycelian_agent.benchmarks.bench_prompts import prompt_tokens, token_counter
from mycelian_agent.benchmarks.bench_recall import _Okapi, bm25_ranker, tokenize

REPO = Path(__file__).resolve().parent.parent

LOCOMO = [{
    "sample_id": "tiny-1",
    "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "I adopted a golden retriever puppy named Biscuit."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "Congratulations! Golden retrievers are lovely."},
            {"speaker": "Caroline", "dia_id": "D1:3", "text": "I also started pottery classes on Tuesdays."},
        ],
        "session_2_date_time": "10:00 am on 20 May, 2023",
        "session_2": [
            {"speaker": "Melanie", "dia_id": "D2:1", "text": "How is the pottery going?"},
            {"speaker": "Caroline", "dia_id": "D2:2", "text": "Great, I made a blue vase for my mother in Lisbon."},
            {"speaker": "Melanie", "dia_id": "D2:3", "text": "Lisbon is beautiful in spring."},
        ],
    },
    "qa": [
        {"question": "What breed is Biscuit?", "answer": "golden retriever", "evidence": ["D1:1"], "category": 4},
        {"question": "What did Caroline make in pottery class?", "answer": "a blue vase", "evidence": ["D1:3", "D2:2"],
         "category": 1},
        {"question": "When did Caroline start pottery?", "answer": "May 2023", "evidence": ["D1:3"], "category": 2},
        {"question": "What breed is Melanie's cat?", "adversarial_answer": "none", "evidence": ["D1:1"],
         "category": 5},
    ],
}]


def _turn(role: str, content: str, has_answer: bool = False) -> dict:
    turn = {"role": role, "content": content}
    if has_answer:
        turn["has_answer"] = True
    return turn


LONGMEMEVAL = [{
    "question_id": "q-move", "question_type": "knowledge-update", "question": "Which city does the user live in now?",
    "answer": "Denver", "question_date": "2023/06/01 (Thu) 10:00",
    "haystack_session_ids": ["s_cook", "s_move", "s_garden"],
    "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/10 (Wed) 18:30", "2023/05/20 (Sat) 08:15"],
    "haystack_sessions": [
        [_turn("user", "Give me a quick pasta recipe for two."),
         _turn("assistant", "Boil spaghetti, toss with garlic, olive oil and parmesan.")],
        [_turn("user", "I just moved from Boston to Denver for a new job.", True),
         _turn("assistant", "Congratulations on the move to Denver!"),
         _turn("user", "The altitude takes some getting used to.")],
        [_turn("user", "Which vegetables grow well in a small garden?"),
         _turn("assistant", "Tomatoes, lettuce and herbs are easy choices.")],
    ],
    "answer_session_ids": ["s_move"],
}]


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("bench_runner", REPO / "runners" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    locomo, lme = tmp_path / "locomo_tiny.json", tmp_path / "lme_tiny.json"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    lme.write_text(json.dumps(LONGMEMEVAL), encoding="utf-8")
    return {"locomo": locomo, "lme": lme}


def _fraction(value) -> bool:
    return value is None or (isinstance(value, float) and 0.0 <= value <= 1.0)


@pytest.mark.slow
def test_quick_suite_runs_every_benchmark_and_writes_sane_json(bench, data, tmp_path: Path):
    out = tmp_path / "out"
    status = bench.main([
        "--quick", "--out", str(out),
        "--messages", "24", "--window", "12", "--naive-budget", "60",
        "--lme", str(data["lme"]), "--sessions", "2",
        "--locomo", str(data["locomo"]), "--longmemeval", str(data["lme"]), "--hybrid", "off",
        "--levels", "1,2", "--conv-messages", "3", "--latency-ms", "20", "--extractive-messages", "12",
    ])
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == {}
    assert set(summary["benchmarks"]) == {"overhead", "prompts", "recall", "throughput"}
    assert summary["machine"]["cpus"] >= 1 and summary["quick"] is True
    assert (out / "report.md").read_text().count("## ") >= 4
    assert not (out / "work").exists()  # the databases are removed unless --keep-work

    overhead = json.loads((out / "overhead.json").read_text())
    ours, naive = overhead["runs"]["ours"], overhead["runs"]["naive"]
    assert ours["messages"] == naive["messages"] == 24 and naive["stopped_early_at"] is None
    assert [(w["first"], w["last"]) for w in ours["windows"]] == [(1, 12), (13, 24)]
    for window in ours["windows"] + naive["windows"]:
        assert window["framework_ms"]["p50"] > 0 and window["framework_ms"]["p95"] >= window["framework_ms"]["p50"]
        assert window["checkpoint_blob_bytes"] > 0 and window["checkpoint_file_bytes"] > 0
    # Past ours' 12-message window the naive state holds more messages, so its checkpoint is larger.
    assert naive["windows"][-1]["checkpoint_blob_bytes"] > ours["windows"][-1]["checkpoint_blob_bytes"]
    breakdown = ours["breakdown_ms"]
    assert breakdown["total"]["mean"] >= breakdown["framework"]["mean"] > 0 and breakdown["tool"]["mean"] > 0

    prompts = json.loads((out / "prompts.json").read_text())
    assert prompts["params"]["messages"] == 5 and prompts["params"]["sessions"] == 2
    for run in prompts["runs"].values():
        assert run["calls_by_operation"]["add_entry"] == 5
        assert run["total_tokens"] == sum(run["per_call_tokens"]) > 0
        assert sum(sum(parts.values()) for parts in run["tokens_by_part"].values()) == run["total_tokens"]
    assert prompts["naive_over_ours"] >= 1.0
    assert prompts["targets"][0]["name"] == "prompt tokens"

    recall = json.loads((out / "recall.json").read_text())
    locomo = recall["tables"]["locomo"]
    main = "evidence recall, categories 1-4"
    assert set(locomo["memory"][main]["categories"]) == set(locomo["bm25"][main]["categories"])
    for method in ("memory", "bm25"):
        row = locomo[method][main]["overall"]
        assert row["count"] == 3 and all(_fraction(row[f"recall_{m}@{k}"]) for m in ("any", "all") for k in (1, 5, 10))
    lme = recall["tables"]["longmemeval/lme_tiny"]
    assert lme["bm25"]["session recall (answer_session_ids)"]["overall"]["recall_any@10"] == 1.0
    assert isinstance(recall["below_bm25"], list) and recall["params"]["hybrid"] is False
    assert any("hybrid dense+BM25 search not run" in note for note in recall["notes"])

    throughput = json.loads((out / "throughput.json").read_text())
    scaling = throughput["scaling"]
    assert [row["conversations"] for row in scaling] == [1, 2]
    assert [row["messages"] for row in scaling] == [3, 6]
    assert scaling[0]["efficiency"] == pytest.approx(1.0) and all(r["messages_per_s"] > 0 for r in scaling)
    # Each message waits >= one 20 ms model call, so a conversation cannot beat the latency.
    assert all(row["mean_ms"]["model"] >= 19 for row in scaling)
    assert [row["conversations"] for row in throughput["extractive"]] == [1, 4]
    assert [t["name"] for t in throughput["targets"]] == ["extractive ingestion"]  # no level 16 in this run

    if have_module("matplotlib"):
        assert all((out / f"{name}.png").stat().st_size > 1000 for name in summary["benchmarks"])
    else:
        assert all(any("plot skipped" in note for note in json.loads((out / f"{name}.json").read_text())["notes"])
                   for name in summary["benchmarks"])


def test_without_the_bench_extras_plots_are_skipped_and_fallbacks_say_so(bench, data, tmp_path: Path, monkeypatch):
    for name in ("matplotlib", "rank_bm25", "tiktoken"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, find_spec raises: as if not installed
    out = tmp_path / "out"
    assert bench.main(["prompts", "recall", "--out", str(out), "--lme", str(data["lme"]), "--locomo",
                       str(data["locomo"]), "--longmemeval", str(data["lme"]), "--hybrid", "off"]) == 0
    prompts = json.loads((out / "prompts.json").read_text())
    assert prompts["params"]["exact_tokens"] is False and prompts["params"]["tokenizer"].startswith("ESTIMATE")
    assert prompts["runs"]["ours"]["total_tokens"] > 0
    recall = json.loads((out / "recall.json").read_text())
    assert any("built-in Okapi" in note for note in recall["notes"])
    for result in (prompts, recall):
        assert result["plots"] == [] and any("plot skipped: matplotlib is not installed" in n for n in result["notes"])
    assert not list(out.glob("*.png"))


def test_unknown_benchmark_is_a_usage_error(bench, tmp_path: Path):
    with pytest.raises(SystemExit) as exc:
        bench.main(["nope", "--out", str(tmp_path)])
    assert exc.value.code == 2


def test_builtin_okapi_matches_rank_bm25():
    texts = ["I adopted a golden retriever puppy", "golden hour photos in Lisbon", "pottery classes on Tuesdays",
             "a puppy needs walks", "the the the"]
    query = tokenize("Which puppy did I adopt, a golden retriever?")
    ours = _Okapi([tokenize(t) for t in texts]).get_scores(query)
    assert ours.index(max(ours)) == 0
    if have_module("rank_bm25"):
        index, name = bm25_ranker(texts)
        assert name == "rank_bm25.BM25Okapi"
        assert list(index.get_scores(query)) == pytest.approx(ours)


def test_token_counting_and_percentiles():
    count, description, _exact = token_counter()
    assert count("hello world") >= 2 and isinstance(description, str)
    record = {"messages": [("system", "rules"), ("human", "the task")],
              "tools": [{"type": "function", "function": {"name": "add_entry"}}]}
    messages, tools = prompt_tokens(record, count)
    assert messages == count("rules") + count("the task") + 2 * 4 + 3 and tools > 0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and percentile([5.0], 95) == 5.0
    assert math.isnan(percentile([], 50))
