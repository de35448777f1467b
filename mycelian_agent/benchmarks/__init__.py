"""Benchmark runners: LongMemEval (:class:`SingleQuestionRunner`) and LoCoMo (:class:`LoCoMoRunner`).

Both write into an output directory: ``records.jsonl`` (one line per finished item: the source of truth, which makes
re-runs resume), ``summary.json`` (rebuilt from every record at the end of each run) and their own extras. This
module holds what they share: choosing items (``limit`` then ``shard``), the JSONL files, the memory harness
(ONE memory-server connection and ONE checkpointer per run; a memory and an invoker per item) and the worker pool.

The runners themselves are imported lazily: ``import mycelian_agent.benchmarks`` loads nothing heavy. Their
command line is :mod:`mycelian_agent.benchmarks.cli` (``mycelian-agent bench longmemeval|locomo``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, TypeVar

from ..errors import ConfigError, make_folder
from ..limits import QUERY_MAX_CHARS

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

    from ..agent.invoker import MycelianAgentInvoker
    from ..conversations.formats import Conversation
    from ..conversations.replay import ReplayStats
    from ..mcp import MemoryConnection
    from ..recall import Recall
    from .locomo import LoCoMoRunner
    from .longmemeval import SingleQuestionRunner

__all__ = [
    "BenchmarkReport", "BenchmarkRunner", "MemoryHarness", "SingleQuestionRunner", "LoCoMoRunner", "parse_shard", "select_items",
    "read_jsonl", "append_jsonl", "write_json", "run_pool", "report_notes",
]

_LAZY = {"SingleQuestionRunner": "longmemeval", "LoCoMoRunner": "locomo"}

T = TypeVar("T")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


# ------------------------------------------------------------------------------------------------- selection


def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"i/n"`` → ``(i, n)`` with ``0 <= i < n``; None stays None. Raises :class:`ConfigError` otherwise."""
    if text is None or isinstance(text, tuple):
        shard = text
    else:
        index, sep, count = str(text).partition("/")
        try:
            shard = (int(index), int(count)) if sep else None
        except ValueError:
            shard = None
        if shard is None:
            raise ConfigError(f"shard must look like i/n (e.g. 0/4), got {text!r}")
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ConfigError(f"shard i/n needs 0 <= i < n, got {shard[0]}/{shard[1]}")
    return shard


def select_items(items: Sequence[T], key: Callable[[T], str], *, limit: int | None = None,
                 shard: tuple[int, int] | None = None) -> list[T]:
    """The items one run handles: the first ``limit`` items (input order), then shard ``i/n`` of those.

    Sharding is by sorted id, modulo: the item whose id is the j-th (0-based) in sorted order belongs to shard
    ``j % n``. It depends only on the set of ids (not on file order or worker count), so ``0/n`` ... ``n-1/n`` are
    disjoint and cover the selection. The chosen items keep their input order.
    """
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    chosen = list(items[:limit] if limit is not None else items)
    if shard is None:
        return chosen
    index, count = shard
    position = {ident: j for j, ident in enumerate(sorted(key(item) for item in chosen))}
    return [item for item in chosen if position[key(item)] % count == index]


# ------------------------------------------------------------------------------------------------- files


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file ([] when missing). A torn last line (a crash mid-write) is cut off the file."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines) - (text.endswith("\n")):
                raise ConfigError(f"{path}: line {number} is not JSON; fix or remove the file") from None
            # Only the unterminated last line can be torn: drop it so the next append starts on a clean line.
            path.write_text(text[: len(text) - len(line)], encoding="utf-8")
    return records


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one object as one line, flushed to disk before returning."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: Path, value: Any, *, lines: Iterable[dict[str, Any]] | None = None) -> None:
    """Write ``value`` as indented JSON (or, with ``lines``, those objects as JSONL), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        if lines is None:
            json.dump(value, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        else:
            for line in lines:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    tmp.replace(path)


# ------------------------------------------------------------------------------------------------- harness


class MemoryHarness:
    """One open memory-server connection and checkpointer, shared by every item of a run.

    Each item gets a memory of its own and an invoker over the same agent (``agent.with_memory``), so concurrent
    items share the MCP session, the compiled graph and the checkpointer.
    """

    def __init__(self, base: "MycelianAgentInvoker", flush_every: int) -> None:
        self.base = base
        self.flush_every = flush_every

    @property
    def connection(self) -> "MemoryConnection":
        return self.base.connection

    @property
    def vault_id(self) -> str:
        return self.base.agent.vault_id

    async def invoker_for(self, title: str) -> tuple[str, "MycelianAgentInvoker"]:
        """The id of memory ``title`` (created when missing) and an invoker writing to it."""
        from ..builder import ensure_memory
        from ..agent.invoker import MycelianAgentInvoker

        memory_id = await ensure_memory(self.connection, self.vault_id, title)
        agent = self.base.agent.with_memory(self.vault_id, memory_id)
        return memory_id, MycelianAgentInvoker(agent, self.flush_every, leases=self.base.leases)

    async def replay(self, conversation: "Conversation", thread_id: str, progress: Any,
                     task: Any) -> tuple[str, "MycelianAgentInvoker", "ReplayStats"]:
        """Replay ``conversation`` as thread ``thread_id`` into the memory titled after it (resuming from the
        thread's checkpoint), advancing ``progress``'s ``task`` per message (skipped ones too).

        Returns the memory id, the invoker that wrote it and the replay's stats.
        """
        from ..conversations.formats import valid_title
        from ..conversations.replay import ReplayStats, replay_conversation

        memory_id, invoker = await self.invoker_for(valid_title(thread_id))
        stats = ReplayStats()
        await replay_conversation(invoker, conversation, thread_id=thread_id, stats=stats,
                                  on_message=lambda result: progress.advance(task, len(result.accepted)))
        progress.advance(task, stats.skipped)
        return memory_id, invoker, stats

    def _search_params(self) -> set[str]:
        schema = getattr(self.connection.tool("search_memories"), "args_schema", None) or {}
        return set(schema.get("properties", {})) if isinstance(schema, dict) else set()

    async def search(self, memory_id: str, query: str, top_ke: int, *, before: str | None = None,
                     top_kc: int = 1, offset: int = 0) -> tuple[dict[str, Any], float]:
        """``search_memories`` with raw entries (the query cut to the server's 2,000 characters), and its time.

        ``before`` (RFC 3339) excludes entries from that time on, where the server supports it; ``offset`` pages
        (a server without paging answers only ``offset=0``: an empty result otherwise).
        """
        declared = self._search_params()
        if offset and "offset" not in declared:
            return {"entries": [], "count": 0}, 0.0
        args: dict[str, Any] = {"memory_id": memory_id, "query": query[:QUERY_MAX_CHARS], "top_ke": min(25, top_ke),
                                "top_kc": top_kc, "include_raw_entries": True}
        if offset:
            args["offset"] = offset
        # vault_id and before are our server's extras: send them only where the server declares them (upstream
        # Mycelian has neither), so the same run works against both.
        if "vault_id" in declared:
            args["vault_id"] = self.vault_id
        if before and "before" in declared:
            args["before"] = before
        started = time.perf_counter()
        result = await self.connection.call_json("search_memories", args)
        return result, time.perf_counter() - started

    async def recall(self, memory_id: str, query: str, *, budget_tokens: int, top_k: int,
                     before: str | None = None) -> tuple["Recall", float]:
        """What a chat pipeline would get for ``query`` from memory ``memory_id`` (``invoker.arecall``'s block;
        ``before`` bounds the conversation time where the server supports it), and its time."""
        from ..recall import MemoryReader

        reader = MemoryReader(self.connection, self.base.reader.users, default_memory_id=memory_id)
        started = time.perf_counter()
        found = await reader.arecall(query[:QUERY_MAX_CHARS], budget_tokens=budget_tokens, top_k=min(25, top_k),
                                     before=before)
        return found, time.perf_counter() - started

    async def ranking(self, memory_id: str, query: str, *, enough: Callable[[list[dict[str, Any]]], bool],
                      before: str | None = None, max_entries: int = 500) -> list[dict[str, Any]]:
        """The ranked entries of ``query``, paged 25 at a time until ``enough(entries)`` holds, the ranking ends
        or ``max_entries`` are read: LongMemEval's recall rule extends the ranking until it holds k distinct
        sessions, which 25 entries may not."""
        entries: list[dict[str, Any]] = []
        while len(entries) < max_entries:
            page, _ = await self.search(memory_id, query, 25, before=before, offset=len(entries))
            found = page.get("entries") or []
            entries.extend(found)
            if len(found) < 25 or enough(entries):
                break
        return entries[:max_entries]


@dataclass
class BenchmarkRunner(ABC):
    """Options shared by the benchmark runners (see each runner for what it adds).

    ``db`` defaults to ``<out>/memory.db`` and ``state`` (the SQLite checkpoint file) to ``<out>/state.db``.
    ``model`` writes the entries (``"extractive"``, ``"openai:<model>"`` or a chat model); ``api_key`` and
    ``base_url`` are passed on to ``openai:`` models (the scripts read ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``),
    as are ``tool_choice_mode``, ``max_tokens`` and ``model_timeout`` (``build_agent``'s; ``"required"`` and a
    long timeout for llama.cpp's server on a CPU).
    ``batch_size`` > 1 ingests in batched mode (one model call per ``batch_size`` messages).
    """

    out: str | Path
    db: str | Path | None = None
    state: str | Path | None = None
    server: str = "embedded"
    token: str | None = None
    model: "str | BaseChatModel | None" = "extractive"
    api_key: str | None = None
    base_url: str | None = None
    tool_choice_mode: str | None = None
    max_tokens: int | None = None
    model_timeout: float | None = 120.0
    flush_every: int = 6
    batch_size: int = 1  # > 1: batched mode (AgentSettings.batch_size)
    embeddings: bool | None = None  # None: the server's default (dense + BM25 when a dense model is installed)
    top_k: int = 10
    ks: tuple[int, ...] = (1, 5, 10)
    workers: int = 1
    shard: str | tuple[int, int] | None = None
    limit: int | None = None
    vault: str = "benchmarks"
    progress: bool = False
    failures: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.out = Path(self.out).expanduser()
        self.shard = parse_shard(self.shard)
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if not 1 <= self.top_k <= 25:
            raise ConfigError(f"top_k must be 1..25 (the server's limit), got {self.top_k}")
        self.ks = tuple(sorted(set(self.ks)))

    @property
    def db_path(self) -> str:
        return str(self.db) if self.db is not None else str(Path(self.out) / "memory.db")

    @property
    def state_path(self) -> Path:
        return Path(self.state).expanduser() if self.state is not None else Path(self.out) / "state.db"

    @property
    def records_path(self) -> Path:
        """``<out>/records.jsonl``: one line per finished item."""
        return Path(self.out) / "records.jsonl"

    @property
    def search_k(self) -> int:
        """Entries to retrieve: enough for every recall cut-off and for ``top_k``."""
        return min(25, max(self.top_k, *self.ks))

    def run(self, paths: Sequence[str | os.PathLike[str]]) -> "BenchmarkReport":
        """Synchronous :meth:`arun`."""
        return asyncio.run(self.arun(paths))

    @abstractmethod
    async def arun(self, paths: Sequence[str | os.PathLike[str]]) -> "BenchmarkReport":
        """Run the items of ``paths`` not yet recorded; write and return the report (each runner defines it)."""

    def _select(self, conversations: Sequence["Conversation"]) -> list["Conversation"]:
        """Start a run: no failures yet, and this run's conversations (``limit`` then ``shard``, by id)."""
        self.failures = {}
        return select_items(conversations, lambda c: c.conversation_id, limit=self.limit,
                            shard=self.shard)  # type: ignore[arg-type]

    @asynccontextmanager
    async def open_harness(self, first_title: str) -> AsyncIterator[MemoryHarness]:
        """Connect once, ensure the vault and ``first_title``'s memory, open the checkpointer, build the agent."""
        from ..builder import build_agent

        make_folder(self.out, "--out")
        db = self.db_path if self.server == "embedded" else None
        async with build_agent(self.model, self.server, db=db, token=self.token, vault=self.vault,
                               memory=first_title, checkpointer=f"sqlite:{self.state_path}",
                               flush_every=self.flush_every, api_key=self.api_key, base_url=self.base_url,
                               tool_choice_mode=self.tool_choice_mode, max_tokens=self.max_tokens,
                               model_timeout=self.model_timeout, batch_size=self.batch_size,
                               embeddings=self.embeddings) as invoker:
            yield MemoryHarness(invoker, self.flush_every)


async def run_pool(items: Sequence[T], workers: int, work: Callable[[T], Awaitable[None]],
                   key: Callable[[T], str], failures: dict[str, str]) -> None:
    """Run ``work`` over ``items`` with at most ``workers`` at a time (asyncio tasks, one event loop).

    An item that raises an ``Exception`` is recorded in ``failures`` (id → message) and the others go on; it has
    no record, so the next run retries it. Cancellation and KeyboardInterrupt stop everything.
    """
    queue: asyncio.Queue[T] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            item = queue.get_nowait()
            try:
                await work(item)
            except Exception as exc:  # noqa: BLE001 - one bad item must not end a long run
                failures[key(item)] = f"{type(exc).__name__}: {exc}"

    await asyncio.gather(*(worker() for _ in range(min(workers, len(items)) or 1)))


@dataclass
class BenchmarkReport:
    """The result of a run: ``summary`` (what ``summary.json`` holds), recall ``tables`` by name, and ``notes``."""

    summary: dict[str, Any]
    tables: dict[str, Any]  # name -> metrics.RecallTable
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> dict[str, str]:
        """Items that failed in this run (id → error); they have no record and are retried by the next run."""
        return self.summary.get("failed", {})

    def format(self) -> str:
        """The recall tables and totals as Markdown-ish text for a terminal."""
        parts = []
        for name, table in self.tables.items():
            parts += [f"### {name}", table.format(), ""]
        return "\n".join(parts + self.notes)


def report_notes(summary: dict[str, Any], *, recorded: str, this_run: str, stream: str, usage: Any,
                 extra: Sequence[str] = ()) -> list[str]:
    """The text lines under a runner's recall tables, from its ``summary``.

    ``recorded``: what is recorded in total; ``this_run``: what this run did, before its wall time (shown only
    when the summary has a ``this_run``); ``stream``: what one ingestion stream is (a sample, a question);
    ``usage``: the ingestion model usage; ``extra``: lines before the failures.
    """
    ing, run = summary["ingestion"], summary["this_run"]
    rate = ing["messages_per_s"]
    speed = f", {run['messages'] / run['wall_s']:.1f} messages/s" if run.get("wall_s") else ""
    lines = [
        recorded + (f" (this run: {this_run}{run.get('wall_s', 0):.1f} s wall{speed})" if run else ""),
        f"ingestion: {ing['messages']} messages in {ing['seconds']:.1f} s"
        + (f" ({rate:.1f} messages/s per {stream} stream)" if rate else "")
        + f", {ing['entries']} entries, {ing['contexts']} context documents; model {summary['model']}",
        f"model usage (ingestion): {usage}",
        *extra,
    ]
    if summary["failed"]:
        lines.append(f"FAILED ({len(summary['failed'])}; re-run to retry): "
                     + "; ".join(f"{k}: {v}" for k, v in list(summary["failed"].items())[:5]))
    return lines


def progress_bar(enabled: bool) -> Any:
    """A rich progress display on stderr (a no-op one when disabled or when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    # Off when stderr is not a terminal: redirected logs would get only a final static bar.
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                    console=console, disable=not (enabled and console.is_terminal))

