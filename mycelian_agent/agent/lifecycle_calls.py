"""The invoker's read, correct and forget calls (``aget_all``, ``aget``, ``aupdate``, ``ahistory``, ``adelete``,
``adelete_user``) and their sync twins: thin doors onto :class:`~mycelian_agent.recall.lifecycle.MemoryLifecycle`,
with the invoker's model writing a correction's summary and tags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._sync import sync_twin

if TYPE_CHECKING:
    import asyncio

    from ..recall import MemoryReader
    from ..recall.lifecycle import EntryPage, MemoryEntry, MemoryLifecycle
    from .graph import MycelianMemoryAgent

__all__ = ["LifecycleCalls"]


class LifecycleCalls:
    """Read, correct, forget one user's entries (``user=None``: the invoker's own memory); mixed into
    :class:`~mycelian_agent.agent.invoker.MycelianAgentInvoker`. An entry of another user's memory is never
    returned, changed or deleted; reads create no memory."""

    if TYPE_CHECKING:
        agent: MycelianMemoryAgent
        _forgotten: dict[str, str]

        def _reader(self) -> MemoryReader: ...

        @property
        def loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def lifecycle(self) -> MemoryLifecycle:
        """What these calls use: the reader's connection and users, and the invoker's model for new texts."""
        from ..recall.lifecycle import MemoryLifecycle

        return MemoryLifecycle(self._reader(), self.agent.awrite_entry_fields)

    async def aget_all(self, user: str | None = None, limit: int = 25, cursor: str | None = None) -> EntryPage:
        """``user``'s entries, newest first: a page of at most ``limit`` (1-1000) whose ``next_cursor``, given as
        ``cursor``, reads the next one. See :meth:`MemoryLifecycle.aget_all`."""
        return await self.lifecycle.aget_all(user, limit, cursor)

    async def aget(self, entry_id: str, user: str | None = None) -> MemoryEntry:
        """The entry ``entry_id`` of ``user``'s memory (:class:`InputError` naming it when that memory does not
        hold it)."""
        return await self.lifecycle.aget(entry_id, user)

    async def aupdate(self, entry_id: str, text: str, user: str | None = None) -> MemoryEntry:
        """Correct the entry ``entry_id``: ``text`` becomes its new version (same id; summary and tags written by
        the invoker's model); the old version leaves search and recall and stays in :meth:`ahistory`."""
        return await self.lifecycle.aupdate(entry_id, text, user)

    async def ahistory(self, entry_id: str, user: str | None = None) -> list[MemoryEntry]:
        """Every version of the entry ``entry_id``, oldest first (the current one last)."""
        return await self.lifecycle.ahistory(entry_id, user)

    async def adelete(self, entry_id: str, user: str | None = None) -> dict[str, Any]:
        """Forget the entry ``entry_id`` of ``user``'s memory, with its versions and what was derived from it."""
        return await self.lifecycle.adelete(entry_id, user)

    async def adelete_user(self, user: str) -> dict[str, Any]:
        """Forget ``user``: their whole memory (entries, versions, context documents). A thread of this invoker
        bound to that user is refused from then on (:class:`InputError`), instead of failing at the server."""
        answer = await self.lifecycle.adelete_user(user)
        self._forgotten[str(answer["memoryId"])] = user
        return answer

    get_all = sync_twin(aget_all)
    get = sync_twin(aget)
    update = sync_twin(aupdate)
    history = sync_twin(ahistory)
    delete = sync_twin(adelete)
    delete_user = sync_twin(adelete_user)
