"""The read side: what a chat pipeline asks memory before it answers.

:class:`MemoryReader` searches (``asearch`` -> :class:`MemoryHits`, a :class:`MemoryHit` list) and recalls
(``arecall`` -> :class:`Recall`,
whose ``as_prompt()`` is the block to put into a prompt) over one vault, one memory per user
(:class:`UserDirectory`); :class:`MemoryLifecycle` reads, corrects and forgets entries one by one
(:class:`MemoryEntry`; pages of them, :class:`EntryPage`). The invoker exposes them all (``invoker.asearch``,
``invoker.aget_all``, ...); the LangChain and LangGraph doors are in :mod:`mycelian_agent.integrations`.
"""

from .hits import MemoryHit, MemoryHits, Recall, RecalledTurn, estimate_tokens
from .lifecycle import EntryPage, MemoryEntry, MemoryLifecycle
from .reader import MemoryReader
from .users import UserDirectory, check_user

__all__ = [
    "EntryPage",
    "MemoryEntry",
    "MemoryHit",
    "MemoryHits",
    "MemoryLifecycle",
    "MemoryReader",
    "Recall",
    "RecalledTurn",
    "UserDirectory",
    "check_user",
    "estimate_tokens",
]
