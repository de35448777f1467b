"""``search_memory``: a LangChain tool for tool-calling agents that answers with what memory holds.

    tool = make_search_memory_tool(invoker)                 # user from config["configurable"]["user_id"]
    agent = create_react_agent(model, [tool])                # or bind it: model.bind_tools([tool])
    await agent.ainvoke({"messages": [...]}, {"configurable": {"user_id": "alice", "thread_id": "t1"}})

The tool's answer is the recall block (:meth:`~mycelian_agent.recall.Recall.as_prompt`): the context document's
relevant notes and the best matching turns with their neighbours, dated, within ``budget_tokens``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel, Field

from .._sync import run_sync
from ..errors import InputError
from ..limits import QUERY_MAX_CHARS
from ..recall import check_user
from ..recall.reader import MIN_BUDGET_TOKENS, check_min_score
from ._common import config_user, memory_parts

__all__ = ["SearchMemoryInput", "make_search_memory_tool", "DEFAULT_DESCRIPTION"]

DEFAULT_DESCRIPTION = (
    "Search the user's long-term memory of earlier conversations: facts they told you, their preferences, plans "
    "and what happened when. Call it before answering anything that may depend on the past. The answer lists the "
    "relevant notes and dated turns ('[date] speaker: words')."
)


class SearchMemoryInput(BaseModel):
    """The arguments of ``search_memory``."""

    query: str = Field(description="What to look for, as a short question or keywords (e.g. 'where does the user's "
                                   "dog like to go')", max_length=QUERY_MAX_CHARS)


def make_search_memory_tool(memory: Any, *, user: str | None = None, budget_tokens: int = 1500,
                            name: str = "search_memory", description: str = DEFAULT_DESCRIPTION,
                            min_score: float | None = None) -> StructuredTool:
    """A ``search_memory(query)`` tool over ``memory`` (the invoker ``build_agent`` yields, or a ``MemoryReader``)
    answering with the recall block of at most ``budget_tokens`` (estimated), built from the hits whose relevance
    score is at least ``min_score`` (0-1, None: every hit; see ``MemoryHit.score``).

    The user is the calling graph's ``config["configurable"]["user_id"]`` (the tool receives the config LangGraph
    passes to it), else ``user``, else the invoker's own memory. An empty query is reported to the model as the
    tool's answer (so it can ask again); an unknown user (``create_users=False``) or a user that cannot name a
    memory raises :class:`~mycelian_agent.errors.InputError`.
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
        recall = await reader.arecall(query, user=config_user(config, user), budget_tokens=budget_tokens,
                                      min_score=min_score)
        return recall.as_prompt()

    def search_memory_sync(query: str, config: RunnableConfig) -> str:
        return run_sync(search_memory(query, config), loop)

    return StructuredTool.from_function(func=search_memory_sync, coroutine=search_memory, name=name,
                                        description=description, args_schema=SearchMemoryInput,
                                        handle_tool_error=True)
