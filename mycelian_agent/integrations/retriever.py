"""MycelianRetriever: a LangChain retriever over a user's Mycelian memory.

Each search hit becomes a ``Document`` whose ``page_content`` is the stored message (verbatim) and whose metadata
says who said it, when, in which thread and how well it matched::

    retriever = MycelianRetriever(memory=invoker, k=5)
    docs = await retriever.ainvoke("where does my dog like to go?", {"configurable": {"user_id": "alice"}})

The user is ``config["configurable"]["user_id"]`` when the call has one (LangGraph passes the graph's config to
every runnable inside it), else the ``user`` field, else the invoker's own memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from pydantic import Field, PrivateAttr, field_validator

from .._sync import run_sync
from ..recall import MemoryHit, MemoryReader, check_user
from ..recall.reader import check_min_score, check_top_k
from ._common import config_user, memory_parts

__all__ = ["MycelianRetriever", "hit_document"]


def hit_document(hit: MemoryHit) -> Document:
    """A search hit as a LangChain ``Document``: the verbatim text, and metadata ``entry_id``, ``summary``,
    ``speaker``, ``role``, ``time``, ``thread``, ``score`` (the 0-1 relevance of :attr:`MemoryHit.score`), ``match``
    (``"words"`` or ``"meaning"``, see
    :attr:`MemoryHit.match`), ``user``, ``memory_id`` (``id`` is the entry id)."""
    return Document(
        id=hit.entry_id,
        page_content=hit.text,
        metadata={
            "entry_id": hit.entry_id,
            "summary": hit.summary,
            "speaker": hit.speaker,
            "role": hit.role,
            "time": hit.time,
            "thread": hit.thread,
            "score": hit.score,
            "match": hit.match,
            "user": hit.user,
            "memory_id": hit.memory_id,
        },
    )


class MycelianRetriever(BaseRetriever):
    """The ``k`` entries of a user's memory that best match the query, as Documents, best first.

    ``memory`` is the invoker ``build_agent`` yields (or a :class:`~mycelian_agent.recall.MemoryReader`); ``user``
    the memory read when the call's config names no ``user_id`` (None: the invoker's own memory); ``k`` 1-100;
    ``min_score`` (0-1, None: no threshold) leaves out documents whose ``metadata["score"]`` is below it.
    The sync ``invoke`` runs on the invoker's event loop (its MCP session is bound to it), so it works from plain
    code and from LangGraph's worker threads, not inside a running loop (use ``ainvoke`` there).
    An empty query or an unknown user (when ``build_agent(create_users=False)``) raises
    :class:`~mycelian_agent.errors.InputError`.
    """

    memory: Any = Field(exclude=True, repr=False)
    user: str | None = None
    k: int = 4
    min_score: float | None = None

    @field_validator("k", mode="before")
    @classmethod
    def _check_k(cls, value: Any) -> int:
        # Before pydantic's coercion, which would read True as 1 and "5" as 5: InputError naming the field.
        return check_top_k(value, "k")

    @field_validator("min_score", mode="before")
    @classmethod
    def _check_min_score(cls, value: Any) -> float | None:
        return check_min_score(value)

    _reader: MemoryReader = PrivateAttr()
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        """Resolve ``memory`` to its reader and loop; check ``user``."""
        self._reader, self._loop = memory_parts(self.memory)
        if self.user is not None:
            check_user(self.user)

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Documents for ``input``; the user from ``config["configurable"]["user_id"]``, else the ``user`` field."""
        kwargs.setdefault("user", config_user(config, self.user))
        return super().invoke(input, config, **kwargs)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """Async :meth:`invoke`."""
        kwargs.setdefault("user", config_user(config, self.user))
        return await super().ainvoke(input, config, **kwargs)

    async def _documents(self, query: str, user: str | None) -> list[Document]:
        hits = await self._reader.asearch(query, user=user, top_k=self.k, min_score=self.min_score)
        return [hit_document(hit) for hit in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, user: str | None = None
    ) -> list[Document]:
        return await self._documents(query, user if user is not None else self.user)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, user: str | None = None
    ) -> list[Document]:
        return run_sync(self._documents(query, user if user is not None else self.user), self._loop)
