"""Worked examples in the prompts: opt-in, after the rules in the system message, substituted as strictly as the task
templates, and a fixed size per operation (a bounded prompt stays bounded)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mycelian_agent import PromptError, build_agent
from mycelian_agent.agent.prompts import (
    BatchItem,
    PromptSet,
    build_add_entries_prompt,
    build_add_entry_prompt,
    build_put_context_prompt,
)
from mycelian_agent.prompt_files import prompts_dir
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

MESSAGE = {
    "role": "user",
    "name": "Caroline",
    "content": "I went to a support group yesterday.",
    "conversation_time": "2023-05-08T13:56:00",
}


def recent(n: int) -> list[dict]:
    return [
        {"role": "user", "content": f"Earlier message {i} " + "words " * 30, "conversation_time": None}
        for i in range(n)
    ]


def prompts_for(prompts: PromptSet, history: int) -> dict[str, list]:
    item = BatchItem(1, MESSAGE, MESSAGE["content"])
    return {
        "add_entry": build_add_entry_prompt(
            prompts, message=MESSAGE, content=MESSAGE["content"], recent=recent(history), context=""
        ),
        "add_entries": build_add_entries_prompt(prompts, items=[item], recent=recent(history), context=""),
        "add_entries_and_context": build_add_entries_prompt(
            prompts, items=[item], recent=recent(history), context="", with_context=True
        ),
        "put_context": build_put_context_prompt(
            prompts, previous_context="", messages=recent(history) or [MESSAGE], max_chars=5000
        ),
    }


def test_examples_are_opt_in_and_follow_the_rules_in_the_system_message():
    plain, shown = PromptSet.load(), PromptSet.load(examples=True)
    assert plain.add_entry_examples == plain.add_entries_examples == plain.put_context_examples == ""
    for operation, messages in prompts_for(shown, 3).items():
        system, task = messages
        assert "# Worked example" in system.content, operation
        assert system.content.index("# Worked example") > system.content.index("rules"), operation
        without = prompts_for(plain, 3)[operation]
        assert "Worked example" not in without[0].content
        assert task.content == without[1].content  # the task itself is unchanged
    # the batch example names the tool of the call it is shown with (strict substitution of $tool)
    batch = prompts_for(shown, 0)
    assert '"name": "add_entries_and_context"' in batch["add_entries_and_context"][0].content
    assert '"name": "add_entries"' in batch["add_entries"][0].content


def test_examples_cost_the_same_at_any_history_length():
    plain, shown = PromptSet.load(), PromptSet.load(examples=True)

    def chars(prompts: PromptSet, history: int) -> dict[str, int]:
        return {op: sum(len(m.content) for m in messages) for op, messages in prompts_for(prompts, history).items()}

    short = {op: chars(shown, 1)[op] - n for op, n in chars(plain, 1).items()}
    long = {op: chars(shown, 12)[op] - n for op, n in chars(plain, 12).items()}
    assert short == long and all(0 < n < 2000 for n in short.values()), short


def test_an_examples_file_is_substituted_strictly_and_must_exist(tmp_path: Path):
    folder = tmp_path / "prompts"
    shutil.copytree(prompts_dir(), folder)
    (folder / "add_entry_examples.md").write_text("Example costing $5 for $speaker.\n", encoding="utf-8")
    prompts = PromptSet.load(folder, examples=True)
    with pytest.raises(PromptError, match=r"add_entry_examples.*malformed.*\$\$"):
        build_add_entry_prompt(prompts, message=MESSAGE, content="hi", recent=[], context="")
    other = tmp_path / "other"  # prompt files are read once per path
    shutil.copytree(prompts_dir(), other)
    (other / "add_entry_examples.md").write_text("Example for $nobody.\n", encoding="utf-8")
    with pytest.raises(PromptError, match=r"add_entry_examples.*\$nobody"):
        build_add_entry_prompt(
            PromptSet.load(other, examples=True), message=MESSAGE, content="hi", recent=[], context=""
        )
    (folder / "put_context_examples.md").unlink()
    assert PromptSet.load(folder).put_context_examples == ""  # without examples the file is not needed
    with pytest.raises(PromptError, match="put_context_examples.*not found"):
        PromptSet.load(folder, examples=True)


async def test_build_agent_shows_the_examples_when_asked(tmp_path: Path):
    reply = tool_call_message("add_entry", {"summary": "Caroline said hi.", "tags": {"topic": "greeting"}})
    for examples in (False, True):
        model = ScriptedChatModel(responses=[reply])
        async with build_agent(
            model, "in-process", db=tmp_path / f"m{examples}.db", prompt_examples=examples
        ) as invoker:
            await invoker.aprocess_conversation_message("user", "hi", "t1")
        assert ("# Worked examples" in model.calls[0][0].content) is examples
