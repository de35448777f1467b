"""Dense feedback (``retrieval/dense_feedback.py``): the query moved towards its best fused hits and away from the
memory's centroid finds an evidence turn in another session that shares no word with the question and that the
query's own vector does not find either. A hand-made memory on a real SQLite file, a stand-in encoder whose
dimensions are chosen by hand (no model)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from dense_stub import memory_of

from mycelian_agent.memory_server.retrieval import dense_feedback, rank_entries, search
from mycelian_agent.memory_server.retrieval.dense.index import DenseVectors
from mycelian_agent.memory_server.storage.rows import DenseHits
from mycelian_agent.memory_server.storage.sqlite.store import Store
from mycelian_agent.words import query_terms

#: Word -> dimensions of the stand-in encoder. Every text also has dimension 0 (what every turn of a conversation
#: shares). "martial arts" and "kickboxing" share nothing: only a turn that has both kinds of word (taekwondo)
#: links them, as a weak model that does not know kickboxing is a martial art would.
_DIMENSIONS = {
    "martial": (1,),
    "arts": (1,),
    "taekwondo": (1, 2),
    "belt": (2,),
    "sparring": (2,),
    "kickboxing": (2,),
    "gloves": (2,),
    "pasta": (3,),
    "cooked": (3,),
    "garden": (4,),
    "tomatoes": (4,),
    "meeting": (5,),
    "office": (5,),
    "week": (6,),
    "fun": (6,),
}
_SIZE = 7


def _encode(texts: Sequence[str]) -> Any:
    rows = []
    for text in texts:
        vector = np.zeros(_SIZE, dtype=np.float32)
        vector[0] = 0.3
        for word in text.lower().replace(",", " ").replace(".", " ").replace("?", " ").split():
            for dimension in _DIMENSIONS.get(word, ()):
                vector[dimension] += 1.0
        rows.append(vector / np.linalg.norm(vector))
    return np.stack(rows)


QUESTION = "What martial arts has John done?"
FIRST = "John: I started taekwondo, my first martial arts class."  # session 1: shares the question's words
#: More of session 1's talk about it (their neighbour shares and the word "John" rank them high).
_MORE = ["John: taekwondo again, sparring today.", "John: I got my yellow belt at taekwondo."]
SECOND = "I'm doing kickboxing now, new gloves and all."  # session 2: shares none, and not the query's vector
_FILLER = [
    "John: I cooked pasta tonight.",
    "John: the garden has tomatoes now.",
    "John: long meeting at the office.",
    "John: I cooked pasta again.",
    "John: more tomatoes in the garden.",
    "John: the office meeting ran late.",
    "John: pasta with tomatoes from the garden.",
    "John: a meeting, then the office party.",
]


def _memory(store: Store) -> str:
    """Two sessions a month apart: John's turns (filler that matches "John"), the first evidence turn in the first,
    the second in the second between Maria's turns (no neighbour shares a query word with it)."""
    vault, memory = memory_of(store)
    turns = [
        ("2023-05-01", FIRST),
        *(("2023-05-01", text) for text in [*_MORE, *_FILLER[:4]]),
        ("2023-06-01", "Maria: how was your week?"),
        ("2023-06-01", SECOND),
        ("2023-06-01", "Maria: that sounds fun."),
        *(("2023-06-01", text) for text in _FILLER[4:]),
    ]
    for i, (day, text) in enumerate(turns):
        store.add_entry(vault, memory, text, text, conversation_time=f"{day}T10:{i:02d}:00Z")
    return memory


def _ranked(store: Store, memory: str, feedback: bool) -> list[str]:
    rows = rank_entries(store, memory, QUESTION, query_terms(QUESTION), 10, dense_feedback=feedback)
    return [found.row["raw_entry"] for found in rows]


def test_the_second_evidence_turn_shares_no_word_and_no_dimension_with_the_question() -> None:
    assert not set(query_terms(QUESTION)) & set(query_terms(SECOND))
    query, second = _encode([QUESTION, SECOND])
    assert float(query[1:] @ second[1:]) == 0.0


def test_only_the_feedback_finds_the_evidence_in_the_other_session(tmp_path: Path) -> None:
    index = DenseVectors(_encode, model="fake", write_behind=False)
    with contextlib.closing(Store.open(tmp_path / "m.db", dense=index)) as store:
        memory = _memory(store)
        before = _ranked(store, memory, feedback=False)
        after = _ranked(store, memory, feedback=True)
    places = dense_feedback.FEEDBACK_AFTER + dense_feedback.FEEDBACK_SLOTS
    assert before[0] == after[0] == FIRST
    assert SECOND not in before[:places]
    assert SECOND in after[dense_feedback.FEEDBACK_AFTER : places]
    assert after[: dense_feedback.FEEDBACK_AFTER] == before[: dense_feedback.FEEDBACK_AFTER]


def test_a_store_without_dense_vectors_ranks_the_same(tmp_path: Path) -> None:
    with contextlib.closing(Store.open(tmp_path / "m.db")) as store:
        memory = _memory(store)
        assert _ranked(store, memory, feedback=True) == _ranked(store, memory, feedback=False)


def test_extend_keeps_the_first_places_and_descending_scores() -> None:
    matrix = _encode(
        [
            "martial arts taekwondo",
            "kickboxing gloves",
            "pasta",
            "garden",
            "office",
            "martial arts",
            "cooked",
            "tomatoes",
        ]
    )
    seqs = list(range(1, 9))
    query = _encode(["martial arts"])[0]
    space = dense_feedback.ScanSpace(query, seqs, matrix, np.ones(len(seqs), dtype=bool))
    dense = DenseHits({1: 1.0}, [1], 0.5, space=space)
    fused = [(1, 1.0), (6, 0.9), (3, 0.5), (4, 0.4), (5, 0.3), (7, 0.2), (8, 0.1)]
    out = dense_feedback.extend(fused, dense, 7, hits=2, after=2, slots=1, window=10)
    assert out[:2] == fused[:2] and out[2][0] == 2
    assert [score for _, score in out] == sorted((score for _, score in out), reverse=True)
    assert dense_feedback.extend(fused, DenseHits({1: 1.0}, [1], 0.5), 7) == fused  # no space: unchanged
    outside = dense_feedback.ScanSpace(query, seqs, matrix, np.array([i != 1 for i in range(8)]))
    assert 2 not in [
        seq
        for seq, _ in dense_feedback.extend(
            fused, DenseHits({1: 1.0}, [1], 0.5, space=outside), 7, hits=2, after=2, slots=1
        )
    ]


def test_room_is_made_by_moving_the_near_repeat_of_a_better_hit_not_the_last_place() -> None:
    matrix = _encode(
        ["martial arts taekwondo", "kickboxing gloves", "pasta", "garden", "office", "cooked pasta", "tomatoes", "fun"]
    )
    seqs = list(range(1, 9))
    space = dense_feedback.ScanSpace(_encode(["martial arts"])[0], seqs, matrix, np.ones(len(seqs), dtype=bool))
    dense = DenseHits({1: 1.0}, [1], 0.5, space=space)
    # Window of 4 places: 1 and 3 stay, kickboxing (2) takes the third; of 6 and 4, 6 ("cooked pasta") repeats 3.
    fused = [(1, 1.0), (3, 0.9), (6, 0.5), (4, 0.4), (5, 0.3)]
    out = [seq for seq, _ in dense_feedback.extend(fused, dense, 5, hits=1, after=2, slots=1, window=4)]
    assert out == [1, 3, 2, 4, 6]
    assert dense_feedback.redundant(space, [1, 3], [6, 4], 1) == [6]


def test_rocchio_moves_the_query_towards_the_hits_and_away_from_the_memory() -> None:
    query, hit = np.array([1.0, 0.0, 0.0]), np.array([[0.0, 1.0, 0.0]])
    centroid = np.array([0.0, 0.0, 1.0])
    assert np.allclose(dense_feedback.rocchio(query, hit, centroid, 0.5, 0.5), [1.0, 0.5, -0.5])


def test_pages_of_a_hybrid_search_join_into_one_ranking_each_entry_once(tmp_path: Path) -> None:
    # The feedback reorders the first ten places: a page shorter than that must still be the start of the longer
    # ranking the next page continues, or an entry shows on both pages and another on neither.
    with contextlib.closing(Store.open(tmp_path / "m.db", dense=DenseVectors(_encode, model="fake"))) as store:
        memory = _memory(store)
        whole = [e["entryId"] for e in search(store, memory, QUESTION, top_ke=16)["entries"]]
        for size in (3, 6, 8):
            pages = [
                e["entryId"]
                for offset in range(0, 16, size)
                for e in search(store, memory, QUESTION, top_ke=min(size, 16 - offset), offset=offset)["entries"]
            ]
            assert pages == whole, size


def test_a_memory_written_by_another_process_during_a_search_is_scanned_consistently(tmp_path: Path) -> None:
    # Another process's write lands after the search has read the memory's vectors: the scan, its sample and the
    # feedback's vectors must all come from that one read (rows of one matrix named by another read's seqs raised,
    # and the mismatch stayed cached for later searches).
    def index() -> DenseVectors:
        return DenseVectors(_encode, model="fake", write_behind=False)

    with (
        contextlib.closing(Store.open(tmp_path / "m.db", dense=index())) as store,
        contextlib.closing(Store.open(tmp_path / "m.db", dense=index())) as other,
    ):
        memory = _memory(store)
        vault = store._conn.execute("SELECT vault_id FROM memories WHERE memory_id = ?", (memory,)).fetchone()[0]
        dense = store._dense
        count, read = dense._catch_up, dense._matrix
        written = iter(range(60))

        def write() -> None:
            n = next(written)
            other.add_entry(
                vault,
                memory,
                f"John: martial arts {n}",
                f"martial arts {n}",
                conversation_time=f"2023-07-01T10:{n:02d}:00Z",
            )

        def count_then_write(conn: Any, memory_id: str) -> int:
            counted = count(conn, memory_id)
            write()  # the search's count is one behind now
            return counted

        def read_then_write(conn: Any, memory_id: str, counted: int) -> Any:
            vectors = read(conn, memory_id, counted)
            write()
            return vectors

        dense._catch_up, dense._matrix = count_then_write, read_then_write
        first = _ranked(store, memory, True)
        dense._catch_up, dense._matrix = count, read
        assert first and _ranked(store, memory, True)  # neither search raised
        layout = dense._layouts[memory]
        assert len(layout.seqs) == len(layout.matrix)


def test_a_short_page_of_the_feedback_is_the_start_of_a_longer_one() -> None:
    # Entry 6 repeats entry 1: the feedback moves it below the first ten places of a ranking at least ten deep.
    # Fused only as deep as a short page (8), it would have stayed 8th there, and shown again on the next page.
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(40, 16)).astype(np.float32)
    matrix[5] = matrix[0] + 0.05 * matrix[5]
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = matrix[1] + matrix[2]
    space = dense_feedback.ScanSpace(query / np.linalg.norm(query), np.arange(1, 41), matrix, np.ones(40, bool))
    dense = DenseHits({1: 1.0}, [1], 0.0, space=space)
    lexical = [(seq, 1.0 - 0.01 * seq) for seq in range(1, 31)]
    whole = [seq for seq, _ in dense_feedback.fuse(lexical, dense, 16)]
    assert 6 in whole[10:]
    for size in (3, 5, 6, 8):
        assert [seq for seq, _ in dense_feedback.fuse(lexical, dense, size)] == whole[:size]
