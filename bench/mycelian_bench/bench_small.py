"""The small-memory benchmark: first hits on hand-written memories a new user would have (issue 38).

Every real memory starts small, and a user's first questions are about what they said a few turns ago, often in
other words. ``data/small_memories.json`` holds five such memories (a user and an AI assistant, two sessions of 24
turns each) and 43 questions, each with the turn(s) that state the answer, of five kinds:

- ``paraphrase``: no content word of the question is in the answer ("What's my job?" -> "I'm a product designer");
- ``update``: a later turn changed the fact ("The landlord raised the rent to 480 euros" after "The rent is 450");
- ``echo``: the assistant repeats the fact ("Understood: two blood pressure tablets a day from now on.");
- ``reaction``: the assistant's reply shares the question's words ("Lovely instrument!") or sits near it;
- ``plain``: the question shares words with the answer.

Each memory is written the way a user writes it: through the agent (:func:`mycelian_agent.build_agent`, the
extractive model, the embedded server over stdio, one memory per user), each session started and ended; then each
question is asked with ``asearch(question, user=...)`` and scored by whether the first hit is an answer. The
hybrid search (the default install) and BM25 alone (a second server on the same database without the dense side)
are scored on the same entries. Tests: ``tests/test_small_memory_suite.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mycelian_bench.bench_common import BenchResult, Target, embeddings_available, md_table, save_plot

__all__ = ["FIRST_HIT_TARGET", "SUITE", "Answer", "ask_suite", "ingest_suite", "load_suite", "run_small"]

#: The hand-written suite shipped with the package.
SUITE = Path(__file__).with_name("data") / "small_memories.json"
#: Issue 38's target: the first hit states the answer for at least this share of the questions.
FIRST_HIT_TARGET = 0.90


@dataclass(frozen=True)
class Answer:
    """One question's outcome: its memory (user), kind, whether the first hit states the answer, the rank of the
    first hit that does (None: not among the hits) and the first hit's text."""

    user: str
    question: str
    kind: str
    first: bool
    rank: int | None
    top: str | None


def load_suite(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The suite's memories (``user``, ``conversation`` in the replay format, ``questions``), from ``path`` or the
    packaged file."""
    from mycelian_agent.errors import ConfigError

    source = Path(path or SUITE)
    try:
        memories = json.loads(source.read_text(encoding="utf-8"))["memories"]
    except OSError as exc:
        raise ConfigError(f"--suite {source}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"--suite {source}: not a small-memory suite (JSON with a 'memories' list): {exc}") from None
    if not isinstance(memories, list):
        raise ConfigError(f"--suite {source}: 'memories' must be a list")
    return memories


async def ingest_suite(memories: list[dict[str, Any]], db: str | Path, *, embeddings: bool | None = None) -> None:
    """Write every memory's conversation into ``db`` through the agent: one memory per user, sessions started and
    ended, each message a minute after the one before it from the session's ``conversation_time``. With the dense
    side (``embeddings`` not False, a model installed) the vectors written behind are then completed
    (``embeddings backfill``), so that the questions are asked of a memory with every vector."""
    from mycelian_agent import build_agent

    async with build_agent(db=str(db), embeddings=embeddings) as agent:
        for memory in memories:
            thread = memory["conversation"]["conversation_id"]
            for session in memory["conversation"]["sessions"]:
                start = datetime.fromisoformat(session["conversation_time"].replace("Z", "+00:00"))
                await agent.astart_session(thread, user=memory["user"])
                for i, message in enumerate(session["messages"]):
                    moment = (start + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
                    await agent.aprocess_conversation_message(
                        message["role"], message["content"], thread, name=message.get("name"), conversation_time=moment
                    )
                await agent.aend_session(thread)
    if embeddings is not False and embeddings_available():
        from mycelian_agent.memory_server.retrieval.dense.backfill import backfill_database

        await asyncio.to_thread(backfill_database, str(db))


async def ask_suite(
    memories: list[dict[str, Any]], db: str | Path, *, embeddings: bool | None = None, top_k: int = 10
) -> list[Answer]:
    """Ask every question of ``memories`` of the memory stored in ``db`` (``asearch``, ``top_k`` hits)."""
    from mycelian_agent import build_agent

    answers = []
    async with build_agent(db=str(db), embeddings=embeddings) as agent:
        for memory in memories:
            for question in memory["questions"]:
                hits = await agent.asearch(question["question"], user=memory["user"], top_k=top_k)
                texts = [hit.text for hit in hits]
                rank = next((i + 1 for i, text in enumerate(texts) if text in question["answers"]), None)
                answers.append(
                    Answer(
                        memory["user"],
                        question["question"],
                        question["kind"],
                        rank == 1,
                        rank,
                        texts[0] if texts else None,
                    )
                )
    return answers


def _share(answers: list[Answer], kind: str | None = None) -> tuple[int, int]:
    chosen = [a for a in answers if kind is None or a.kind == kind]
    return sum(a.first for a in chosen), len(chosen)


def run_small(out: Path, *, suite: str | Path | None = None, hybrid: str = "auto") -> BenchResult:
    """First hits on the small-memory suite, hybrid (when a dense model is installed, or ``hybrid="on"``) against
    BM25 alone on the same database (``out/work/small.db``)."""
    started = time.perf_counter()
    memories = load_suite(suite)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    db = work / "small.db"
    for leftover in work.glob("small.db*"):
        leftover.unlink()
    use_hybrid = hybrid == "on" or (hybrid == "auto" and embeddings_available())
    asyncio.run(ingest_suite(memories, db, embeddings=use_hybrid))
    runs = {"BM25 alone": asyncio.run(ask_suite(memories, db, embeddings=False))}
    if use_hybrid:
        runs["hybrid (default)"] = asyncio.run(ask_suite(memories, db, embeddings=True))
    kinds = sorted(Counter(q["kind"] for m in memories for q in m["questions"]))
    rows = []
    for name, answers in runs.items():
        cells = []
        for kind in (None, *kinds):
            right, total = _share(answers, kind)
            cells.append(f"{right}/{total} ({right / total:.2f})" if total else "-")
        rows.append([name, *cells])
    result = BenchResult(
        "small",
        {
            "params": {"suite": str(suite or SUITE), "hybrid": use_hybrid},
            "runs": {name: [a.__dict__ for a in answers] for name, answers in runs.items()},
        },
    )
    result.tables.append(
        ("First hit states the answer (questions right / asked)", md_table(["search", "all", *kinds], rows))
    )
    best = runs.get("hybrid (default)", runs["BM25 alone"])
    right, total = _share(best)
    result.targets.append(
        Target(
            "small memories",
            f"first hit right >= {FIRST_HIT_TARGET:.0%}",
            f"{right}/{total} ({right / total:.1%})",
            right / total >= FIRST_HIT_TARGET,
        )
    )
    misses = [a for a in best if not a.first]
    if misses:
        result.notes.append(
            "missed: "
            + "; ".join(f"{a.question!r} (answer at {a.rank or '-'}, first: {(a.top or '')[:50]!r})" for a in misses)
        )

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        groups = ["all", *kinds]
        width = 0.8 / len(runs)
        for i, (name, answers) in enumerate(runs.items()):
            shares = [
                right / total if total else 0.0
                for right, total in (_share(answers, None if g == "all" else g) for g in groups)
            ]
            ax.bar([j + (i - (len(runs) - 1) / 2) * width for j in range(len(groups))], shares, width, label=name)
        ax.axhline(FIRST_HIT_TARGET, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(groups)), groups)
        ax.set(title="Small memories: the first hit states the answer", ylabel="share of questions", ylim=(0, 1.05))

    save_plot(result, out, draw, size=(8, 4), ncols=1, grid="y")
    result.seconds = time.perf_counter() - started
    return result
