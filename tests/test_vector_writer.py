"""Vectors written behind the entries (``vector_writer.py``): neither writes, ``await_consistency`` nor searches
wait for the encoder (a search embeds a small gap itself and reports the entries it ranked without a vector), only
explicit waits do, and no vector is lost or misfiled (a crash, a delete in between, a failing encoder, closing the
store promptly). Real SQLite files and a real PostgreSQL cluster; the encoder is
the stand-in of test_dense.py, gated where a test needs the writer to be caught mid-batch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

np = pytest.importorskip("numpy")

from dense_stub import CountingEncoder
from dense_stub import memory_of as _memory

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval import search
from mycelian_agent.memory_server.retrieval.dense import writer as vector_writer
from mycelian_agent.memory_server.retrieval.dense.index import CATCHUP_LIMIT, DenseVectors
from mycelian_agent.memory_server.storage import open_store
from mycelian_agent.memory_server.storage.sqlite.store import Store

WAIT = 30.0  # seconds: only a broken writer ever comes near it


class GatedEncoder(CountingEncoder):
    """Blocks inside the encoder call until :meth:`open` (``entered`` is set once a call is waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self._gate = threading.Event()

    def open(self) -> None:
        self._gate.set()

    def __call__(self, texts):
        self.entered.set()
        assert self._gate.wait(WAIT), "the test never opened the gate"
        return super().__call__(texts)


class FirstCallGated(GatedEncoder):
    """Blocks its first call only (the writer's), until :meth:`open`; later calls (a search's) encode at once."""

    def __init__(self) -> None:
        super().__init__()
        self._first = True

    def __call__(self, texts):
        first, self._first = self._first, False
        return super().__call__(texts) if first else CountingEncoder.__call__(self, texts)


class FailsFirst(CountingEncoder):
    """Raises ``error`` on its first call, then encodes (counting only the calls that encoded)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self._error: BaseException | None = error

    def __call__(self, texts):
        error, self._error = self._error, None
        if error is not None:
            raise error
        return super().__call__(texts)


@pytest.fixture(params=["sqlite", "postgres"])
def db_target(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "m.db")
    return request.getfixturevalue("pg_url")


def test_a_write_returns_before_its_vector_and_nothing_but_an_explicit_wait_waits_for_it(db_target: str) -> None:
    encoder = FirstCallGated()  # the writer's call blocks; a search's (the query, its catch-up) encode at once
    index = DenseVectors(encoder, model="fake")
    # One thread owns the store, as in the server (a SQLite connection stays on the thread that opened it).
    with ThreadPoolExecutor(1) as owner:

        def run(fn, *args, **kwargs):
            return owner.submit(fn, *args, **kwargs).result(WAIT)

        store = run(open_store, db_target, dense_factory=lambda: index)
        try:
            v, m = run(_memory, store)
            car = run(store.add_entry, v, m, "I bought a new car last week", "bought car")["entryId"]  # not gated
            assert encoder.entered.wait(WAIT)  # the writer holds the entry, inside the encoder
            assert run(store.counts)["entry_vectors"] == 0 and index.writer.pending(m) == 1
            run(store.await_consistency, m)  # the words are searchable: it returns with the vector still coming
            assert run(store.counts)["entry_vectors"] == 0
            # A search does not wait for the writer either: the gap is small, so it embeds the entry itself and
            # "automobile", which shares no word with the entry, finds it by its vector.
            found = run(search, store, m, "automobile", top_ke=1)
            assert [e["entryId"] for e in found["entries"]] == [car] and "pendingVectors" not in found
            assert index.embedded_at_search == 1
            encoder.open()
            assert run(store.wait_for_vectors, m, WAIT) and index.writer.pending() == 0
        finally:
            encoder.open()
            run(store.close)


def test_a_search_reports_the_entries_it_ranked_without_a_vector(db_target: str) -> None:
    encoder = FirstCallGated()
    index = DenseVectors(encoder, model="fake")
    with contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store:
        try:
            v, m = _memory(store)
            store.add_entry(v, m, "I bought a new car last week", "bought car")
            assert encoder.entered.wait(WAIT)  # the writer is stuck on the first entry
            gap = CATCHUP_LIMIT + 4  # more than a search embeds itself: it leaves them to the writer
            store.add_entries(
                v, m, [{"raw_entry": f"note {i} about the puppy", "summary": f"puppy {i}"} for i in range(gap - 1)]
            )
            found = search(store, m, "puppy", top_ke=3)
            assert found["pendingVectors"] == gap and found["count"] == 3  # ranked by their words
            assert index.embedded_at_search == 0
            status = store.vector_status(memory_id=m)
            assert (status.entries, status.embedded, status.pending) == (gap, 0, gap)
            assert status.oldest_pending_s is not None and status.oldest_pending_s >= 0
        finally:
            encoder.open()
        assert store.wait_for_vectors(m, WAIT)
        assert "pendingVectors" not in search(store, m, "puppy", top_ke=3)
        assert store.vector_status().pending == 0 and store.vector_status().oldest_pending_s is None


def test_entries_committed_without_a_vector_are_embedded_in_the_background_at_open(db_target: str) -> None:
    with contextlib.closing(open_store(db_target)) as plain:  # a crash before the writer got to them looks the same
        v, m = _memory(plain)
        for i in range(70):
            plain.add_entry(v, m, f"note number {i} about the dog", f"note {i}")
    encoder = CountingEncoder()
    index = DenseVectors(encoder, model="fake")
    with contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store:
        late = store.add_entry(v, m, "a hound barked", "hound barked")  # queued ahead of the backlog
        assert store.wait_for_vectors(m, WAIT)  # the memory's queued entry and its backlog
        late_seq = store._entry_row(m, late["entryId"])["seq"]
        assert store._dense_similarities(m, "dog", None, None)[0].count(late_seq) == 1
        assert index.writer.wait_idle(WAIT)
        assert store.counts()["entry_vectors"] == 71 and index.writer.written == 71
        assert max(encoder.calls) <= 32  # the backlog goes in small batches, so new writes never wait long
        assert search(store, m, "puppy", top_ke=1)["entries"][0]["entryId"] == late["entryId"]


def test_a_search_does_not_miss_an_entry_the_writer_is_embedding_from_its_backlog(db_target: str) -> None:
    # No search waits for the backlog (entries found without a vector at open), so a search's catch-up must embed
    # such an entry itself even while the writer is encoding it, or the search misses it (it did, now and then).
    with contextlib.closing(open_store(db_target)) as plain:
        v, m = _memory(plain)
        old = plain.add_entry(v, m, "The dog barked", "dog barked")["entryId"]
    encoder = FirstCallGated()
    index = DenseVectors(encoder, model="fake")
    with contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store:
        try:
            assert encoder.entered.wait(WAIT)  # the writer took the backlog's entry and is inside the encoder
            # "puppy" shares no word with the entry: only its vector can find it.
            assert [e["entryId"] for e in search(store, m, "puppy", top_ke=5)["entries"]] == [old]
            assert index.embedded_at_search == 1
        finally:
            encoder.open()
        assert index.writer.wait_idle(WAIT) and store.counts()["entry_vectors"] == 1


def test_an_entry_deleted_while_the_writer_encodes_it_gets_no_vector(db_target: str) -> None:
    encoder = GatedEncoder()
    index = DenseVectors(encoder, model="fake")
    with contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store:
        v, m = _memory(store)
        gone = store.add_entry(v, m, "I bought a car", "bought car")["entryId"]
        assert encoder.entered.wait(WAIT)  # its text is read; its vector is being computed
        store.delete_entry(v, m, gone)
        kept = store.add_entry(v, m, "the puppy slept", "puppy slept")["entryId"]
        encoder.open()
        assert store.wait_for_vectors(m, WAIT)
        assert store.counts()["entry_vectors"] == 1 and index.writer.failures == 0
        seqs, _ = store._dense_similarities(m, "dog", None, None)
        assert len(seqs) == 1
        assert search(store, m, "hound", top_ke=1)["entries"][0]["entryId"] == kept


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_writer, "RETRY_SECONDS", 0.01)


def test_a_failed_batch_is_logged_and_tried_again(db_target: str, caplog, quick_retries) -> None:
    encoder = FailsFirst(RuntimeError("encoder out of memory"))
    index = DenseVectors(encoder, model="fake")
    with (
        contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store,
        caplog.at_level(logging.ERROR, logger="mycelian_agent.memory_server.retrieval.dense.writer"),
    ):
        v, m = _memory(store)
        store.add_entries(v, m, [{"raw_entry": f"entry {i}", "summary": f"bought car {i}"} for i in range(3)])
        assert index.writer.wait_idle(WAIT)
        assert "could not embed 3 entries" in caplog.text and "encoder out of memory" in caplog.text
        assert index.writer.failures == 0 and store.counts()["entry_vectors"] == 3
        assert encoder.calls == [1, 1, 1]  # retried one by one


def test_an_entry_the_encoder_cannot_take_is_given_up_alone(db_target: str, caplog, quick_retries) -> None:
    encoder = CountingEncoder()

    def picky(texts):
        if any("poison" in text for text in texts):
            raise ValueError("cannot encode this text")
        return encoder(texts)

    index = DenseVectors(picky, model="fake")
    with (
        contextlib.closing(open_store(db_target, dense_factory=lambda: index)) as store,
        caplog.at_level(logging.ERROR),
    ):
        v, m = _memory(store)
        items = [
            {"raw_entry": "my car", "summary": "car"},
            {"raw_entry": "bad", "summary": "poison pill"},
            {"raw_entry": "my dog", "summary": "dog"},
        ]
        store.add_entries(v, m, items)
        assert index.writer.wait_idle(WAIT)
        assert index.writer.failures == 1 and store.counts()["entry_vectors"] == 2
        assert "gave up embedding entry seq" in caplog.text and f"after {vector_writer.ATTEMPTS} tries" in caplog.text
        # The search's catch-up fails on the same text: logged, and the search goes on with the vectors present.
        found = search(store, m, "automobile", top_ke=1)["entries"]
        assert found[0]["summary"] == "car" and "could not embed 1 entries of memory" in caplog.text


def test_a_writer_whose_thread_died_hands_writes_back_to_the_inline_path(tmp_path, caplog) -> None:
    class Fatal(BaseException):
        pass

    index = DenseVectors(FailsFirst(Fatal("interpreter shutting down")), model="fake")
    with contextlib.closing(Store.open(tmp_path / "m.db", dense=index)) as store, caplog.at_level(logging.CRITICAL):
        v, m = _memory(store)
        store.add_entry(v, m, "I bought a car", "bought car")
        index.writer._thread.join(WAIT)
        assert not index.writer.alive and "the vector writer stopped" in caplog.text
        assert store.counts()["entry_vectors"] == 0
        store.add_entry(v, m, "the puppy slept", "puppy slept")  # inline now
        assert store.counts()["entry_vectors"] == 1
        assert search(store, m, "automobile", top_ke=1)["entries"][0]["summary"] == "bought car"  # the catch-up
        assert store.counts()["entry_vectors"] == 2


def test_a_stuck_writer_delays_searches_once_not_every_time(tmp_path, caplog) -> None:
    encoder = GatedEncoder()
    index = DenseVectors(encoder, model="fake")
    store = Store.open(tmp_path / "m.db", dense=index)
    try:
        v, m = _memory(store)
        store.add_entry(v, m, "I bought a car", "bought car")
        assert encoder.entered.wait(WAIT)
        assert index.writer.settle(m, timeout=0.2) is False  # waited, timed out
        assert index.writer.settle(m, timeout=WAIT) is False  # no progress since: no second wait
        encoder.open()  # progress again: waits end as before
        assert index.writer.wait_idle(WAIT) and index.writer.settle(m, timeout=WAIT) is True
    finally:
        encoder.open()
        store.close()


def test_closing_gives_up_on_a_writer_that_does_not_finish(tmp_path, caplog, monkeypatch) -> None:
    monkeypatch.setattr(vector_writer, "CLOSE_TIMEOUT", 0.2)
    encoder = GatedEncoder()
    index = DenseVectors(encoder, model="fake")
    store = Store.open(tmp_path / "m.db", dense=index)
    v, m = _memory(store)
    store.add_entry(v, m, "first", "first entry")
    assert encoder.entered.wait(WAIT)  # the writer is inside the encoder with the first entry
    store.add_entry(v, m, "second", "second entry")  # queued behind it
    writer = index.writer
    with caplog.at_level(logging.INFO):
        store.close()  # the writer gets CLOSE_TIMEOUT, then is left to finish the batch in hand
    said = [r for r in caplog.records if "not yet embedded" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO and index.writer is None
    assert "closing with 2 entries not yet embedded" in said[0].getMessage()
    assert "embeddings backfill" in said[0].getMessage()
    encoder.open()  # the batch in hand finishes and writes nothing: the store closed
    writer._thread.join(WAIT)
    assert not writer.alive
    with contextlib.closing(Store.open(tmp_path / "m.db")) as plain:
        assert plain.counts()["entry_vectors"] == 0 and plain.counts()["entries"] == 2
    again = DenseVectors(CountingEncoder(), model="fake")
    with contextlib.closing(Store.open(tmp_path / "m.db", dense=again)) as reopened:
        assert again.writer.wait_idle(WAIT) and reopened.counts()["entry_vectors"] == 2


def test_a_delete_in_flight_on_postgres_costs_only_its_own_vector(request: pytest.FixtureRequest) -> None:
    import psycopg

    url = request.getfixturevalue("pg_url")
    index = DenseVectors(CountingEncoder(), model="fake", write_behind=False)
    with contextlib.closing(open_store(url, dense_factory=lambda: index)) as store:
        v, m = _memory(store)
        with contextlib.closing(open_store(url)) as plain:  # entries without vectors
            ids = [plain.add_entry(v, m, f"entry {i}", f"car {i}")["entryId"] for i in range(3)]
        seqs = [row["seq"] for row in store._entry_page(m, 10, None, None)]
        with psycopg.connect(url) as deleting:  # a delete that has started and not committed
            deleting.execute("DELETE FROM entries WHERE entry_id = %s", (ids[1],))
            embedding = ThreadPoolExecutor(1).submit(index.embed_entries, store.maintenance_connection, seqs)
            with pytest.raises(FutureTimeout):
                embedding.result(0.3)  # waits for the delete's row lock
            deleting.commit()
        assert embedding.result(WAIT) == 2 and store.counts()["entry_vectors"] == 2


def test_closing_the_store_stops_promptly_and_leaves_the_queue_to_the_next_start(db_target: str) -> None:
    encoder = GatedEncoder()
    index = DenseVectors(encoder, model="fake")
    store = open_store(db_target, dense_factory=lambda: index)
    v, m = _memory(store)
    for i in range(12):
        store.add_entry(v, m, f"entry {i} about the bakery", f"bread {i}")
    assert encoder.entered.wait(WAIT)
    try:
        store.close()  # does not wait for the stuck batch beyond CLOSE_TIMEOUT, nor for the queue at all
        assert index.writer is None
    finally:
        encoder.open()
    with contextlib.closing(open_store(db_target)) as plain:
        assert plain.counts()["entry_vectors"] == 0 and plain.vector_status("fake").pending == 12
    again = DenseVectors(CountingEncoder(), model="fake")
    with contextlib.closing(open_store(db_target, dense_factory=lambda: again)) as reopened:
        assert again.writer.wait_idle(WAIT) and reopened.counts()["entry_vectors"] == 12


def test_one_index_writes_for_one_open_store_at_a_time(tmp_path) -> None:
    index = DenseVectors(CountingEncoder(), model="fake")
    with contextlib.closing(Store.open(tmp_path / "a.db", dense=index)):
        with pytest.raises(ConfigError, match="another open store"):
            Store.open(tmp_path / "b.db", dense=index)
    Store.open(tmp_path / "b.db", dense=index).close()  # free again once the first store closed


@pytest.mark.parametrize("target", [":memory:", "file::memory:", "file:scratch?mode=memory&cache=shared"])
def test_an_in_memory_database_writes_vectors_inline(target: str) -> None:
    # A second connection to an in-memory database would open another, empty one: no writer there.
    index = DenseVectors(CountingEncoder(), model="fake")
    with contextlib.closing(Store.open(target, dense=index)) as store:
        assert index.writer is None
        v, m = _memory(store)
        store.add_entry(v, m, "I bought a car", "bought car")
        assert store.counts()["entry_vectors"] == 1


def test_the_write_mode_is_checked_where_it_is_given(monkeypatch, capsys) -> None:
    from click.testing import CliRunner

    from mycelian_agent.builder import connect
    from mycelian_agent.memory_server.cli import serve_command
    from mycelian_agent.memory_server.server.app import create_server

    with pytest.raises(ConfigError, match="embeddings writes must be one of behind, inline"):
        create_server(":memory:", embeddings=True, embeddings_writes="later")
    with pytest.raises(ConfigError, match="embeddings must be True, False, 'behind' or 'inline'"):
        connect("embedded", db=":memory:", embeddings="later")
    context = serve_command.make_context("mycelian-memory-server", ["--embeddings-writes", "Inline"])
    assert context.params["embeddings_writes"] == "inline"
    # The environment variable is checked like the flag.
    refused = CliRunner().invoke(serve_command, [], env={"MYCELIAN_EMBEDDINGS_WRITES": "sometimes"})
    assert refused.exit_code == 2 and "--embeddings-writes" in refused.output and "sometimes" in refused.output


async def test_the_await_consistency_tool_waits_for_the_vectors_only_when_asked(tmp_path, monkeypatch) -> None:
    import asyncio
    import sqlite3

    from mycelian_agent.memory_server.retrieval.dense import encoders
    from mycelian_agent.memory_server.server.app import create_server
    from mycelian_agent.memory_server.testing import call_json, call_text, in_memory_session

    encoder = FirstCallGated()
    monkeypatch.setitem(encoders._LOADERS, "fake", lambda _threads: encoders.Encoder("fake", encoder, encoder))
    db = tmp_path / "m.db"

    def vectors() -> int:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            return conn.execute("SELECT count(*) FROM entry_vectors").fetchone()[0]

    try:
        async with in_memory_session(create_server(str(db), embeddings=True, embeddings_model="fake")) as session:
            vault = (await call_json(session, "create_vault", title="v"))["vaultId"]
            memory = (
                await call_json(session, "create_memory_in_vault", vault_id=vault, title="m", memory_type="NOTES")
            )["memoryId"]
            added = await call_json(
                session,
                "add_entry",
                vault_id=vault,
                memory_id=memory,
                raw_entry="I bought a new car",
                summary="bought car",
            )
            assert added["status"] == "stored" and vectors() == 0  # answered before the vector exists
            assert encoder.entered.wait(WAIT)  # the writer is encoding it
            assert await call_text(session, "await_consistency", memory_id=memory) == "consistent"
            assert vectors() == 0  # the words were enough
            waiting = asyncio.ensure_future(call_text(session, "await_consistency", memory_id=memory, vectors=True))
            done, _ = await asyncio.wait({waiting}, timeout=0.3)
            assert not done  # asked for the vectors: it waits for the writer
            # Meanwhile the store answers other calls (the wait holds none of its threads).
            listed = await call_json(session, "list_entries", vault_id=vault, memory_id=memory)
            assert listed["count"] == 1
            encoder.open()
            assert await waiting == "consistent" and vectors() == 1
            found = await call_json(session, "search_memories", memory_id=memory, query="automobile", top_ke=1)
            assert [e["entryId"] for e in found["entries"]] == [added["entryId"]] and "pendingVectors" not in found
    finally:
        encoder.open()
