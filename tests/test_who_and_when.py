"""Entries that say who and when (issue 10, item 1).

Speaker names travel from every input format and API into the Turn, the prompts, the extractive model's task
payload and the stored summary; relative dates are resolved against the message's time; a message without a time
takes its session's time.
"""

from __future__ import annotations

from datetime import date
from functools import partial
from typing import Any

import pytest
from langchain_core.messages import ChatMessage

from mycelian_agent import ControlState, InputError, build_agent
from mycelian_agent.conversations.formats import parse_conversation_data
from mycelian_agent.conversations.replay import replay_conversation
from mycelian_agent.dates import resolve_relative_dates
from mycelian_agent.models.extractive import add_entry_args, summarize_message, third_person
from mycelian_agent.models.task import TASK_KEY
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

in_process = partial(build_agent, server="in-process")
T = "2023-05-08T13:56:00Z"  # a Monday


async def entries(invoker) -> list[dict[str, Any]]:
    agent = invoker.agent
    if agent.memory_id is None:  # nothing written yet: the invoker's own memory does not exist
        return []
    result = await invoker.connection.call_json(
        "list_entries",
        {"vault_id": agent.vault_id, "memory_id": agent.memory_id, "after": "2000-01-01T00:00:00Z", "limit": 50},
    )
    return result["entries"]  # oldest first (with after)


def entry_reply(summary: str = "A summary.") -> Any:
    return tool_call_message("add_entry", {"summary": summary, "tags": {"topic": "x"}})


@pytest.fixture
def db(tmp_path):
    return tmp_path / "memory.db"


# -- relative dates -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went yesterday.", "I went yesterday (2023-05-07)."),
        ("We leave tomorrow morning.", "We leave tomorrow morning (2023-05-09)."),
        ("the day before yesterday", "the day before yesterday (2023-05-06)"),
        ("the day after tomorrow", "the day after tomorrow (2023-05-10)"),
        ("Last night was fun.", "Last night (2023-05-07) was fun."),
        ("two days ago", "two days ago (2023-05-06)"),
        ("3 days ago", "3 days ago (2023-05-05)"),
        ("a week ago", "a week ago (week of 2023-05-01)"),
        ("a couple of months ago", "a couple of months ago (March 2023)"),
        ("ten years ago", "ten years ago (2013)"),
        ("in 3 weeks", "in 3 weeks (week of 2023-05-29)"),
        ("in two days", "in two days (2023-05-10)"),
        ("a month from now", "a month from now (June 2023)"),
        ("last week", "last week (week of 2023-05-01)"),
        ("this week", "this week (week of 2023-05-08)"),
        ("next week", "next week (week of 2023-05-15)"),
        ("last month", "last month (April 2023)"),
        ("next month", "next month (June 2023)"),
        ("Last year", "Last year (2022)"),
        ("next year", "next year (2024)"),
        ("last Friday", "last Friday (2023-05-05)"),
        ("this past Saturday", "this past Saturday (2023-05-06)"),
        ("next Friday", "next Friday (2023-05-12)"),
        ("this Friday", "this Friday (2023-05-12)"),
        ("last Monday", "last Monday (2023-05-01)"),  # the day itself is a Monday: the one before
        ("this weekend", "this weekend (weekend of 2023-05-13)"),
        ("last weekend", "last weekend (weekend of 2023-05-06)"),
        ("last summer", "last summer (summer 2022)"),
        ("next summer", "next summer (summer 2023)"),
        ("last winter", "last winter (winter 2022-2023)"),
    ],
)
def test_relative_dates_resolved_beside_the_words(text: str, expected: str) -> None:
    assert resolve_relative_dates(text, T) == expected


@pytest.mark.parametrize(
    "text",
    [
        "a few days ago",
        "recently",
        "the other day",
        "I run twice in a week",
        "yesterday (2023-05-07) again",
        "next to the lake",
        "last time we met",
        "in a while",
        "the last day of the trip",
    ],
)
def test_vague_frequent_or_resolved_expressions_are_left_alone(text: str) -> None:
    assert resolve_relative_dates(text, T) == text


def test_relative_dates_need_a_time_and_accept_every_date_form() -> None:
    assert resolve_relative_dates("yesterday", None) == "yesterday"
    assert resolve_relative_dates("yesterday", "not a date") == "yesterday"
    assert resolve_relative_dates("yesterday", "1:56 pm on 8 May, 2023") == "yesterday (2023-05-07)"
    assert resolve_relative_dates("yesterday", "2023/05/08 (Mon) 13:56") == "yesterday (2023-05-07)"
    assert resolve_relative_dates("yesterday", date(2023, 5, 8)) == "yesterday (2023-05-07)"
    # month and year edges
    assert resolve_relative_dates("next month", "2023-12-31T00:00:00Z") == "next month (January 2024)"
    assert resolve_relative_dates("yesterday", "2024-03-01T00:00:00Z") == "yesterday (2024-02-29)"
    # seen from a Sunday and a Saturday
    assert resolve_relative_dates("this weekend", "2023-05-14T10:00:00Z") == "this weekend (weekend of 2023-05-13)"
    assert resolve_relative_dates("last weekend", "2023-05-13T10:00:00Z") == "last weekend (weekend of 2023-05-06)"


# -- the extractive summary -------------------------------------------------------------------------------------------


def test_summary_names_the_speaker_and_resolves_dates() -> None:
    summary = summarize_message("I researched adoption agencies yesterday.", conversation_time=T, name="Caroline")
    assert summary == "On 2023-05-08, Caroline researched adoption agencies yesterday (2023-05-07)."
    said = summarize_message(
        "Wow! I painted a lake sunrise last week.", role="assistant", conversation_time=T, name="Melanie"
    )
    assert "Melanie" in said and "the assistant" not in said and "last week (week of 2023-05-01)" in said
    # without a name: the role, as before
    assert summarize_message("I adopted a dog.").startswith("The user adopted")
    assert third_person("I love my dog.", "Caroline") == "Caroline loves Caroline's dog."


def test_summary_of_a_short_reply_names_who_it_answers() -> None:
    recent = [{"role": "user", "name": "Caroline", "content": "Do you want to join the support group?"}]
    summary = summarize_message("Yes, please!", role="assistant", name="Melanie", recent=recent)
    assert summary.startswith("Melanie said: Yes, please!") and "(replying to Caroline:" in summary


def test_extractive_model_reads_the_names_of_the_task() -> None:
    task = {
        "operation": "add_entry",
        "context": "",
        "message": {"role": "user", "content": "I went hiking yesterday.", "conversation_time": T, "name": "Caroline"},
        "recent": [],
    }
    assert add_entry_args(task)["summary"] == "On 2023-05-08, Caroline went hiking yesterday (2023-05-07)."


# -- names through the input formats ------------------------------------------------------------------------------


def test_generic_formats_take_an_optional_name() -> None:
    [conv] = parse_conversation_data(
        {"messages": [{"role": "user", "content": "hi", "name": "Caroline"}, {"role": "assistant", "content": "hello"}]}
    )
    assert [m.name for m in conv.sessions[0].messages] == ["Caroline", None]
    [conv] = parse_conversation_data(
        {
            "sessions": [
                {"session_id": "s1", "messages": [{"role": "assistant", "content": "hello", "name": " Melanie "}]}
            ]
        }
    )
    assert conv.sessions[0].messages[0].name == "Melanie"
    assert conv.sessions[0].messages[0].role == "assistant"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 101, "at most 100 characters"),
        ("Caro\nline", "one line"),
        (7, "must be a string"),
    ],
)
def test_generic_formats_refuse_bad_names(name: Any, problem: str) -> None:
    with pytest.raises(InputError, match=r"messages\[0\]\.name: .*" + problem):
        parse_conversation_data({"messages": [{"role": "user", "content": "hi", "name": name}]})


def test_locomo_messages_carry_their_speakers_name() -> None:
    sample = {
        "sample_id": "s",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hi!"},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "Hey!"},
            ],
        },
    }
    [conv] = parse_conversation_data(sample)
    assert [(m.role, m.name) for m in conv.sessions[0].messages] == [("user", "Caroline"), ("assistant", "Melanie")]


# -- names through the API into prompts and stored entries -------------------------------------------------------------


async def test_name_reaches_prompts_payload_and_stored_summary(db) -> None:
    model = ScriptedChatModel(responses=[entry_reply(), entry_reply()])
    async with in_process(model, db=db) as invoker:
        await invoker.astart_session("t1", T)
        await invoker.aprocess_conversation_message("user", "I adopted a dog.", "t1", T, name="Caroline")
        await invoker.aprocess_conversation_message("assistant", "Lovely!", "t1", T, name="Melanie")
        task = model.calls[-1][-1]
        assert '<message role="assistant" name="Melanie"' in task.content
        assert f"[user Caroline @ {T}] I adopted a dog." in task.content
        payload = task.additional_kwargs[TASK_KEY]
        assert payload["message"]["name"] == "Melanie" and payload["recent"][-1]["name"] == "Caroline"
        assert "Name the speaker" in model.calls[-1][0].content
        [first, _] = await entries(invoker)
        assert first["tags"]["role"] == "user"  # role semantics unchanged

    async with in_process("extractive", db=db.with_name("x.db")) as invoker:
        await invoker.aprocess_conversation_message(
            "user", "I researched adoption agencies yesterday.", "t1", T, name="Caroline"
        )
        [entry] = await entries(invoker)
        assert entry["summary"] == "On 2023-05-08, Caroline researched adoption agencies yesterday (2023-05-07)."


async def test_name_through_ainvoke_mapping_and_chat_message(db) -> None:
    async with in_process("extractive", db=db) as invoker:
        agent = invoker.agent
        await agent.ainvoke(
            ControlState.PROCESS_MESSAGE, "t1", {"role": "user", "content": "I moved to Denver.", "name": "Caroline"}, T
        )
        await agent.ainvoke(
            ControlState.PROCESS_MESSAGE,
            "t1",
            ChatMessage(role="assistant", content="I visited Denver last year.", name="Melanie"),
            T,
        )
        await agent.ainvoke(
            ControlState.PROCESS_MESSAGE, "t1", {"role": "user", "content": "I like it."}, T, name="Caroline"
        )
        summaries = [e["summary"] for e in await entries(invoker)]
        # short messages also say what they reply to: "(replying to Caroline: ...)"
        assert summaries[0] == "On 2023-05-08, Caroline moved to Denver."
        assert summaries[1] == (
            "On 2023-05-08 Melanie said: I visited Denver last year (2022). (replying to Caroline: I moved to Denver.)"
        )
        assert summaries[2].startswith("On 2023-05-08, Caroline likes it. (replying to Melanie: ")
        with pytest.raises(InputError, match="two speaker names"):
            await agent.ainvoke(
                ControlState.PROCESS_MESSAGE, "t1", {"role": "user", "content": "x", "name": "A"}, T, name="B"
            )
        with pytest.raises(InputError, match="takes no message"):
            await agent.ainvoke(ControlState.START_SESSION, "t1", name="Caroline")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "must not be empty"),
        ("x" * 101, "at most 100"),
        ("a\tb", "one line"),
        (3, "must be a string"),
    ],
)
async def test_bad_names_are_refused_before_anything_is_written(db, name: Any, problem: str) -> None:
    model = ScriptedChatModel(responses=[])
    async with in_process(model, db=db) as invoker:
        await invoker.astart_session("t1")
        with pytest.raises(InputError, match=problem):
            await invoker.aprocess_conversation_message("user", "hello", "t1", T, name=name)
        assert model.calls == [] and await entries(invoker) == []
        assert (await invoker.athread_status("t1")).messages == 0


async def test_replay_passes_names_from_the_file(db) -> None:
    [conv] = parse_conversation_data(
        {
            "conversation_id": "c1",
            "conversation_time": T,
            "messages": [
                {"role": "user", "content": "I went to a pride parade last Friday.", "name": "Caroline"},
                {"role": "assistant", "content": "I ran a charity race two days ago.", "name": "Melanie"},
                {"role": "user", "content": "I started a new job."},
            ],
        }
    )
    async with in_process("extractive", db=db) as invoker:
        await replay_conversation(invoker, conv)
        summaries = [e["summary"] for e in await entries(invoker)]
    assert summaries[0] == "On 2023-05-08, Caroline went to a pride parade last Friday (2023-05-05)."
    assert summaries[1] == "On 2023-05-08 Melanie said: I ran a charity race two days ago (2023-05-06)."
    assert summaries[2] == (
        "On 2023-05-08, the user started a new job. "
        "(replying to Melanie: I ran a charity race two days ago (2023-05-06).)"
    )


def test_sync_invoker_takes_a_name(db) -> None:
    with in_process("extractive", db=db) as invoker:
        result = invoker.process_conversation_message("user", "I adopted a cat.", "t1", T, name="Caroline")
        assert len(result.entry_ids) == 1 and invoker.thread_status("t1").messages == 1
        with pytest.raises(InputError, match="must not be empty"):
            invoker.process_conversation_message("user", "I adopted a cat.", "t1", T, name=" ")


# -- time inheritance -----------------------------------------------------------------------------------------------


async def test_message_without_time_takes_the_sessions_time(db) -> None:
    async with in_process("extractive", db=db) as invoker:
        await invoker.astart_session("t1", "2023-05-08T13:00:00Z")
        first = await invoker.aprocess_conversation_message("user", "I went hiking yesterday.", "t1")
        assert any("session's time 2023-05-08T13:00:00Z" in note for note in first.notes)
        await invoker.aprocess_conversation_message("user", "Later that day.", "t1", "2023-05-08T15:00:00Z")
        await invoker.aprocess_conversation_message("assistant", "Nice!", "t1")  # the later of the two
        await invoker.aend_session("t1")
        # a new session without a time forgets the old one; the server stamps the creation time
        await invoker.astart_session("t1")
        await invoker.aprocess_conversation_message("user", "Undated.", "t1")
        found = await entries(invoker)
    times = [e.get("conversationTime") for e in found]
    assert [t[:19] if t else None for t in times[:3]] == [
        "2023-05-08T13:00:00",
        "2023-05-08T15:00:00",
        "2023-05-08T15:00:00",
    ]
    assert found[0]["summary"] == "On 2023-05-08, the user went hiking yesterday (2023-05-07)."
    assert not found[3].get("conversationTime")


async def test_last_message_time_is_inherited_without_a_session_time(db) -> None:
    async with in_process("extractive", db=db) as invoker:
        await invoker.aprocess_conversation_message("user", "Dated.", "t1", "2023-06-01T09:00:00Z")
        await invoker.aprocess_conversation_message("user", "Not dated.", "t1")
        found = await entries(invoker)
    assert [e["conversationTime"][:19] for e in found] == ["2023-06-01T09:00:00", "2023-06-01T09:00:00"]
