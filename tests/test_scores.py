"""Scores a person can read (issue 38, item 6): every hit's ``score`` is a 0-1 relevance, the same scale in every
search, non-increasing down the ranking; ``min_score`` thresholds it on every read door; ``top_k`` reaches 100.

On a real SQLite file (and PostgreSQL where the ``memory_db`` fixture has it), through the real server code."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from mycelian_agent import InputError, build_agent
from mycelian_agent.cli import cli as cli_main
from mycelian_agent.memory_server.retrieval import relevance, search
from mycelian_agent.memory_server.retrieval.relevance import MEANING_CEILING
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.base import MemoryStore
from mycelian_agent.recall.hits import MemoryHit

CHAT = [  # (speaker, text)
    ("Dana", "My partner Marco and I want to go to Lisbon in June."),
    ("assistant", "Lovely! Which dates are you thinking of?"),
    ("Dana", "June 14 to June 21, flying from Amsterdam."),
    ("assistant", "Noted: June 14-21 from Amsterdam."),
    ("Dana", "Marco is vegetarian, by the way."),
    ("assistant", "I'll keep restaurant tips vegetarian-friendly."),
    ("Dana", "My sister Ana adopted a beagle called Pixel."),
    ("assistant", "Pixel is a great name for a beagle!"),
    ("Dana", "What should we pack for the Lisbon trip?"),
    ("assistant", "Light clothes, comfortable shoes and a rain jacket."),
]


@pytest.fixture
def store(memory_db: str):
    opened = open_store(memory_db)
    yield opened
    opened.close()


def _fill(store: MemoryStore, turns, *, vault: str = "v", memory: str = "chat") -> tuple[str, str]:
    vault_id = store.create_vault(vault)["vaultId"]
    memory_id = store.create_memory(vault_id, memory, "CHAT")["memoryId"]
    for i, (speaker, text) in enumerate(turns):
        tags = {"role": "assistant" if speaker == "assistant" else "user", "msg": str(i + 1)}
        if speaker != "assistant":
            tags["speaker"] = speaker
        store.add_entry(
            vault_id,
            memory_id,
            raw_entry=text,
            summary=f"{speaker} said: {text}",
            tags=tags,
            conversation_time=f"2024-03-02T10:{i % 60:02d}:{i // 60:02d}Z",
        )
    return vault_id, memory_id


def _scores(found: dict) -> list[float]:
    return [entry["score"] for entry in found["entries"]]


def test_scores_are_a_0_1_relevance_non_increasing_and_high_for_an_entry_holding_every_word(store) -> None:
    _, memory = _fill(store, CHAT)
    for query in ("beagle Pixel", "When do we fly to Lisbon?", "vegetarian restaurant", "Amsterdam June", "rain"):
        found = search(store, memory, query, top_ke=10, include_raw_entries=True)
        scores = _scores(found)
        assert scores and all(0.0 <= s <= 1.0 for s in scores), (query, scores)
        assert scores == sorted(scores, reverse=True), (query, scores)
    best = search(store, memory, "Ana adopted a beagle", top_ke=3, include_raw_entries=True)["entries"][0]
    assert best["rawEntry"] == "My sister Ana adopted a beagle called Pixel." and best["score"] == 1.0
    # An entry holding the question's rarer words scores above 0.5; holding only a common one, below.
    found = search(store, memory, "Marco vegetarian", top_ke=10, include_raw_entries=True)["entries"]
    assert found[0]["rawEntry"] == "Marco is vegetarian, by the way." and found[0]["score"] > 0.5
    # The answer after a question takes the ranking's share of the question's evidence (0.8), not 0.
    found = search(store, memory, "pack Lisbon trip", top_ke=10, include_raw_entries=True)["entries"]
    answer = next(e for e in found if e["rawEntry"].startswith("Light clothes"))
    assert answer["score"] == pytest.approx(0.8)


def test_scores_are_absolute_the_same_entry_scores_the_same_in_a_larger_memory(memory_db: str) -> None:
    """Comparable across searches: a threshold means the same thing whatever else the memory holds."""
    with contextlib.closing(open_store(memory_db)) as store:
        _, small = _fill(store, CHAT[:8], vault="small")
        _, large = _fill(
            store, CHAT[:8] + [("Dana", f"Note {i}: the weather was mild today.") for i in range(30)], vault="large"
        )
        one = search(store, small, "beagle Pixel", top_ke=1)["entries"][0]["score"]
        two = search(store, large, "beagle Pixel", top_ke=1)["entries"][0]["score"]
        assert one == two == 1.0


def test_paged_scores_continue_one_non_increasing_list(store) -> None:
    turns = [("Dana", f"Gardening note {i}: the tomatoes {'and basil ' * (i % 3)}grew well.") for i in range(80)]
    _, memory = _fill(store, turns)
    pages = [search(store, memory, "tomatoes basil garden", top_ke=25, offset=offset) for offset in (0, 25, 50, 75)]
    scores = [s for page in pages for s in _scores(page)]
    ids = [e["entryId"] for page in pages for e in page["entries"]]
    assert len(ids) == len(set(ids)) == 80
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert _scores(pages[0]) == _scores(search(store, memory, "tomatoes basil garden", top_ke=25))


def test_context_scores_are_the_share_of_the_question_words_they_hold(store) -> None:
    vault, memory = _fill(store, CHAT)
    store.put_context(vault, memory, "## Facts\n- Marco is vegetarian\n- Pixel is Ana's beagle")
    found = search(store, memory, "Marco vegetarian", top_ke=1, top_kc=2)
    assert found["contexts"] and found["contexts"][0]["score"] == 1.0
    unrelated = search(store, memory, "submarine periscope", top_ke=1, top_kc=2)
    assert all(context["score"] == 0.0 for context in unrelated["contexts"])


def test_meaning_only_hits_stay_at_or_below_the_ceiling(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    del np
    from dense_stub import CountingEncoder

    from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors
    from mycelian_agent.memory_server.storage.sqlite.store import Store

    with contextlib.closing(Store.open(tmp_path / "m.db", dense=DenseVectors(CountingEncoder()))) as store:
        _, memory = _fill(store, CHAT)
        unrelated = search(store, memory, "submarine periscope", top_ke=5)["entries"]
        assert unrelated and all(e["match"] == "meaning" for e in unrelated)
        assert all(0.0 <= e["score"] <= MEANING_CEILING for e in unrelated), _scores({"entries": unrelated})
        found = search(store, memory, "beagle Pixel", top_ke=10)["entries"]
        assert found[0]["score"] == 1.0 and _scores({"entries": found}) == sorted(
            _scores({"entries": found}), reverse=True
        )
        assert all(e["score"] <= MEANING_CEILING for e in found if e["match"] == "meaning")


def test_relevance_parts() -> None:
    weights = {"beagl": 2.0, "pixel": 1.0, "dog": 1.0}
    assert relevance.word_evidence(weights, {"beagl": 1.0, "pixel": 0.5}) == 0.75
    assert relevance.word_evidence(weights, set()) == 0.0 and relevance.word_evidence({}, {"x"}) == 0.0
    assert relevance.meaning_evidence(0.9, 0.8) == pytest.approx(MEANING_CEILING / 2)
    assert relevance.meaning_evidence(0.7, 0.8) == 0.0 and relevance.meaning_evidence(None, 0.8) == 0.0
    assert relevance.meaning_evidence(1.0, 0.8) == MEANING_CEILING and relevance.meaning_evidence(0.9, 1.0) == 0.0
    assert relevance.non_increasing([0.9, 1.0, 0.5, 0.7, -1.0, 0.2]) == [0.9, 0.9, 0.5, 0.5, 0.0, 0.0]
    # seq 2 follows a question (seq 1) that holds every word; seq 3 is two turns after it.
    steps = {1: (1, None, 2, True), 2: (2, 1, 3, False), 3: (3, 2, None, False)}
    own = {1: 1.0, 2: 0.0, 3: 0.0}
    assert relevance.borrowed(2, steps, own) == pytest.approx(0.8)
    assert relevance.borrowed(3, steps, own) == pytest.approx(0.25)
    assert relevance.borrowed(1, steps, {1: 0.0, 2: 1.0, 3: 0.0}) == pytest.approx(0.25)


# -- the client side: min_score and top_k up to 100 on every door ------------------------------------------------

TURNS = 130


def _big_memory(db: Path) -> None:
    """A memory ``default`` in vault ``mycelian`` (what build_agent opens) with TURNS turns that match "tomatoes"."""
    with contextlib.closing(open_store(str(db))) as store:
        _fill(
            store,
            [("Dana", f"Garden day {i}: the tomatoes {'and basil ' * (i % 4)}needed water.") for i in range(TURNS)]
            + CHAT,
            vault="mycelian",
            memory="default",
        )


async def test_top_k_up_to_100_pages_through_the_ranking_and_min_score_filters(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _big_memory(db)
    async with build_agent(server="in-process", db=db, embeddings=False) as invoker:
        hits = await invoker.asearch("tomatoes basil", top_k=100)
        assert len(hits) == 100 and len({h.entry_id for h in hits}) == 100
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
        first = await invoker.asearch("tomatoes basil", top_k=25)
        assert [h.entry_id for h in hits[:25]] == [h.entry_id for h in first]  # the same ranking, paged
        with contextlib.closing(open_store(str(db))) as store:  # the server's own pages, in order
            memory = hits[0].memory_id
            pages = [
                e["entryId"]
                for offset in (0, 25, 50, 75)
                for e in search(store, memory, "tomatoes basil", top_ke=25, offset=offset)["entries"]
            ]
        assert [h.entry_id for h in hits] == pages
        assert await invoker.asearch("tomatoes basil", top_k=100, min_score=0.0) == hits
        middle = scores[40]
        kept = await invoker.asearch("tomatoes basil", top_k=100, min_score=middle)
        assert kept == [h for h in hits if h.score >= middle] and 40 < len(kept) <= 100
        assert await invoker.asearch("submarine", top_k=10, min_score=0.01) == []
        recall = await invoker.arecall("tomatoes basil", top_k=100, min_score=1.0)
        assert recall.hits and all(h.score >= 1.0 for h in recall.hits)
        assert (await invoker.arecall("submarine", min_score=0.5)).hits == ()
        # The sync twins take the same parameters.
        synced = await invoker.asearch("Lisbon", top_k=3, by_meaning=False, min_score=0.2)
        assert synced and all(h.score >= 0.2 and not h.by_meaning for h in synced)


async def test_bad_min_score_and_top_k_raise_input_error_naming_the_parameter(tmp_path: Path) -> None:
    async with build_agent(server="in-process", db=tmp_path / "m.db", embeddings=False) as invoker:
        await invoker.astart_session("t", "2024-03-02T10:00:00Z")
        await invoker.aprocess_conversation_message("user", "Pixel is a beagle.", "t", "2024-03-02T10:00:00Z")
        for bad in (-0.1, 1.5, math.nan, True, "0.5", math.inf):
            with pytest.raises(InputError, match="min_score must be a number from 0 to 1"):
                await invoker.asearch("beagle", min_score=bad)  # type: ignore[arg-type]
            with pytest.raises(InputError, match="min_score must be a number from 0 to 1"):
                await invoker.arecall("beagle", min_score=bad)  # type: ignore[arg-type]
        for bad_k in (0, 101, True, 2.0):
            with pytest.raises(InputError, match="top_k must be an integer from 1 to 100"):
                await invoker.asearch("beagle", top_k=bad_k)  # type: ignore[arg-type]
            with pytest.raises(InputError, match="top_k must be an integer from 1 to 100"):
                await invoker.arecall("beagle", top_k=bad_k)  # type: ignore[arg-type]


def test_retriever_tool_and_cli_take_min_score(tmp_path: Path) -> None:
    from mycelian_agent.integrations import MycelianRetriever, make_search_memory_tool

    db = tmp_path / "m.db"
    _big_memory(db)
    with build_agent(server="in-process", db=db, embeddings=False) as invoker:
        docs = MycelianRetriever(memory=invoker, k=100).invoke("tomatoes basil")
        assert len(docs) == 100
        kept = MycelianRetriever(memory=invoker, k=100, min_score=1.0).invoke("tomatoes basil")
        assert kept and all(doc.metadata["score"] >= 1.0 for doc in kept) and len(kept) < len(docs)
        for bad in (1.5, True, math.nan, "x"):
            with pytest.raises(InputError, match="min_score must be a number from 0 to 1"):
                MycelianRetriever(memory=invoker, min_score=bad)
        for bad_k in (0, 101, True):
            with pytest.raises(InputError, match="k must be an integer from 1 to 100"):
                MycelianRetriever(memory=invoker, k=bad_k)
        with pytest.raises(InputError, match="min_score must be a number from 0 to 1"):
            make_search_memory_tool(invoker, min_score=2)
        tool = make_search_memory_tool(invoker, min_score=0.99)
        assert "Garden day" not in tool.invoke({"query": "submarine"})
        assert "Garden day" in tool.invoke({"query": "tomatoes basil"})
    runner = CliRunner()
    base = ["--db", str(db), "--memory", "default"]
    out = runner.invoke(cli_main, ["search", "tomatoes basil", *base, "--top-k", "100", "--json"])
    assert out.exit_code == 0, out.output
    import json

    listed = json.loads(out.stdout)  # (a note on pending vectors goes to stderr)
    assert len(listed) == 100
    out = runner.invoke(cli_main, ["search", "tomatoes basil", *base, "--top-k", "100", "--min-score", "1", "--json"])
    assert out.exit_code == 0 and all(hit["score"] >= 1.0 for hit in json.loads(out.stdout))
    out = runner.invoke(cli_main, ["search", "submarine", *base, "--min-score", "0.6"])
    assert out.exit_code == 0 and "with a score of at least 0.6" in out.output, out.output
    out = runner.invoke(cli_main, ["recall", "tomatoes", *base, "--min-score", "1.5"])
    assert out.exit_code != 0 and "--min-score" in out.output
    out = runner.invoke(cli_main, ["search", "tomatoes", *base, "--top-k", "101"])
    assert out.exit_code != 0 and "--top-k" in out.output


def test_a_server_with_another_scale_does_not_break_the_client() -> None:
    """An old server (or a remote Mycelian) may send unbounded, missing or odd scores: the hit is kept; min_score
    compares with what was sent."""
    base = {"entryId": "e", "rawEntry": "x", "summary": "x", "tags": {}}
    assert MemoryHit.from_entry({**base, "score": 7.25}, memory_id="m", user=None).score == 7.25
    for odd in (None, "high", math.nan, [1], True):
        assert MemoryHit.from_entry({**base, "score": odd}, memory_id="m", user=None).score == 0.0
    assert MemoryHit.from_entry(base, memory_id="m", user=None).score == 0.0
    assert MemoryHit.from_entry({**base, "score": "0.5"}, memory_id="m", user=None).score == 0.5


def test_the_scores_benchmark_tables() -> None:
    from mycelian_bench.bench_scores import markdown, shown

    hits = [
        {"own": 1.0, "borrowed": 0.0, "meaning": 0.4, "match": "words", "evidence": False},
        {"own": 0.0, "borrowed": 0.8, "meaning": 0.2, "match": "words", "evidence": True},
        {"own": 0.0, "borrowed": 0.0, "meaning": 0.6, "match": "meaning", "evidence": False},
    ]
    assert shown(hits) == [1.0, 0.8, 0.3]
    assert shown(hits, borrow=False) == [1.0, 0.1, 0.1] and shown(hits, ceiling=1.0) == [1.0, 0.8, 0.6]
    searches = [
        {"question": "q1", "category": "1", "where": "own", "hits": hits},
        {"question": "q1", "category": "1", "where": "other", "hits": hits[2:]},
        {"question": "q2", "category": "5", "where": "own", "hits": hits[:1]},
    ]
    text = markdown({"params": {"hybrid": True}, "seconds": 1.0, "searches": searches})
    assert "| as shipped (neighbour share, ceiling 0.5) | 0.80 | 0.80 | 0.65 | 1.00 | 1.00 | 0.30 |" in text
    assert "| 0.3 | 1.00 | 1.00 | 1.00 | 1.00 |" in text and "| 0.8-0.9 | 1 / 1.000 | 0 |" in text
