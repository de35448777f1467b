"""Conformance: an entry updated under the same id (``update_entry``) and its history (``list_entry_versions``), the
same on every backend (``conftest.BACKENDS``): the replaced text leaves search, statistics and index, and stays
readable in the history."""

from __future__ import annotations

import pytest
from conformance import Backend, all_entries, assert_statistics_recount, ids, search

from mycelian_agent.errors import InputError, MemoryServerError
from mycelian_agent.memory_server import MemoryStore

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def _memory(store: MemoryStore, title: str = "chat") -> tuple[str, str]:
    vault = store.create_vault(f"v-{title}")["vaultId"]
    return vault, store.create_memory(vault, title, "CHAT")["memoryId"]


def test_an_update_keeps_the_id_and_place_bumps_the_version_and_replaces_what_search_finds(
    backend: Backend, store: MemoryStore
) -> None:
    v, m = _memory(store)
    before = store.add_entry(
        v, m, "I moved to Lisbon last spring", "Ann moved to Lisbon", {"speaker": "Ann"}, "2023-05-08T13:56:00Z"
    )
    assert before["version"] == 1
    after_it = store.add_entry(v, m, "The kayak trip is on Sunday", "kayak trip")["entryId"]
    entry_id = before["entryId"]
    updated = store.update_entry(
        v, m, entry_id, "I moved to Porto last spring", "Ann moved to Porto", {"speaker": "Ann", "topic": "home"}
    )
    assert updated["status"] == "updated"
    assert (updated["entryId"], updated["version"], updated["creationTime"]) == (entry_id, 2, before["creationTime"])
    assert updated["conversationTime"] == before["conversationTime"]  # kept: none was given
    assert (updated["rawEntry"], updated["summary"]) == ("I moved to Porto last spring", "Ann moved to Porto")
    assert store.get_entry(v, m, entry_id) == {
        k: val for k, val in updated.items() if k not in ("status", "contextItemsRemoved")
    }
    # Same place in the memory: the newest entry is still the kayak trip.
    assert [e["entryId"] for e in store.list_entries(v, m)["entries"]] == [after_it, entry_id]
    assert ids(store, m, "Lisbon", top_ke=25) == []
    assert ids(store, m, "Porto", top_ke=25) == [entry_id]
    assert search(store, m, "Porto", include_raw_entries=True)["entries"][0]["rawEntry"] == (
        "I moved to Porto last spring"
    )
    assert_statistics_recount(store, v, m, also=(["lisbon"], ["lisbon"]))
    counts = store.counts()
    assert counts["entries"] == counts["entries_fts"] == 2
    backend.check_integrity(store)


def test_the_history_lists_every_version_oldest_first_with_when_each_was_replaced(store: MemoryStore) -> None:
    v, m = _memory(store)
    first = store.add_entry(v, m, "I like tea", "likes tea", {"speaker": "Bo"})
    entry_id = first["entryId"]
    store.update_entry(v, m, entry_id, "I like green tea", "likes green tea", {"speaker": "Bo"})
    third = store.update_entry(v, m, entry_id, "I like coffee now", "likes coffee", None, "2024-01-02T03:04:05Z")
    history = store.list_entry_versions(v, m, entry_id)
    assert (history["entryId"], history["count"]) == (entry_id, 3)
    versions = history["versions"]
    assert [h["version"] for h in versions] == [1, 2, 3]
    assert [h["rawEntry"] for h in versions] == ["I like tea", "I like green tea", "I like coffee now"]
    assert [h["tags"] for h in versions] == [{"speaker": "Bo"}, {"speaker": "Bo"}, {}]
    assert versions[2]["conversationTime"].startswith("2024-01-02T03:04:05") and "conversationTime" not in versions[0]
    assert versions[0]["replacedAt"] <= versions[1]["replacedAt"] and versions[2]["replacedAt"] is None
    assert all(h["creationTime"] == first["creationTime"] for h in versions)
    assert {k: val for k, val in versions[2].items() if k != "replacedAt"} == {
        k: val for k, val in third.items() if k not in ("status", "contextItemsRemoved")
    }
    # The history is read-only, and an entry never updated has one version.
    assert store.list_entry_versions(v, m, entry_id) == history
    other = store.add_entry(v, m, "I run on Mondays", "runs")["entryId"]
    assert [h["version"] for h in store.list_entry_versions(v, m, other)["versions"]] == [1]
    assert [e["version"] for e in all_entries(store, v, m)] == [3, 1]


def test_a_deleted_entry_takes_its_history(backend: Backend, store: MemoryStore) -> None:
    v, m = _memory(store)
    entry_id = store.add_entry(v, m, "My locker code is 4417", "locker code")["entryId"]
    store.update_entry(v, m, entry_id, "My locker code is 9902", "locker code")
    store.delete_entry(v, m, entry_id)
    with pytest.raises(MemoryServerError, match=f"entry {entry_id} not found in memory {m}"):
        store.list_entry_versions(v, m, entry_id)
    assert store.snapshot()["rows"]["entry_versions"] == []


def test_bad_updates_are_refused_by_name_and_change_nothing(store: MemoryStore) -> None:
    v, m = _memory(store)
    ov, om = _memory(store, "other")
    entry_id = store.add_entry(v, m, "I adopted a cat", "cat")["entryId"]
    other = store.add_entry(ov, om, "secret of other", "other")["entryId"]
    before = store.snapshot()
    for call, error, message in [
        (
            lambda: store.update_entry(v, m, UNKNOWN, "r", "s"),
            MemoryServerError,
            f"entry {UNKNOWN} not found in memory {m}",
        ),
        (
            lambda: store.update_entry(v, m, other, "r", "s"),
            MemoryServerError,
            f"entry {other} not found in memory {m}",
        ),
        (
            lambda: store.update_entry(v, om, entry_id, "r", "s"),
            MemoryServerError,
            f"memory {om} not found in vault {v}",
        ),
        (lambda: store.update_entry(UNKNOWN, m, entry_id, "r", "s"), MemoryServerError, f"vault {UNKNOWN} not found"),
        (lambda: store.update_entry(v, m, entry_id, "", "s"), InputError, "raw_entry"),
        (lambda: store.update_entry(v, m, entry_id, "r", "s", {"k": 5}), InputError, "tags"),  # type: ignore[dict-item]
        (lambda: store.update_entry(v, m, entry_id, "r", "s", None, "yesterday"), InputError, "conversation_time"),
        (lambda: store.update_entry(v, m, "not-a-uuid", "r", "s"), InputError, "entry_id"),
        (lambda: store.list_entry_versions(v, m, UNKNOWN), MemoryServerError, f"entry {UNKNOWN} not found in memory"),
        (lambda: store.list_entry_versions(v, om, other), MemoryServerError, f"memory {om} not found in vault {v}"),
    ]:
        with pytest.raises(error, match=message):
            call()
    assert store.snapshot() == before


def test_an_update_takes_the_items_only_the_replaced_text_said_out_of_every_context_snapshot(
    store: MemoryStore,
) -> None:
    v, m = _memory(store)
    moved = store.add_entry(v, m, "I moved to Lisbon last spring", "Ann moved to Lisbon")["entryId"]
    tea = store.add_entry(v, m, "I like green tea a lot", "Ann likes green tea")["entryId"]
    document = "## Facts\n- Ann moved to Lisbon last spring\n- Ann likes green tea a lot\n- Ann has a cat"
    store.put_context(v, m, document)
    store.put_context(v, m, document + "\n- Ann runs")
    answer = store.update_entry(v, m, moved, "I moved to Porto last spring", "Ann moved to Porto")
    assert answer["contextItemsRemoved"] == 2  # one item in each snapshot
    assert store.get_context(v, m) == "## Facts\n- Ann likes green tea a lot\n- Ann has a cat\n- Ann runs"
    # The new text still says what the item says: it stays.
    assert (
        store.update_entry(v, m, tea, "I like green tea a lot, and coffee", "Ann likes tea and coffee")[
            "contextItemsRemoved"
        ]
        == 0
    )
    assert "- Ann likes green tea a lot" in store.get_context(v, m)
    assert store.list_entry_versions(v, m, moved)["versions"][0]["rawEntry"] == "I moved to Lisbon last spring"


def test_a_retried_write_of_an_entry_corrected_since_is_answered_not_refused(store: MemoryStore) -> None:
    """A writer that lost the answer to its add_entry retries it with the same key and text after someone corrected
    the entry: the retry is the same write, so it gets the entry as now stored; another text under the key is still
    a conflict."""
    v, m = _memory(store)
    first = store.add_entry(v, m, "I moved to Boston", "moved", idempotency_key="t1:msg:1")
    store.update_entry(v, m, first["entryId"], "I moved to Denver", "moved")
    before = store.snapshot()
    again = store.add_entry(v, m, "I moved to Boston", "moved", idempotency_key="t1:msg:1")
    batch = store.add_entries(
        v, m, [{"raw_entry": "I moved to Boston", "summary": "moved", "idempotency_key": "t1:msg:1"}]
    )
    assert (again["entryId"], again["rawEntry"], again["deduplicated"]) == (first["entryId"], "I moved to Denver", True)
    assert (batch["stored"], batch["entries"][0]["rawEntry"]) == (0, "I moved to Denver")
    assert store.snapshot() == before
    with pytest.raises(MemoryServerError, match="idempotency_key 't1:msg:1' conflicts"):
        store.add_entry(v, m, "I moved to Austin", "moved", idempotency_key="t1:msg:1")
