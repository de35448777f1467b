"""The examples run: the LangGraph chatbot graph and tool-calling agent (with scripted chat models) and
chat_pipeline.py as a process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from mycelian_agent import build_agent
from mycelian_agent.testing import ScriptedChatModel, text_message, tool_call_message

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def chatbot():
    return _load("langgraph_chatbot")


def _system_prompt(model: ScriptedChatModel) -> str:
    first = model.calls[-1][0]
    assert isinstance(first, SystemMessage)
    return str(first.content)


async def test_chatbot_recalls_each_users_first_turn_in_the_next_turn(chatbot) -> None:
    model = ScriptedChatModel(responses=[text_message("Got it.")], cycle=True)
    async with build_agent("extractive", server="in-process", db=":memory:") as invoker:
        bot = chatbot.build_chatbot(invoker, model)

        async def turn(user: str, thread: str, text: str) -> str:
            config = {"configurable": {"user_id": user, "thread_id": thread}}
            state = await bot.ainvoke({"messages": [HumanMessage(text)]}, config)
            assert state["messages"][-1].content == "Got it."
            return _system_prompt(model)

        assert "Memory holds nothing about this yet." in await turn("alice", "a1", "My dog Rex loves the beach.")
        await turn("bob", "b1", "I am learning to play the cello.")
        # second turns, in new threads: only long-term memory can carry the first turns' facts
        alice = await turn("alice", "a2", "Where does my dog like to go?")
        assert "My dog Rex loves the beach." in alice and "cello" not in alice
        bob = await turn("bob", "b2", "Which instrument am I learning?")
        assert "I am learning to play the cello." in bob and "Rex" not in bob
        # the remember node stored both turns of each exchange in the user's memory
        hits = await invoker.asearch("Got it", user="alice")
        assert {(hit.role, hit.thread) for hit in hits if hit.text == "Got it."} == {
            ("assistant", "a1"),
            ("assistant", "a2"),
        }


async def test_chatbot_offline_model_says_what_memory_holds(chatbot) -> None:
    async with build_agent("extractive", server="in-process", db=":memory:") as invoker:
        bot = chatbot.build_chatbot(invoker, chatbot.MemoryEchoModel())
        config = {"configurable": {"user_id": "dana", "thread_id": "d1"}}
        first = await bot.ainvoke({"messages": [HumanMessage("My sister Ana lives in Lisbon.")]}, config)
        assert first["messages"][-1].content == "(offline) Noted."
        second = await bot.ainvoke({"messages": [HumanMessage("Where does my sister live?")]}, config)
        assert second["messages"][-1].content == '(offline) From memory: you said "My sister Ana lives in Lisbon."'
        with pytest.raises(ValueError, match="user_id"):
            await bot.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "x"}})


def test_chat_pipeline_runs_offline_with_piped_stdin(tmp_path: Path) -> None:
    lines = "I moved to Denver with my dog Rex.\nWhat do you remember about my dog?\n"
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            str(EXAMPLES / "chat_pipeline.py"),
            "--server",
            "in-process",
            "--db",
            str(tmp_path / "chat.db"),
            "--state",
            str(tmp_path / "state.db"),
            "--user",
            "dana",
        ],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    replies = [line for line in done.stdout.splitlines() if line.startswith("assistant> ")]
    assert replies == [
        "assistant> (offline assistant) Noted.",
        "assistant> (offline assistant) I remember you said: I moved to Denver with my dog Rex.",
    ]
    assert "session ended: 4 messages stored in total" in done.stdout


async def test_tool_agent_keeps_corrects_and_forgets_with_the_memory_tools(chatbot) -> None:
    """The tool-calling agent with a scripted model: manage_memory creates, updates and deletes the user's memory
    item, search_memory finds it; each call lands in the config's user's memory only."""
    async with build_agent("extractive", server="in-process", db=":memory:") as invoker:

        async def turn(user: str, *replies: AIMessage) -> list[str]:
            """One user turn with the model's scripted replies; the tools' answers, in order."""
            model = ScriptedChatModel(responses=[*replies, text_message("Done.")])
            agent = chatbot.build_tool_agent(invoker, model)
            config = {"configurable": {"user_id": user, "thread_id": f"{user}-tools"}}
            state = await agent.ainvoke({"messages": [HumanMessage("...")]}, config)
            assert state["messages"][-1].content == "Done."
            assert {tool["function"]["name"] for tool in model.bound_tools} == {"search_memory", "manage_memory"}
            return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]

        def manage(**args: str) -> AIMessage:
            return tool_call_message("manage_memory", args)

        [created] = await turn("alice", manage(content="Alice is allergic to peanuts."))
        assert created.startswith("created memory ")
        note = created.removeprefix("created memory ")
        [entry] = (await invoker.aget_all(user="alice")).entries
        assert (entry.entry_id, entry.text, entry.role) == (note, "Alice is allergic to peanuts.", "assistant")
        [found] = await turn("alice", tool_call_message("search_memory", {"query": "peanuts allergy"}))
        assert "Alice is allergic to peanuts." in found
        assert f"- {note}: Alice is allergic to peanuts." in found  # the id manage_memory takes
        # bob's agent cannot touch alice's memory: the model is told, nothing changes
        [refused] = await turn("bob", manage(action="delete", id=note))
        assert f"entry {note} not found" in refused
        [updated] = await turn("alice", manage(action="update", id=note, content="Alice is allergic to cashews."))
        assert updated == f"updated memory {note}"
        assert (await invoker.aget(note, user="alice")).text == "Alice is allergic to cashews."
        [deleted] = await turn("alice", manage(action="delete", id=note))
        assert deleted == f"deleted memory {note}"
        assert (await invoker.aget_all(user="alice")).entries == ()
