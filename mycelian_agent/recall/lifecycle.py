"""Read, correct, forget: one user's entries one by one (``aget_all``, ``aget``, ``aupdate``, ``ahistory``,
``adelete``, ``adelete_user``; the invoker's methods of those names call these).

Every call names the user whose memory it works in (None: the invoker's own memory) and goes to that memory
only: an entry id of another user's memory is "not found" there, so it is never returned, changed or deleted.
Reads never create a memory: a user without one has no entries (``aget_all`` answers an empty page; ``aget`` and
``ahistory`` say the entry is not found). The tools are Mycelian's (``list_entries``, ``get_entry``,
``delete_entry``, ``delete_memory``) and this server's additions (``update_entry``, ``list_entry_versions``); a
server without the additions is told apart before anything is sent.

A correction (``aupdate``) is a new version of the entry under the same id: its summary and tags are written by
the invoker's model exactly as the agent writes an entry's (``MycelianMemoryAgent.awrite_entry_fields``: the
extractive model by default, no network); the tags code owns (role, thread, message number, part, speaker) and
the caller's are kept from the version it replaces (:data:`KEPT_TAGS`). The old version leaves search and recall
and stays readable in ``ahistory``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..dates import normalise_time
from ..errors import ConfigError, InputError, MemoryServerError
from ..limits import TAGS_MAX_KEYS
from .hits import StoredText, stored_fields
from .reader import MemoryReader
from .retry import read_call
from .users import check_user

__all__ = [
    "KEPT_TAGS",
    "NOTE_TAGS",
    "PAGE_MAX",
    "EntryPage",
    "FieldWriter",
    "MemoryEntry",
    "MemoryLifecycle",
    "check_entry_id",
]

#: The most entries one ``aget_all`` page holds (read from the server 50 at a time, ``list_entries``' largest page).
PAGE_MAX = 1000
_SERVER_PAGE = 50
#: Tags of an entry that code wrote (the agent's role, thread, message number and part, and the speaker's name): a
#: correction keeps them as they are. The model writes its tags anew (replacing the old ones of the same name); the
#: entry's other tags (a caller's, such as a replay's session or a store's key) are kept.
KEPT_TAGS = ("role", "thread", "msg", "part", "speaker")
#: The tags of an entry written by :meth:`MemoryLifecycle.aadd` (a memory item, not a turn of a conversation).
NOTE_TAGS = {"role": "assistant", "thread": "manage_memory"}


class FieldWriter(Protocol):
    """What writes an entry's summary and tags (``MycelianMemoryAgent.awrite_entry_fields``)."""

    async def __call__(
        self, message: Mapping[str, Any], conversation_time: str | None = None, *, tags: Mapping[str, str] | None = None
    ) -> dict[str, Any]: ...  # pragma: no cover


@dataclass(frozen=True)
class MemoryEntry(StoredText):
    """One stored entry (or one version of it, from :meth:`MemoryLifecycle.ahistory`).

    ``text`` is the verbatim text, ``summary`` and ``tags`` as stored, ``speaker`` / ``role`` / ``thread`` read
    from the tags, ``time`` the conversation time (else the time it was stored), ``created`` when it was first
    stored, ``version`` its version (1: as first written; None from a server without versions), ``replaced_at``
    when a later version replaced it (None: the current version), ``user`` whose memory holds it (None: the
    invoker's own)."""

    memory_id: str
    user: str | None = None
    created: str | None = None
    version: int | None = None
    replaced_at: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], *, memory_id: str, user: str | None) -> MemoryEntry:
        """An entry object of the tool contract (``get_entry``, ``list_entries``, ``update_entry``, a version of
        ``list_entry_versions``)."""
        version = entry.get("version")
        return cls(
            **stored_fields(entry),
            memory_id=memory_id,
            user=user,
            version=version if isinstance(version, int) and not isinstance(version, bool) else None,
            replaced_at=entry.get("replacedAt"),
        )

    def as_dict(self) -> dict[str, Any]:
        """The entry as plain JSON-ready data."""
        return {**asdict(self), "tags": dict(self.tags)}


@dataclass(frozen=True)
class EntryPage:
    """One page of a user's entries, newest first; ``next_cursor`` reads the next (older) page (None: no more)."""

    entries: tuple[MemoryEntry, ...]
    next_cursor: str | None = None

    def __iter__(self) -> Iterator[MemoryEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def check_entry_id(entry_id: object) -> str:
    """``entry_id`` as the server writes it (a UUID, lower case), else :class:`InputError` naming it."""
    if isinstance(entry_id, uuid.UUID):
        return str(entry_id)
    if isinstance(entry_id, str):
        try:
            return str(uuid.UUID(entry_id.strip()))
        except ValueError:
            pass
    raise InputError(
        f"entry id {entry_id!r} is not an entry id: entries are named by the UUID the server gave "
        "them (a hit's entry_id, or one listed by get_all)"
    )


def _check_text(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"the new text is empty: say what the entry should hold (got {text!r})")
    return text


class MemoryLifecycle:
    """Read, correct and forget the entries of one vault's users over ``reader``'s connection (see the module
    docstring). ``write_fields`` writes a new text's summary and tags (``aupdate``, ``aadd``); without it those
    two raise :class:`~mycelian_agent.errors.ConfigError`."""

    def __init__(self, reader: MemoryReader, write_fields: FieldWriter | None = None) -> None:
        self.reader = reader
        self.write_fields = write_fields

    @property
    def _connection(self) -> Any:
        return self.reader.connection

    async def _memory(self, user: str | None) -> tuple[str | None, str | None]:
        if user is not None:
            check_user(user)
        return await self.reader.memory_of(user)

    @staticmethod
    def _whose(user: str | None) -> str:
        return "the invoker's own memory" if user is None else f"the memory of user {user!r}"

    def _require(self, tool: str) -> None:
        if not self._connection.parameters(tool):
            raise MemoryServerError(
                f"the memory server has no {tool} tool (upstream Mycelian lacks it; mycelian-agent's server has it)",
                tool=tool,
            )

    async def _entry_call(
        self,
        tool: str,
        entry_id: object,
        user: str | None,
        extra: Mapping[str, Any] | None = None,
        *,
        read: bool = False,
    ) -> tuple[str, str, Any]:
        """``(memory id, entry id, result)`` of ``tool`` on ``entry_id`` in ``user``'s memory; an entry that is
        not there (another user's, deleted, never stored) or a user without a memory is an :class:`InputError`
        naming the entry."""
        entry_id = check_entry_id(entry_id)
        memory_id, user = await self._memory(user)
        if memory_id is None:
            raise InputError(f"entry {entry_id} not found: user {user!r} has no memory")
        self._require(tool)
        arguments = {"vault_id": self.reader.vault_id, "memory_id": memory_id, "entry_id": entry_id, **(extra or {})}
        try:
            if read:
                result = await read_call(self._connection, tool, arguments)
            else:
                result = await self._connection.call_json(tool, arguments)
        except MemoryServerError as exc:
            if "not found" not in str(exc):
                raise
            raise InputError(f"entry {entry_id} not found in {self._whose(user)}") from exc
        return memory_id, entry_id, result

    async def aget_all(self, user: str | None = None, limit: int = 25, cursor: str | None = None) -> EntryPage:
        """``user``'s entries, newest first, at most ``limit`` (1-:data:`PAGE_MAX`); ``cursor`` (a page's
        ``next_cursor``) continues after the previous page. A user without a memory has an empty page."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
            raise InputError(f"limit must be an integer from 1 to {PAGE_MAX}, got {limit!r}")
        if cursor is not None:
            try:  # a cursor is the creation time of the last entry of a page, passed back as the server wrote it
                valid = isinstance(cursor, str) and normalise_time(cursor) is not None
            except (InputError, ValueError, TypeError):
                valid = False
            if not valid:
                raise InputError(f"cursor {cursor!r} is not one get_all returned (a page's next_cursor)")
        memory_id, user = await self._memory(user)
        if memory_id is None:
            return EntryPage(())
        entries: list[MemoryEntry] = []
        before = cursor
        while len(entries) < limit:
            arguments: dict[str, Any] = {
                "vault_id": self.reader.vault_id,
                "memory_id": memory_id,
                "limit": min(_SERVER_PAGE, limit - len(entries)),
            }
            if before:
                arguments["before"] = before
            page = await read_call(self._connection, "list_entries", arguments)
            entries += [
                MemoryEntry.from_entry(entry, memory_id=memory_id, user=user) for entry in page.get("entries") or []
            ]
            before = page.get("next_before")
            if not before:
                break
        return EntryPage(tuple(entries), before or None)

    async def aget(self, entry_id: str, user: str | None = None) -> MemoryEntry:
        """The entry ``entry_id`` of ``user``'s memory; :class:`InputError` when that memory does not hold it."""
        memory_id, _, entry = await self._entry_call("get_entry", entry_id, user, read=True)
        return MemoryEntry.from_entry(entry, memory_id=memory_id, user=user)

    async def ahistory(self, entry_id: str, user: str | None = None) -> list[MemoryEntry]:
        """Every version of the entry ``entry_id`` of ``user``'s memory, oldest first (the current one last, its
        ``replaced_at`` None)."""
        memory_id, _, found = await self._entry_call("list_entry_versions", entry_id, user, read=True)
        return [
            MemoryEntry.from_entry(version, memory_id=memory_id, user=user) for version in found.get("versions") or []
        ]

    def _writer(self) -> FieldWriter:
        if self.write_fields is None:
            raise ConfigError("no model writes summaries and tags here: use the invoker build_agent(...) yields")
        return self.write_fields

    async def aupdate(self, entry_id: str, text: str, user: str | None = None) -> MemoryEntry:
        """Replace the text of the entry ``entry_id`` of ``user``'s memory by ``text``: a new version under the
        same id (its summary and tags written by the model, the code's and the caller's tags kept, see
        :data:`KEPT_TAGS`). Returns the entry as now stored (``version`` counts up). The old version leaves search
        and recall and stays in :meth:`ahistory`. One entry holds one part of a long message: ``text`` must fit
        one entry."""
        text = _check_text(text)
        self._require("update_entry")  # before the model writes anything
        current = await self.aget(entry_id, user)
        kept = {key: value for key, value in current.tags.items() if key in KEPT_TAGS}
        message: dict[str, Any] = {
            "role": current.role if current.role in ("user", "assistant") else "user",
            "content": text,
        }
        if kept.get("speaker") and kept.get("speaker") != current.role:
            message["name"] = kept["speaker"]
        fields = await self._writer()(message, current.time, tags=kept)
        written: dict[str, str] = dict(fields["tags"])
        others = [(key, value) for key, value in current.tags.items() if key not in written]
        tags = {**dict(others[: max(0, TAGS_MAX_KEYS - len(written))]), **written}
        memory_id, _, stored = await self._entry_call(
            "update_entry", current.entry_id, user, {"raw_entry": text, "summary": fields["summary"], "tags": tags}
        )
        return MemoryEntry.from_entry(stored, memory_id=memory_id, user=user)

    async def aadd(self, text: str, user: str | None = None) -> MemoryEntry:
        """Store ``text`` as a new entry of ``user``'s memory (a memory item, tagged :data:`NOTE_TAGS`; the
        user's memory is created as a write creates it), its summary and tags written by the model."""
        text = _check_text(text)
        if user is None:
            memory_id = await self.reader.default_memory(create=True)
            if memory_id is None:
                raise InputError("this reader has no default memory: name the user")
        else:
            memory_id = await self.reader.users.memory_id(check_user(user))
        fields = await self._writer()({"role": NOTE_TAGS["role"], "content": text}, tags=NOTE_TAGS)
        stored = await self._connection.call_json(
            "add_entry",
            {
                "vault_id": self.reader.vault_id,
                "memory_id": memory_id,
                "raw_entry": text,
                "summary": fields["summary"],
                "tags": fields["tags"],
            },
        )
        return MemoryEntry.from_entry(stored, memory_id=memory_id, user=user)

    async def adelete(self, entry_id: str, user: str | None = None) -> dict[str, Any]:
        """Forget the entry ``entry_id`` of ``user``'s memory: the entry, its versions and what was derived from
        it on the server. Returns the server's answer (``{"entryId", "status": "deleted", ...}``)."""
        _, _, result = await self._entry_call("delete_entry", entry_id, user)
        return dict(result)

    async def adelete_user(self, user: str) -> dict[str, Any]:
        """Forget ``user``: their memory with every entry, version and context document. Returns the server's
        answer (``{"memoryId", "status": "deleted", "entries": n}``). A user without a memory, or the invoker's
        own memory (which its threads write to), is an :class:`InputError`."""
        check_user(user)
        if user == self.reader.default_user:
            raise InputError(
                f"user {user!r} is the invoker's own memory (build_agent(memory={user!r})), which "
                "threads without a user write to: it is not deleted as a user; use `mycelian-agent "
                f"delete --memory {user}` when nothing runs on it"
            )
        memory_id = await self.reader.users.find(user)
        if memory_id is None:
            raise InputError(f"unknown user {user!r}: vault {self.reader.vault_id} has no memory of that user")
        try:
            result = await self._connection.call_json(
                "delete_memory", {"vault_id": self.reader.vault_id, "memory_id": memory_id}
            )
        except MemoryServerError as exc:
            if "not found" not in str(exc):
                raise
            raise InputError(f"unknown user {user!r}: their memory was deleted meanwhile") from exc
        finally:
            self.reader.users.forget(user)
        return dict(result)
