"""The MCP server: Mycelian's tool surface (plus deletes, idempotent add_entry and the batch write add_entries) on a
SQLite or PostgreSQL store.

Tool names, parameters, defaults and result shapes follow the upstream Mycelian memory server
(github.com/mycelian-ai/mycelian-memory) and docs/ARCHITECTURE.md ("Memory server contract"). Every result is one
text content; every failure is an MCP error result whose text names the problem.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Annotated, Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.fastmcp.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import NotRequired, TypedDict

from mycelian_agent.errors import ConfigError, InputError
from mycelian_agent.limits import ADD_ENTRIES_MAX_ITEMS, RAW_ENTRY_MAX_CHARS, SEARCH_DEPTH_MAX, SUMMARY_MAX_CHARS, TAGS_MAX_KEYS
from mycelian_agent.prompt_files import PROMPT_NAMES, read_prompt
from mycelian_agent.memory_server.server.runtime import StoreHandle, StoreRunner
from mycelian_agent.memory_server.server.access import vaults_of
from mycelian_agent.memory_server.server.hosts import transport_security
from mycelian_agent.memory_server.retrieval.pipeline import search
from mycelian_agent.memory_server.storage.base import DenseIndex, MemoryStore
from mycelian_agent.memory_server.storage import is_postgres_url
from mycelian_agent.memory_server.storage.sqlite.store import SYNC_MODES

__all__ = ["DEFAULT_PORT", "PROMPTS_VERSION", "VECTORS_WAIT", "AppContext", "MemoryServer", "create_server", "transport_security"]

#: Upstream's port; the streamable HTTP endpoint is ``/mcp``.
DEFAULT_PORT = 11546
#: Seconds ``await_consistency`` with ``vectors`` waits for the memory's vectors at most (a client calls again).
VECTORS_WAIT = 30.0
#: ``version`` of the ``get_default_prompts`` answer.
PROMPTS_VERSION = "1"
_SUPPORTED_MEMORY_TYPES = ("chat",)
# Tools whose vault_id is optional upstream; required over HTTP (MemoryServer.require_vault).
_VAULT_SCOPED = ("search_memories",)
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


@dataclass(frozen=True)
class AppContext:
    """What each MCP session's lifespan yields to the tools."""

    store: StoreRunner
    prompts_dir: Path | None


class MemoryServer(FastMCP[AppContext]):
    """FastMCP with strict argument checking and a store shared by all sessions.

    FastMCP validates arguments in pydantic's lax mode (``"5"`` becomes ``5``, a JSON string becomes an object),
    and ignores unknown arguments. This server first checks the raw arguments strictly and rejects unknown ones,
    so a wrong type is an error that names the argument, never a silent conversion.
    """

    def __init__(
        self, handle: StoreHandle, *, tools: list[Tool], token: str | None, prompts_dir: Path | None, **settings: Any
    ):
        super().__init__(lifespan=_lifespan, tools=tools, **settings)
        self.handle = handle
        self.token = token
        self.prompts_dir = prompts_dir
        self._strict_models: dict[str, type[BaseModel]] = {t.name: t.fn_metadata.arg_model for t in tools}
        #: Whether search_memories must name its vault (set for HTTP, where several clients share the server).
        self.require_vault = False

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Check ``arguments`` strictly and against the token's vaults, then run the tool (errors become MCP error
        results)."""
        model = self._strict_models.get(name)
        if model is not None:
            _check_arguments(name, model, arguments)
        if self.require_vault and name in _VAULT_SCOPED and arguments.get("vault_id") is None:
            raise ToolError(f"{name} needs vault_id on this server: a search is confined to the vault it names "
                            "(pass the UUID of the memory's vault)")
        allowed = _token_vaults(self.get_context())
        if allowed is not None and model is not None:
            await self._check_vault_access(name, model, arguments, allowed)
        return await super().call_tool(name, arguments)

    async def _check_vault_access(
        self, name: str, model: type[BaseModel], arguments: dict[str, Any], allowed: frozenset[str]
    ) -> None:
        # A limited token sees another vault exactly as a vault that does not exist.
        if name == "create_vault":
            if arguments.get("title") not in allowed:
                raise ToolError(f"this token may not create vault {arguments.get('title')!r}: it is limited to the "
                                f"vaults {', '.join(sorted(allowed))} (the server's tokens file)")
            return
        if "vault_id" not in model.model_fields:
            return
        vault_id = arguments.get("vault_id")
        if vault_id is None:
            raise ToolError(f"{name} needs vault_id with this token: it is limited to the vaults "
                            f"{', '.join(sorted(allowed))}")
        runner = self.get_context().request_context.lifespan_context.store
        titles = {v["vaultId"]: v["title"] for v in await runner.call(MemoryStore.list_vaults)}
        if titles.get(vault_id) not in allowed:
            raise ToolError(f"vault {vault_id} not found")

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[StoreRunner]:
        """Keep the database open across sessions (e.g. a ``:memory:`` database between test sessions)."""
        async with self.handle.hold() as runner:
            yield runner


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_arguments(tool: str, model: type[BaseModel], arguments: dict[str, Any]) -> None:
    problems = [f"unknown argument {key!r}" for key in arguments if key not in model.model_fields]
    try:
        model.model_validate(arguments, strict=True)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".") or "arguments"
            if err["type"] == "missing":
                problems.append(f"missing required argument {where!r}")
            else:
                got = err.get("input")
                problems.append(f"argument {where!r}: {err['msg']} (got {type(got).__name__} {_show(got)})")
    if problems:
        expected = ", ".join(model.model_fields)
        raise ToolError(f"invalid arguments for {tool}: {'; '.join(problems)} (parameters: {expected})")


@asynccontextmanager
async def _lifespan(server: FastMCP[AppContext]) -> AsyncIterator[AppContext]:
    assert isinstance(server, MemoryServer)
    async with server.handle.hold() as runner:
        yield AppContext(store=runner, prompts_dir=server.prompts_dir)


def _app(ctx: Context) -> AppContext:
    return ctx.request_context.lifespan_context


def _token_vaults(ctx: Context) -> frozenset[str] | None:
    """The vault titles the HTTP request's bearer token is limited to (None: every vault; stdio, in-process)."""
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return None
    return vaults_of(getattr(request, "scope", None))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- parameter types (descriptions and ranges show in the tools' JSON schemas) ---------------------------------

VaultId = Annotated[str, Field(description="The UUID of the vault")]
MemoryId = Annotated[str, Field(description="The UUID of the memory")]
EntryId = Annotated[str, Field(description="The UUID of the entry")]
Title = Annotated[str, Field(description="1-50 characters: letters, digits and hyphen")]
Description = Annotated[str, Field(description="Optional description (at most 1000 characters)")]
Timestamp = Annotated[str | None, Field(description="RFC 3339 timestamp with a time zone, e.g. 2024-05-01T12:00:00Z")]
OptionalVaultId = Annotated[str | None, Field(description="Optional: the memory's vault UUID, checked if given")]
RawEntry = Annotated[str, Field(description=f"The full text of the entry (1-{RAW_ENTRY_MAX_CHARS} characters)")]
Summary = Annotated[str, Field(description=f"A short retrieval-oriented summary (1-{SUMMARY_MAX_CHARS} characters)")]
Tags = Annotated[
    dict[str, str] | None, Field(description=f"Optional object of string to string (at most {TAGS_MAX_KEYS} keys)")
]
IdempotencyKey = Annotated[
    str | None,
    Field(description="Optional key (<= 200 chars): a retry with the same key and raw_entry is not duplicated"),
]


class EntryItem(TypedDict):
    """One entry of an ``add_entries`` call: ``add_entry``'s fields, without the ids."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    raw_entry: RawEntry
    summary: Summary
    tags: NotRequired[Tags]
    conversation_time: NotRequired[Timestamp]
    idempotency_key: NotRequired[IdempotencyKey]


# -- tools ---------------------------------------------------------------------------------------------------


async def create_vault(ctx: Context, title: Title, description: Description = "") -> str:
    """Create a vault (a container of memories). Returns {"vaultId", "title"}; a duplicate title is an error."""
    return _json(await _app(ctx).store.call(MemoryStore.create_vault, title, description))


async def list_vaults(ctx: Context) -> str:
    """List all vaults as a JSON array of {"vaultId", "title"}."""
    vaults = await _app(ctx).store.call(MemoryStore.list_vaults)
    allowed = _token_vaults(ctx)
    return _json(vaults if allowed is None else [v for v in vaults if v["title"] in allowed])


async def create_memory_in_vault(
    ctx: Context,
    vault_id: VaultId,
    title: Title,
    memory_type: Annotated[str, Field(description="Memory type, e.g. NOTES or chat")],
    description: Description = "",
) -> str:
    """Create a memory in a vault. Returns the memory {memoryId, vaultId, title, description, memoryType,
    creationTime}; a duplicate title in the vault is an error."""
    return _json(await _app(ctx).store.call(MemoryStore.create_memory, vault_id, title, memory_type, description))


async def list_memories(ctx: Context, vault_id: VaultId) -> str:
    """List the memories of a vault as a JSON array of {"memoryId", "title"}."""
    return _json(await _app(ctx).store.call(MemoryStore.list_memories, vault_id))


async def get_memory(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> str:
    """Get one memory of a vault."""
    return _json(await _app(ctx).store.call(MemoryStore.get_memory, vault_id, memory_id))


async def add_entry(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    raw_entry: RawEntry,
    summary: Summary,
    tags: Tags = None,
    conversation_time: Timestamp = None,
    idempotency_key: IdempotencyKey = None,
) -> str:
    """Append an entry to a memory. It is stored before this returns: the answer is the stored entry plus
    "status": "stored" and "deduplicated" (true when idempotency_key matched an earlier identical write)."""
    result = await _app(ctx).store.call(
        MemoryStore.add_entry, vault_id, memory_id, raw_entry, summary, tags, conversation_time, idempotency_key
    )
    return _json(result)


async def add_entries(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    entries: Annotated[
        list[EntryItem],
        Field(description=f"1-{ADD_ENTRIES_MAX_ITEMS} entries, appended in this order; each with add_entry's fields "
                          "and rules"),
    ],
) -> str:
    """Append several entries to a memory in one transaction: all are stored before this returns, or none is
    (an invalid item or an idempotency conflict names the item, e.g. entries[3], and stores nothing). An item whose
    idempotency_key and raw_entry match an earlier write answers that entry, so a retried call stores nothing twice.
    Returns {"entries": [stored entry + "deduplicated"], "count", "stored", "deduplicated", "status": "stored"}."""
    return _json(await _app(ctx).store.call(MemoryStore.add_entries, vault_id, memory_id, entries))


async def list_entries(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    limit: Annotated[int, Field(ge=1, le=50, description="Page size, 1-50")] = 25,
    before: Annotated[str | None, Field(description="RFC 3339: entries created before this (newest first)")] = None,
    after: Annotated[str | None, Field(description="RFC 3339: entries created after this (oldest first)")] = None,
) -> str:
    """List entries of a memory, newest first (with `after`, oldest first). `before` and `after` are exclusive
    of each other. Returns {"entries", "count", "applied_limit", "next_before", "next_after"}; a cursor is set
    when more entries exist in that direction."""
    return _json(await _app(ctx).store.call(MemoryStore.list_entries, vault_id, memory_id, limit, before, after))


async def get_entry(ctx: Context, vault_id: VaultId, memory_id: MemoryId, entry_id: EntryId) -> str:
    """Get one entry of a memory."""
    return _json(await _app(ctx).store.call(MemoryStore.get_entry, vault_id, memory_id, entry_id))


async def put_context(
    ctx: Context,
    vault_id: VaultId,
    memory_id: MemoryId,
    content: Annotated[str, Field(description="The whole context document (at most 65536 characters)")],
) -> str:
    """Store a new context snapshot (the whole document) for a memory; it becomes the current context and older
    snapshots stay searchable. Returns {"memoryId", "timestamp", "status": "stored", "chars"}."""
    return _json(await _app(ctx).store.call(MemoryStore.put_context, vault_id, memory_id, content))


async def get_context(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> str:
    """Get the current (newest) context document of a memory as plain text. A new memory answers a placeholder
    that says it is a default: treat it as empty."""
    return await _app(ctx).store.call(MemoryStore.get_context, vault_id, memory_id)


async def await_consistency(
    ctx: Context,
    memory_id: MemoryId,
    vault_id: OptionalVaultId = None,
    vectors: Annotated[bool, Field(description="Also wait (up to 30 s) for the memory's vectors, which are written "
                                   "behind the entries")] = False,
) -> str:
    """Wait until every earlier write to the memory is visible to search (by its words); answers "consistent".
    Vectors are written behind and not waited for unless ``vectors`` is true: then the answer is "consistent"
    once they are written too, or "vectors pending: N" if N entries still had none after 30 s (call again)."""
    runner = _app(ctx).store
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
    offset: Annotated[int, Field(ge=0, le=SEARCH_DEPTH_MAX - 25,
                                 description="Entries to skip: the next page of the ranking starts here")] = 0,
) -> str:
    """Search a memory's entries and context snapshots. Returns {"entries": [{entryId, summary, rawEntry?, score,
    match, creationTime, conversationTime?, tags}], "count", "latestContext", "latestContextTimestamp", "contexts":
    [{context, timestamp, score}]}, best first. score is a relevance from 0 to 1, on the same scale in every
    search (threshold it): the share of the query's informative word weight the entry holds (or that the turn
    before it, asking, holds: 0.8 of it), at most 0.5 for an entry found by meaning alone; it never rises down the
    list. With offset, the places past the 50th continue one deeper ranking, each entry once, scores continuing
    from the page before. match is "words" when the query's words led to the entry (in it
    or in the turns beside it) and "meaning" when only semantic similarity did (servers with embeddings): entries
    that are all "meaning" mean no entry shares a word with the query, and they may be unrelated."""
    result = await _app(ctx).store.call(
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
    return _json(result)


async def get_default_prompts(
    ctx: Context, memory_type: Annotated[str, Field(description="Memory type; supported: chat")]
) -> str:
    """Get the default prompt templates for a memory type: {"version", "context_summary_rules", "templates":
    {"context_prompt", "entry_capture_prompt", "summary_prompt"}}."""
    if not isinstance(memory_type, str) or memory_type.strip().lower() not in _SUPPORTED_MEMORY_TYPES:
        supported = ", ".join(_SUPPORTED_MEMORY_TYPES)
        raise InputError(f"unsupported memory_type {memory_type!r}: supported memory types are {supported}")
    directory = _app(ctx).prompts_dir
    templates = {name: read_prompt(name, directory) for name in sorted(PROMPT_NAMES)}
    return _json({"version": PROMPTS_VERSION, "context_summary_rules": _CONTEXT_SUMMARY_RULES, "templates": templates})


async def delete_entry(ctx: Context, vault_id: VaultId, memory_id: MemoryId, entry_id: EntryId) -> str:
    """Delete one entry of a memory. Returns {"entryId", "status": "deleted"}."""
    return _json(await _app(ctx).store.call(MemoryStore.delete_entry, vault_id, memory_id, entry_id))


async def delete_memory(ctx: Context, vault_id: VaultId, memory_id: MemoryId) -> str:
    """Delete a memory with all its entries and context snapshots. Returns {"memoryId", "status": "deleted",
    "entries": n}."""
    return _json(await _app(ctx).store.call(MemoryStore.delete_memory, vault_id, memory_id))


# In the reference page's order; the flags are MCP tool annotations (read-only / destructive hints).
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
        # structured_output=False: every result is exactly one text content, as upstream answers.
        tools.append(Tool.from_function(fn, annotations=annotations, structured_output=False))
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
    ``embeddings`` fuses dense vectors with BM25 (None, the default: as ``embeddings.dense_by_default()`` says; False:
    BM25 only), on ``embeddings_model`` (default ``auto``: the first installed of ``encoders.MODELS``), batches
    encoded on ``embeddings_threads`` (0: one per core), e5-small's queries by ``embeddings_queries``
    (``encoders.QUERY_ENCODERS``), vectors written ``embeddings_writes`` (``"behind"``: by a background thread after
    each write commits, ``"inline"``: inside it; see embeddings.py), memories of ``embeddings_hnsw_min`` vectors or
    more searched through pgvector's HNSW index on a PostgreSQL database that has it (None: ``embeddings.HNSW_MIN``).
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
        dense_factory = partial(load_dense_index, model, batch_threads=embeddings_threads, writes=embeddings_writes,
                                hnsw_min=HNSW_MIN if embeddings_hnsw_min is None else embeddings_hnsw_min,
                                queries=embeddings_queries)
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
