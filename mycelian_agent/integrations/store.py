"""MycelianStore: LangGraph's ``BaseStore`` over a Mycelian memory server.

``graph.compile(store=MycelianStore(invoker))`` gives every node (``runtime.store``, ``get_store()``) and every tool
written for LangGraph's store (LangMem's ``create_manage_memory_tool`` / ``create_search_memory_tool``, ...) a store
whose items live in Mycelian memories, searchable by the same server search as the conversations the agent wrote.

The mapping:

- A namespace is one memory of the invoker's vault, titled by its labels joined with ``-``:
  ``("memories", "alice")`` is the memory ``memories-alice``; ``("alice",)`` is ``alice``, the very memory the
  invoker reads and writes for ``user="alice"``. Labels are any strings (a UUID, an e-mail address):
  labels or a joined title that break the Mycelian title rule give an encoded title
  (:mod:`~mycelian_agent.recall.names`). A memory the store creates records its namespace in its description, so
  ``("memories", "u-1042")`` lists back as itself; a memory it did not create is its user's one-label namespace.
  Two namespaces whose title-shaped labels join to one title (``("a", "b")`` and ``("a-b",)``) cannot both be
  used: the second one is refused with both named.
- ``put(namespace, key, value)`` appends an entry (``add_entry``) tagged ``store_key=key``. A value with exactly one
  field holding non-empty text (``{"content": ...}`` as LangMem writes, ``{"text": ...}``, ``{"memory": ...}``)
  is stored as that text (tag ``store_field`` names the field), so searches, recall blocks and the agent see
  plain words; any other value is stored as its JSON text. At most 9,000 characters as stored (no splitting).
- Entries are append-only, so a put of an existing key writes a new entry, then deletes the older one(s)
  (``delete_entry``); ``created_at`` survives in the tag ``store_created``, ``updated_at`` is the newest entry's
  creation time. ``put(..., None)`` / ``delete`` delete every entry of the key.
- ``get`` finds the key's newest entry through a per-memory key index kept in this process: the first use of a
  memory reads all its entries once (``list_entries``, 50 a call), every later operation reads only the entries
  created since (one ``list_entries`` call, usually empty), then ``get_entry`` confirms the entry still exists
  (another process may have deleted it). So a get costs two calls; a put three (plus a delete per replaced entry).
- ``search(prefix, query=...)`` runs ``search_memories`` on every memory whose namespace starts with ``prefix`` and
  merges the hits by score (the server's 0-1 relevance, the same scale in every memory and search); without a query
  it lists
  the newest items first. Results include the entries the agent wrote in those memories (conversation turns):
  their key is the entry id and their value ``{"text", "summary", "tags", "conversation_time"?}``; such an entry
  can be read (``get``) and deleted by that key too.

Where it bends (what LangGraph's own stores do differently):

- no update in place: a put is an append and a delete (a process killed between them leaves the older entry,
  which every read ignores and the next put of the key deletes);
- ``filter`` (exact values, nested dicts and ``$eq $ne $gt $gte $lt $lte``, as ``InMemoryStore``) is applied to the
  ranked hits after the search, to a depth of ``max(50, 4 × (offset + limit))``: a rare filter may return fewer
  items than exist; ``offset + limit`` is at most 1,000 with a query;
- ``index=`` and ``ttl=`` are refused when the store is built (the server indexes the stored text: words with
  BM25, and dense vectors when the server runs with embeddings; items do not expire, ``supports_ttl = False``);
  ``refresh_ttl`` is ignored;
- ``list_namespaces`` lists the vault's memories, also those the store did not create (each user's memory, and the
  invoker's own once written to, as one-label namespaces) and memories whose items were all deleted (the memory
  stays);
- search scores are the server's relevance (0 to 1, see ``MemoryHit.score``: the share of the query's informative
  words an item holds, or at most 0.5 for one found by meaning alone), not cosine similarities.

Batches run their operations in order, on the invoker's event loop (the MCP session is bound to it): ``abatch`` on
that loop (awaited on another loop, it is handed to the invoker's, or refused at once when that one is not
running), ``batch`` from any thread without a running loop (inside one it raises ``asyncio.InvalidStateError``, as
LangGraph's async stores do). How an item is encoded as an entry, and the filter and namespace
rules, are in :mod:`~mycelian_agent.integrations.items`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .._sync import run_sync
from ..errors import ConfigError, InputError, MemoryServerError, MycelianError
from ..limits import SEARCH_DEPTH_MAX
from ..recall.names import described_labels, is_encoded, namespace_description
from ..recall.reader import check_query
from ..recall.users import create_or_find
from ._common import memory_parts
from .items import (
    CREATED_TAG,
    FIELD_TAG,
    KEY_TAG,
    check_key,
    check_labels,
    encode_item,
    matches,
    namespace_matches,
    namespace_title,
    to_item,
    to_search_item,
)

__all__ = ["CREATED_TAG", "FIELD_TAG", "KEY_TAG", "MycelianStore", "namespace_title"]

_EPOCH = "1970-01-01T00:00:00Z"
_PAGE = 50  # list_entries' largest page
_SEARCH_PAGE = 25  # search_memories' largest page


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _not_found(exc: MemoryServerError) -> bool:
    return "not found" in str(exc)


@dataclass
class _Version:
    entry_id: str
    first: str  # creation time of the key's first version


@dataclass
class _KeyIndex:
    """The stored items of one memory by key (versions oldest first), read up to ``cursor``."""

    cursor: str = _EPOCH
    keys: dict[str, list[_Version]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def current(self, entry: Mapping[str, Any]) -> bool:
        """Whether ``entry`` is not a replaced version of its key (every entry the store did not write is)."""
        key = (entry.get("tags") or {}).get(KEY_TAG)
        versions = self.keys.get(key, []) if key is not None else []
        return all(version.entry_id != entry.get("entryId") for version in versions[:-1])

    def forget(self, key: str, entry_ids: Iterable[str]) -> None:
        gone = set(entry_ids)
        left = [version for version in self.keys.get(key, []) if version.entry_id not in gone]
        if left:
            self.keys[key] = left
        else:
            self.keys.pop(key, None)


class _Namespaces:
    """Namespace <-> memory of one vault: titles and ids from ``list_memories``, each memory's namespace read once
    (from the description of the memories this store creates)."""

    def __init__(self, store: MycelianStore) -> None:
        self.store = store
        self.ids: dict[str, str] = {}  # title -> memory id
        self.spaces: dict[str, tuple[str, ...]] = {}  # memory id -> namespace
        self.lock: asyncio.Lock | None = None

    async def reload(self) -> None:
        found = await self.store._call("list_memories", {})
        self.ids = {
            str(item["title"]): str(item["memoryId"])
            for item in found
            if isinstance(item, Mapping) and "title" in item and "memoryId" in item
        }

    async def namespace_of(self, title: str) -> tuple[str, ...]:
        memory_id = self.ids[title]
        known = self.spaces.get(memory_id)
        if known is not None:
            return known
        namespace: tuple[str, ...] = (title,)
        if "-" in title:  # only a joined or an encoded title can hold other labels (kept in the description)
            memory = await self.store._call("get_memory", {"memory_id": memory_id})
            labels = described_labels(str(memory.get("description") or ""))
            try:
                if labels is not None and namespace_title(labels) == title:
                    namespace = labels
            except InputError:  # a description this store did not write
                pass
        self.spaces[memory_id] = namespace
        return namespace

    async def find(self, namespace: tuple[str, ...], *, create: bool) -> str | None:
        """The memory id of ``namespace``: created when missing if ``create``, else None."""
        title = namespace_title(namespace)
        if title not in self.ids:
            await self.reload()
        if title not in self.ids:
            if not create:
                return None
            await self._create(title, namespace)
        held = await self.namespace_of(title)
        if held != namespace:
            raise InputError(
                f"namespace {namespace!r} maps to the memory {title!r}, which holds namespace {held!r}: "
                "two namespaces whose labels join to one title cannot both be used; use one of them"
            )
        return self.ids[title]

    async def _create(self, title: str, namespace: tuple[str, ...]) -> None:
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if title in self.ids:
                return

            async def create() -> str:
                created = await self.store._call(
                    "create_memory_in_vault",
                    {
                        "title": title,
                        "memory_type": self.store._memory_type,
                        "description": namespace_description(namespace),
                    },
                )
                memory_id = str(created["memoryId"])
                self.ids[title] = memory_id
                self.spaces[memory_id] = namespace
                if len(namespace) == 1:  # a user's memory: the invoker's user directory learns it
                    self.store._reader.users.remember(namespace[0], memory_id)
                return memory_id

            async def find() -> str | None:
                await self.reload()  # created by another process meanwhile
                return self.ids.get(title)

            await create_or_find(create, find)

    async def matching(self, prefix: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
        """``(memory id, namespace)`` of every memory whose namespace starts with ``prefix``."""
        await self.reload()
        joined = "-".join(prefix)
        # A plain title without the joined prefix cannot hold the namespace; an encoded one may.
        titles = [t for t in self.ids if not prefix or t == joined or t.startswith(joined + "-") or is_encoded(t)]
        spaces = await asyncio.gather(*(self.namespace_of(title) for title in titles))
        return [(self.ids[t], ns) for t, ns in zip(titles, spaces) if ns[: len(prefix)] == prefix]


class MycelianStore(BaseStore):
    """LangGraph's ``BaseStore`` on the memory server behind ``memory`` (the invoker ``build_agent`` yields, or its
    ``invoker.reader``), in the invoker's vault; see the module docstring for the mapping and where it bends.

    ``create_namespaces``: whether a put into a namespace without a memory creates it (default: as the invoker's
    users, ``build_agent(create_users=...)``); when off such a put raises :class:`InputError`. ``loop``: the event
    loop the connection is bound to, for ``batch`` when ``memory`` is a bare reader.
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Any,
        *,
        create_namespaces: bool | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        index: Any = None,
        ttl: Any = None,
    ) -> None:
        if index is not None:
            raise ConfigError(
                "MycelianStore does not take index=: the memory server indexes the stored text itself "
                "(BM25 words, and dense vectors when it runs with embeddings); leave index out"
            )
        if ttl is not None:
            raise ConfigError(
                "MycelianStore does not take ttl=: items do not expire (supports_ttl is False); delete them instead"
            )
        self._reader, self._loop = memory_parts(memory, loop)
        self._connection = self._reader.connection
        self._vault_id = self._reader.vault_id
        self._memory_type = self._reader.users.memory_type
        self.create_namespaces = self._reader.users.create if create_namespaces is None else create_namespaces
        self._spaces = _Namespaces(self)
        self._indexes: dict[str, _KeyIndex] = {}
        self._declared: set[str] | None = None

    # -- the server ----------------------------------------------------------------------------------------

    async def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        return await self._connection.call_json(tool, {"vault_id": self._vault_id, **arguments})

    def _search_params(self) -> set[str]:
        """The optional ``search_memories`` parameters the server declares (ours: ``vault_id``, ``offset``)."""
        if self._declared is None:
            tool = getattr(self._connection, "tool", None)
            if tool is None:
                self._declared = {"vault_id", "offset"}
            else:
                schema = getattr(tool("search_memories"), "args_schema", None) or {}
                self._declared = set(schema.get("properties", {})) if isinstance(schema, Mapping) else set()
        return self._declared

    async def _index(self, memory_id: str) -> _KeyIndex:
        """The memory's key index, brought up to date (call holding its lock)."""
        index = self._indexes[memory_id]
        while True:
            page = await self._call("list_entries", {"memory_id": memory_id, "limit": _PAGE, "after": index.cursor})
            for entry in page.get("entries") or []:
                tags = entry.get("tags") or {}
                if KEY_TAG in tags:
                    first = str(tags.get(CREATED_TAG) or entry["creationTime"])
                    index.keys.setdefault(tags[KEY_TAG], []).append(_Version(str(entry["entryId"]), first))
                index.cursor = entry["creationTime"]
            if not page.get("next_after"):
                return index

    def _lock(self, memory_id: str) -> asyncio.Lock:
        return self._indexes.setdefault(memory_id, _KeyIndex()).lock

    async def _delete_entries(self, memory_id: str, entry_ids: Iterable[str]) -> None:
        for entry_id in entry_ids:
            try:
                await self._call("delete_entry", {"memory_id": memory_id, "entry_id": entry_id})
            except MemoryServerError as exc:
                if not _not_found(exc):  # already gone: another process deleted it
                    raise

    async def _foreign(self, memory_id: str, key: str) -> Mapping[str, Any] | None:
        """The entry whose id is ``key`` when the store did not write it (an agent's conversation turn)."""
        if not _is_uuid(key):
            return None
        try:
            entry = await self._call("get_entry", {"memory_id": memory_id, "entry_id": key})
        except MemoryServerError as exc:
            if _not_found(exc):
                return None
            raise
        return None if KEY_TAG in (entry.get("tags") or {}) else entry

    # -- operations ----------------------------------------------------------------------------------------

    async def _get(self, op: GetOp) -> Item | None:
        check_key(op.key)
        namespace = tuple(op.namespace)
        memory_id = await self._spaces.find(namespace, create=False)
        if memory_id is None:
            return None
        async with self._lock(memory_id):
            index = await self._index(memory_id)
            for version in reversed(list(index.keys.get(op.key, []))):
                try:
                    entry = await self._call("get_entry", {"memory_id": memory_id, "entry_id": version.entry_id})
                except MemoryServerError as exc:
                    if not _not_found(exc):
                        raise
                    index.forget(op.key, [version.entry_id])  # deleted by another process
                    continue
                return to_item(entry, namespace)
            entry = await self._foreign(memory_id, op.key)
        return None if entry is None else to_item(entry, namespace)

    async def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        if op.value is None:
            await self._delete(namespace, op.key)
            return
        raw, summary, tags = encode_item(op.key, op.value)
        memory_id = await self._spaces.find(namespace, create=self.create_namespaces)
        if memory_id is None:
            raise InputError(
                f"namespace {namespace!r} has no memory ({namespace_title(namespace)!r}) in vault "
                f"{self._vault_id} and creation is off (MycelianStore(create_namespaces=True), or "
                "build_agent(create_users=True))"
            )
        async with self._lock(memory_id):
            index = await self._index(memory_id)
            older = [version.entry_id for version in index.keys.get(op.key, [])]
            if older:
                tags[CREATED_TAG] = index.keys[op.key][0].first
            await self._call("add_entry", {"memory_id": memory_id, "raw_entry": raw, "summary": summary, "tags": tags})
            await self._delete_entries(memory_id, older)  # after the new version is stored: nothing is lost
            index.forget(op.key, older)

    async def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        check_key(key)
        memory_id = await self._spaces.find(namespace, create=False)
        if memory_id is None:
            return
        async with self._lock(memory_id):
            index = await self._index(memory_id)
            versions = [version.entry_id for version in index.keys.get(key, [])]
            if not versions and await self._foreign(memory_id, key) is not None:
                versions = [key]
            await self._delete_entries(memory_id, versions)
            index.forget(key, versions)

    async def _ranked(self, memory_id: str, namespace: tuple[str, ...], query: str, depth: int) -> list[SearchItem]:
        declared = self._search_params()
        if "offset" not in declared:
            depth = min(depth, _SEARCH_PAGE)
        async with self._lock(memory_id):
            index = await self._index(memory_id)
            items: list[SearchItem] = []
            offset = 0
            while offset < depth:
                top = min(_SEARCH_PAGE, depth - offset)
                args: dict[str, Any] = {
                    "memory_id": memory_id,
                    "query": query,
                    "top_ke": top,
                    "top_kc": 1,
                    "include_raw_entries": True,
                }
                if "vault_id" in declared:
                    args["vault_id"] = self._vault_id
                if offset:
                    args["offset"] = offset
                entries = (await self._connection.call_json("search_memories", args)).get("entries") or []
                items += [
                    to_search_item(entry, namespace, score=float(entry.get("score", 0.0)))
                    for entry in entries
                    if index.current(entry)
                ]
                if len(entries) < top:
                    break
                offset += len(entries)
        return items

    async def _recent(
        self, memory_id: str, namespace: tuple[str, ...], need: int, wanted: Mapping[str, Any] | None
    ) -> list[SearchItem]:
        async with self._lock(memory_id):
            index = await self._index(memory_id)
            items: list[SearchItem] = []
            before: str | None = None
            while len(items) < need:
                args: dict[str, Any] = {"memory_id": memory_id, "limit": _PAGE}
                if before:
                    args["before"] = before
                page = await self._call("list_entries", args)
                for entry in page.get("entries") or []:  # newest first
                    if index.current(entry):
                        item = to_search_item(entry, namespace)
                        if matches(item.value, wanted):
                            items.append(item)
                before = page.get("next_before")
                if not before:
                    break
        return items[:need]

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = check_labels(tuple(op.namespace_prefix), "namespace_prefix")
        need = _check_page(op.limit, op.offset)
        if op.query is not None and not isinstance(op.query, str):
            raise InputError(f"query must be a string, got {type(op.query).__name__}")
        query = check_query(op.query or "", empty=True)
        if query and need > SEARCH_DEPTH_MAX:
            raise InputError(f"offset + limit is {need}; a ranked search reaches at most {SEARCH_DEPTH_MAX} items")
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise InputError(f"filter must be a mapping of value fields to wanted values, got {op.filter!r}")
        if need == 0:
            return []
        targets = await self._spaces.matching(prefix)
        if query:
            depth = need if not op.filter else min(SEARCH_DEPTH_MAX, max(50, 4 * need))
            ranked = await asyncio.gather(*(self._ranked(m, ns, query, depth) for m, ns in targets))
            merged = sorted(
                (item for items in ranked for item in items if matches(item.value, op.filter)),
                key=lambda item: -(item.score or 0.0),
            )
        else:
            recent = await asyncio.gather(*(self._recent(m, ns, need, op.filter) for m, ns in targets))
            merged = sorted(
                (item for items in recent for item in items), key=lambda item: item.updated_at, reverse=True
            )
        return merged[op.offset : need]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        _check_page(op.limit, op.offset)
        if op.max_depth is not None and (
            isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
        ):
            raise InputError(f"max_depth must be a positive integer or None, got {op.max_depth!r}")
        conditions = tuple(op.match_conditions or ())
        spaces = [
            ns
            for _, ns in await self._spaces.matching(())
            if all(namespace_matches(condition, ns) for condition in conditions)
        ]
        if op.max_depth is not None:
            spaces = [ns[: op.max_depth] for ns in spaces]
        return sorted(set(spaces))[op.offset : op.offset + op.limit]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on the invoker's event loop; one result per operation (None for a put). Awaited
        on another event loop, the operations are handed to the invoker's (running in another thread, as a sync
        ``build_agent`` has it); a :class:`MycelianError` at once when that loop is not running."""
        ops = list(ops)
        running = asyncio.get_running_loop()
        if self._loop is not None and running is not self._loop:
            if self._loop.is_closed() or not self._loop.is_running():
                raise MycelianError(
                    "MycelianStore: awaited on another event loop than its invoker's, which is not "
                    "running (its MCP session is bound to that loop); use the store inside the "
                    "invoker's `async with build_agent(...)` block, or a sync build_agent"
                )
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._abatch(ops), self._loop))
        return await self._abatch(ops)

    async def _abatch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:
                raise InputError(f"unknown store operation {op!r}: expected GetOp, PutOp, SearchOp or ListNamespacesOp")
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Synchronous :meth:`abatch` (from any thread but the loop's own: LangGraph runs sync nodes in worker
        threads, so ``store.put(...)`` in a sync node works)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run_sync(self._abatch(list(ops)), self._loop)
        # As LangGraph's async stores: blocking the running loop on itself would deadlock it.
        raise asyncio.InvalidStateError(
            "MycelianStore: a synchronous call inside a running event loop; await its "
            "async twin (aput, aget, asearch, ...) instead"
        )


def _check_page(limit: object, offset: object) -> int:
    """``limit`` and ``offset`` of a search or a namespace listing, checked: non-negative integers (a negative one
    would slice from the end). Returns ``offset + limit``."""
    checked: list[int] = []
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InputError(f"{name} must be a non-negative integer, got {number!r}")
        checked.append(number)
    return sum(checked)
