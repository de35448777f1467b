"""Conformance: vaults, memories, entries and contexts written, listed, deduplicated and deleted, the same on every
backend (``conftest.BACKENDS``), through ``MemoryStore``'s public methods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conformance import COUNT_KEYS, Backend, all_entries, assert_statistics_recount, ids, search

from mycelian_agent.errors import InputError, MemoryServerError
from mycelian_agent.memory_server import PLACEHOLDER_CONTEXT, MemoryStore

UNKNOWN = "00000000-0000-4000-8000-000000000000"
ENTRY_KEYS = {
    "entryId",
    "memoryId",
    "vaultId",
    "creationTime",
    "conversationTime",
    "rawEntry",
    "summary",
    "tags",
    "version",
}


def _memory(store: MemoryStore, title: str = "chat", vault: str | None = None) -> tuple[str, str]:
    vault = vault or store.create_vault(f"v-{title}")["vaultId"]
    return vault, store.create_memory(vault, title, "CHAT")["memoryId"]


# -- vaults and memories -----------------------------------------------------------------------------------------


def test_vaults_and_memories_are_listed_oldest_first_and_titles_are_unique(store: MemoryStore) -> None:
    home = store.create_vault("home", "main vault")
    assert home == {"vaultId": home["vaultId"], "title": "home"}
    other = store.create_vault("other")["vaultId"]
    assert store.list_vaults() == [home, {"vaultId": other, "title": "other"}]
    v = home["vaultId"]
    first = store.create_memory(v, "chat-1", "NOTES", "the first")
    assert first == {
        "memoryId": first["memoryId"],
        "vaultId": v,
        "title": "chat-1",
        "description": "the first",
        "memoryType": "NOTES",
        "creationTime": first["creationTime"],
    }
    second = store.create_memory(v, "chat-2", "CHAT")["memoryId"]
    store.create_memory(other, "chat-1", "CHAT")  # a title is unique within its vault only
    assert store.list_memories(v) == [
        {"memoryId": first["memoryId"], "title": "chat-1"},
        {"memoryId": second, "title": "chat-2"},
    ]
    assert store.get_memory(v, first["memoryId"]) == first
    before = store.snapshot()
    with pytest.raises(MemoryServerError, match="a vault titled 'home' already exists"):
        store.create_vault("home")
    with pytest.raises(MemoryServerError, match=f"a memory titled 'chat-2' already exists in vault {v}"):
        store.create_memory(v, "chat-2", "CHAT")
    assert store.snapshot() == before


# -- entries and contexts ----------------------------------------------------------------------------------------


def test_an_entry_is_stored_as_given_and_read_back_whole(store: MemoryStore) -> None:
    v, m = _memory(store)
    entry = store.add_entry(
        v,
        m,
        "Moved to Denver",
        "The user moved to Denver.",
        {"role": "user", "topic": "move"},
        "2024-03-05T10:00:00+01:00",
    )
    assert (entry["status"], entry["deduplicated"]) == ("stored", False)
    assert entry["conversationTime"] == "2024-03-05T09:00:00.000000Z"  # normalised to UTC
    stored = store.get_entry(v, m, entry["entryId"])
    assert stored == {k: value for k, value in entry.items() if k not in ("status", "deduplicated")}
    assert set(stored) == ENTRY_KEYS and (stored["memoryId"], stored["vaultId"]) == (m, v)
    plain = store.add_entry(v, m, "no time", "plain")
    assert "conversationTime" not in store.get_entry(v, m, plain["entryId"]) and plain["tags"] == {}


def test_creation_times_strictly_increase_per_memory(store: MemoryStore) -> None:
    v, m = _memory(store)
    times = [store.add_entry(v, m, f"e{i}", "s")["creationTime"] for i in range(100)]
    times += [
        e["creationTime"]
        for e in store.add_entries(v, m, [{"raw_entry": f"b{i}", "summary": "s"} for i in range(50)])["entries"]
    ]
    assert times == sorted(set(times))  # distinct and increasing: exact list_entries cursors


def test_add_entries_stores_all_in_order_or_nothing(store: MemoryStore) -> None:
    v, m = _memory(store)
    items: list[dict[str, Any]] = [
        {
            "raw_entry": f"walrus fact {i}",
            "summary": f"walrus {i}",
            "tags": {"msg": str(i)},
            "conversation_time": "2024-05-01T12:00:00Z",
            "idempotency_key": f"t:{i}",
        }
        for i in range(3)
    ]
    items.append({"raw_entry": "no key, no time", "summary": "plain"})
    first = store.add_entries(v, m, items)
    assert (first["count"], first["stored"], first["deduplicated"], first["status"]) == (4, 4, 0, "stored")
    stored = first["entries"]
    assert [e["rawEntry"] for e in stored] == [i["raw_entry"] for i in items]
    assert [e["deduplicated"] for e in stored] == [False] * 4 and {e["memoryId"] for e in stored} == {m}
    assert stored[1]["tags"] == {"msg": "1"} and stored[0]["conversationTime"] == "2024-05-01T12:00:00.000000Z"
    assert "conversationTime" not in stored[3]
    assert [e["entryId"] for e in store.list_entries(v, m)["entries"]] == [e["entryId"] for e in reversed(stored)]
    assert set(ids(store, m, "walrus fact")) == {e["entryId"] for e in stored[:3]}
    before = store.snapshot()
    # The first item is inserted, then the second's key conflicts with it: the transaction stores neither.
    with pytest.raises(MemoryServerError, match=r"entries\[1\]: idempotency_key 'k' conflicts.*nothing was stored"):
        store.add_entries(
            v,
            m,
            [
                {"raw_entry": "one", "summary": "s", "idempotency_key": "k"},
                {"raw_entry": "two", "summary": "s", "idempotency_key": "k"},
            ],
        )
    assert store.snapshot() == before


def test_contexts_the_newest_is_current_and_each_is_searchable(store: MemoryStore) -> None:
    v, m = _memory(store)
    assert store.get_context(v, m) == PLACEHOLDER_CONTEXT
    empty = search(store, m, "anything")
    assert (empty["latestContext"], empty["latestContextTimestamp"], empty["contexts"]) == (
        PLACEHOLDER_CONTEXT,
        None,
        [],
    )
    puts = [
        store.put_context(v, m, text)
        for text in ("## Facts\n- grows tomatoes in the garden", "## Facts\n- has a cat", "## Facts\n- likes jazz")
    ]
    assert puts[0] == {
        "memoryId": m,
        "timestamp": puts[0]["timestamp"],
        "status": "stored",
        "chars": len("## Facts\n- grows tomatoes in the garden"),
    }
    assert store.get_context(v, m) == "## Facts\n- likes jazz"
    found = search(store, m, "cat", top_ke=0, top_kc=1)
    assert (found["entries"], found["count"]) == ([], 0)
    assert [c["context"] for c in found["contexts"]] == ["## Facts\n- has a cat"] and found["contexts"][0]["score"] > 0
    assert (found["latestContext"], found["latestContextTimestamp"]) == ("## Facts\n- likes jazz", puts[2]["timestamp"])
    # Only the snapshots that match, best first, however many are asked for.
    assert [c["context"] for c in search(store, m, "tomatoes garden", top_kc=3)["contexts"]] == [
        "## Facts\n- grows tomatoes in the garden"
    ]


def test_list_entries_pages_newest_first_before_and_oldest_first_after(store: MemoryStore) -> None:
    v, m = _memory(store)
    made = [store.add_entry(v, m, f"m{i}", "s")["entryId"] for i in range(7)]
    first = store.list_entries(v, m)
    assert (first["count"], first["applied_limit"], first["next_before"], first["next_after"]) == (7, 25, None, None)
    seen, cursor = [], None
    while True:
        page = store.list_entries(v, m, limit=3, before=cursor)
        seen += [e["entryId"] for e in page["entries"]]
        assert page["next_after"] is None and page["applied_limit"] == 3
        cursor = page["next_before"]
        if cursor is None:
            break
    assert seen == made[::-1]
    forward, cursor = [], store.get_entry(v, m, made[0])["creationTime"]  # bounds are exclusive
    while cursor:
        page = store.list_entries(v, m, limit=4, after=cursor)
        forward += [e["entryId"] for e in page["entries"]]
        assert page["next_before"] is None
        cursor = page["next_after"]
    assert forward == made[1:]


def _write_texts(store: MemoryStore, texts: list[str]) -> None:
    """Each text, as an entry's raw text, summary and tag, a context and a memory's description, is stored and read
    back exactly, or refused as input naming the argument with nothing written; never another error."""
    v, m = _memory(store)
    for number, text in enumerate(texts):
        writes: list[tuple[str, Callable[[], Any], Callable[[Any], Any], Any]] = [
            (
                "raw_entry",
                lambda: store.add_entry(v, m, text, text[:2000], {"k": text[:500]}),
                lambda added: (lambda e: (e["rawEntry"], e["summary"], e["tags"]))(
                    store.get_entry(v, m, added["entryId"])
                ),
                (text, text[:2000], {"k": text[:500]}),
            ),
            ("content", lambda: store.put_context(v, m, text[:2000]), lambda _: store.get_context(v, m), text[:2000]),
            (
                "description",
                lambda: store.create_memory(v, f"text-{number}", "CHAT", text[:1000]),
                lambda made: store.get_memory(v, made["memoryId"])["description"],
                text[:1000],
            ),
        ]
        for argument, write, read, expected in writes:
            before = store.snapshot()
            try:
                written = write()
            except InputError as exc:
                assert argument in str(exc) and store.snapshot() == before
                continue
            assert read(written) == expected, (argument, text[:40])


def test_any_text_is_stored_whole(store: MemoryStore) -> None:
    _write_texts(store, ["tab\there, CR\r, bell\x07, DEL\x7f", "emoji \U0001f600, e\u0301, \u2028, \ufeff", "x" * 9000])


def test_a_nul_character_is_refused_by_name_and_changes_nothing(store: MemoryStore) -> None:
    # PostgreSQL's text cannot hold U+0000, so every backend refuses it the same way (not a database error on one).
    v, m = _memory(store)
    before = store.snapshot()
    writes: list[tuple[str, Callable[[], Any]]] = [
        ("raw_entry", lambda: store.add_entry(v, m, "a\x00b kayak", "s")),
        ("summary", lambda: store.add_entry(v, m, "kayak", "s\x00")),
        ("tags value", lambda: store.add_entry(v, m, "kayak", "s", {"k": "\x00"})),
        ("idempotency_key", lambda: store.add_entry(v, m, "kayak", "s", idempotency_key="k\x00")),
        ("content", lambda: store.put_context(v, m, "ctx\x00")),
        ("description", lambda: store.create_memory(v, "nul", "CHAT", "d\x00")),
    ]
    for argument, write in writes:
        with pytest.raises(InputError, match=f"{argument}: a NUL character"):
            write()
    assert store.snapshot() == before


# -- idempotency keys --------------------------------------------------------------------------------------------


def test_a_retry_with_the_same_key_returns_the_stored_entry(store: MemoryStore) -> None:
    v, m = _memory(store)
    args: dict[str, Any] = dict(raw_entry="hello there", summary="greeting", idempotency_key="t1:msg:1")
    first = store.add_entry(v, m, **args)
    counts = store.counts()
    retry = store.add_entry(v, m, **{**args, "summary": "a different summary"})  # the raw entry decides
    assert (first["deduplicated"], retry["deduplicated"]) == (False, True)
    assert retry["entryId"] == first["entryId"] and retry["summary"] == "greeting"
    assert store.counts() == counts
    # add_entries shares the memory's keys, and answers a whole retried call from them.
    items = [
        {"raw_entry": "hello there", "summary": "g", "idempotency_key": "t1:msg:1"},
        {"raw_entry": "second", "summary": "s", "idempotency_key": "t1:msg:2"},
        {"raw_entry": "second", "summary": "s", "idempotency_key": "t1:msg:2"},
    ]  # one key twice in one call
    batch = store.add_entries(v, m, items)
    assert (batch["stored"], batch["deduplicated"]) == (1, 2)
    assert [e["deduplicated"] for e in batch["entries"]] == [True, False, True]
    assert batch["entries"][0]["entryId"] == first["entryId"]
    assert batch["entries"][1]["entryId"] == batch["entries"][2]["entryId"]
    again = store.add_entries(v, m, items)
    assert (again["stored"], again["deduplicated"]) == (0, 3)
    assert [e["entryId"] for e in again["entries"]] == [e["entryId"] for e in batch["entries"]]
    assert store.counts()["entries"] == counts["entries"] + 1
    # Keys are per memory.
    ov, om = _memory(store, "other")
    other = store.add_entry(ov, om, **args)
    assert other["deduplicated"] is False and other["entryId"] != first["entryId"]


def test_the_same_key_with_another_text_is_refused_and_changes_nothing(store: MemoryStore) -> None:
    v, m = _memory(store)
    first = store.add_entry(v, m, "hello there", "greeting", idempotency_key="k")
    before = store.snapshot()
    with pytest.raises(
        MemoryServerError, match=f"idempotency_key 'k' conflicts: memory {m} already holds entry {first['entryId']}"
    ):
        store.add_entry(v, m, "something else", "greeting", idempotency_key="k")
    with pytest.raises(MemoryServerError, match=r"entries\[1\]: idempotency_key 'k' conflicts"):
        store.add_entries(
            v,
            m,
            [
                {"raw_entry": "new", "summary": "s"},
                {"raw_entry": "something else", "summary": "s", "idempotency_key": "k"},
            ],
        )
    assert store.snapshot() == before


# -- deletion and the statistics -----------------------------------------------------------------------------------


def test_every_kind_of_write_keeps_the_statistics_equal_to_a_recount(backend: Backend, store: MemoryStore) -> None:
    """The per-memory term statistics (what BM25 and query feedback read) follow every write, retry, refusal and
    deletion; the terms of deleted entries count 0, and another memory's entries count in none."""
    vault, kept = _memory(store, "kept")
    gone = store.create_memory(vault, "gone", "CHAT")["memoryId"]
    first = store.add_entry(
        vault,
        kept,
        "I adopted a golden retriever",
        "User adopted a dog",
        {"speaker": "Ana"},
        "2024-05-03T10:00:00Z",
        idempotency_key="k1",
    )
    assert store.add_entry(
        vault,
        kept,
        "I adopted a golden retriever",
        "User adopted a dog",
        {"speaker": "Ana"},
        "2024-05-03T10:00:00Z",
        idempotency_key="k1",
    )["deduplicated"]
    batch = [
        {
            "raw_entry": f"Walked the retriever by the river, day {i}",
            "summary": f"Walk {i} by the river",
            "tags": {"speaker": "Ana" if i % 2 else "Ben"},
            "idempotency_key": f"b{i}",
        }
        for i in range(12)
    ]
    batch.append(dict(batch[3]))  # the same key twice in one call: stored once
    added = store.add_entries(vault, kept, batch)
    assert (added["stored"], added["deduplicated"]) == (12, 1)
    assert store.add_entries(vault, kept, batch)["stored"] == 0  # the whole call retried
    store.add_entries(vault, gone, batch[:5] + [{"raw_entry": "kayaks only here", "summary": "kayaks"}])
    assert_statistics_recount(store, vault, kept)
    before = store.snapshot()
    with pytest.raises(MemoryServerError, match="conflicts"):  # refused part-way: nothing stored, nothing counted
        store.add_entries(
            vault,
            kept,
            [
                {"raw_entry": "a new line about canoes", "summary": "canoes"},
                {**batch[0], "raw_entry": "something else"},
            ],
        )
    assert store.snapshot() == before
    assert_statistics_recount(store, vault, kept, also=(["kayak", "cano"], ["kayaks", "canoes"]))
    store.delete_entry(vault, kept, first["entryId"])
    store.delete_entry(vault, kept, added["entries"][5]["entryId"])
    total = assert_statistics_recount(store, vault, kept, also=(["adopt", "golden"], ["adopted", "golden"]))
    assert total.entries == 11
    assert store.delete_memory(vault, gone) == {"memoryId": gone, "status": "deleted", "entries": 6}
    for entry in all_entries(store, vault, kept):
        store.delete_entry(vault, kept, entry["entryId"])
    assert_statistics_recount(store, vault, kept, also=(["river", "retriev"], ["river"]))
    counts = store.counts()
    assert (counts["entries"], counts["memory_stats"], counts["term_stats"]) == (0, 0, 0)  # no zero rows left
    backend.check_integrity(store)


def test_a_deleted_entry_leaves_listing_search_and_index(backend: Backend, store: MemoryStore) -> None:
    v, m = _memory(store)
    gone = store.add_entry(v, m, "walrus", "walrus", {"speaker": "Ann"}, "2023-05-08T13:56:00Z")["entryId"]
    kept = store.add_entry(v, m, "walrus", "walrus", {"speaker": "Ann"})["entryId"]
    assert store.delete_entry(v, m, gone) == {"entryId": gone, "status": "deleted", "contextItemsRemoved": 0}
    assert ids(store, m, "walrus Ann May", top_ke=25) == [kept]  # its words, name and date left with it
    assert [e["entryId"] for e in store.list_entries(v, m)["entries"]] == [kept]
    with pytest.raises(MemoryServerError, match=f"entry {gone} not found in memory {m}"):
        store.get_entry(v, m, gone)
    with pytest.raises(MemoryServerError, match=f"entry {gone} not found in memory {m}"):
        store.delete_entry(v, m, gone)
    counts = store.counts()
    assert counts["entries"] == counts["entries_fts"] == 1
    backend.check_integrity(store)


def test_a_deleted_memory_takes_its_entries_contexts_and_statistics(backend: Backend, store: MemoryStore) -> None:
    v, m = _memory(store)
    ov, om = _memory(store, "other")
    store.add_entry(ov, om, "secret of other", "other walrus")
    for i in range(3):
        store.add_entry(v, m, f"walrus fact {i}", "walrus")
    store.put_context(v, m, "walrus context")
    before = store.counts()
    assert set(before) >= COUNT_KEYS
    assert (before["vaults"], before["memories"], before["entries"], before["contexts"]) == (2, 2, 4, 1)
    assert before["memory_stats"] == 2
    assert store.delete_memory(v, m) == {"memoryId": m, "status": "deleted", "entries": 3}
    after = store.counts()
    assert (after["memories"], after["entries"], after["entries_fts"]) == (1, 1, 1)  # the other memory's stays
    assert (after["contexts"], after["contexts_fts"], after["memory_stats"]) == (0, 0, 1)
    assert after["term_stats"] < before["term_stats"]
    assert store.list_memories(v) == []
    with pytest.raises(MemoryServerError, match=f"memory {m} not found"):
        search(store, m, "walrus")
    with pytest.raises(MemoryServerError, match=f"memory {m} not found in vault {v}"):
        store.delete_memory(v, m)
    assert ids(store, om, "walrus") != []  # the other memory is still searched
    backend.check_integrity(store)


# -- wrong ids -----------------------------------------------------------------------------------------------------


def test_wrong_ids_raise_errors_naming_what_is_missing_and_change_nothing(store: MemoryStore) -> None:
    v, m = _memory(store)
    e = store.add_entry(v, m, "I adopted a cat", "cat")["entryId"]
    ov, om = _memory(store, "other")
    oe = store.add_entry(ov, om, "secret of other", "other")["entryId"]
    before = store.snapshot()
    refusals: list[tuple[Callable[[], object], str]] = [
        (lambda: store.create_memory(UNKNOWN, "m", "CHAT"), f"vault {UNKNOWN} not found"),
        (lambda: store.list_memories(UNKNOWN), f"vault {UNKNOWN} not found"),
        (lambda: store.get_memory(UNKNOWN, m), f"vault {UNKNOWN} not found"),
        (lambda: store.get_memory(v, UNKNOWN), f"memory {UNKNOWN} not found in vault {v}"),
        # a memory of another vault: not found in the vault named (vault mismatch)
        (lambda: store.get_memory(v, om), f"memory {om} not found in vault {v}"),
        (lambda: store.add_entry(v, om, "r", "s"), f"memory {om} not found in vault {v}"),
        (lambda: store.add_entries(v, om, [{"raw_entry": "r", "summary": "s"}]), f"memory {om} not found in vault {v}"),
        (lambda: store.list_entries(ov, m), f"memory {m} not found in vault {ov}"),
        (lambda: store.get_entry(v, om, oe), f"memory {om} not found in vault {v}"),
        (lambda: store.put_context(ov, m, "c"), f"memory {m} not found in vault {ov}"),
        (lambda: store.get_context(v, om), f"memory {om} not found in vault {v}"),
        (lambda: store.delete_memory(v, om), f"memory {om} not found in vault {v}"),
        (lambda: store.check_memory(UNKNOWN), f"memory {UNKNOWN} not found"),
        (lambda: store.check_memory(om, v), f"memory {om} not found in vault {v}"),
        (lambda: store.await_consistency(om, v), f"memory {om} not found in vault {v}"),
        (lambda: search(store, UNKNOWN, "cat"), f"memory {UNKNOWN} not found"),
        (lambda: search(store, om, "secret", vault_id=v), f"memory {om} not found in vault {v}"),
        # an entry of another memory: not found in the memory named
        (lambda: store.get_entry(v, m, UNKNOWN), f"entry {UNKNOWN} not found in memory {m}"),
        (lambda: store.get_entry(v, m, oe), f"entry {oe} not found in memory {m}"),
        (lambda: store.delete_entry(v, m, oe), f"entry {oe} not found in memory {m}"),
    ]
    for call, message in refusals:
        with pytest.raises(MemoryServerError) as info:
            call()
        assert str(info.value).startswith(message), (message, str(info.value))
    assert store.snapshot() == before
    assert store.get_entry(v, m, e)["rawEntry"] == "I adopted a cat"
