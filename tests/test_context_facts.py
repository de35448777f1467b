"""The extractive context document keeps what the user said about themselves (Facts) and updates it when it changes."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage

from mycelian_agent.agent.model_tools import tool_schema
from mycelian_agent.models.extractive import TASK_KEY, ExtractiveChatModel, merge_context

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart_conversation.json"


def message(role: str, content: str, when: str = "2024-03-08T10:00:00Z", name: str | None = None) -> dict:
    return {"role": role, "content": content, "conversation_time": when, **({"name": name} if name else {})}


def section(doc: str, name: str) -> str:
    return doc.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0] if f"## {name}\n" in doc else ""


def current(doc: str, name: str = "Facts") -> str:
    """A section without its "(…; earlier: …)" notes: what the document presents as true now."""
    lines = section(doc, name).splitlines()
    return "\n".join(line.split("; earlier: ")[0] for line in lines)


def test_health_conditions_and_diet_are_facts():
    doc = merge_context(
        "",
        [
            message("user", "I'm severely allergic to peanuts."),
            message("assistant", "Good to know."),
            message("user", "Also, I have asthma. I can't eat gluten either."),
        ],
    )
    facts = section(doc, "Facts")
    assert "- The user is severely allergic to peanuts. (2024-03-08)" in facts
    assert "asthma" in facts and "gluten" in facts


def test_named_speaker_is_the_subject_of_the_facts():
    doc = merge_context("", [message("user", "I'm severely allergic to peanuts.", name="Dana")])
    assert "- Dana is severely allergic to peanuts. (2024-03-08)" in section(doc, "Facts")


def test_pet_with_name_and_people_by_name():
    doc = merge_context(
        "",
        [
            message("user", "We adopted a rescue dog called Biscuit."),
            message("user", "My partner Sam and I are going to Kyoto in October."),
            message("user", "My best friend Priya is vegan, so the dinner has to work for her."),
            message("user", "Priya has two kids."),
        ],
    )
    facts = section(doc, "Facts")
    assert "Biscuit" in facts
    assert "- The user's partner is Sam. (2024-03-08)" in facts
    assert "The user's best friend is Priya." in facts
    assert "Priya has two kids." in facts  # a statement about a person of the user's life
    assert "Kyoto in October" in doc


def test_assistant_echoes_do_not_become_user_facts():
    doc = merge_context(
        "",
        [
            message("user", "Can you suggest a Thai dish?"),
            message("assistant", "Noted: you're allergic to peanuts. You have a cat named Luna, and you live in Oslo."),
        ],
    )
    assert "## Facts" not in doc and "## Preferences" not in doc
    assert "allergic to peanuts" in section(doc, "Timeline")  # the exchange itself stays on the timeline


def test_a_move_replaces_the_home():
    first = merge_context("", [message("user", "I live in Denver and work as a nurse.")])
    assert "Denver" in current(first)
    later = merge_context(first, [message("user", "Big news: we moved to Austin last month.", "2024-05-02T09:00:00Z")])
    facts = current(later)
    assert "Austin" in facts and "Denver" not in facts
    assert "earlier: The user lives in Denver" in section(later, "Facts")  # the old home is marked as earlier
    # replaying the older message does not bring the old home back
    assert merge_context(later, [message("user", "I live in Denver and work as a nurse.")]) == later


def test_a_changed_trip_keeps_only_the_new_dates_as_current():
    doc = merge_context(
        "",
        [
            message("user", "We're flying to Rome for my sister's wedding. We're thinking May 3 to May 9."),
            message("assistant", "Lovely, Rome in May is great."),
        ],
    )
    assert "May 3 to May 9" in current(doc, "Decisions and plans")
    doc = merge_context(
        doc,
        [
            message("user", "Change of plans: the Rome trip moved, it's now May 10 to May 16.", "2024-04-01T09:00:00Z"),
        ],
    )
    plans = current(doc, "Decisions and plans")
    assert "May 10 to May 16" in plans and "May 3 to May 9" not in plans
    assert "earlier:" in section(doc, "Decisions and plans") and "May 3 to May 9" in section(doc, "Decisions and plans")
    assert sum("Rome" in line for line in section(doc, "Decisions and plans").splitlines()) == 1


def test_a_cancelled_plan_is_no_longer_current():
    doc = merge_context("", [message("user", "I have a dentist appointment on March 20.")])
    assert "March 20" in current(doc, "Decisions and plans") + current(doc)
    doc = merge_context(doc, [message("user", "I cancelled the dentist appointment.", "2024-03-10T09:00:00Z")])
    text = current(doc, "Decisions and plans") + current(doc)
    assert "cancelled the dentist appointment" in text and "March 20" not in text


def test_an_ended_possession_updates_the_fact():
    doc = merge_context("", [message("user", "I have a cat named Luna.")])
    assert "The user has a cat named Luna." in current(doc)
    doc = merge_context(doc, [message("user", "Sadly I no longer have the cat.", "2024-06-01T09:00:00Z")])
    assert "no longer have the cat" in current(doc) and "has a cat named Luna" not in current(doc)


def test_unrelated_facts_are_not_replaced():
    doc = merge_context(
        "",
        [
            message("user", "My partner Marco is vegetarian."),
            message("user", "We booked Lisbon for June 14 to June 21."),
            message("user", "I work at a bakery in Porto."),
        ],
    )
    later = merge_context(doc, [message("user", "Marco has a deadline now on June 3.", "2024-04-01T09:00:00Z")])
    for kept in ("Marco is vegetarian", "June 14 to June 21", "bakery in Porto"):
        assert kept in current(later) + current(later, "Decisions and plans"), kept


def test_facts_respect_the_size_cap():
    messages = [
        message("user", f"I'm allergic to substance number {i} and my friend Alex{chr(97 + i)} is too.")
        for i in range(20)
    ]
    for cap in (300, 800, 2000):
        doc = merge_context("", messages, max_chars=cap)
        assert 0 < len(doc) <= cap


def test_put_context_call_keeps_the_allergy():
    model = ExtractiveChatModel().bind_tools([tool_schema("put_context")], tool_choice="put_context")
    task = {
        "operation": "put_context",
        "previous_context": "",
        "max_chars": 2000,
        "messages": [
            message("user", "I'm severely allergic to peanuts."),
            message("assistant", "Noted: you're allergic to peanuts."),
        ],
    }
    reply = model.invoke([SystemMessage("rules"), HumanMessage("task", additional_kwargs={TASK_KEY: task})])
    (call,) = reply.tool_calls
    assert "- The user is severely allergic to peanuts. (2024-03-08)" in section(call["args"]["content"], "Facts")


def test_quickstart_conversation_after_both_sessions():
    data = json.loads(EXAMPLE.read_text())
    doc = ""
    for session in data["sessions"]:
        doc = merge_context(doc, [dict(m, conversation_time=session["conversation_time"]) for m in session["messages"]])
    now = current(doc) + current(doc, "Decisions and plans")
    assert "June 15 to June 22" in now and "June 14 to June 21" not in now
    assert "2,400 euros" in now and "budget" in now
    assert "Marco is vegetarian" in current(doc)
    assert "Dana's partner is Marco." in current(doc)
    assert "before 9 am" in section(doc, "Preferences")
    # the same when merged message by message, as a flush after every message would
    step = ""
    for session in data["sessions"]:
        for m in session["messages"]:
            step = merge_context(step, [dict(m, conversation_time=session["conversation_time"])])
    now = current(step) + current(step, "Decisions and plans")
    assert "June 15 to June 22" in now and "June 14 to June 21" not in now
