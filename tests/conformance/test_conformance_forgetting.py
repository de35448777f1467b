"""Conformance: what ``delete_entry`` and ``delete_memory`` forget, the same on every backend (``conftest.BACKENDS``):
the entry's rows and versions, its index rows and statistics, and the context items derived from it in every
snapshot; a deleted memory leaves no row in any table."""

from __future__ import annotations

from conformance import Backend, all_entries, assert_statistics_recount, ids, search

from mycelian_agent.memory_server import MemoryStore

PEANUTS = "I'm allergic to peanuts, even a trace makes me sick"
DOCUMENT = """# Conversation context

## Facts
- Alice is allergic to peanuts, even a trace makes Alice sick
- Alice works as a nurse on the cardiac ward

## Timeline
- 2024-05-01: Alice: I'm allergic to peanuts, even a trace makes me sick
- 2024-05-01: Alice: I work as a nurse on the cardiac ward

## Notes
Alice plays the cello on Thursdays. She said even a trace makes her sick. Alice avoids nut bars."""


def _memory(store: MemoryStore, title: str = "chat") -> tuple[str, str]:
    vault = store.create_vault(f"v-{title}")["vaultId"]
    return vault, store.create_memory(vault, title, "CHAT")["memoryId"]


def test_a_deleted_entry_leaves_every_context_snapshot_and_the_rest_stays(backend: Backend, store: MemoryStore) -> None:
    v, m = _memory(store)
    gone = store.add_entry(v, m, PEANUTS, "Alice is allergic to peanuts", {"speaker": "Alice"})["entryId"]
    store.add_entry(v, m, "I work as a nurse on the cardiac ward", "Alice is a nurse", {"speaker": "Alice"})
    store.add_entry(v, m, "I play the cello on Thursdays", "Alice plays cello", {"speaker": "Alice"})
    store.put_context(v, m, DOCUMENT)
    store.put_context(v, m, DOCUMENT.replace("## Notes", "## Open questions\n- none\n\n## Notes"))
    answer = store.delete_entry(v, m, gone)
    # Per snapshot: the fact, the timeline line and the sentence quoting it; two snapshots.
    assert answer == {"entryId": gone, "status": "deleted", "contextItemsRemoved": 6}
    current = store.get_context(v, m)
    assert "peanut" not in current.casefold() and "trace" not in current
    assert "Alice avoids nut bars." in current  # a paraphrase quotes no run of the entry: the documented limit
    assert "- Alice works as a nurse on the cardiac ward" in current and "## Facts" in current
    assert "Alice plays the cello on Thursdays." in current and "- none" in current
    found = search(store, m, "peanuts allergic trace sick", top_kc=10, include_raw_entries=True)
    assert found["entries"] == [] or all("peanut" not in e["rawEntry"] for e in found["entries"])
    assert all("peanut" not in c["context"].casefold() for c in found["contexts"])
    assert "peanut" not in found["latestContext"].casefold()
    assert all("peanut" not in row[1].casefold() for row in store.snapshot()["rows"]["contexts"])
    assert_statistics_recount(store, v, m, also=(["peanut", "allerg"], ["peanuts"]))
    backend.check_integrity(store)


def test_an_item_another_entry_still_supports_stays(store: MemoryStore) -> None:
    v, m = _memory(store)
    first = store.add_entry(v, m, PEANUTS, "Alice is allergic to peanuts", {"speaker": "Alice"})["entryId"]
    again = store.add_entry(
        v,
        m,
        "As I said, I'm allergic to peanuts, even a trace makes me sick",
        "Alice repeats her peanut allergy",
        {"speaker": "Alice"},
    )["entryId"]
    store.put_context(v, m, DOCUMENT)
    assert store.delete_entry(v, m, first)["contextItemsRemoved"] == 0  # the second entry says the same
    assert store.get_context(v, m) == DOCUMENT
    assert store.delete_entry(v, m, again)["contextItemsRemoved"] == 3
    assert "peanut" not in store.get_context(v, m).casefold()


def test_a_deleted_entry_takes_every_version_from_search_history_and_context(store: MemoryStore) -> None:
    v, m = _memory(store)
    entry_id = store.add_entry(v, m, "My locker code is 4417 at the gym", "locker code 4417")["entryId"]
    store.update_entry(v, m, entry_id, "My locker code is 9902 at the gym", "locker code 9902")
    # A document written from both versions (the agent saw the first one before the update).
    store.put_context(
        v, m, "## Facts\n- The locker code is 4417 at the gym\n- Likes swimming\n- Her locker code is 9902 at the gym"
    )
    assert store.delete_entry(v, m, entry_id)["contextItemsRemoved"] == 2
    assert store.get_context(v, m) == "## Facts\n- Likes swimming"
    assert ids(store, m, "locker code gym", top_ke=25) == []
    assert all_entries(store, v, m) == []
    rows = store.snapshot()["rows"]
    assert rows["entries"] == [] and rows["entry_versions"] == []
    counts = store.counts()
    assert (counts["entries"], counts["entries_fts"], counts["memory_stats"], counts["term_stats"]) == (0, 0, 0, 0)


def test_a_deleted_memory_leaves_no_row_of_it_in_any_table(backend: Backend, store: MemoryStore) -> None:
    v, m = _memory(store)
    ov, om = _memory(store, "other")
    kept = store.add_entry(ov, om, "The kayak trip is on Sunday", "kayak trip")["entryId"]
    made = store.add_entries(v, m, [{"raw_entry": f"walrus fact {i}", "summary": "walrus"} for i in range(4)])
    store.update_entry(v, m, made["entries"][0]["entryId"], "walrus fact zero", "walrus")
    store.put_context(v, m, "## Facts\n- walrus facts")
    assert store.delete_memory(v, m) == {"memoryId": m, "status": "deleted", "entries": 4}
    rows = store.snapshot()["rows"]
    for table, table_rows in rows.items():
        assert all(m not in row for row in table_rows), table
    assert [row for row in rows["memories"]] and rows["entry_versions"] == []
    counts = store.counts()
    assert (counts["entries"], counts["entries_fts"], counts["contexts"], counts["contexts_fts"]) == (1, 1, 0, 0)
    assert counts["memory_stats"] == 1
    assert ids(store, om, "kayak") == [kept]
    backend.check_integrity(store)
