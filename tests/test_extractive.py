"""The extractive model: summaries, tags, context documents and the tool-call contract. Offline and fast."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

from mycelian_agent.agent.model_tools import tool_schema
from mycelian_agent.errors import ToolCallError
from mycelian_agent.models.extractive import (
    TASK_KEY,
    ExtractiveChatModel,
    conversation_date,
    entry_tags,
    merge_context,
    summarize_message,
    third_person,
)

ADD_ENTRY_SCHEMA = tool_schema("add_entry")  # the schema the agent binds
PUT_CONTEXT_SCHEMA = tool_schema("put_context")


def message(role: str, content: str, when: str | None = "2024-03-05T10:00:00Z") -> dict:
    return {"role": role, "content": content, "conversation_time": when}


def prompt(task: dict | None) -> list:
    kwargs = {TASK_KEY: task} if task is not None else {}
    return [SystemMessage("rules"), HumanMessage("task text", additional_kwargs=kwargs)]


def add_entry_task(content: str, role: str = "user", **extra) -> dict:
    return {"operation": "add_entry", "message": message(role, content), "recent": [], "context": "", **extra}


CONVERSATION = [
    message("user", "I just moved to Denver with my partner Sam. My rent is $2,150 a month.", "2024-03-01T09:00:00Z"),
    message("assistant", "Congratulations on the move! Denver has great hiking nearby.", "2024-03-01T09:00:05Z"),
    message(
        "user",
        "I love hiking, but I hate crowded trails. I'm planning to hike Mount Bierstadt in July.",
        "2024-03-01T09:01:00Z",
    ),
    message(
        "assistant", "Mount Bierstadt is a popular 14er; start before 6 AM to avoid crowds.", "2024-03-01T09:01:05Z"
    ),
]


# --- summaries --------------------------------------------------------------------------------------------------------
def test_summary_keeps_speaker_date_names_numbers_and_money():
    summary = summarize_message(
        "Hi! I moved to Denver on March 3rd and my rent is $2,150 a month. Thanks for asking.",
        role="user",
        conversation_time="2024-03-05T10:00:00Z",
    )
    assert summary.startswith("On 2024-03-05")
    for kept in ("Denver", "March 3rd", "$2,150", "the user"):
        assert kept in summary, (kept, summary)
    assert "Thanks" not in summary  # pleasantries give way to content


def test_summary_rewrites_only_where_grammatical_and_otherwise_attributes():
    rewritten = summarize_message("I've been vegetarian since 2019.", conversation_time="2023/05/30 (Tue) 21:48")
    assert rewritten == "On 2023-05-30, the user has been vegetarian since 2019."
    kept = summarize_message("Do you know if my passport from 2015 is still valid?", conversation_time="2023-05-30")
    assert kept == "On 2023-05-30 the user said: Do you know if my passport from 2015 is still valid?"
    assistant = summarize_message("I recommend the Kyoto Ryokan for 3 nights.", role="assistant")
    assert assistant == "The assistant said: I recommend the Kyoto Ryokan for 3 nights."


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("I'm planning a trip to Kyoto in May.", "The user is planning a trip to Kyoto in May."),
        ("I usually wake up at 6:45 AM on Tuesdays.", "The user usually wakes up at 6:45 AM on Tuesdays."),
        ("I don't eat meat.", "The user doesn't eat meat."),
        ("I'd like a window seat.", "The user would like a window seat."),
        ("I'd been there twice.", "The user had been there twice."),
        ("My wife and I went to Paris.", "The user's wife and the user went to Paris."),
        ("Do I need a visa?", "Does the user need a visa?"),
        ("I study Spanish, and I love it.", "The user studies Spanish, and the user loves it."),
        ("My wife and I love Paris.", None),  # plural subject: not rewritten
        ("I apply to jobs every week.", None),  # verb not known: not rewritten
        ("I did it myself.", None),
    ],
)
def test_third_person_is_correct_or_declines(sentence, expected):
    assert third_person(sentence) == expected


def test_summary_of_long_message_prefers_informative_sentences_within_400_chars():
    filler = "That's a really good question and I appreciate you taking the time to help. " * 8
    content = filler + "My daughter Emma starts kindergarten at Lincoln Elementary on September 4th. " + filler
    summary = summarize_message(content, conversation_time="2024-08-01")
    assert len(summary) <= 400
    assert "Emma" in summary and "Lincoln Elementary" in summary and "September 4th" in summary


def test_assistant_list_summary_names_the_items():
    content = (
        "Here are some podcasts you might enjoy:\n\n1. **Hardcore History** by Dan Carlin - deep dives.\n"
        "2. **Radiolab**: science stories.\n3. **Lore**: folklore.\n"
    )
    summary = summarize_message(content, role="assistant", conversation_time="2023-05-22")
    assert summary.startswith("On 2023-05-22 the assistant said:")
    assert "Items: Hardcore History; Radiolab; Lore." in summary
    assert "**" not in summary
    numbered = "Try this:\n\n**1. Make a playlist:** Queue 3 episodes.\n\n**2. Alternate shows:** Lore on Fridays.\n"
    summary = summarize_message(numbered, role="assistant")
    assert "Items: Make a playlist; Alternate shows." in summary and " 1. " not in summary


def test_summary_is_never_empty_and_bounded():
    assert summarize_message("", conversation_time="2024-01-02") == "On 2024-01-02 the user said: (an empty message)"
    assert summarize_message("***") == "The user said: ***"
    long_word_soup = "word " * 500
    summary = summarize_message(long_word_soup)
    assert 0 < len(summary) <= 400 and summary.endswith("…")
    assert len(summarize_message("x" * 5000, max_chars=120)) <= 120


def test_short_reply_says_what_it_answers():
    recent = [message("assistant", "Would you like the recipe for Mango Lassi with cardamom?")]
    summary = summarize_message("Yes, please!", recent=recent)
    assert "Yes, please!" in summary and "Mango Lassi" in summary and "replying to the assistant" in summary


@pytest.mark.parametrize(
    ("when", "day"),
    [
        ("2024-03-05T10:00:00Z", "2024-03-05"),
        ("2023/05/30 (Tue) 21:48", "2023-05-30"),
        ("1:56 pm on 8 May, 2023", "2023-05-08"),
        ("May 8, 2023", "2023-05-08"),
        ("sometime", ""),
        (None, ""),
    ],
)
def test_conversation_date_formats(when, day):
    assert conversation_date(when) == day


# --- tags -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "role", "kind"),
    [
        ("I love spicy Thai food.", "user", "preference"),
        ("I'm going to Lisbon next week.", "user", "plan"),
        ("My sister Ana lives in Porto.", "user", "fact"),
        ("What is the capital of Peru?", "user", "question"),
        ("ok", "user", "other"),
        ("Porto has 230,000 residents.", "assistant", "fact"),
    ],
)
def test_entry_tag_kinds(content, role, kind):
    assert entry_tags(content, role=role)["kind"] == kind


def test_entry_tag_topics_are_short_lowercase_keywords():
    tags = entry_tags("I'm planning a fishing trip to Lake Michigan to catch trout. Trout fishing is fun.")
    assert set(tags) == {"topic", "kind"} and all(isinstance(v, str) for v in tags.values())
    topics = tags["topic"].split(", ")
    assert "michigan" in topics and set(topics) <= {"fishing", "trout", "lake", "michigan"} and len(topics) == 3
    assert tags["topic"] == tags["topic"].lower() and len(tags["topic"]) < 60


# --- context documents ------------------------------------------------------------------------------------------------
def test_context_document_sections_and_dated_timeline():
    doc = merge_context("", CONVERSATION, max_chars=4000)
    assert doc.startswith("# Conversation context")
    for heading in ("## Facts", "## Preferences", "## Decisions and plans", "## Timeline"):
        assert heading in doc
    facts = doc.split("## Facts")[1].split("##")[0]
    assert "Denver" in facts and "$2,150" in facts and "(2024-03-01)" in facts
    assert "the user hates crowded trails" in doc.split("## Preferences")[1].split("##")[0]
    assert "Mount Bierstadt in July" in doc.split("## Decisions and plans")[1].split("##")[0]
    timeline = doc.split("## Timeline")[1].split("##")[0].strip().splitlines()
    assert len(timeline) == 4 and all(line.startswith("- 2024-03-01: ") for line in timeline)


def test_context_keeps_previous_facts_and_dedupes():
    first = merge_context("", CONVERSATION[:2])
    later = [message("user", "My favorite cafe is Huckleberry Roasters.", "2024-04-02T08:00:00Z")]
    second = merge_context(first, later)
    assert "Denver" in second and "Huckleberry Roasters" in second
    again = merge_context(second, CONVERSATION[:2] + later)  # a replay of the same messages adds nothing
    assert again == second
    assert merge_context(again, []) == again  # parsing our own format back is lossless


def test_context_respects_max_chars_dropping_oldest_timeline_first():
    full = merge_context("", CONVERSATION, max_chars=8000)
    budget = len(full) - 60
    doc = merge_context("", CONVERSATION, max_chars=budget)
    assert len(doc) <= budget
    assert "Denver" in doc and "Mount Bierstadt" in doc  # durable items survive
    timeline = doc.split("## Timeline")[1].strip().splitlines()
    assert len(timeline) < 4 and "Bierstadt is a popular 14er" in timeline[-1]  # the newest stays
    for tiny in (600, 200, 40):
        assert 0 < len(merge_context("", CONVERSATION, max_chars=tiny)) <= tiny


def test_context_keeps_foreign_previous_text_as_earlier_notes():
    foreign = "The user is a nurse in Leeds.\nShe prefers tea over coffee.\n" + "More notes. " * 400
    doc = merge_context(foreign, CONVERSATION[:1], max_chars=4000)
    notes = doc.split("## Earlier notes")[1]
    assert "nurse in Leeds" in notes and len(notes) <= 1100
    assert "Denver" in doc.split("## Earlier notes")[0]


def test_context_is_never_empty():
    assert merge_context("", []) == "# Conversation context\n\nNo conversation content recorded yet.\n"
    chatter = [message("user", "Thanks, that sounds great!"), message("assistant", "Glad to help.")]
    # small talk has no facts, preferences or plans: it is kept on the timeline
    assert merge_context("", chatter) == (
        "# Conversation context\n\n## Timeline\n"
        "- 2024-03-05: User: Thanks, that sounds great!\n- 2024-03-05: Assistant: Glad to help.\n"
    )
    # too small a budget for even one timeline item: the topics take its place
    tiny = merge_context("", chatter, max_chars=60)
    assert tiny.startswith("# Conversation context\n\nThe conversation covered: ") and len(tiny) <= 60


def test_open_questions_are_kept_until_answered():
    asked = merge_context("", [message("user", "What's the best time to visit Iceland?")])
    assert "Iceland" in asked.split("## Open questions")[1]
    answered = merge_context(asked, [message("assistant", "June to August, for the midnight sun.")])
    assert "## Open questions" not in answered


# --- the chat model ---------------------------------------------------------------------------------------------------
def test_forced_add_entry_call_has_the_contract_shape():
    model = ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
    reply = model.invoke(prompt(add_entry_task("I moved to Denver last week.")))
    assert isinstance(reply, AIMessage) and len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["name"] == "add_entry" and set(call["args"]) == {"summary", "tags"}
    assert "Denver" in call["args"]["summary"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in call["args"]["tags"].items())
    assert reply.usage_metadata == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    assert reply.response_metadata["model_name"] == "extractive"


def test_put_context_call_and_async_path():
    model = ExtractiveChatModel().bind_tools([PUT_CONTEXT_SCHEMA], tool_choice="put_context")
    task = {"operation": "put_context", "previous_context": "", "messages": CONVERSATION, "max_chars": 500}
    reply = asyncio.run(model.ainvoke(prompt(task)))
    (call,) = reply.tool_calls
    assert call["name"] == "put_context" and 0 < len(call["args"]["content"]) <= 500


class AddEntry(BaseModel):
    """Record the message."""

    summary: str
    tags: dict[str, str]


@pytest.mark.parametrize(
    ("tools", "tool_choice"),
    [
        ([ADD_ENTRY_SCHEMA], None),  # a single bound tool is the one to call
        ([ADD_ENTRY_SCHEMA, PUT_CONTEXT_SCHEMA], {"type": "function", "function": {"name": "add_entry"}}),
        ([ADD_ENTRY_SCHEMA, PUT_CONTEXT_SCHEMA], "any"),  # no forced name: the task's operation decides
    ],
)
def test_tool_choice_forms(tools, tool_choice):
    reply = ExtractiveChatModel().bind_tools(tools, tool_choice=tool_choice).invoke(prompt(add_entry_task("hi")))
    assert [c["name"] for c in reply.tool_calls] == ["add_entry"]


def test_tool_named_otherwise_than_the_task_is_refused():
    model = ExtractiveChatModel().bind_tools([AddEntry])  # a pydantic tool is named after its class
    with pytest.raises(ToolCallError, match="'AddEntry' but the task is 'add_entry'"):
        model.invoke(prompt(add_entry_task("hi")))


@pytest.mark.parametrize(
    ("task", "problem"),
    [
        (None, "no additional_kwargs['mycelian_task']"),
        ({"operation": "summarize"}, "operation'] must be one of"),
        ({"operation": "add_entry"}, "mycelian_task['message'] must be an object"),
        ({"operation": "add_entry", "message": {"role": "user"}}, "mycelian_task['message']['content']"),
        ({"operation": "put_context", "previous_context": ""}, "mycelian_task['messages'] is missing"),
        ({"operation": "put_context", "messages": [{"role": "user", "content": 3}]}, "['messages'][0]['content']"),
        ({"operation": "put_context", "messages": [], "max_chars": 0}, "max_chars"),
    ],
)
def test_missing_or_malformed_payload_is_a_clear_tool_call_error(task, problem):
    model = ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA, PUT_CONTEXT_SCHEMA])
    with pytest.raises(ToolCallError) as info:
        model.invoke(prompt(task))
    assert problem in str(info.value)


def test_mismatched_forced_tool_and_missing_human_message():
    model = ExtractiveChatModel().bind_tools([PUT_CONTEXT_SCHEMA], tool_choice="put_context")
    with pytest.raises(ToolCallError, match="'put_context' but the task is 'add_entry'"):
        model.invoke(prompt(add_entry_task("hi")))
    with pytest.raises(ToolCallError, match="no HumanMessage"):
        ExtractiveChatModel().invoke([SystemMessage("rules only")])


def test_deterministic_across_calls_and_instances():
    task = add_entry_task("My flight to Tokyo leaves on 2024-06-12 at 9:40 PM; it cost $1,240.")
    first = ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA]).invoke(prompt(task))
    second = ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA]).invoke(prompt(json.loads(json.dumps(task))))
    assert first.tool_calls == second.tool_calls


def test_fast_enough_to_be_free():
    model = ExtractiveChatModel().bind_tools([ADD_ENTRY_SCHEMA], tool_choice="add_entry")
    prompts = [
        prompt(
            add_entry_task(
                f"I paid ${n} for tickets to see Arcade Fire in Austin on May {n % 28 + 1}. "
                "It was the best concert I've been to this year, and my friend Lee agreed."
            )
        )
        for n in range(200)
    ]
    started = time.perf_counter()
    for p in prompts:
        model.invoke(p)
    per_call = (time.perf_counter() - started) / len(prompts)
    assert per_call < 0.005, f"{per_call * 1000:.2f} ms per call"  # ~0.5 ms on a quiet 2-core VM


# --- real conversations -----------------------------------------------------------------------------------------------
def test_longmemeval_answers_survive_in_summaries(shared_data):
    sample = json.loads((shared_data / "longmemeval" / "longmemeval_oracle_6q.json").read_text())
    summaries = []
    for question in sample:
        for when, session in zip(question["haystack_dates"], question["haystack_sessions"], strict=True):
            for turn in session:
                summary = summarize_message(turn["content"], role=turn["role"], conversation_time=when)
                assert 0 < len(summary) <= 400 and conversation_date(when) in summary
                summaries.append(summary)
    text = "\n".join(summaries)
    assert "caught 12 largemouth bass" in text
    assert "staying with me for nine months" in text
    assert "Mayo Clinic" in text and "UfOvNlX9Hh0" in text
