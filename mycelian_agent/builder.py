"""build_agent: connect to a memory server, make sure the vault exists, return a ready invoker.

The invoker's own memory (``memory=``, the memory of threads and reads that name no user) is created by its first
write, not here: reads of a database nobody wrote to leave it unchanged.

``build_agent(...)`` returns a context manager usable both ways::

    async with build_agent(model="extractive") as invoker:      # async pipelines
        await invoker.aprocess_conversation_message("user", "hi", thread_id="t1")

    with build_agent(model="extractive") as invoker:            # plain scripts (a background loop thread)
        invoker.process_conversation_message("user", "hi", thread_id="t1")
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._sync import LoopThread
from .errors import ConfigError, MemoryServerError, make_parent_folder
from .paths import default_db_path, is_postgres_url
from .recall.users import Connection, check_user, create_or_find, if_exists_return

if TYPE_CHECKING:  # the agent (LangChain, LangGraph) is imported when an agent is built, not by connect(); the MCP
    # client when a connection is opened, not by ensure_vault / ensure_memory over an in-process one
    from langchain_core.language_models import BaseChatModel

    from .agent.invoker import MycelianAgentInvoker
    from .agent.prompts import PromptSet
    from .agent.settings import AgentSettings
    from .mcp import MemoryConnection
    from .recall import MemoryReader

__all__ = [
    "AgentContext",
    "ConnectionSettings",
    "build_agent",
    "connect",
    "ensure_memory",
    "ensure_vault",
    "is_uuid",
    "open_connection",
]


def is_uuid(text: str) -> bool:
    """Whether ``text`` is a UUID (a vault or memory given by id, not by title)."""
    try:
        uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


async def _find_or_create(
    find: Callable[[], Awaitable[str | None]], create: Callable[[], Awaitable[str]], *, reuses: bool
) -> str:
    """The id ``find`` returns, else the id of what ``create`` makes (a create that loses a race with another
    process reads the winner's: :func:`~mycelian_agent.recall.users.create_or_find`). ``reuses``: ``create`` answers
    an existing title's id itself (the server declares ``if_exists``), so it is the one call."""
    if reuses:
        return await create()
    found = await find()
    return found if found is not None else await create_or_find(create, find)


async def ensure_vault(memory: Connection, vault: str, description: str = "") -> str:
    """The id of vault ``vault`` (a UUID, or a title created when missing).

    Safe when several processes ensure the same vault at once: the one whose create loses the race reads the
    winner's vault instead of failing with "already exists"."""
    if is_uuid(vault):
        return vault

    async def find() -> str | None:
        for item in await memory.call_json("list_vaults"):
            if item.get("title") == vault:
                return str(item["vaultId"])
        return None

    reuse = if_exists_return(memory, "create_vault")

    async def create() -> str:
        created = await memory.call_json("create_vault", {"title": vault, "description": description, **reuse})
        return str(created["vaultId"])

    return await _find_or_create(find, create, reuses=bool(reuse))


async def ensure_memory(
    memory: Connection, vault_id: str, title: str, memory_type: str = "NOTES", description: str = ""
) -> str:
    """The id of memory ``title`` in ``vault_id`` (a UUID, or a title created when missing); safe when several
    processes ensure the same memory at once (see :func:`ensure_vault`)."""
    if is_uuid(title):
        await memory.call_json("get_memory", {"vault_id": vault_id, "memory_id": title})
        return title

    async def find() -> str | None:
        for item in await memory.call_json("list_memories", {"vault_id": vault_id}):
            if item.get("title") == title:
                return str(item["memoryId"])
        return None

    reuse = if_exists_return(memory, "create_memory_in_vault")

    async def create() -> str:
        created = await memory.call_json(
            "create_memory_in_vault",
            {"vault_id": vault_id, "title": title, "memory_type": memory_type, "description": description, **reuse},
        )
        return str(created["memoryId"])

    return await _find_or_create(find, create, reuses=bool(reuse))


_LOCAL_SERVERS = ("embedded", "in-process")


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the memory server is and how to reach it: what :func:`connect` and :func:`build_agent` use.

    Built by the caller and passed in (nothing in the library reads the environment): a command line builds it
    from its flags and the environment with :meth:`from_env`; a program builds it directly or gives
    :func:`build_agent` the same fields as keywords.

    - ``server``: ``"embedded"`` (our server spawned over stdio), ``"in-process"`` (inside this process) or an
      ``http(s)://`` URL of a Mycelian server (``token``: its bearer token).
    - ``db``: the database of the first two: a SQLite file or a ``postgresql://`` URL; None:
      :func:`~mycelian_agent.paths.default_db_path` (``$XDG_DATA_HOME/mycelian/memory.db``, by default
      ``~/.local/share/mycelian/memory.db``, the file the commands use; :meth:`from_env` adds ``MYCELIAN_DB``).
    - ``embeddings`` (the first two): None leaves it to the server (dense + BM25 when a dense model is installed,
      vectors written behind), False BM25 only, True or ``"behind"`` vectors written behind each entry,
      ``"inline"`` inside each entry's write; ``embeddings_model``: the dense model (None: ``auto``).
    - ``timeout``: seconds each tool call may take (None: no limit); ``reconnect_wait``: how long an HTTP
      connection waits for a server that went away to come back.
    """

    server: str = "embedded"
    db: str | Path | None = None
    token: str | None = None
    embeddings: bool | str | None = None
    embeddings_model: str | None = None
    timeout: float | None = 60.0
    reconnect_wait: float = 30.0

    def __post_init__(self) -> None:
        if self.server not in _LOCAL_SERVERS and not self.server.startswith(("http://", "https://")):
            raise ConfigError(
                f"unknown server {self.server!r}: use 'embedded', 'in-process' or an http(s)://host:port/mcp URL"
            )
        _embeddings_writes(self.embeddings)  # refuses a bad value now, not at the first connection

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **given: Any) -> ConnectionSettings:
        """The settings of a command line: ``given`` (its flags; None or absent: not given) with the environment's
        fallbacks ``MYCELIAN_SERVER``, ``MYCELIAN_DB``, ``MYCELIAN_TOKEN`` and, for the default database,
        ``XDG_DATA_HOME`` (``$XDG_DATA_HOME/mycelian/memory.db``). ``environ`` is passed in (``os.environ`` at the
        edge): resolving the default database here means a spawned server, which gets few variables, uses the same
        file as the command's own reads."""
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown connection setting(s) {', '.join(sorted(unknown))}")
        values = {key: value for key, value in given.items() if value is not None}
        for key, variable in (("server", "MYCELIAN_SERVER"), ("db", "MYCELIAN_DB"), ("token", "MYCELIAN_TOKEN")):
            if key not in values and environ.get(variable):
                values[key] = environ[variable]
        if values.get("server", "embedded") in _LOCAL_SERVERS and "db" not in values:
            values["db"] = str(default_db_path(environ))
        return cls(**values)

    def database(self) -> str:
        """The database of an embedded or in-process server: ``db`` as given (a path expanded), or the default."""
        if self.db is None:
            return str(default_db_path())
        if str(self.db) == ":memory:" or is_postgres_url(str(self.db)):
            return str(self.db)
        return str(Path(self.db).expanduser())

    def prepared_database(self) -> str:
        """:meth:`database`, with the folder of a SQLite file made when missing (the file is created when opened);
        a folder that cannot be made is a :class:`ConfigError` naming ``--db``."""
        target = self.database()
        if target != ":memory:" and not is_postgres_url(target):
            make_parent_folder(target, "--db")
        return target


def connect(
    server: str = "embedded",
    *,
    db: str | Path | None = None,
    token: str | None = None,
    embeddings: bool | str | None = None,
    timeout: float | None = 60.0,
    reconnect_wait: float = 30.0,
    embeddings_model: str | None = None,
    settings: ConnectionSettings | None = None,
) -> MemoryConnection:
    """A (not yet opened) connection to a memory server: ``settings``, or the same fields given as keywords (see
    :class:`ConnectionSettings`).

    ``"embedded"`` spawns our server over stdio; ``"in-process"`` runs it inside this process (no
    subprocess); an ``http(s)://`` URL reaches a remote server. ``db`` is the database of the first two: a SQLite
    file (default ``~/.local/share/mycelian/memory.db``; :meth:`ConnectionSettings.from_env` honours
    ``MYCELIAN_DB`` and ``XDG_DATA_HOME``) or a ``postgresql://`` URL (the ``postgres`` extra), which
    many processes and hosts may share.
    """
    if settings is None:
        settings = ConnectionSettings(
            server=server,
            db=db,
            token=token,
            embeddings=embeddings,
            timeout=timeout,
            reconnect_wait=reconnect_wait,
            embeddings_model=embeddings_model,
        )
    return open_connection(settings)


def open_connection(settings: ConnectionSettings) -> MemoryConnection:
    """A (not yet opened) connection to the memory server ``settings`` name."""
    from .mcp import MemoryConnection, embedded_connection, http_connection, in_process_connection

    s = settings
    writes = _embeddings_writes(s.embeddings)

    def limited(connection: Any) -> MemoryConnection:
        return MemoryConnection(connection, call_timeout=s.timeout, reconnect_wait=s.reconnect_wait)

    if s.server not in _LOCAL_SERVERS:
        return limited(http_connection(s.server, token=s.token))
    # Resolved here, not by a spawned server: it does not get the caller's environment (the SDK passes few variables).
    target = s.prepared_database()
    if s.server == "in-process":
        return limited(
            in_process_connection(
                target,
                embeddings=None if s.embeddings is None else writes or False,
                embeddings_model=s.embeddings_model,
            )
        )
    if s.embeddings is None:
        extra = []
    else:
        extra = ["--embeddings", "--embeddings-writes", writes] if writes else ["--no-embeddings"]
    if s.embeddings is not False and s.embeddings_model:
        extra += ["--embeddings-model", s.embeddings_model]
    if is_postgres_url(target):
        # Through the environment, not argv: a password in the URL stays out of the process list.
        return limited(embedded_connection(None, extra_args=extra, env={"MYCELIAN_DB": target}))
    return limited(embedded_connection(target, extra_args=extra))


def _embeddings_writes(embeddings: bool | str | None) -> str | None:
    """The server's ``--embeddings-writes`` mode for ``embeddings`` (None: no embeddings, or the server's
    default)."""
    if embeddings is True:
        return "behind"
    if embeddings is False or embeddings is None:
        return None
    if embeddings in ("behind", "inline"):
        return embeddings
    raise ConfigError(f"embeddings must be True, False, 'behind' or 'inline' (got {embeddings!r})")


@dataclass
class AgentContext:
    """What :func:`build_agent` returns: enter it (``async with`` or ``with``) to get a ready invoker."""

    model: str | BaseChatModel | None = "extractive"
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    vault: str = "mycelian"
    memory: str = "default"
    memory_type: str = "NOTES"
    create_users: bool = True
    checkpointer: Any = "memory"
    thread_wait: float | None = None
    flush_every: int = 6
    settings: AgentSettings | None = None
    prompts: PromptSet | Literal["package", "server"] | str | Path = "package"
    prompt_examples: bool = False
    api_key: str | None = None
    base_url: str | None = None
    tool_choice_mode: Literal["named", "required", "auto"] | None = None
    max_tokens: int | None = None
    batch_size: int | None = None
    max_delay_s: float | None = None
    model_timeout: float | None = 120.0
    _stack: AsyncExitStack | None = field(default=None, init=False, repr=False)
    _invoker: MycelianAgentInvoker | None = field(default=None, init=False, repr=False)
    _portal: LoopThread | None = field(default=None, init=False, repr=False)

    async def __aenter__(self) -> MycelianAgentInvoker:
        import asyncio

        from .agent.checkpointers import open_checkpointer
        from .agent.graph import MycelianMemoryAgent
        from .agent.invoker import MycelianAgentInvoker
        from .agent.leases import thread_leases
        from .agent.settings import AgentSettings
        from .models.resolve import resolve_model

        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            memory = await stack.enter_async_context(open_connection(self.connection))
            vault_id = await ensure_vault(memory, self.vault)
            # A memory named by id must exist; one named by title (a user) is created by its first write.
            memory_id = await ensure_memory(memory, vault_id, self.memory) if is_uuid(self.memory) else None
            reader = self._reader(memory, vault_id, memory_id)
            saver = await stack.enter_async_context(
                open_checkpointer(self.checkpointer, reconnect_wait=self.connection.reconnect_wait)
            )
            prompts = await self._prompts(memory)
            # The agent retries transient model failures itself (bounded, counted: AgentSettings.model_attempts).
            model = resolve_model(
                self.model,
                api_key=self.api_key,
                base_url=self.base_url,
                max_tokens=self.max_tokens,
                timeout=self.model_timeout,
                max_retries=0,
            )
            settings = self.settings
            if self.tool_choice_mode is not None:
                settings = replace(settings or AgentSettings(), tool_choice_mode=self.tool_choice_mode)
            if self.batch_size is not None:
                settings = replace(settings or AgentSettings(), batch_size=self.batch_size)
            if self.max_delay_s is not None:
                settings = replace(settings or AgentSettings(), max_delay_s=self.max_delay_s)
            agent = MycelianMemoryAgent(
                model,
                memory.tools,
                vault_id=vault_id,
                memory_id=memory_id,
                checkpointer=saver,
                settings=settings,
                prompts=prompts,
                loop=asyncio.get_running_loop(),
                own_memory=reader,
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        invoker = MycelianAgentInvoker(
            agent,
            flush_every=self.flush_every,
            reader=reader,
            leases=thread_leases(saver),
            thread_wait=self.thread_wait,
        )
        invoker.connection = memory
        self._invoker = invoker
        return invoker

    def _reader(self, memory: MemoryConnection, vault_id: str, memory_id: str | None) -> MemoryReader:
        from .recall import MemoryReader, UserDirectory

        users = UserDirectory(memory, vault_id, create=self.create_users, memory_type=self.memory_type)
        return MemoryReader(
            memory,
            users,
            default_memory_id=memory_id,
            default_user=None if memory_id is not None else check_user(self.memory),
        )

    async def _prompts(self, memory: MemoryConnection) -> PromptSet:
        from .agent.prompts import PromptSet

        if isinstance(self.prompts, PromptSet):
            return self.prompts
        examples = self.prompt_examples
        if self.prompts == "package":
            return PromptSet.load(examples=examples)
        if self.prompts == "server":
            try:
                served = await memory.call_json("get_default_prompts", {"memory_type": "chat"})
            except MemoryServerError as exc:
                raise ConfigError(f"prompts='server' but the server gave none: {exc}") from exc
            return PromptSet.load(examples=examples).with_server_rules(served)
        return PromptSet.load(self.prompts, examples=examples)

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        invoker, self._invoker = self._invoker, None
        try:
            if invoker is not None:
                invoker.cancel_timers()
                try:
                    if exc_info[0] is None:
                        # Batched mode: messages accepted and not yet written are written before the connection
                        # closes (after an error they stay in the checkpoint and are written when the thread
                        # resumes).
                        await invoker.aflush_all()
                finally:
                    await invoker.leases.release_all()
        finally:
            if stack is not None:
                await stack.aclose()

    def __enter__(self) -> MycelianAgentInvoker:
        self._portal = LoopThread()
        try:
            return self._portal.run(self.__aenter__())
        except BaseException:
            self._portal.close()
            self._portal = None
            raise

    def __exit__(self, *exc_info: object) -> None:
        if self._portal is not None:
            try:
                self._portal.run(self.__aexit__(*exc_info))
            finally:
                self._portal.close()
                self._portal = None


def build_agent(
    model: str | BaseChatModel | None = "extractive",
    server: str = "embedded",
    *,
    connection: ConnectionSettings | None = None,
    db: str | Path | None = None,
    token: str | None = None,
    vault: str = "mycelian",
    memory: str = "default",
    checkpointer: Any = "memory",
    flush_every: int = 6,
    settings: AgentSettings | None = None,
    prompts: PromptSet | Literal["package", "server"] | str | Path = "package",
    prompt_examples: bool = False,
    api_key: str | None = None,
    base_url: str | None = None,
    memory_type: str = "NOTES",
    create_users: bool = True,
    thread_wait: float | None = None,
    embeddings: bool | str | None = None,
    tool_choice_mode: Literal["named", "required", "auto"] | None = None,
    max_tokens: int | None = None,
    batch_size: int | None = None,
    max_delay_s: float | None = None,
    timeout: float | None = 60.0,
    reconnect_wait: float = 30.0,
    model_timeout: float | None = 120.0,
    embeddings_model: str | None = None,
) -> AgentContext:
    """Everything needed to give a chat pipeline memory, as one context manager yielding the invoker.

    - ``model``: ``"extractive"`` (default, no network), ``"openai:<model>"``, or a LangChain chat model.
    - ``connection``: where the memory server is, as one :class:`ConnectionSettings` (a command line builds it with
      ``ConnectionSettings.from_env``); or give its fields as the keywords ``server``, ``db``, ``token``,
      ``embeddings``, ``embeddings_model``, ``timeout`` and ``reconnect_wait`` (not both).
    - ``server``: ``"embedded"`` (our server spawned over stdio; ``db`` is its SQLite file or a ``postgresql://``
      URL shared by many processes), ``"in-process"``
      (the same server inside this process, no subprocess) or a Mycelian server URL such as
      ``http://127.0.0.1:11546/mcp`` (``token`` for its bearer token).
    - ``vault`` / ``memory``: titles (created when missing) or ids. ``memory`` is the memory of threads and reads
      that name no user; ``user="alice"`` (``astart_session``, ``asearch``, ``arecall``, ...) uses the memory
      titled ``alice`` in the same vault, created on first use unless ``create_users=False`` (then an unknown user
      is an :class:`~mycelian_agent.errors.InputError`).
    - ``checkpointer``: ``"memory"``, ``"sqlite:PATH"`` (resumable), a ``postgresql://`` URL, or a saver. With
      SQLite or PostgreSQL, a thread has one writer: a second process writing a thread in use fails at once with
      :class:`~mycelian_agent.errors.ThreadBusyError` naming the other process, or waits for it up to
      ``thread_wait`` seconds.
    - ``embeddings``: our server (embedded or in-process) fuses dense vectors with BM25 (the ``dense`` extra):
      None (default) as the server's default says (``memory_server/retrieval/dense/loading.py``'s
      ``DENSE_BY_DEFAULT``), False never (BM25 only), True or ``"behind"`` (vectors written by a background thread;
      searches wait for them) or ``"inline"`` (inside each entry's write); ``embeddings_model``: ``"e5-small"``,
      ``"minilm"`` or ``"auto"`` (default: the first installed, see ``memory_server/retrieval/dense/encoders.py``).
    - ``prompts``: ``"package"``, ``"server"`` (the server's ``get_default_prompts`` rules), or a directory;
      ``prompt_examples``: also show the model the worked examples (``prompts/*_examples.md``; BENCHMARKS.md §5).
    - ``tool_choice_mode``: how the tool is forced (``AgentSettings.tool_choice_mode``; overrides ``settings``):
      ``"named"`` (default), ``"required"`` for llama.cpp's server and similar endpoints, or ``"auto"``.
    - ``max_tokens``: completion limit of an ``openai:`` model.
    - ``batch_size``: batched mode when > 1 (``AgentSettings.batch_size``; overrides ``settings``): messages are
      accepted at once and written ``batch_size`` at a time with one model call (and at each flush, session end,
      ``invoker.aflush(thread_id)``, after ``max_delay_s`` seconds, and when the context manager exits). A message
      is searchable only once written.
    - ``timeout``: seconds each memory tool call may take before it is retried (None: no limit);
      ``reconnect_wait``: seconds an HTTP connection waits for a server that went away to come back (and a
      PostgreSQL checkpointer for its server).
    - ``model_timeout``: seconds an ``openai:`` model call may take. A call failing transiently (HTTP 429 / 5xx,
      timeout) is retried by the agent (``AgentSettings.model_attempts``, counted as ``model_retries``), then the
      fallback model writes the step.
    """
    given = ConnectionSettings(
        server=server,
        db=db,
        token=token,
        embeddings=embeddings,
        embeddings_model=embeddings_model,
        timeout=timeout,
        reconnect_wait=reconnect_wait,
    )
    if connection is None:
        connection = given
    else:
        defaults = ConnectionSettings()
        clashing = [f.name for f in fields(given) if getattr(given, f.name) != getattr(defaults, f.name)]
        if clashing:
            raise ConfigError(
                f"build_agent: give the connection either as connection=ConnectionSettings(...) or as "
                f"keywords, not both (also given: {', '.join(clashing)})"
            )
    return AgentContext(
        model=model,
        connection=connection,
        vault=vault,
        memory=memory,
        memory_type=memory_type,
        create_users=create_users,
        thread_wait=thread_wait,
        checkpointer=checkpointer,
        flush_every=flush_every,
        settings=settings,
        prompts=prompts,
        prompt_examples=prompt_examples,
        api_key=api_key,
        base_url=base_url,
        tool_choice_mode=tool_choice_mode,
        max_tokens=max_tokens,
        batch_size=batch_size,
        max_delay_s=max_delay_s,
        model_timeout=model_timeout,
    )
