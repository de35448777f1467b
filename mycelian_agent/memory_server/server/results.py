"""The shapes of the memory tools' JSON results, as typed dicts: what each tool's MCP ``outputSchema`` says.

A tool annotated with one of these (or a list of them) declares its output schema, derived from the type by the MCP
SDK (``Tool.from_function(structured_output=True)``), and answers its result twice: as the JSON text content upstream
clients parse, and as ``structuredContent`` (a list wrapped as ``{"result": [...]}``, the SDK's rule for a result
that is not an object). The store builds the dicts (``storage/rows.py``, ``retrieval/pipeline.py``); these types
only describe them, so a field the store adds later is allowed by the schemas (they do not forbid extra keys)
until it is written here too.
"""

# No "from __future__ import annotations": TypedDict tells NotRequired keys only from evaluated annotations.
from typing import Literal, NotRequired

from typing_extensions import TypedDict

__all__ = [
    "BatchEntry",
    "DeletedEntry",
    "DeletedMemory",
    "Entry",
    "EntryPage",
    "EntryVersion",
    "EntryVersions",
    "FoundContext",
    "FoundEntry",
    "Memory",
    "MemoryRef",
    "PromptTemplates",
    "Prompts",
    "SearchResult",
    "StoredContext",
    "StoredEntries",
    "StoredEntry",
    "UpdatedEntry",
    "Vault",
]


class Vault(TypedDict):
    """A vault: ``create_vault``'s answer and an item of ``list_vaults``."""

    vaultId: str
    title: str


class MemoryRef(TypedDict):
    """An item of ``list_memories``."""

    memoryId: str
    title: str


class Memory(TypedDict):
    """A memory: ``create_memory_in_vault``'s and ``get_memory``'s answer."""

    memoryId: str
    vaultId: str
    title: str
    description: str
    memoryType: str
    creationTime: str


class Entry(TypedDict):
    """An entry of a memory's log (``get_entry``, ``list_entries``); conversationTime only when it was given."""

    entryId: str
    memoryId: str
    vaultId: str
    creationTime: str
    conversationTime: NotRequired[str]
    rawEntry: str
    summary: str
    tags: dict[str, str]
    version: int


class StoredEntry(Entry):
    """``add_entry``'s answer: the stored entry; deduplicated when its idempotency key matched an earlier write."""

    status: Literal["stored"]
    deduplicated: bool


class BatchEntry(Entry):
    """An entry of ``add_entries``' answer."""

    deduplicated: bool


class StoredEntries(TypedDict):
    """``add_entries``' answer: every entry, in the given order, with the counts stored and deduplicated."""

    entries: list[BatchEntry]
    count: int
    stored: int
    deduplicated: int
    status: Literal["stored"]


class EntryPage(TypedDict):
    """``list_entries``' answer: a page of entries and the cursor of the next page in its direction (or null)."""

    entries: list[Entry]
    count: int
    applied_limit: int
    next_before: str | None
    next_after: str | None


class StoredContext(TypedDict):
    """``put_context``'s answer."""

    memoryId: str
    timestamp: str
    status: Literal["stored"]
    chars: int


class FoundEntry(TypedDict):
    """An entry found by ``search_memories``: score is a 0-1 relevance; rawEntry only with include_raw_entries."""

    entryId: str
    summary: str
    rawEntry: NotRequired[str]
    score: float
    match: Literal["words", "meaning"]
    creationTime: str
    conversationTime: NotRequired[str]
    tags: dict[str, str]


class FoundContext(TypedDict):
    """A context snapshot found by ``search_memories``."""

    context: str
    timestamp: str
    score: float


class SearchResult(TypedDict):
    """``search_memories``' answer, best first; pendingVectors (ours) when some entries had no vector yet."""

    entries: list[FoundEntry]
    count: int
    latestContext: str
    latestContextTimestamp: str | None
    contexts: list[FoundContext]
    pendingVectors: NotRequired[int]


class PromptTemplates(TypedDict):
    """The prompt templates of ``get_default_prompts``."""

    context_prompt: str
    entry_capture_prompt: str
    summary_prompt: str


class Prompts(TypedDict):
    """``get_default_prompts``' answer."""

    version: str
    context_summary_rules: str
    templates: PromptTemplates


class UpdatedEntry(Entry):
    """``update_entry``'s answer: the entry as now stored, and how many context items only the replaced text held."""

    status: Literal["updated"]
    contextItemsRemoved: int


class EntryVersion(Entry):
    """One version of an entry: when a later version replaced it (None for the current one)."""

    replacedAt: str | None


class EntryVersions(TypedDict):
    """``list_entry_versions``' answer: the versions oldest first, the current one last."""

    entryId: str
    versions: list[EntryVersion]
    count: int


class DeletedEntry(TypedDict):
    """``delete_entry``'s answer."""

    entryId: str
    status: Literal["deleted"]
    contextItemsRemoved: int


class DeletedMemory(TypedDict):
    """``delete_memory``'s answer: entries is how many entries the memory held."""

    memoryId: str
    status: Literal["deleted"]
    entries: int
