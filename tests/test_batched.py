"""Batched mode: messages accepted at once, written N at a time by one model call, each exactly once.

The memory server runs in-process on a real SQLite file; checkpointers are real (in-memory and SQLite). Only the
model is faked (ScriptedChatModel) or is the extractive model. The crash tests SIGKILL a replay process (a real
SQLite memory file and SQLite checkpoint file) and resume it with the ``mycelian-agent replay --batch`` command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from mycelian_agent import AgentSettings, ConfigError, ControlState, InputError, build_agent
from mycelian_agent.agent.control import PLANS, Step
from mycelian_agent.cli import main
from mycelian_agent.testing import ScriptedChatModel, text_message, tool_call_message

in_process = partial(build_agent, server="in-process")


def batch_reply(*items: tuple[int, str], context: str | None = None) -> AIMessage:
    """An add_entries (or, with ``context``, add_entries_and_context) call for ``(item, summary)`` pairs."""
    args: dict[str, Any] = {
        "entries": [{"item": n, "summary": summary, "tags": {"topic": f"t{n}"}} for n, summary in items]
    }
    if context is not None:
        args["context"] = context
    return tool_call_message("add_entries_and_context" if context is not None else "add_entries", args, usage=(400, 60))


async def entries(invoker) -> list[dict[str, Any]]:
    agent = invoker.agent
    if agent.memory_id is None:  # nothing written yet: the invoker's own memory does not exist
        return []
    result = await invoker.connection.call_json(
        "list_entries", {"vault_id": agent.vault_id, "memory_id": agent.memory_id, "limit": 50, "after": ""}
    )
    return result["entries"]


async def listed(invoker) -> list[dict[str, Any]]:
    agent = invoker.agent
    if agent.memory_id is None:  # nothing written yet: the invoker's own memory does not exist
        return []
    result = await invoker.connection.call_json(
        "list_entries", {"vault_id": agent.vault_id, "memory_id": agent.memory_id, "limit": 50}
    )
    return sorted(result["entries"], key=lambda e: int(e["tags"]["msg"]))


async def search(invoker, query: str) -> list[dict[str, Any]]:
    if invoker.agent.memory_id is None:  # nothing written yet: the invoker's own memory does not exist
        return []
    result = await invoker.connection.call_json(
        "search_memories",
        {"memory_id": invoker.agent.memory_id, "query": query, "top_ke": 10, "include_raw_entries": True},
    )
    return result["entries"]


def task_text(prompt) -> str:
    return str(prompt[-1].content)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "memory.db"


async def test_messages_are_accepted_without_a_model_call_then_written_by_one(db):
    model = ScriptedChatModel(
        responses=[
            batch_reply(
                (1, "Ana adopted a dog named Rex."),
                (2, "The assistant suggested puppy classes."),
                (3, "Ana booked puppy classes for Rex."),
            )
        ]
    )
    async with in_process(model, db=db, batch_size=3, flush_every=100) as invoker:
        first = await invoker.aprocess_conversation_message(
            "user", "I adopted a dog, Rex!", "t1", "2024-03-01T10:00:00Z", name="Ana"
        )
        second = await invoker.aprocess_conversation_message("assistant", "Try puppy classes.", "t1")
        assert (first.control, second.control) == (ControlState.ACCEPT_MESSAGE, ControlState.ACCEPT_MESSAGE)
        assert (first.accepted, first.written, first.pending) == ((1,), (), 1)
        assert (second.accepted, second.written, second.pending) == ((2,), (), 2)
        assert first.llm_calls == second.llm_calls == 0 and model.calls == []
        assert first.tool_calls == () and await listed(invoker) == []
        assert await search(invoker, "Rex dog") == []  # accepted is not searchable: nothing is written yet
        status = await invoker.athread_status("t1")
        assert (status.messages, status.pending, status.accepted) == (0, 2, 2)

        third = await invoker.aprocess_conversation_message("user", "Booked them for Rex.", "t1", tags={"turn": "3"})
        assert third.control is ControlState.ACCEPT_MESSAGE_AND_WRITE
        assert (third.accepted, third.written, third.pending) == ((3,), (1, 2, 3), 0)
        assert third.llm_calls == 1 and third.prompt_tokens == 400
        assert third.tool_calls == ("add_entries",) and len(third.entry_ids) == 3  # one transaction on the server
        assert model.bound_tool_choice == "add_entries"
        text = task_text(model.calls[0])
        assert all(
            part in text
            for part in (
                'item="1"',
                'item="2"',
                'item="3"',
                'name="Ana"',
                "I adopted a dog, Rex!",
                "Booked them for Rex.",
            )
        )
        stored = await listed(invoker)
        assert [e["rawEntry"] for e in stored] == [
            "I adopted a dog, Rex!",
            "Try puppy classes.",
            "Booked them for Rex.",
        ]
        assert [e["summary"] for e in stored] == [
            "Ana adopted a dog named Rex.",
            "The assistant suggested puppy classes.",
            "Ana booked puppy classes for Rex.",
        ]
        assert [e["tags"]["msg"] for e in stored] == ["1", "2", "3"]
        assert stored[2]["tags"]["turn"] == "3" and stored[0]["tags"]["topic"] == "t1"
        # code-owned times: the second and third messages inherit the first one's time
        assert {e["conversationTime"] for e in stored} == {"2024-03-01T10:00:00.000000Z"}
        assert [e["entryId"] for e in await search(invoker, "Rex puppy classes")]  # written: searchable now
        status = await invoker.athread_status("t1")
        assert (status.messages, status.pending, status.progress.entries, status.usage.llm_calls) == (3, 0, 3, 1)


async def test_one_bad_item_is_asked_for_again_alone_and_the_rest_is_kept(db):
    model = ScriptedChatModel(
        responses=[
            tool_call_message(
                "add_entries",
                {
                    "entries": [
                        {"item": 1, "summary": "Ana likes tea.", "tags": {}},
                        {"item": 2, "summary": "", "tags": {}},  # unusable: empty summary
                        {"item": 3, "summary": "Ana lives in Lisbon.", "tags": {}},
                        {"item": 9, "summary": "not a message of the batch", "tags": {}},
                    ]
                },
            ),
            batch_reply((2, "Ana drinks coffee in the morning.")),
        ]
    )
    async with in_process(model, db=db, batch_size=3) as invoker:
        for text in ("I like tea.", "Coffee in the morning though.", "I live in Lisbon."):
            result = await invoker.aprocess_conversation_message("user", text, "t1", name="Ana")
        assert result.llm_calls == 2 and result.corrections == 1 and result.fallbacks == 0
        retry = task_text(model.calls[1])
        assert "Coffee in the morning though." in retry  # only the bad item is asked for again
        assert "I like tea." not in retry.split("Messages to record")[1] and "I live in Lisbon." not in retry
        assert "the summary was missing or empty" in retry and "item 9 is not a message of this batch" in retry
        assert any("summary was missing" in e for e in result.errors)
        assert [e["summary"] for e in await listed(invoker)] == [
            "Ana likes tea.",
            "Ana drinks coffee in the morning.",
            "Ana lives in Lisbon.",
        ]


async def test_an_item_the_model_never_writes_falls_back_to_the_extractive_model_alone(db):
    only_first = tool_call_message("add_entries", {"entries": [{"item": 1, "summary": "Ana likes tea.", "tags": {}}]})
    model = ScriptedChatModel(responses=[only_first, text_message("I cannot."), text_message("No.")])
    settings = AgentSettings(max_corrections=2)
    async with in_process(model, db=db, batch_size=2, settings=settings) as invoker:
        await invoker.aprocess_conversation_message("user", "I like tea.", "t1", name="Ana")
        result = await invoker.aprocess_conversation_message(
            "user", "I moved to Lisbon last week.", "t1", "2024-05-10T09:00:00Z", name="Ana"
        )
        assert result.llm_calls == 3 and result.corrections == 2 and result.fallbacks == 1
        stored = await listed(invoker)
        assert stored[0]["summary"] == "Ana likes tea."  # the model's item is kept
        assert "Ana" in stored[1]["summary"] and "Lisbon" in stored[1]["summary"]  # the extractive model's
        assert [e["rawEntry"] for e in stored] == ["I like tea.", "I moved to Lisbon last week."]


async def test_a_flush_that_coincides_with_a_write_is_one_model_call(db):
    model = ScriptedChatModel(
        responses=[
            batch_reply((1, "s1"), (2, "s2"), (3, "s3"), (4, "s4"), context="## Facts\n- Four messages."),
            # the context part unusable: the entries are kept and put_context is asked for on its own
            batch_reply((1, "s5"), (2, "s6"), (3, "s7"), (4, "s8"), context=""),
            tool_call_message("put_context", {"content": "## Facts\n- Eight messages."}),
        ]
    )
    async with in_process(model, db=db, batch_size=8, flush_every=4) as invoker:
        for i in range(1, 5):
            result = await invoker.aprocess_conversation_message("user", f"message {i}", "t1")
        assert result.control is ControlState.ACCEPT_MESSAGE_AND_FLUSH
        assert result.llm_calls == 1 and result.context_written
        assert result.tool_calls == ("add_entries", "await_consistency", "put_context")
        assert model.bound_tool_choice == "add_entries_and_context"
        agent = invoker.agent
        ids = {"vault_id": agent.vault_id, "memory_id": agent.memory_id}
        assert await invoker.connection.call("get_context", ids) == "## Facts\n- Four messages."
        for i in range(5, 9):
            result = await invoker.aprocess_conversation_message("user", f"message {i}", "t1")
        assert result.llm_calls == 2 and result.context_written and len(result.entry_ids) == 4
        assert await invoker.connection.call("get_context", ids) == "## Facts\n- Eight messages."
        assert [e["summary"] for e in await listed(invoker)] == [f"s{i}" for i in range(1, 9)]


async def test_session_end_and_aflush_write_the_pending_messages(db):
    model = ScriptedChatModel(
        responses=[
            batch_reply((1, "first"), (2, "second")),
            batch_reply((1, "third"), context="## Facts\n- Three messages."),
        ]
    )
    async with in_process(model, db=db, batch_size=8, flush_every=100) as invoker:
        await invoker.astart_session("t1", "2024-01-01T09:00:00Z")
        await invoker.aprocess_conversation_message("user", "one", "t1")
        await invoker.aprocess_conversation_message("assistant", "two", "t1")
        flushed = await invoker.aflush("t1")
        assert flushed.control is ControlState.WRITE_PENDING
        assert (flushed.written, flushed.pending, flushed.llm_calls, flushed.context_written) == ((1, 2), 0, 1, False)
        nothing = await invoker.aflush("t1")
        assert (nothing.written, nothing.llm_calls, nothing.tool_calls) == ((), 0, ())
        await invoker.aprocess_conversation_message("user", "three", "t1")
        ended = await invoker.aend_session("t1")
        assert ended.written == (3,) and ended.llm_calls == 1 and ended.context_written
        assert [e["summary"] for e in await listed(invoker)] == ["first", "second", "third"]
        assert (await invoker.athread_status("t1")).progress.sessions_ended == 1


def test_sync_flush_and_pending_written_when_the_context_manager_exits(db):
    with build_agent("extractive", server="in-process", db=db, batch_size=8) as invoker:
        for i in range(3):
            invoker.process_conversation_message("user", f"I planted {i + 1} tomato plants.", "t1")
        assert invoker.thread_status("t1").pending == 3
        assert invoker.flush("t1").written == (1, 2, 3)
        invoker.process_conversation_message("user", "And one basil plant.", "t1")
        taken = invoker.process_conversation_messages("t1", [{"role": "user", "content": "Two peppers too."}])
        assert [r.accepted for r in taken] == [(5,)]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        raws = [row[0] for row in conn.execute("SELECT raw_entry FROM entries ORDER BY rowid")]
    assert raws == [f"I planted {i + 1} tomato plants." for i in range(3)] + [
        "And one basil plant.",
        "Two peppers too.",
    ]


async def test_max_delay_writes_a_quiet_threads_pending_messages(db):
    async with in_process("extractive", db=db, batch_size=8, max_delay_s=0.05) as invoker:
        accepted = await invoker.aprocess_conversation_message("user", "My sister Mia lives in Oslo.", "t1")
        assert accepted.pending == 1
        for _ in range(400):  # the timer fires 50 ms after the accept; allow a loaded machine 20 s
            if (await invoker.athread_status("t1")).pending == 0:
                break
            await asyncio.sleep(0.05)
        status = await invoker.athread_status("t1")
        assert (status.pending, status.messages) == (0, 1) and invoker.background_errors == []
        assert [e["rawEntry"] for e in await search(invoker, "Mia Oslo")] == ["My sister Mia lives in Oslo."]


async def test_extractive_summaries_are_the_same_batched_and_unbatched(tmp_path):
    texts = [
        ("user", "I went hiking near Denver yesterday with my brother Tom."),
        ("assistant", "Sounds great!"),
        ("user", "Yes"),
        ("assistant", "Bring layers next time; mornings are cold."),
        ("user", "Will do."),
    ]
    summaries = {}
    for batch in (1, 2):
        async with in_process("extractive", db=tmp_path / f"m{batch}.db", batch_size=batch, flush_every=3) as invoker:
            await invoker.astart_session("t", "2024-06-02T10:00:00Z")
            for role, text in texts:
                await invoker.aprocess_conversation_message(role, text, "t", name="Sam" if role == "user" else None)
            await invoker.aend_session("t")
            stored = await listed(invoker)
            summaries[batch] = ([e["summary"] for e in stored], (await invoker.athread_status("t")).context)
    assert summaries[1] == summaries[2]


async def test_a_thread_leaving_batched_mode_writes_its_pending_messages_first(db):
    from mycelian_agent.agent.invoker import MycelianAgentInvoker

    async with in_process("extractive", db=db, batch_size=8) as batched:
        await batched.aprocess_conversation_message("user", "I have a cat named Miso.", "t1")
        await batched.aprocess_conversation_message("user", "Miso is three years old.", "t1")
        single = MycelianAgentInvoker(batched.agent, batch_size=1)
        result = await single.aprocess_conversation_message("user", "She likes tuna.", "t1")
        assert result.control is ControlState.PROCESS_MESSAGE
        assert (result.accepted, result.written, result.pending, result.message_index) == ((3,), (1, 2, 3), 0, 3)
        assert result.llm_calls == 2  # one batch call for the pending two, one call for this message
        stored = await listed(batched)
        assert [(e["tags"]["msg"], e["rawEntry"]) for e in stored] == [
            ("1", "I have a cat named Miso."),
            ("2", "Miso is three years old."),
            ("3", "She likes tuna."),
        ]


async def test_a_batch_written_as_json_text_is_read_item_by_item(db):
    text = (
        '{"name": "add_entries", "arguments": {"entries": [{"item": "1", "summary": "Lee plays chess.", '
        '"tags": ["chess"]}, {"item": 2, "summary": "Lee plays on Sundays.", "tags": {}}]}}'
    )
    model = ScriptedChatModel(responses=[text_message(text)])
    async with in_process(model, db=db, batch_size=2, tool_choice_mode="auto") as invoker:
        await invoker.aprocess_conversation_message("user", "I play chess.", "t1", name="Lee")
        result = await invoker.aprocess_conversation_message("user", "Every Sunday.", "t1", name="Lee")
        assert result.llm_calls == 1 and result.corrections == 0 and result.fallbacks == 0
        assert any("call read from the reply text" in note for note in result.notes)
        stored = await listed(invoker)
        assert [e["summary"] for e in stored] == ["Lee plays chess.", "Lee plays on Sundays."]
        assert stored[0]["tags"]["topic"] == "chess"


def stored_keys(db: Path) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [
            tuple(row) for row in conn.execute("SELECT raw_entry, summary, idempotency_key FROM entries ORDER BY rowid")
        ]


CHAT = [
    {
        "role": "user" if i % 2 == 0 else "assistant",
        "content": f"Note {i}: the heron nests by pond {i % 3}.",
        **({"name": "Ivo"} if i % 2 == 0 else {}),
        **({"tags": {"turn": str(i)}} if i % 3 == 0 else {}),
    }
    for i in range(11)
]


async def test_many_messages_in_one_call_store_what_one_call_per_message_stores(tmp_path):
    stored = {}
    for mode in ("one by one", "bulk"):
        db = tmp_path / f"{mode}.db"
        async with in_process("extractive", db=db, batch_size=4, flush_every=6) as invoker:
            await invoker.astart_session("t1", "2024-06-02T10:00:00Z")
            if mode == "bulk":
                seen = []
                results = await invoker.aprocess_conversation_messages("t1", CHAT, on_result=seen.append)
                assert seen == results
                # cut where one call per message would write: 4 pending, the flush at 6, 4 pending again; 11 pending
                assert [r.accepted for r in results] == [(1, 2, 3, 4), (5, 6), (7, 8, 9, 10), (11,)]
                assert [r.control for r in results] == [
                    ControlState.ACCEPT_MESSAGE_AND_WRITE,
                    ControlState.ACCEPT_MESSAGE_AND_FLUSH,
                    ControlState.ACCEPT_MESSAGE_AND_WRITE,
                    ControlState.ACCEPT_MESSAGE,
                ]
                assert [r.written for r in results] == [(1, 2, 3, 4), (5, 6), (7, 8, 9, 10), ()]
                assert [r.pending for r in results] == [0, 0, 0, 1] and results[1].context_written
                assert results[0].tool_calls == ("add_entries",) and results[3].tool_calls == ()
                assert sum(r.llm_calls for r in results) == 3
            else:
                for m in CHAT:
                    await invoker.aprocess_conversation_message(
                        m["role"], m["content"], "t1", tags=m.get("tags"), name=m.get("name")
                    )
            status = await invoker.athread_status("t1")
            assert (status.accepted, status.pending, status.messages) == (11, 1, 10)
            await invoker.aend_session("t1")
            stored[mode] = (stored_keys(db), (await invoker.athread_status("t1")).context)
            entries = await listed(invoker)
            assert entries[0]["tags"]["turn"] == "0" and entries[0]["conversationTime"].startswith("2024-06-02T10:00")
    assert stored["bulk"] == stored["one by one"]  # same entries, summaries, idempotency keys and context
    assert len(stored["bulk"][0]) == 11


async def test_a_bad_message_in_the_list_is_named_and_nothing_is_accepted(db):
    async with in_process("extractive", db=db, batch_size=4) as invoker:
        await invoker.aprocess_conversation_messages("t1", CHAT[:2])
        before = await invoker.athread_status("t1")
        bad_lists = [
            ([*CHAT[:3], {"role": "robot", "content": "beep"}], r"messages\[3\]: unknown role 'robot'"),
            ([CHAT[0], {"role": "user", "content": "  "}], r"messages\[1\]: message content is empty"),
            ([{"role": "user", "content": "hi", "time": "noon"}], r"messages\[0\]: unknown key\(s\) 'time'"),
            ([CHAT[0], {"role": "user", "content": "hi", "conversation_time": "someday"}], r"messages\[1\]: .*someday"),
            ([{"role": "user", "content": "hi", "name": "A\nB"}], r"messages\[0\]: invalid name"),
            ([{"role": "user", "content": "hi", "tags": ["x"]}], r"messages\[0\]: tags must be a mapping"),
            ([], "messages is empty"),
        ]
        for messages, error in bad_lists:
            with pytest.raises(InputError, match=error):
                await invoker.aprocess_conversation_messages("t1", messages)
        with pytest.raises(InputError, match="nothing was accepted"):
            await invoker.agent.aaccept_messages("t1", [CHAT[0], {"role": "user"}])
        with pytest.raises(InputError, match="an accepting control .* got WRITE_PENDING"):
            await invoker.agent.aaccept_messages("t1", CHAT[:1], control=ControlState.WRITE_PENDING)
        after = await invoker.athread_status("t1")
        assert (after.accepted, after.pending, after.progress) == (before.accepted, before.pending, before.progress)


async def test_without_the_servers_add_entries_the_batch_is_one_add_entry_per_entry(db):
    """A remote Mycelian server that lacks add_entries: the agent sees its tool list and falls back."""
    from mycelian_agent.agent.graph import MycelianMemoryAgent
    from mycelian_agent.agent.invoker import MycelianAgentInvoker

    async with in_process("extractive", db=db, batch_size=4, flush_every=100) as invoker:
        agent = invoker.agent
        tools = [t for t in invoker.connection.tools if t.name != "add_entries"]
        memory_id = await invoker.reader.default_memory(create=True)
        upstream = MycelianMemoryAgent(
            agent.model,
            tools,
            vault_id=agent.vault_id,
            memory_id=memory_id,
            checkpointer=agent.checkpointer,
            settings=agent.settings,
        )
        fallback = MycelianAgentInvoker(upstream, flush_every=100)
        results = await fallback.aprocess_conversation_messages("t1", CHAT[:6])
        assert [r.accepted for r in results] == [(1, 2, 3, 4), (5, 6)]
        assert results[0].tool_calls == ("add_entry",) * 4 and len(results[0].entry_ids) == 4
        assert (await fallback.aflush("t1")).tool_calls == ("add_entry",) * 2
        assert [raw for raw, _, _ in stored_keys(db)] == [m["content"] for m in CHAT[:6]]
        # A re-run of the thread without its checkpoint, through add_entries: the same keys, nothing stored twice.
        fresh = MycelianMemoryAgent(
            agent.model,
            invoker.connection.tools,
            vault_id=agent.vault_id,
            memory_id=memory_id,
            checkpointer=InMemorySaver(),
            settings=agent.settings,
        )
        rerun = MycelianAgentInvoker(fresh, flush_every=100)
        again = await rerun.aprocess_conversation_messages("t1", CHAT[:6])
        again.append(await rerun.aflush("t1"))
        assert [r.tool_calls for r in again] == [("add_entries",), (), ("add_entries",)]
        assert sum(r.deduplicated for r in again) == 6 and len(stored_keys(db)) == 6


def test_batch_settings_are_checked():
    with pytest.raises(ConfigError, match="batch_size must be a positive integer, got 0"):
        AgentSettings(batch_size=0)
    with pytest.raises(ConfigError, match="max_delay_s must be a positive number"):
        AgentSettings(max_delay_s=-1)


def test_plans_write_pending_messages_before_anything_else():
    for control in ControlState:
        plan = PLANS[control]
        if Step.ADD_ENTRIES in plan and Step.ACCEPT not in plan:
            assert plan[0] is Step.ADD_ENTRIES, control
    assert not ControlState.ACCEPT_MESSAGE.flushes and ControlState.ACCEPT_MESSAGE.stores_message


# ------------------------------------------------------------------------------------------- crash safety

REPLAYER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from mycelian_agent import build_agent
    from mycelian_agent.conversations.formats import load_conversations
    from mycelian_agent.conversations.replay import replay_conversation

    async def main(data, db, state, kill_at, where, batch, flush, bulk):
        conversation = load_conversations(data)[0]
        async with build_agent("extractive", server="in-process", db=db, memory="kill-test",
                               checkpointer="sqlite:" + state, flush_every=flush, batch_size=batch) as invoker:
            if where == "after-write":
                # Die after the server stored a batch and before that invocation's checkpoint is written.
                saver = invoker.agent.checkpointer
                put = saver.aput

                async def dying_put(config, checkpoint, metadata, versions):
                    if checkpoint["channel_values"].get("control") == "accept_message_and_write" and (
                            checkpoint["channel_values"]["progress"]["messages"] >= kill_at):
                        os.kill(os.getpid(), signal.SIGKILL)
                    return await put(config, checkpoint, metadata, versions)

                saver.aput = dying_put

            def on_message(result):
                # Die between accepting and writing: accepted messages are only in the checkpoint.
                if where == "accepted" and result.message_index >= kill_at and result.pending:
                    os.kill(os.getpid(), signal.SIGKILL)

            await replay_conversation(invoker, conversation, thread_id="kill-test", on_message=on_message,
                                      bulk=bulk == "bulk")

    asyncio.run(main(*sys.argv[1:3], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), int(sys.argv[7]),
                     sys.argv[8]))
""")


def raw_entries(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [row[0] for row in conn.execute("SELECT raw_entry FROM entries ORDER BY rowid")]


@pytest.mark.parametrize(
    "where, kill_at, batch, flush, bulk",
    [
        ("accepted", 23, 4, 7, "single"),  # one accept invocation per message
        ("after-write", 12, 4, 7, "single"),
        # bulk: a session's messages in one call; messages 11-15 accepted by one invocation, then the kill
        ("accepted", 15, 8, 10, "bulk"),
        (
            "after-write",
            8,
            8,
            10,
            "bulk",
        ),  # messages 1-8 accepted and stored by one invocation, killed before its checkpoint
    ],
)
def test_a_replay_killed_mid_batch_resumes_and_stores_every_message_exactly_once(
    tmp_path, capsys, monkeypatch, where, kill_at, batch, flush, bulk
):
    sessions = [
        {
            "session_id": f"s{s}",
            "conversation_time": f"2024-0{s + 1}-01T10:00:00Z",
            "messages": [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"Session {s} message {i}: note number {s * 100 + i} about topic {i % 5}.",
                }
                for i in range(15)
            ],
        }
        for s in range(3)
    ]
    data = tmp_path / "conversation.json"
    data.write_text(json.dumps({"conversation_id": "kill-test", "sessions": sessions}))
    db, state = tmp_path / "memory.db", tmp_path / "state.db"
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            REPLAYER,
            str(data),
            str(db),
            str(state),
            str(kill_at),
            where,
            str(batch),
            str(flush),
            bulk,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    expected = [m["content"] for s in sessions for m in s["messages"]]
    before = raw_entries(db)
    assert 0 < len(before) < len(expected) and len(set(before)) == len(before)
    if where == "accepted":
        assert len(before) < kill_at  # accepted messages were not all written at the kill
    if bulk == "bulk":
        assert len(before) == {"accepted": 10, "after-write": 8}[where]

    monkeypatch.setenv("COLUMNS", "1000")
    capsys.readouterr()
    try:  # the user runs the replay again, batched (a session's messages in one call), with the same files
        main(
            [
                "replay",
                str(data),
                "--db",
                str(db),
                "--state",
                str(state),
                "--server",
                "in-process",
                "--memory",
                "kill-test",
                "--flush-every",
                str(flush),
                "--batch",
                str(batch),
                "--json",
            ]
        )
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, None), out.err
    summary = json.loads(out.out)
    after = raw_entries(db)
    assert sorted(after) == sorted(expected)  # every message exactly once
    assert summary["skipped"] + summary["messages"] == len(expected)
    if where == "accepted":
        assert summary["skipped"] == kill_at and summary["deduplicated"] == 0  # accepted ones came from the checkpoint
    else:
        # The killed invocation's batch was stored but not checkpointed: re-sent, answered from idempotency keys.
        assert summary["deduplicated"] >= 1
    if bulk == "bulk" and where == "after-write":
        assert summary["deduplicated"] == 8
