"""The MCP server: Mycelian's tool surface (plus deletes, idempotent add_entry and the batch write add_entries) on a
SQLite or PostgreSQL store.

Tool names, parameters, defaults and result shapes follow the upstream Mycelian memory server
(github.com/mycelian-ai/mycelian-memory) and docs/ARCHITECTURE.md ("Memory server contract"). Every result is one
text content (JSON, or plain text where upstream answers text); a JSON result is also the tool's structured content,
as its declared output schema (``results.py``) says. Every failure is an MCP error result whose text names the
problem. It is one module because the tool surface is one contract: every tool's name, parameters and result, in the
reference page's order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast, get_type_hints

from mcp.server.fastmcp import Context
from mcp.server.fastmcp.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import Field

from mycelian_agent.errors import ConfigError, InputError, MemoryServerError
from mycelian_agent.limits import ADD_ENTRIES_MAX_ITEMS, SEARCH_DEPTH_MAX
from mycelian_agent.memory_server.retrieval.pipeline import search
from mycelian_agent.memory_server.server.arguments import (
    Description,
    EntryId,
    EntryItem,
    IdempotencyKey,
    IfExists,
    MemoryId,
    OptionalVaultId,
    RawEntry,
    Summary,
    Tags,
    Timestamp,
    Title,
    VaultId,
)
from mycelian_agent.memory_server.server.hosts import transport_security
from mycelian_agent.memory_server.server.mcp_server import AppContext, MemoryServer, app_context, token_vaults
from mycelian_agent.memory_server.server.results import (
    DeletedEntry,
    DeletedMemory,
    Entry,
    EntryPage,
    EntryVersions,
    Memory,
    MemoryRef,
    Prompts,
    PromptTemplates,
    SearchResult,
    StoredContext,
    StoredEntries,
    StoredEntry,
    UpdatedEntry,
    Vault,
)
from mycelian_agent.memory_server.server.runtime import StoreHandle
from mycelian_agent.memory_server.storage.base import DenseIndex, MemoryStore
from mycelian_agent.memory_server.storage.sqlite.store import SYNC_MODES
from mycelian_agent.paths import is_postgres_url
from mycelian_agent.prompt_files import PROMPT_NAMES, read_prompt

__all__ = [
    "DEFAULT_PORT",
    "PROMPTS_VERSION",
    "VECTORS_WAIT",
    "AppContext",
    "MemoryServer",
    "create_server",
    "transport_security",
]

#: Upstream's port; the streamable HTTP endpoint is ``/mcp``.
DEFAULT_PORT = 11546
#: Seconds ``await_consistency`` with ``vectors`` waits for the memory's vectors at most (a client calls again).
VECTORS_WAIT = 30.0
#: ``version`` of the ``get_default_prompts`` answer.
PROMPTS_VERSION = "1"
_SUPPORTED_MEMORY_TYPES = ("chat",)
_CONTEXT_SUMMARY_RULES = (
    "Keep one context document per memory and replace it whole with put_context: durable facts, preferences, "
    "decisions and plans, a dated timeline and open questions, in Markdown with absolute dates. Keep facts from "
    "the previous document unless new messages change them, and stay within the size limit."
)
_INSTRUCTIONS = (
    "Long-term memory: vaults hold memories; a memory holds an append-only log of entries and a context document. "
    "Writes are stored before the tool answers. A new memory's context is a placeholder that says it is a default: "
    "treat it as empty."
)


# -- tools ---------------------------------------------------------------------------------------------------


_T = TypeVar("_T")


async def _store(ctx: Context, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``method(store, *args, **kwargs)`` on the session's store; the dict it answers is the tool's result, of the
    shape the tool's return annotation (results.py) describes."""
    return await app_context(ctx).store.call(method, *args, **kwargs)


async def _created_or_existing(
    if_exists: str, create: Callable[[], Awaitable[_T]], find: Callable[[], Awaitable[_T | None]]
) -> _T:
    """What ``create`` makes; with ``if_exists="return"``, what ``find`` reads when the title is taken (before the
    create, or after it lost a race with another session)."""
    if if_exists == "return" and (found := await find()) is not None:
        return found
    try:
        return await create()
    except MemoryServerError:
        if if_exists != "return" or (found := await find()) is None:
            raise
        return found


async def create_vault(
    ctx: Context, title: Title, description: Description = "", if_exists: IfExists = "error"
) -> Vault:
    """Create a vault (a container of memories). Returns {"vaultId", "title"}; a duplicate title is an error, or
    with if_exists "return" (ours) the existing vault."""

    async def find() -> Vault | None:
        vaults: list[Vault] = await _store(ctx, MemoryStore.list_vaults)
        return next((v for v in vaults if v["title"] == title), None)

    create = partial(_store, ctx, MemoryStore.create_vault, title, description)
    return await _created_or_existing(if_exists, create, find)


async def list_vaults(ctx: Context) -> list[Vault]:
    """List all vaults as a JSON array of {"vaultId", "title"}."""
    vaults = await _store(ctx, MemoryStore.list_vaults)
    allowed = token_vaults(ctx)
    return vaults if allowed is None else [v for v in vaults if v["title"] in allowed]


async def create_memory_in_vault(
    ctx: Context,
    vault_id: VaultId,
    title: Title,
    memory_type: Annotated[str, Field(description="Memory type, e.g. NOTES or chat")],
    description: Description = "",
    if_exists: IfExists = "error",
) -> Memory:
    """Create a memory in a vault. Returns the memory {memoryId, vaultId, title, description, memoryType,
    creationTime}; a duplicate title in the vault is an error, or with if_exists "return" (ours) the existing
    memory (its type and description as they are)."""

    async def find() -> Memory | None:
        memories: list[MemoryRef] = await _store(ctx, MemoryStore.list_memories, vault_id)
        found = next((m["memoryId"] for m in memories if m["title"] == title), None)
        return None if found is None else await _store(ctx, MemoryStore.get_memory, vault_id, found)

    create = partial(_store, ctx, MemoryStore.create_memory, vault_id, title, memory_type, description)
    return await _created_or_existing(if_exists, create, find)


async def list_memories(ctx: Context, vault_id: VaultId) -> list[MemoryRef]:
    """List the memories of a vault as a JSON array of {"memoryId", "title"}."""
    return await _store(ctx, MemoryStore.list_memories, vault_id)


async def get_memory(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> Memory:
    """Get one memory of a vault."""
    return await _store(ctx, MemoryStore.get_memory, vault_id, memory_id)


async def add_entry(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    raw_entry: RawEntry,
    summary: Summary,
    tags: Tags = None,
    conversation_time: Timestamp = None,
    idempotency_key: IdempotencyKey = None,
) -> StoredEntry:
    """Append an entry to a memory. It is stored before this returns: the answer is the stored entry plus
    "status": "stored" and "deduplicated" (true when idempotency_key matched an earlier identical write)."""
    return await _store(
        ctx, MemoryStore.add_entry, vault_id, memory_id, raw_entry, summary, tags, conversation_time, idempotency_key
    )


async def add_entries(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    entries: Annotated[
        list[EntryItem],
        Field(
            description=f"1-{ADD_ENTRIES_MAX_ITEMS} entries, appended in this order; each with add_entry's fields "
            "and rules"
        ),
    ],
) -> StoredEntries:
    """Append several entries to a memory in one transaction: all are stored before this returns, or none is
    (an invalid item or an idempotency conflict names the item, e.g. entries[3], and stores nothing). An item whose
    idempotency_key and raw_entry match an earlier write answers that entry, so a retried call stores nothing twice.
    Returns {"entries": [stored entry + "deduplicated"], "count", "stored", "deduplicated", "status": "stored"}."""
    return await _store(ctx, MemoryStore.add_entries, vault_id, memory_id, entries)


async def list_entries(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    limit: Annotated[int, Field(ge=1, le=50, description="Page size, 1-50")] = 25,
    before: Annotated[str | None, Field(description="RFC 3339: entries created before this (newest first)")] = None,
    after: Annotated[str | None, Field(description="RFC 3339: entries created after this (oldest first)")] = None,
) -> EntryPage:
    """List entries of a memory, newest first (with `after`, oldest first). `before` and `after` are exclusive
    of each other. Returns {"entries", "count", "applied_limit", "next_before", "next_after"}; a cursor is set
    when more entries exist in that direction."""
    return await _store(ctx, MemoryStore.list_entries, vault_id, memory_id, limit, before, after)


async def get_entry(ctx: Context, vault_id: VaultId, memory_id: MemoryId, entry_id: EntryId) -> Entry:
    """Get one entry of a memory."""
    return await _store(ctx, MemoryStore.get_entry, vault_id, memory_id, entry_id)


async def update_entry(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    entry_id: EntryId,
    raw_entry: RawEntry,
    summary: Summary,
    tags: Tags = None,
    conversation_time: Timestamp = None,
) -> UpdatedEntry:
    """Replace an entry's rawEntry, summary and tags (and conversationTime, when given) under the same entryId.
    The replaced version leaves search and the context snapshots' items that quote it, and stays in
    list_entry_versions. Returns the entry as now stored with its "version" (the first write is 1), "status":
    "updated" and "contextItemsRemoved"."""
    return await _store(
        ctx, MemoryStore.update_entry, vault_id, memory_id, entry_id, raw_entry, summary, tags, conversation_time
    )


async def list_entry_versions(ctx: Context, vault_id: VaultId, memory_id: MemoryId, entry_id: EntryId) -> EntryVersions:
    """List every version of an entry, oldest first and the current one last: {"entryId", "versions": [entry +
    "version" + "replacedAt" (null for the current one)], "count"}."""
    return await _store(ctx, MemoryStore.list_entry_versions, vault_id, memory_id, entry_id)


async def put_context(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    content: Annotated[str, Field(description="The whole context document (at most 65536 characters)")],
) -> StoredContext:
    """Store a new context snapshot (the whole document) for a memory; it becomes the current context and older
    snapshots stay searchable. Returns {"memoryId", "timestamp", "status": "stored", "chars"}."""
    return await _store(ctx, MemoryStore.put_context, vault_id, memory_id, content)


async def get_context(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> str:
    """Get the current (newest) context document of a memory as plain text. A new memory answers a placeholder
    that says it is a default: treat it as empty."""
    return await _store(ctx, MemoryStore.get_context, vault_id, memory_id)


async def await_consistency(
    ctx: Context,
    memory_id: MemoryId,
    vault_id: OptionalVaultId = None,
    vectors: Annotated[
        bool, Field(description="Also wait (up to 30 s) for the memory's vectors, which are written behind the entries")
    ] = False,
) -> str:
    """Wait until every earlier write to the memory is visible to search (by its words); answers "consistent".
    Vectors are written behind and not waited for unless ``vectors`` is true: then the answer is "consistent"
    once they are written too, or "vectors pending: N" if N entries still had none after 30 s (call again)."""
    runner = app_context(ctx).store
    await runner.barrier(MemoryStore.await_consistency, memory_id, vault_id)
    if vectors and await runner.call(lambda store: store.has_dense):
        await runner.wait_for_vectors(memory_id, VECTORS_WAIT)
        pending = (await runner.call(MemoryStore.vector_status, None, memory_id)).pending
        if pending:
            return f"vectors pending: {pending}"
    return "consistent"


async def search_memories(
    ctx: Context,
    memory_id: MemoryId,
    query: Annotated[str, Field(description="Search text (at most 2000 characters)")],
    top_ke: Annotated[int, Field(ge=0, le=25, description="Entries to return, 0-25 (0: contexts only)")] = 5,
    top_kc: Annotated[int, Field(ge=1, le=10, description="Context snapshots to return, 1-10")] = 2,
    include_raw_entries: Annotated[bool, Field(description="Include each entry's rawEntry")] = False,
    after: Annotated[str | None, Field(description="RFC 3339: only entries (conversation time) after this")] = None,
    before: Annotated[str | None, Field(description="RFC 3339: only entries (conversation time) before this")] = None,
    vault_id: OptionalVaultId = None,
    offset: Annotated[
        int,
        Field(ge=0, le=SEARCH_DEPTH_MAX - 25, description="Entries to skip: the next page of the ranking starts here"),
    ] = 0,
) -> SearchResult:
    """Search a memory's entries and context snapshots. Returns {"entries": [{entryId, summary, rawEntry?, score,
    match, creationTime, conversationTime?, tags}], "count", "latestContext", "latestContextTimestamp", "contexts":
    [{context, timestamp, score}]}, best first. score is a relevance from 0 to 1, on the same scale in every
    search (threshold it): the share of the query's informative word weight the entry holds (or that the turn
    before it, asking, holds: 0.8 of it), at most 0.5 for an entry found by meaning alone; it never rises down the
    list. With offset, the places past the 50th continue one deeper ranking, each entry once, scores continuing
    from the page before. match is "words" when the query's words led to the entry (in it
    or in the turns beside it) and "meaning" when only semantic similarity did (servers with embeddings): entries
    that are all "meaning" mean no entry shares a word with the query, and they may be unrelated."""
    return await _store(
        ctx,
        search,
        memory_id,
        query,
        top_ke,
        top_kc,
        include_raw_entries,
        after=after,
        before=before,
        vault_id=vault_id,
        offset=offset,
    )


async def get_default_prompts(
    ctx: Context, memory_type: Annotated[str, Field(description="Memory type; supported: chat")]
) -> Prompts:
    """Get the default prompt templates for a memory type: {"version", "context_summary_rules", "templates":
    {"context_prompt", "entry_capture_prompt", "summary_prompt"}}."""
    if not isinstance(memory_type, str) or memory_type.strip().lower() not in _SUPPORTED_MEMORY_TYPES:
        supported = ", ".join(_SUPPORTED_MEMORY_TYPES)
        raise InputError(f"unsupported memory_type {memory_type!r}: supported memory types are {supported}")
    directory = app_context(ctx).prompts_dir
    templates = cast(PromptTemplates, {name: read_prompt(name, directory) for name in sorted(PROMPT_NAMES)})
    return {"version": PROMPTS_VERSION, "context_summary_rules": _CONTEXT_SUMMARY_RULES, "templates": templates}


async def delete_entry(ctx: Context, vault_id: VaultId, memory_id: MemoryId, entry_id: EntryId) -> DeletedEntry:
    """Delete one entry of a memory and everything derived from it: its versions, index rows, vector, and the items
    of every context snapshot that quote it (unless another entry says the same). Returns {"entryId", "status":
    "deleted", "contextItemsRemoved": n}."""
    return await _store(ctx, MemoryStore.delete_entry, vault_id, memory_id, entry_id)


async def delete_memory(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> DeletedMemory:
    """Delete a memory with all its entries and context snapshots. Returns {"memoryId", "status": "deleted",
    "entries": n}."""
    return await _store(ctx, MemoryStore.delete_memory, vault_id, memory_id)


# The tools, in the reference page's order; the flags are MCP tool annotations (read-only / destructive hints).
#
# The pattern a tool follows (a new tool too):
# - its return annotation is its result's shape: a TypedDict of results.py (or a list of one) for a JSON result,
#   which declares the tool's outputSchema and answers the value as structured content besides the JSON text
#   (MemoryServer.call_tool, _answer); `str` for a plain-text result (upstream's get_context, await_consistency),
#   which declares none. The function returns the value itself, never JSON text;
# - a failure is raised (InputError for a bad argument, MemoryServerError for an unknown id or a conflict,
#   ToolError): every exception becomes an MCP error result (isError) whose text names the problem, which
#   langchain-mcp-adapters raises as a ToolException (or hands the model as an error ToolMessage) and
#   MemoryConnection.call as MemoryServerError; a tool never answers an error as a result;
# - an optional parameter beyond upstream's keeps upstream's behaviour as its default (clients test for it with
#   MemoryConnection.parameters).
# tests/test_mcp_structured.py checks every tool here against its schema over stdio and HTTP.
_TOOLS: tuple[tuple[Callable[..., Any], bool, bool], ...] = (
    (create_vault, False, False),
    (list_vaults, True, False),
    (create_memory_in_vault, False, False),
    (list_memories, True, False),
    (get_memory, True, False),
    (add_entry, False, False),
    (add_entries, False, False),  # ours: a batch of add_entry in one transaction
    (list_entries, True, False),
    (get_entry, True, False),
    (update_entry, False, True),  # ours (issue 39): a new version under the same entryId
    (list_entry_versions, True, False),  # ours (issue 39)
    (put_context, False, False),
    (get_context, True, False),
    (await_consistency, True, False),
    (search_memories, True, False),
    (get_default_prompts, True, False),
    (delete_entry, False, True),
    (delete_memory, False, True),
)


@lru_cache(maxsize=1)
def _tool_definitions() -> tuple[Tool, ...]:
    # Building the argument models and schemas costs ~50 ms; they hold no server state, so build them once.
    tools = []
    for fn, read_only, destructive in _TOOLS:
        annotations = ToolAnnotations(readOnlyHint=read_only, destructiveHint=destructive, openWorldHint=False)
        # A JSON result is typed (an output schema); a text result (-> str) stays one text content, as upstream's.
        structured = get_type_hints(fn).get("return") is not str
        tools.append(Tool.from_function(fn, annotations=annotations, structured_output=structured))
    return tuple(tools)


@lru_cache(maxsize=1)
def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mycelian-agent")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def create_server(
    db_path: str | Path,
    *,
    token: str | None = None,
    prompts_dir: str | Path | None = None,
    synchronous: str = "NORMAL",
    embeddings: bool | None = None,
    embeddings_model: str | None = None,
    embeddings_threads: int = 0,
    embeddings_writes: str = "behind",
    embeddings_hnsw_min: int | None = None,
    embeddings_queries: str = "auto",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    log_level: str = "WARNING",
    allowed_hosts: Sequence[str] = (),
) -> MemoryServer:
    """Build the memory server for the SQLite database at ``db_path`` (``":memory:"`` allowed) or the PostgreSQL
    database a ``postgresql://`` URL names.

    Nothing is opened here: each MCP session (stdio, in-memory, HTTP) opens the shared database in the server's
    lifespan, and the last one closes it. ``token`` is used by :func:`create_http_app` (HTTP only).
    ``synchronous`` is ``"NORMAL"`` (survives a process kill) or ``"FULL"`` (also survives power loss).
    ``embeddings`` fuses dense vectors with BM25 (None, the default: as ``retrieval.dense.index.dense_by_default()``
    says; False: BM25 only), on ``embeddings_model`` (default ``auto``: the first installed of ``encoders.MODELS``),
    batches encoded on ``embeddings_threads`` (0: one per core), e5-small's queries by ``embeddings_queries``
    (``encoders.QUERY_ENCODERS``), vectors written ``embeddings_writes`` (``"behind"``: by a background thread after
    each write commits, ``"inline"``: inside it; see ``retrieval/dense/index.py``), memories of
    ``embeddings_hnsw_min`` vectors or more searched through pgvector's HNSW index on a PostgreSQL database that has
    it (None: ``retrieval.dense.index.HNSW_MIN``).
    ``host`` and ``allowed_hosts`` set the HTTP Host/Origin checks (see :func:`transport_security`).
    """
    if synchronous.upper() not in SYNC_MODES:
        raise ConfigError(f"synchronous must be one of {', '.join(SYNC_MODES)} (got {synchronous!r})")
    dense_factory: Callable[[], DenseIndex | None] | None = None
    if embeddings is None:
        from mycelian_agent.memory_server.retrieval.dense.index import dense_by_default

        embeddings = dense_by_default()
    if embeddings:
        from mycelian_agent.memory_server.retrieval.dense.index import HNSW_MIN, check_encoder_options, load_dense_index

        model = check_encoder_options(embeddings_model, embeddings_threads, embeddings_writes, embeddings_queries)
        dense_factory = partial(
            load_dense_index,
            model,
            batch_threads=embeddings_threads,
            writes=embeddings_writes,
            hnsw_min=HNSW_MIN if embeddings_hnsw_min is None else embeddings_hnsw_min,
            queries=embeddings_queries,
        )
    if is_postgres_url(db_path):
        from mycelian_agent.memory_server.storage.postgres.store import require_psycopg

        require_psycopg()
    handle = StoreHandle(db_path, synchronous=synchronous.upper(), dense_factory=dense_factory)
    server = MemoryServer(
        handle,
        tools=list(_tool_definitions()),
        token=token,
        prompts_dir=Path(prompts_dir) if prompts_dir is not None else None,
        name="mycelian-memory",
        instructions=_INSTRUCTIONS,
        host=host,
        port=port,
        streamable_http_path="/mcp",
        log_level=log_level.upper(),
        transport_security=transport_security(host, allowed_hosts),
    )
    server._mcp_server.version = _package_version()  # what initialize reports (the SDK would report its own)
    return server
