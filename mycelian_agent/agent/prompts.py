"""Prompt sets and the prompts the agent sends: add_entry (one message), add_entries (a batch of messages, optionally
with the context merge) and put_context (the context merge).

Templates are ``string.Template`` files in ``prompts/``; substitution is strict, so a missing variable is a
:class:`PromptError` naming it. Rule files (entry capture, summary, context) are attached verbatim: they may come
from the package or from the memory server's ``get_default_prompts``. Worked examples (``*_examples.md``, opt-in:
``PromptSet.load(examples=True)``) follow the rules in the system message, substituted as strictly as the tasks;
they are a fixed text per operation, so they add the same tokens to every call of it and do not grow with the
conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from string import Template
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from ..errors import PromptError
from ..models.task import TASK_KEY
from ..prompt_files import PROMPT_NAMES, read_prompt
from .entries import add_entry_task, clip, task_message
from .turn import Turn

__all__ = [
    "BatchItem",
    "PromptSet",
    "build_add_entries_prompt",
    "build_add_entry_prompt",
    "build_put_context_prompt",
    "render",
]

_TEMPLATE_NAMES = ("agent_prefix", "add_entry_task", "put_context_task")
_EXAMPLE_NAMES = ("add_entry_examples", "add_entries_examples", "put_context_examples")


def render(template: str, name: str, values: Mapping[str, Any]) -> str:
    """Substitute ``values`` into ``template``; a missing variable raises :class:`PromptError` naming it."""
    try:
        return Template(template).substitute(values)
    except KeyError as exc:
        raise PromptError(f"prompt template {name!r} needs variable ${exc.args[0]}, which was not supplied") from None
    except ValueError as exc:
        raise PromptError(f"prompt template {name!r} is malformed: {exc} (write a literal $ as $$)") from None


@dataclass(frozen=True)
class PromptSet:
    """The texts the agent builds its prompts from."""

    agent_prefix: str
    add_entry_task: str
    put_context_task: str
    entry_capture_prompt: str
    summary_prompt: str
    context_prompt: str
    add_entries_task: str = ""  # batched mode; a prompt directory without add_entries_task.md gets the package's
    # Worked examples shown after the rules ("" = none, the default): one to three invented exchanges per operation.
    add_entry_examples: str = ""
    add_entries_examples: str = ""
    put_context_examples: str = ""

    @classmethod
    def load(cls, directory: Path | str | None = None, *, examples: bool = False) -> PromptSet:
        """Load every prompt from ``directory`` (default: the package's ``prompts/``); with ``examples`` also the
        worked examples (``add_entry_examples``, ``add_entries_examples``, ``put_context_examples``), which a
        directory must then hold too."""
        base = Path(directory) if directory is not None else None
        texts = {name: read_prompt(name, base) for name in (*_TEMPLATE_NAMES, *PROMPT_NAMES)}
        batch = base / "add_entries_task.md" if base is not None else None
        texts["add_entries_task"] = read_prompt("add_entries_task", base if batch and batch.is_file() else None)
        if examples:
            texts.update({name: read_prompt(name, base) for name in _EXAMPLE_NAMES})
        return cls(**texts)

    def with_server_rules(self, default_prompts: Mapping[str, Any]) -> PromptSet:
        """Replace the rule texts with those of a ``get_default_prompts`` result."""
        templates = default_prompts.get("templates") if isinstance(default_prompts, Mapping) else None
        if not isinstance(templates, Mapping):
            raise PromptError("get_default_prompts returned no 'templates' object")
        missing = [name for name in PROMPT_NAMES if not isinstance(templates.get(name), str) or not templates[name]]
        if missing:
            raise PromptError(f"get_default_prompts is missing template(s): {', '.join(missing)}")
        return replace(self, **{name: templates[name] for name in PROMPT_NAMES})


def _system(parts: Sequence[str], examples: str, name: str, values: Mapping[str, Any]) -> SystemMessage:
    """The system message: the rule texts, then the operation's worked examples (if loaded) rendered strictly."""
    texts = [part.strip() for part in parts]
    if examples.strip():
        texts.append(render(examples, name, values).strip())
    return SystemMessage("\n\n".join(texts))


def _format_messages(items: Sequence[Mapping[str, Any]]) -> str:
    if not items:
        return "(none)"
    lines = []
    for item in items:
        who = f"{item['role']} {item['name']}" if item.get("name") else item["role"]
        when = f" @ {item['conversation_time']}" if item.get("conversation_time") else ""
        lines.append(f"[{who}{when}] {item['content']}")
    return "\n".join(lines)


def build_add_entry_prompt(
    prompts: PromptSet,
    *,
    message: Turn,
    content: str,
    recent: Sequence[Turn],
    context: str,
    part: tuple[int, int] = (1, 1),
    recent_message_chars: int | None = 600,
    context_chars: int | None = None,
) -> list[BaseMessage]:
    """The add_entry prompt: rules as the system message, the task (context, recent messages, message) as human.

    ``content`` is the text to record (the whole message, or one part of a message too long for one entry);
    ``context_chars`` clips the context document (its first sections, the durable facts, matter most here).
    """
    payload = add_entry_task(
        message, content, recent, context, recent_message_chars=recent_message_chars, context_chars=context_chars
    )
    current = payload["message"]
    index, total = part
    values = {
        "context": payload["context"] or "(empty)",
        "recent": _format_messages(payload["recent"]),
        "role": current["role"],
        "name": (current.get("name") or "unknown").replace('"', "'"),
        "speaker": f"{current['role']} {current['name']}" if current.get("name") else current["role"],
        "conversation_time": current["conversation_time"] or "unknown",
        "content": content,
        "part_note": "whole message" if total == 1 else f"part {index} of {total} of a long message",
    }
    system = _system(
        [prompts.agent_prefix, prompts.entry_capture_prompt, prompts.summary_prompt],
        prompts.add_entry_examples,
        "add_entry_examples",
        values,
    )
    task = render(prompts.add_entry_task, "add_entry_task", values)
    return [system, HumanMessage(task, additional_kwargs={TASK_KEY: payload})]


@dataclass(frozen=True)
class BatchItem:
    """One entry to write in a batch: its item number, the message, the text to record (the message or one part of
    it), which part, and the recent messages as the unbatched prompt would have shown them (for the task data)."""

    item: int
    message: Turn
    content: str
    part: tuple[int, int] = (1, 1)
    recent: Sequence[Turn] = ()


def build_add_entries_prompt(
    prompts: PromptSet,
    *,
    items: Sequence[BatchItem],
    recent: Sequence[Turn],
    context: str,
    recent_message_chars: int | None = 600,
    context_chars: int | None = None,
    with_context: bool = False,
    since_flush: Sequence[Turn] = (),
    earlier: int = 0,
    max_chars: int = 5000,
    message_chars: int | None = 2000,
    note: str = "",
) -> list[BaseMessage]:
    """The add_entries prompt: one model call writes the summary and tags of every item of a batch.

    ``recent`` is shown before the batch (the batch itself is context for its later messages). With
    ``with_context`` the same call also writes the new context document (tool ``add_entries_and_context``): the
    whole previous document and the messages since it (``since_flush``: the ``earlier`` first of them are already
    stored, the rest are the batch's) are merged;
    otherwise the context document is clipped to ``context_chars``. ``note`` (a correction) opens the task.
    """
    tool = "add_entries_and_context" if with_context else "add_entries"
    shown_context = context if with_context else clip(context, context_chars)
    lines = []
    for item in items:
        current = task_message(item.message, None) | {"content": item.content}
        index, total = item.part
        part = "" if total == 1 else f' part="{index} of {total}"'
        name = (current.get("name") or "unknown").replace('"', "'")
        lines.append(
            f'<message item="{item.item}" role="{current["role"]}" name="{name}" '
            f'time="{current["conversation_time"] or "unknown"}"{part}>\n{item.content}\n</message>'
        )
    flush_items = [task_message(m, message_chars) for m in since_flush]
    earlier_items = flush_items[:earlier]
    values = {
        "tool": tool,
        "context": shown_context or "(empty)",
        "recent": _format_messages([task_message(m, recent_message_chars) for m in recent]),
        "earlier": (
            "\nMessages since the context document was written, already recorded, oldest first:\n"
            f"<earlier>\n{_format_messages(earlier_items)}\n</earlier>\n"
        )
        if with_context
        else "",
        "messages": "\n".join(lines),
        "context_instruction": (
            "\n\nAlso write the whole new context document in `context`: merge the current document with the "
            "earlier messages and the messages to record, following the context rules (at most "
            f"{max_chars} characters)."
        )
        if with_context
        else "",
    }
    rules = [prompts.agent_prefix, prompts.entry_capture_prompt, prompts.summary_prompt]
    if with_context:
        rules.append(prompts.context_prompt)
    task = render(prompts.add_entries_task, "add_entries_task", values)
    if note:
        task = f"{note}\n\n{task}"
    seen: dict[int, dict[str, Any]] = {}  # items share most of their recent messages: convert each once

    def recent_dict(message: Turn) -> dict[str, Any]:
        if id(message) not in seen:
            seen[id(message)] = task_message(message, recent_message_chars)
        return seen[id(message)]

    payload: dict[str, Any] = {
        "operation": tool,
        "items": [
            {
                "item": item.item,
                "message": task_message(item.message, None) | {"content": item.content},
                "recent": [recent_dict(m) for m in item.recent],
            }
            for item in items
        ],
        "context": shown_context,
    }
    if with_context:
        payload["context_task"] = {
            "previous_context": context,
            "messages": flush_items,
            "max_chars": max_chars,
        }
    system = _system(rules, prompts.add_entries_examples, "add_entries_examples", values)
    return [system, HumanMessage(task, additional_kwargs={TASK_KEY: payload})]


def build_put_context_prompt(
    prompts: PromptSet,
    *,
    previous_context: str,
    messages: Sequence[Turn],
    max_chars: int,
    message_chars: int | None = 2000,
) -> list[BaseMessage]:
    """The put_context prompt: merge the previous context document with the messages since the last flush."""
    items = [task_message(m, message_chars) for m in messages]
    values = {
        "previous_context": previous_context or "(empty)",
        "messages": _format_messages(items),
        "max_chars": max_chars,
    }
    system = _system(
        [prompts.agent_prefix, prompts.context_prompt], prompts.put_context_examples, "put_context_examples", values
    )
    task = render(prompts.put_context_task, "put_context_task", values)
    payload = {
        "operation": "put_context",
        "previous_context": previous_context,
        "messages": items,
        "max_chars": max_chars,
    }
    return [system, HumanMessage(task, additional_kwargs={TASK_KEY: payload})]
