"""Read, correct, forget on the invoker (issue 39): ``get_all``, ``get``, ``update``, ``history``, ``delete``,
``delete_user`` and their sync twins, against the real memory server: in process (``:memory:``) and the embedded
server over stdio. The agent's model is the extractive one (no network) unless a test scripts one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from mycelian_agent import InputError, build_agent, make_manage_memory_tool
from mycelian_agent.recall import EntryPage, MemoryEntry
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

ALICE = [
    "I am severely allergic to peanuts.",
    "My sister Ana lives in Lisbon.",
    "I play the cello on Sundays.",
    "Our cat Miso is twelve years old.",
    "I work night shifts as a nurse.",
]


def in_process(model: Any = "extractive", **options: Any):
    return build_agent(model, server="in-process", db=":memory:", **options)


async def _tell(invoker, user: str, texts: list[str], thread: str | None = None) -> None:
    await invoker.aprocess_conversation_messages(
        thread or f"{user}-chat",
        [
            {"role": "user", "content": text, "conversation_time": f"2024-03-0{1 + i}T10:00:00Z"}
            for i, text in enumerate(texts)
        ],
        user=user,
    )


async def _titles(invoker) -> list[str]:
    memories = await invoker.connection.call_json("list_memories", {"vault_id": invoker.reader.vault_id})
    return sorted(memory["title"] for memory in memories)


@pytest.fixture
async def invoker():
    async with in_process() as ready:
        await _tell(ready, "alice", ALICE)
        await _tell(ready, "bob", ["Bob keeps bees on his roof."])
        yield ready


async def test_get_all_pages_newest_first_and_get_reads_one(invoker) -> None:
    pages: list[EntryPage] = []
    cursor = None
    while True:
        page = await invoker.aget_all(user="alice", limit=2, cursor=cursor)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [len(page) for page in pages] == [2, 2, 1]
    entries = [entry for page in pages for entry in page]
    assert [entry.text for entry in entries] == ALICE[::-1]  # newest first, each once
    assert all(isinstance(e, MemoryEntry) and e.user == "alice" and e.role == "user" and e.summary for e in entries)
    assert [e.text for e in await invoker.aget_all(user="alice")] == ALICE[::-1]  # one page of the default 25
    one = await invoker.aget(entries[-1].entry_id, user="alice")
    assert (one.text, one.thread, one.time) == (ALICE[0], "alice-chat", "2024-03-01T10:00:00.000000Z")
    assert one.as_dict()["entry_id"] == one.entry_id and one.as_dict()["tags"]["msg"] == "1"
    assert [e.text for e in await invoker.aget_all(user="bob")] == ["Bob keeps bees on his roof."]
    for limit in (0, 1001, True, "5"):
        with pytest.raises(InputError, match="limit must be an integer from 1 to 1000"):
            await invoker.aget_all(user="alice", limit=limit)
    with pytest.raises(InputError, match="cursor 'page 2' is not one get_all returned"):
        await invoker.aget_all(user="alice", cursor="page 2")


async def test_an_entry_of_another_user_is_never_returned_changed_or_deleted(invoker) -> None:
    bees = (await invoker.aget_all(user="bob")).entries[0]
    calls = (
        lambda: invoker.aget(bees.entry_id, user="alice"),
        lambda: invoker.ahistory(bees.entry_id, user="alice"),
        lambda: invoker.aupdate(bees.entry_id, "Bob keeps wasps.", user="alice"),
        lambda: invoker.adelete(bees.entry_id, user="alice"),
        lambda: invoker.adelete(bees.entry_id),
    )
    # the invoker's own memory was never written: it does not exist (issue 39 item 3)
    elsewhere = f"entry {bees.entry_id} not found(: user 'default' has no memory| in the memory of user 'alice')"
    for call in calls:
        with pytest.raises(InputError, match=elsewhere):
            await call()
    assert await invoker.aget(bees.entry_id, user="bob") == bees  # untouched
    with pytest.raises(InputError, match="entry id 'bees' is not an entry id"):
        await invoker.aget("bees", user="bob")
    stranger = str(uuid.uuid4())
    with pytest.raises(InputError, match=f"entry {stranger} not found in the memory of user 'bob'"):
        await invoker.adelete(stranger, user="bob")
    assert (await invoker.aget_all(user="bob smith")).entries == ()  # any id names a user; this one has no memory
    with pytest.raises(InputError, match="user '' is empty"):
        await invoker.aget_all(user="")


async def test_reads_of_an_unknown_user_find_nothing_and_create_nothing(invoker) -> None:
    before = await _titles(invoker)
    assert before == ["alice", "bob"]  # no 'default': nothing was written to the invoker's own memory
    assert (await invoker.aget_all(user="zoe")).entries == ()
    assert await invoker.asearch("bees", user="zoe") == []
    assert (await invoker.arecall("bees", user="zoe")).empty
    some = str(uuid.uuid4())
    for call in (invoker.aget, invoker.ahistory, invoker.adelete):
        with pytest.raises(InputError, match=f"entry {some} not found: user 'zoe' has no memory"):
            await call(some, user="zoe")
    with pytest.raises(InputError, match="unknown user 'zoe'"):
        await invoker.adelete_user("zoe")
    assert await _titles(invoker) == before


async def test_delete_forgets_an_entry_and_delete_user_a_whole_memory(invoker) -> None:
    await invoker.aend_session("alice-chat")  # the context document now holds the allergy too
    ids = {"vault_id": invoker.reader.vault_id, "memory_id": await invoker.reader.users.find("alice")}
    assert "peanuts" in await invoker.connection.call("get_context", ids)
    peanuts = next(e for e in await invoker.aget_all(user="alice") if "peanuts" in e.text)
    deleted = await invoker.adelete(peanuts.entry_id, user="alice")
    assert deleted["entryId"] == peanuts.entry_id and deleted["status"] == "deleted"
    assert deleted["contextItemsRemoved"] >= 1
    assert "peanuts" not in await invoker.connection.call("get_context", ids)  # nor anything built on it
    recall = await invoker.arecall("peanuts allergy", user="alice")
    assert not any("peanuts" in line for line in (*recall.notes, *(turn.text for turn in recall.turns)))
    with pytest.raises(InputError, match=f"entry {peanuts.entry_id} not found"):
        await invoker.aget(peanuts.entry_id, user="alice")
    assert all("peanuts" not in e.text for e in await invoker.aget_all(user="alice"))
    assert all("peanuts" not in hit.text for hit in await invoker.asearch("peanuts allergy", user="alice"))
    with pytest.raises(InputError, match="not found"):  # a second delete is not reported as done
        await invoker.adelete(peanuts.entry_id, user="alice")

    gone = await invoker.adelete_user("bob")
    assert gone["status"] == "deleted" and gone["entries"] == 1
    assert await _titles(invoker) == ["alice"]
    assert await invoker.asearch("bees", user="bob") == [] and await _titles(invoker) == ["alice"]
    with pytest.raises(InputError, match="unknown user 'bob'"):
        await invoker.adelete_user("bob")
    with pytest.raises(InputError, match="'default' is the invoker's own memory"):
        await invoker.adelete_user("default")
    assert len(await invoker.aget_all(user="alice")) == 4


async def test_update_writes_a_new_version_and_history_keeps_the_old(invoker) -> None:
    peanuts = next(e for e in await invoker.aget_all(user="alice") if "peanuts" in e.text)
    updated = await invoker.aupdate(peanuts.entry_id, "I am allergic to cashews, not peanuts.", user="alice")
    assert (updated.entry_id, updated.version, updated.text) == (
        peanuts.entry_id,
        2,
        "I am allergic to cashews, not peanuts.",
    )
    assert "cashews" in updated.summary  # written anew by the (extractive) model
    assert {k: updated.tags[k] for k in ("role", "thread", "msg")} == {
        "role": "user",
        "thread": "alice-chat",
        "msg": "1",
    }
    assert updated.time == peanuts.time  # the conversation time stays
    assert (await invoker.aget(peanuts.entry_id, user="alice")).text == updated.text
    found = await invoker.asearch("cashews", user="alice", by_meaning=False)
    assert [hit.entry_id for hit in found] == [peanuts.entry_id]
    assert all("severely" not in hit.text for hit in await invoker.asearch("severely allergic", user="alice"))
    history = await invoker.ahistory(peanuts.entry_id, user="alice")
    assert [(v.version, v.text) for v in history] == [(1, ALICE[0]), (2, "I am allergic to cashews, not peanuts.")]
    assert history[0].replaced_at is not None and history[-1].replaced_at is None
    for text in ("", "   ", None):
        with pytest.raises(InputError, match="the new text is empty"):
            await invoker.aupdate(peanuts.entry_id, text, user="alice")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="9001 characters; one entry holds at most 9000"):
        await invoker.aupdate(peanuts.entry_id, "x" * 9001, user="alice")
    assert len(await invoker.ahistory(peanuts.entry_id, user="alice")) == 2  # nothing written by a refused update


async def test_update_has_the_invokers_model_write_the_summary_and_tags() -> None:
    model = ScriptedChatModel(
        responses=[
            tool_call_message(
                "add_entry",
                {
                    "summary": "Alice is allergic to peanuts",
                    "tags": {"topic": "peanuts", "kind": "fact", "role": "robot"},
                },
            ),
            tool_call_message(
                "add_entry",
                {"summary": "Alice is allergic to cashews, not peanuts", "tags": {"topic": "allergy", "role": "robot"}},
            ),
        ]
    )
    async with in_process(model) as invoker:
        await invoker.astart_session("a", user="alice")
        await invoker.aprocess_conversation_message(
            "user", "I am allergic to peanuts.", "a", name="Alice", tags={"source": "import"}
        )
        entry = (await invoker.aget_all(user="alice")).entries[0]
        updated = await invoker.aupdate(entry.entry_id, "Correction: cashews, not peanuts.", user="alice")
    assert updated.summary == "Alice is allergic to cashews, not peanuts"
    # the model's tags anew (a code-owned name it writes is dropped), the code's and the caller's kept
    assert updated.tags == {
        "topic": "allergy",
        "kind": "fact",
        "source": "import",
        "role": "user",
        "thread": "a",
        "msg": "1",
        "speaker": "Alice",
    }
    assert updated.speaker == "Alice"
    prompt = model.calls[-1][-1].content
    assert "Correction: cashews, not peanuts." in prompt and "Alice" in prompt


def test_the_sync_twins_outside_an_event_loop() -> None:
    with in_process() as invoker:
        invoker.process_conversation_message("user", "My bike is a green Brompton.", "c1", user="carol")
        page = invoker.get_all(user="carol")
        bike = page.entries[0]
        assert invoker.get(bike.entry_id, user="carol").text == "My bike is a green Brompton."
        assert [hit.text for hit in invoker.search("bike", user="carol", by_meaning=False)] == [bike.text]
        assert "Brompton" in invoker.recall("which bike?", user="carol", by_meaning=False).as_prompt()
        assert invoker.update(bike.entry_id, "My bike is a red Brompton.", user="carol").version == 2
        assert [v.text for v in invoker.history(bike.entry_id, user="carol")][-1] == "My bike is a red Brompton."
        assert invoker.delete(bike.entry_id, user="carol")["status"] == "deleted"
        assert invoker.flush_all() == []
        manage = make_manage_memory_tool(invoker, user="carol")  # the tool's sync form runs on the invoker's loop
        note = manage.invoke({"content": "Carol rides to work."}).removeprefix("created memory ")
        assert invoker.get(note, user="carol").text == "Carol rides to work."
        assert invoker.delete_user("carol")["entries"] == 1


async def _whole_cycle(invoker) -> None:
    """Every call once, on whatever server ``invoker`` reaches: list, read, correct, history, forget, forget all."""
    await _tell(invoker, "dana", ALICE[:2])
    before = await _titles(invoker)
    assert (await invoker.aget_all(user="nobody")).entries == () and await _titles(invoker) == before
    lisbon = next(e for e in await invoker.aget_all(user="dana") if "Lisbon" in e.text)
    assert (await invoker.aget(lisbon.entry_id, user="dana")).text == lisbon.text
    updated = await invoker.aupdate(lisbon.entry_id, "My sister Ana moved to Porto.", user="dana")
    assert updated.version == 2 and "Porto" in updated.summary
    assert [v.version for v in await invoker.ahistory(lisbon.entry_id, user="dana")] == [1, 2]
    assert [h.entry_id for h in await invoker.asearch("Porto", user="dana", by_meaning=False)] == [lisbon.entry_id]
    assert (await invoker.adelete(lisbon.entry_id, user="dana"))["status"] == "deleted"
    assert [e.text for e in await invoker.aget_all(user="dana")] == [ALICE[0]]
    assert (await invoker.adelete_user("dana"))["entries"] == 1
    assert "dana" not in await _titles(invoker)


async def test_the_lifecycle_over_the_embedded_stdio_server(tmp_path: Path) -> None:
    async with build_agent("extractive", db=tmp_path / "memory.db") as invoker:  # server="embedded": stdio
        await _whole_cycle(invoker)


async def test_the_lifecycle_on_each_backend(memory_db: str) -> None:
    async with build_agent("extractive", server="in-process", db=memory_db) as invoker:
        await _whole_cycle(invoker)


async def test_over_http_a_token_never_reads_or_deletes_another_vaults_entries() -> None:
    from mycelian_agent.memory_server import create_server
    from mycelian_agent.memory_server.testing import serve_http

    acme, other, admin = "acme-token-0123456789", "other-token-0123456789", "admin-token-0123456789"
    tokens = {acme: frozenset({"acme"}), other: frozenset({"other"})}
    async with serve_http(create_server(":memory:"), token=admin, tokens=tokens) as url:
        async with build_agent(server=url, token=acme, vault="acme") as invoker:
            await _tell(invoker, "alice", ["The launch code is tangerine."])
            secret = (await invoker.aget_all(user="alice")).entries[0]
        async with build_agent(server=url, token=other, vault="other") as intruder:
            await _tell(intruder, "alice", ["My locker code is plum."])  # the same user name: another memory
            for call in (intruder.aget, intruder.ahistory, intruder.adelete):
                with pytest.raises(InputError, match=f"entry {secret.entry_id} not found"):
                    await call(secret.entry_id, user="alice")
            assert [e.text for e in await intruder.aget_all(user="alice")] == ["My locker code is plum."]
            await _whole_cycle(intruder)
        async with build_agent(server=url, token=acme, vault="acme") as invoker:
            assert await invoker.aget(secret.entry_id, user="alice") == secret


async def test_a_thread_of_a_deleted_user_is_refused_by_name_and_creates_nothing(tmp_path: Path) -> None:
    """After ``adelete_user``, a thread bound to that user gets an InputError naming the thread and the user (not the
    server's "memory not found"), with or without ``user=``, and no new memory is made for the refused write; a new
    thread of that user starts a new memory."""
    async with build_agent(server="in-process", db=tmp_path / "m.db") as invoker:
        await invoker.astart_session("t1", user="alice")
        await invoker.aprocess_conversation_message("user", "I like tea.", "t1")
        await invoker.adelete_user("alice")
        for user in (None, "alice"):
            with pytest.raises(InputError, match=r"thread 't1' belongs to user 'alice', whose memory was deleted"):
                await invoker.aprocess_conversation_message("user", "Still there?", "t1", user=user)
        with pytest.raises(InputError, match=r"whose memory was deleted"):
            await invoker.aend_session("t1")
        assert await invoker.reader.users.find("alice") is None  # the refused writes made no memory
        await invoker.aprocess_conversation_message("user", "I like coffee now.", "t2", user="alice")
        assert [hit.text for hit in await invoker.asearch("coffee", user="alice")] == ["I like coffee now."]
