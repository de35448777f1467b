"""Users are data, not processes: user ``alice`` is the memory titled ``alice`` in the invoker's vault.

A user is any id a user's system has (``alice``, a UUID, ``bob@example.com``, ``user_1``); one that is not a
Mycelian title is kept under an encoded title with the id in the memory's description (:mod:`.names`).

One :class:`UserDirectory` per invoker maps user names to memory ids over the invoker's one server connection,
creating a user's memory on its first write (unless creation is off); reads never create one
(:meth:`UserDirectory.find`). The vault's memory list is read once; after that a known user costs nothing and a new
one one ``create_memory_in_vault`` call. Only Mycelian tools are used
(``list_memories``, ``create_memory_in_vault``), so it works against a remote Mycelian server too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..errors import InputError, MemoryServerError
from .names import check_label, described_labels, is_encoded, memory_title, user_description
from .retry import read_call

__all__ = ["Connection", "UserDirectory", "check_user", "create_or_find", "if_exists_return"]


class Connection(Protocol):
    """What the read side needs of a memory server connection (:class:`~mycelian_agent.mcp.MemoryConnection`, or
    the CLI's in-process ``LocalConnection``): tool calls, and the parameters a tool declares."""

    async def call(self, name: str, arguments: Any = None) -> str: ...  # pragma: no cover - a protocol

    async def call_json(self, name: str, arguments: Any = None) -> Any: ...  # pragma: no cover - a protocol

    def parameters(self, name: str) -> set[str]: ...  # pragma: no cover - a protocol


async def create_or_find(create: Callable[[], Awaitable[str]], find: Callable[[], Awaitable[str | None]]) -> str:
    """The id of what ``create`` makes (a vault, a memory); when another process created it first (the server
    answers "already exists"), the id ``find`` reads then. Any other failure, or a race ``find`` cannot resolve, is
    raised as it came."""
    try:
        return await create()
    except MemoryServerError as exc:
        if "already exists" not in str(exc) or (found := await find()) is None:
            raise
        return found


def if_exists_return(connection: Connection, tool: str) -> dict[str, str]:
    """``{"if_exists": "return"}`` when ``tool`` (``create_vault``, ``create_memory_in_vault``) declares that
    parameter (our server): a title that is taken, also by another process a moment ago, then answers the existing
    vault or memory instead of an error. Empty for a server without it (upstream's), where :func:`create_or_find`
    reads the winner's after the "already exists" error."""
    return {"if_exists": "return"} if "if_exists" in connection.parameters(tool) else {}


def check_user(user: object) -> str:
    """``user`` if it can name a memory (any string of 1-255 characters: see
    :func:`~mycelian_agent.recall.names.check_label`), else :class:`InputError` saying why."""
    return check_label(user)


class UserDirectory:
    """User -> memory id in one vault, cached; a user's memory is created on first write when ``create``
    (:meth:`memory_id`; reads use :meth:`find`, which never creates).

    ``memory_type`` is the type of the memories it creates. Concurrent first uses of one user create one memory
    (creations are serialised in this process; a creation lost to another process reads the winner's memory).
    """

    def __init__(
        self, connection: Connection, vault_id: str, *, create: bool = True, memory_type: str = "NOTES"
    ) -> None:
        self.connection = connection
        self.vault_id = vault_id
        self.create = create
        self.memory_type = memory_type
        self._ids: dict[str, str] = {}  # user -> memory id
        self._users: dict[str, str] = {}  # memory id -> user
        self._titles: dict[str, str] = {}  # title -> memory id, as the vault last listed them
        self._loaded = False
        self._lock: asyncio.Lock | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def remember(self, user: str, memory_id: str) -> None:
        """Record that ``user``'s memory is ``memory_id`` (e.g. the memory the invoker was built with)."""
        self._ids[user] = memory_id
        self._users[memory_id] = user

    def forget(self, user: str) -> None:
        """Drop ``user`` from the cache (their memory was deleted): the next use reads the vault again."""
        memory_id = self._ids.pop(user, None)
        if memory_id is not None:
            self._users.pop(memory_id, None)
        self._loaded = False

    def user_of(self, memory_id: str) -> str | None:
        """The user whose memory is ``memory_id``, if this directory has seen it."""
        return self._users.get(memory_id)

    async def owner_of(self, memory_id: str) -> str | None:
        """The user whose memory is ``memory_id`` (the vault's memories are listed again if this directory has not
        seen it: another process may have created it); None when it is no user's memory in the vault."""
        if memory_id not in self._users:
            await self._reload()
            title = next((t for t, known in self._titles.items() if known == memory_id), None)
            if title is not None and is_encoded(title):
                labels = await self._labels(memory_id)
                if labels is not None and len(labels) == 1 and memory_title(labels[0]) == title:
                    self.remember(labels[0], memory_id)
        return self._users.get(memory_id)

    async def _reload(self) -> None:
        self._titles = {
            str(item["title"]): str(item["memoryId"])
            for item in await read_call(self.connection, "list_memories", {"vault_id": self.vault_id})
            if isinstance(item, dict) and "title" in item and "memoryId" in item
        }
        for title, memory_id in self._titles.items():
            if not is_encoded(title):  # a plain title is its user; an encoded one is read when asked for
                self.remember(title, memory_id)
        self._loaded = True

    async def _labels(self, memory_id: str) -> tuple[str, ...] | None:
        memory = await read_call(self.connection, "get_memory", {"vault_id": self.vault_id, "memory_id": memory_id})
        return described_labels(str(memory.get("description") or "")) if isinstance(memory, dict) else None

    async def _listed(self, user: str) -> str | None:
        """The memory id of ``user`` among the titles last listed (an encoded title is confirmed by its
        description); an :class:`InputError` when its title is another id's (a hash collision)."""
        if user in self._ids:
            return self._ids[user]
        title = memory_title(user)
        memory_id = self._titles.get(title)
        if memory_id is None or not is_encoded(title):
            return None
        labels = await self._labels(memory_id)
        if labels != (user,):
            raise InputError(
                f"user {user!r} maps to the memory {title!r}, which holds {labels!r}: two ids share "
                "one title (a hash collision); use another id for this user"
            )
        self.remember(user, memory_id)
        return memory_id

    async def find(self, user: str) -> str | None:
        """The memory id of ``user``, or None when the vault holds no memory of that user: never creates one (a
        read has no side effects). An unknown user is looked up again in the vault (another process may have
        created it since)."""
        check_user(user)
        found = self._ids.get(user)
        if found is None:
            await self._reload()
            found = await self._listed(user)
        return found

    async def memory_id(self, user: str, *, create: bool | None = None) -> str:
        """The memory id of ``user``; created when missing if ``create`` (default: the directory's setting), else
        :class:`InputError` naming the unknown user."""
        check_user(user)
        found = self._ids.get(user)
        if found is not None:
            return found
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if user in self._ids:
                return self._ids[user]
            if not self._loaded:
                await self._reload()
                if (found := await self._listed(user)) is not None:
                    return found
            if not (self.create if create is None else create):
                await self._reload()  # another process may have created it since
                if (found := await self._listed(user)) is not None:
                    return found
                raise InputError(
                    f"unknown user {user!r}: vault {self.vault_id} has no memory of that user and "
                    "user creation is off (build_agent(create_users=True) creates users on first use)"
                )
            title = memory_title(user)

            async def create_memory() -> str:
                created = await self.connection.call_json(
                    "create_memory_in_vault",
                    {
                        "vault_id": self.vault_id,
                        "title": title,
                        "memory_type": self.memory_type,
                        "description": user_description(user),
                        **if_exists_return(self.connection, "create_memory_in_vault"),
                    },
                )
                self._titles[title] = str(created["memoryId"])
                self._ids.pop(user, None)
                # if_exists may answer a memory another id made under this title: confirmed like a listed one
                found = await self._listed(user) if is_encoded(title) else None
                self.remember(user, found or str(created["memoryId"]))
                return self._ids[user]

            async def reread() -> str | None:
                await self._reload()  # created by another process meanwhile
                return await self._listed(user)

            return await create_or_find(create_memory, reread)
