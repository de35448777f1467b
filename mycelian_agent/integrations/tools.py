"""``search_memory`` and ``manage_memory``: LangChain tools for tool-calling agents, to read and to keep a user's
memory.

    tools = [make_search_memory_tool(invoker), make_manage_memory_tool(invoker)]  # user from the config's user_id
    agent = create_react_agent(model, tools)                 # or bind them: model.bind_tools(tools)
    await agent.ainvoke({"messages": [...]}, {"configurable": {"user_id": "alice", "thread_id": "t1"}})

``search_memory``'s answer is the recall block (:meth:`~mycelian_agent.recall.Recall.as_prompt`): the context
document's relevant notes and the best matching turns with their neighbours, dated, within ``budget_tokens``.
``manage_memory`` creates, updates or deletes one memory item of the user (LangMem's ``create_manage_memory_tool``
is the model): an entry of the user's memory, found by search and recall like the conversation's turns.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel, Field

from .._sync import run_sync
from ..agent.lifecycle_calls import LifecycleCalls
from ..errors import ConfigError, InputError
from ..limits import QUERY_MAX_CHARS
from ..recall import check_user
from ..recall.lifecycle import check_entry_id
from ..recall.reader import MIN_BUDGET_TOKENS, check_min_score
from ._common import config_user, memory_parts

__all__ = [
    "DEFAULT_DESCRIPTION",
    "MANAGE_DESCRIPTION",
    "ManageMemoryInput",
    "SearchMemoryInput",
    "make_manage_memory_tool",
    "make_search_memory_tool",
]

DEFAULT_DESCRIPTION = (
    "Search the user's long-term memory of earlier conversations: facts they told you, their preferences, plans "
    "and what happened when. Call it before answering anything that may depend on the past. The answer lists the "
    "relevant notes and dated turns ('[date] speaker: words')."
)


class SearchMemoryInput(BaseModel):
    """The arguments of ``search_memory``."""

    query: str = Field(
        description="What to look for, as a short question or keywords (e.g. 'where does the user's dog like to go')",
        max_length=QUERY_MAX_CHARS,
    )


def make_search_memory_tool(
    memory: Any,
    *,
    user: str | None = None,
    budget_tokens: int = 1500,
    name: str = "search_memory",
    description: str = DEFAULT_DESCRIPTION,
    min_score: float | None = None,
    show_ids: bool = False,
) -> StructuredTool:
    """A ``search_memory(query)`` tool over ``memory`` (the invoker ``build_agent`` yields, or a ``MemoryReader``)
    answering with the recall block of at most ``budget_tokens`` (estimated), built from the hits whose relevance
    score is at least ``min_score`` (0-1, None: every hit; see ``MemoryHit.score``). ``show_ids``: the block is
    followed by the ids of the hits it shows (a line each, beyond the budget), which ``manage_memory`` takes to
    update or delete them.

    The user is the calling graph's ``config["configurable"]["user_id"]`` (the tool receives the config LangGraph
    passes to it), else ``user``, else the invoker's own memory; a user without a memory gets the empty block (no
    memory is created). An empty query is reported to the model as the tool's answer (so it can ask again); a user
    that cannot name a memory raises :class:`~mycelian_agent.errors.InputError`.
    """
    reader, loop = memory_parts(memory)
    if user is not None:
        check_user(user)
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < MIN_BUDGET_TOKENS:
        raise InputError(f"budget_tokens must be an integer of at least {MIN_BUDGET_TOKENS}, got {budget_tokens!r}")
    min_score = check_min_score(min_score)

    async def search_memory(query: str, config: RunnableConfig) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ToolException("query is empty: call search_memory with what to look for")
        recall = await reader.arecall(
            query, user=config_user(config, user), budget_tokens=budget_tokens, min_score=min_score
        )
        hits = [turn for turn in recall.turns if turn.hit]
        if not show_ids or not hits:
            return recall.as_prompt()
        return (
            recall.as_prompt()
            + "\nIds of the entries found (for manage_memory):\n"
            + "".join(f"- {turn.entry_id}: {_clip(turn.text)}\n" for turn in hits)
        )

    def search_memory_sync(query: str, config: RunnableConfig) -> str:
        return run_sync(search_memory(query, config), loop)

    return StructuredTool.from_function(
        func=search_memory_sync,
        coroutine=search_memory,
        name=name,
        description=description,
        args_schema=SearchMemoryInput,
        handle_tool_error=True,
    )


def _clip(text: str, width: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


MANAGE_DESCRIPTION = (
    "Create, update or delete a memory of the user that should persist across conversations. Include the memory's "
    "id (from search_memory or an earlier create) when updating or deleting it; omit it when creating one (the id "
    "is made for you). Call it when the user "
    "tells you something to remember (a preference, a fact about them, a plan), corrects something you remember "
    "(update), or asks you to forget it (delete)."
)


class ManageMemoryInput(BaseModel):
    """The arguments of ``manage_memory``."""

    content: str | None = Field(default=None, description="The memory's text (for create and update).")
    action: Literal["create", "update", "delete"] = Field(default="create", description="What to do.")
    id: str | None = Field(default=None, description="The memory's id (for update and delete).")


def make_manage_memory_tool(
    invoker: Any, *, user: str | None = None, name: str = "manage_memory", description: str = MANAGE_DESCRIPTION
) -> StructuredTool:
    """A ``manage_memory(content, action, id)`` tool over ``invoker`` (the invoker ``build_agent`` yields: its
    model writes a memory's summary and tags) that creates (``aadd``), updates (``aupdate``: a new version under
    the same id) or deletes (``adelete``) one memory item of the user, and answers ``"created memory <id>"``,
    ``"updated memory <id>"`` or ``"deleted memory <id>"``.

    The user is the calling graph's ``config["configurable"]["user_id"]``, else ``user``, else the invoker's own
    memory; an id of another user's memory is not found, so it is never changed. What the model got wrong (no
    content, no id, an id that is not the user's) is the tool's answer, for it to correct; a user that cannot
    name a memory raises :class:`~mycelian_agent.errors.InputError`.
    """
    if not isinstance(invoker, LifecycleCalls):
        raise ConfigError(
            f"make_manage_memory_tool needs the invoker build_agent(...) yields (its model writes a "
            f"memory's summary and tags), got {type(invoker).__name__}"
        )
    _, loop = memory_parts(invoker)
    if user is not None:
        check_user(user)

    async def manage_memory(
        config: RunnableConfig,
        content: str | None = None,
        action: Literal["create", "update", "delete"] = "create",
        id: str | None = None,
    ) -> str:
        whose = config_user(config, user)
        if action in ("create", "update") and (not isinstance(content, str) or not content.strip()):
            raise ToolException(f"content is empty: {action} needs the memory's text")
        if action in ("update", "delete") and not id:
            raise ToolException(
                f"id is missing: {action} needs the id of the memory (from 'created memory <id>' or search_memory)"
            )
        if action == "create" and id:
            raise ToolException("create makes a new memory and takes no id; use action 'update' to change one")
        try:
            if action == "create":
                entry = await invoker.lifecycle.aadd(content or "", whose)
                return f"created memory {entry.entry_id}"
            entry_id = check_entry_id(id)
            if action == "update":
                await invoker.lifecycle.aupdate(entry_id, content or "", whose)
                return f"updated memory {entry_id}"
            if action == "delete":
                await invoker.lifecycle.adelete(entry_id, whose)
                return f"deleted memory {entry_id}"
        except InputError as exc:  # an id or a text the model got wrong: its answer, to correct
            raise ToolException(str(exc)) from exc
        raise ToolException(f"unknown action {action!r}: use create, update or delete")

    def manage_memory_sync(
        config: RunnableConfig,
        content: str | None = None,
        action: Literal["create", "update", "delete"] = "create",
        id: str | None = None,
    ) -> str:
        return run_sync(manage_memory(config, content, action, id), loop)

    return StructuredTool.from_function(
        func=manage_memory_sync,
        coroutine=manage_memory,
        name=name,
        description=description,
        args_schema=ManageMemoryInput,
        handle_tool_error=True,
    )
