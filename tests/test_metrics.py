"""recall@k on hand-checked cases, and its aggregation per category."""

from __future__ import annotations

import json

import pytest

from mycelian_bench.metrics import RecallRecord, aggregate, recall_at_k, unique_in_order

# Entries retrieved for one question, mapped to their session ids, best first. Distinct in order: s3, s1, s7, s2.
RETRIEVED = ["s3", "s3", "s1", "s3", "s7", "s1", "s2"]


@pytest.mark.parametrize(
    ("gold", "k", "expected"),
    [
        ({"s1", "s2"}, 1, (False, False)),  # top-1 distinct: {s3}
        ({"s1", "s2"}, 2, (True, False)),  # {s3, s1}: the duplicate s3 does not use up a rank
        ({"s1", "s2"}, 3, (True, False)),  # {s3, s1, s7}
        ({"s1", "s2"}, 4, (True, True)),  # {s3, s1, s7, s2}
        ({"s1", "s2"}, 100, (True, True)),  # k beyond the list: everything retrieved
        ({"s3"}, 1, (True, True)),
        ({"s9"}, 4, (False, False)),
        (["s1", "s1"], 2, (True, True)),  # duplicate gold ids count once
    ],
)
def test_recall_at_k_hand_checked(gold: set[str], k: int, expected: tuple[bool, bool]) -> None:
    assert recall_at_k(RETRIEVED, gold, k) == expected


def test_recall_at_k_edge_cases() -> None:
    assert recall_at_k(RETRIEVED, set(), 5) is None  # no gold: undefined, not False
    assert recall_at_k([], {"s1"}, 5) == (False, False)
    with pytest.raises(ValueError):
        recall_at_k(RETRIEVED, {"s1"}, 0)


def test_unique_in_order() -> None:
    assert unique_in_order(RETRIEVED) == ["s3", "s1", "s7", "s2"]
    assert unique_in_order([]) == []


def _records() -> list[RecallRecord]:
    return [
        RecallRecord("q1", "temporal", ["a", "b", "c"], {"a"}),  # any/all from k=1
        RecallRecord("q2", "temporal", ["x", "b", "x", "c"], {"b", "c"}),  # distinct x, b, c: any@5 and all@5
        RecallRecord("q3", "multi-hop", ["d", "e"], {"e", "f"}),  # any from k=2, never all
        RecallRecord("q4", "multi-hop", ["a"], []),  # no gold: excluded
        RecallRecord("q5", "abstention", ["a"], ()),  # a category with nothing scored
    ]


def test_aggregate_hand_checked() -> None:
    table = aggregate(_records(), ks=(1, 5))
    assert table.ks == (1, 5)
    assert list(table.categories) == ["abstention", "multi-hop", "temporal"]  # sorted
    temporal = table.categories["temporal"]
    assert (temporal.count, temporal.excluded) == (2, 0)
    assert (temporal.recall_any(1), temporal.recall_all(1)) == (0.5, 0.5)
    assert (temporal.recall_any(5), temporal.recall_all(5)) == (1.0, 1.0)
    multi = table.categories["multi-hop"]
    assert (multi.count, multi.excluded) == (1, 1)
    assert (multi.recall_any(1), multi.recall_all(1), multi.recall_any(5), multi.recall_all(5)) == (0.0, 0.0, 1.0, 0.0)
    abstention = table.categories["abstention"]
    assert (abstention.count, abstention.excluded, abstention.recall_any(5)) == (0, 1, None)
    overall = table.overall
    assert (overall.category, overall.count, overall.excluded) == ("overall", 3, 2)
    assert overall.hits_any == {1: 1, 5: 3} and overall.hits_all == {1: 1, 5: 2}
    assert overall.recall_any(5) == 1.0 and overall.recall_all(5) == pytest.approx(2 / 3)


def test_aggregate_outputs() -> None:
    table = aggregate(_records(), ks=(1, 5, 5))
    assert table.ks == (1, 5)  # duplicates dropped
    data = json.loads(json.dumps(table.as_dict()))
    assert data["overall"] == {
        "count": 3,
        "excluded": 2,
        "recall_any@1": pytest.approx(1 / 3),
        "recall_all@1": pytest.approx(1 / 3),
        "recall_any@5": 1.0,
        "recall_all@5": pytest.approx(2 / 3),
    }
    assert data["categories"]["abstention"]["recall_all@5"] is None
    lines = table.format().splitlines()
    assert lines[0] == "| category | n | excluded | any@1 | all@1 | any@5 | all@5 |"
    assert lines[2] == "| abstention | 0 | 1 | - | - | - | - |"
    assert lines[-1] == "| overall | 3 | 2 | 0.333 | 0.333 | 1.000 | 0.667 |"


def test_aggregate_empty_and_bad_ks() -> None:
    table = aggregate([], ks=(1,))
    assert table.categories == {} and table.overall.count == 0 and table.overall.recall_any(1) is None
    with pytest.raises(ValueError):
        aggregate(_records(), ks=())
    with pytest.raises(ValueError):
        aggregate(_records(), ks=(0, 5))


def test_record_freezes_its_inputs() -> None:
    retrieved, gold = ["a", "b"], ["b"]
    record = RecallRecord("q", "c", retrieved, gold)
    retrieved.append("z")
    gold.clear()
    assert record.retrieved == ("a", "b") and record.gold == frozenset({"b"})
