"""What the LongMemEval and LoCoMo runners share: the memory harness (ONE memory-server connection and ONE
checkpointer per run; a memory and an invoker per item), the runner's options and run loop, the worker pool and the
report.

Both runners write into an output directory: ``records.jsonl`` (one line per finished item: the source of truth,
which makes re-runs resume; see :mod:`.records`), ``summary.json`` (rebuilt from every record at the end of each run)
and their own extras. Rates are messages over the wall time of the run (``this_run``): with several workers the
items' own ingestion times overlap, so their sum (``ingestion.stream_seconds``) is not the run's time.
"""

from __future__ import annotations

import asyncio
import os
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mycelian_agent.conversations.selection import parse_shard, select_items
from mycelian_agent.errors import ConfigError, make_folder
from mycelian_agent.limits import QUERY_MAX_CHARS

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

    from mycelian_agent.agent.invoker import MycelianAgentInvoker
    from mycelian_agent.agent.model_tools import ToolChoiceMode
    from mycelian_agent.conversations.formats import Conversation
    from mycelian_agent.conversations.replay import ReplayStats
    from mycelian_agent.mcp import MemoryConnection
    from mycelian_agent.recall import Recall

__all__ = [
    "BenchmarkReport",
    "BenchmarkRunner",
    "MemoryHarness",
    "ingestion_totals",
    "progress_bar",
    "report_notes",
    "run_pool",
    "run_rates",
    "usage_by_model",
    "usage_totals",
]

T = TypeVar("T")


# ------------------------------------------------------------------------------------------------- harness


class MemoryHarness:
    """One open memory-server connection and checkpointer, shared by every item of a run.

    Each item gets a memory of its own and an invoker over the same agent (``agent.with_memory``), so concurrent
    items share the MCP session, the compiled graph and the checkpointer.
    """

    def __init__(self, base: MycelianAgentInvoker, flush_every: int) -> None:
        self.base = base
        self.flush_every = flush_every

    @property
    def connection(self) -> MemoryConnection:
        return self.base.connection

    @property
    def vault_id(self) -> str:
        return self.base.agent.vault_id

    async def invoker_for(self, title: str) -> tuple[str, MycelianAgentInvoker]:
        """The id of memory ``title`` (created when missing) and an invoker writing to it."""
        from mycelian_agent.agent.invoker import MycelianAgentInvoker
        from mycelian_agent.builder import ensure_memory

        memory_id = await ensure_memory(self.connection, self.vault_id, title)
        agent = self.base.agent.with_memory(self.vault_id, memory_id)
        return memory_id, MycelianAgentInvoker(agent, self.flush_every, leases=self.base.leases)

    async def replay(
        self, conversation: Conversation, thread_id: str, progress: Any, task: Any
    ) -> tuple[str, MycelianAgentInvoker, ReplayStats]:
        """Replay ``conversation`` as thread ``thread_id`` into the memory titled after it (resuming from the
        thread's checkpoint), advancing ``progress``'s ``task`` per message (skipped ones too).

        Returns the memory id, the invoker that wrote it and the replay's stats.
        """
        from mycelian_agent.conversations.formats import valid_title
        from mycelian_agent.conversations.replay import ReplayStats, replay_conversation

        memory_id, invoker = await self.invoker_for(valid_title(thread_id))
        stats = ReplayStats()
        await replay_conversation(
            invoker,
            conversation,
            thread_id=thread_id,
            stats=stats,
            on_message=lambda result: progress.advance(task, len(result.accepted)),
        )
        progress.advance(task, stats.skipped)
        await self.await_vectors(memory_id)
        return memory_id, invoker, stats

    async def await_vectors(self, memory_id: str, *, rounds: int = 40) -> None:
        """Wait until the memory's vectors are written (``await_consistency`` with ``vectors``, where the server
        declares it: ours writes them behind the entries), so that questions are searched with every vector, as
        they were when ingestion waited for them. Up to ``rounds`` calls (each waits up to 30 s); a server that
        does not declare it is not asked. Not counted in the ingestion time."""
        tool = self.connection.tool("await_consistency")
        schema = getattr(tool, "args_schema", None) or {}
        declared = set(schema.get("properties", {})) if isinstance(schema, dict) else set()
        if "vectors" not in declared:
            return
        args: dict[str, Any] = {"memory_id": memory_id, "vectors": True}
        if "vault_id" in declared:
            args["vault_id"] = self.vault_id
        for _ in range(rounds):
            if await self.connection.call("await_consistency", args) == "consistent":
                return
        raise RuntimeError(f"memory {memory_id}: vectors still pending after {rounds} waits")

    def _search_params(self) -> set[str]:
        schema = getattr(self.connection.tool("search_memories"), "args_schema", None) or {}
        return set(schema.get("properties", {})) if isinstance(schema, dict) else set()

    async def search(
        self, memory_id: str, query: str, top_ke: int, *, before: str | None = None, top_kc: int = 1, offset: int = 0
    ) -> tuple[dict[str, Any], float]:
        """``search_memories`` with raw entries (the query cut to the server's 2,000 characters), and its time.

        ``before`` (RFC 3339) excludes entries from that time on, where the server supports it; ``offset`` pages
        (a server without paging answers only ``offset=0``: an empty result otherwise).
        """
        declared = self._search_params()
        if offset and "offset" not in declared:
            return {"entries": [], "count": 0}, 0.0
        args: dict[str, Any] = {
            "memory_id": memory_id,
            "query": query[:QUERY_MAX_CHARS],
            "top_ke": min(25, top_ke),
            "top_kc": top_kc,
            "include_raw_entries": True,
        }
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

    async def recall(
        self, memory_id: str, query: str, *, budget_tokens: int, top_k: int, before: str | None = None
    ) -> tuple[Recall, float]:
        """What a chat pipeline would get for ``query`` from memory ``memory_id`` (``invoker.arecall``'s block;
        ``before`` bounds the conversation time where the server supports it), and its time."""
        from mycelian_agent.recall import MemoryReader

        reader = MemoryReader(self.connection, self.base._reader().users, default_memory_id=memory_id)
        started = time.perf_counter()
        found = await reader.arecall(
            query[:QUERY_MAX_CHARS], budget_tokens=budget_tokens, top_k=min(25, top_k), before=before
        )
        return found, time.perf_counter() - started

    async def ranking(
        self,
        memory_id: str,
        query: str,
        *,
        enough: Callable[[list[dict[str, Any]]], bool],
        before: str | None = None,
        max_entries: int = 500,
    ) -> list[dict[str, Any]]:
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
    model: str | BaseChatModel | None = "extractive"
    api_key: str | None = None
    base_url: str | None = None
    tool_choice_mode: ToolChoiceMode | None = None
    max_tokens: int | None = None
    model_timeout: float | None = 120.0
    flush_every: int = 6
    batch_size: int = 1  # > 1: batched mode (AgentSettings.batch_size)
    prompt_examples: bool = False  # show the model the prompts' worked examples (build_agent's)
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
    def shard_label(self) -> str | None:
        """``"i/n"`` when this run handles one shard, else None."""
        shard = parse_shard(self.shard)
        return f"{shard[0]}/{shard[1]}" if shard else None

    @property
    def records_path(self) -> Path:
        """``<out>/records.jsonl``: one line per finished item."""
        return Path(self.out) / "records.jsonl"

    @property
    def search_k(self) -> int:
        """Entries to retrieve: enough for every recall cut-off and for ``top_k``."""
        return min(25, max(self.top_k, *self.ks))

    def run(self, paths: Sequence[str | os.PathLike[str]]) -> BenchmarkReport:
        """Synchronous :meth:`arun`."""
        return asyncio.run(self.arun(paths))

    @abstractmethod
    async def arun(self, paths: Sequence[str | os.PathLike[str]]) -> BenchmarkReport:
        """Run the items of ``paths`` not yet recorded; write and return the report (each runner defines it)."""

    def _select(self, conversations: Sequence[Conversation]) -> list[Conversation]:
        """Start a run: no failures yet, and this run's conversations (``limit`` then ``shard``, by id)."""
        self.failures = {}
        return select_items(conversations, lambda c: c.conversation_id, limit=self.limit, shard=parse_shard(self.shard))

    @asynccontextmanager
    async def open_harness(self, first_title: str) -> AsyncIterator[MemoryHarness]:
        """Connect once, ensure the vault and ``first_title``'s memory, open the checkpointer, build the agent."""
        from mycelian_agent.builder import build_agent

        make_folder(self.out, "--out")
        db = self.db_path if self.server == "embedded" else None
        async with build_agent(
            self.model,
            self.server,
            db=db,
            token=self.token,
            vault=self.vault,
            memory=first_title,
            checkpointer=f"sqlite:{self.state_path}",
            flush_every=self.flush_every,
            api_key=self.api_key,
            base_url=self.base_url,
            tool_choice_mode=self.tool_choice_mode,
            max_tokens=self.max_tokens,
            model_timeout=self.model_timeout,
            batch_size=self.batch_size,
            embeddings=self.embeddings,
            prompt_examples=self.prompt_examples,
        ) as invoker:
            yield MemoryHarness(invoker, self.flush_every)


async def run_pool(
    items: Sequence[T],
    workers: int,
    work: Callable[[T], Awaitable[None]],
    key: Callable[[T], str],
    failures: dict[str, str],
) -> None:
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
            except Exception as exc:
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


def run_rates(this_run: dict[str, Any], started: float) -> dict[str, Any]:
    """``this_run`` (its counts, ``messages`` among them) with the run's wall time since ``started``
    (``time.perf_counter()``) and its ingestion rate: messages over that wall time (None when none was stored)."""
    wall = time.perf_counter() - started
    messages = this_run.get("messages", 0)
    return {
        **this_run,
        "wall_s": round(wall, 3),
        "messages_per_s": round(messages / wall, 2) if messages and wall > 0 else None,
    }


def ingestion_totals(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The recorded items' ingestion (each an ``ingestion`` block: ``messages``, ``seconds``, ``entries``,
    ``contexts``) summed. ``stream_seconds`` adds every item's own time: with several workers they overlap, so it is
    no run's time and gives no rate (``this_run`` has the rate from wall time)."""
    return {
        "messages": sum(i["messages"] for i in items),
        "stream_seconds": round(sum(i["seconds"] for i in items), 3),
        "entries": sum(i["entries"] for i in items),
        "contexts": sum(i["contexts"] for i in items),
    }


def usage_totals(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of usage dicts (``Usage.as_dict``: the totals and the ``by_model`` rows), in the same form."""
    from mycelian_agent.agent.report import Usage

    total = Usage()
    for item in items:
        total += Usage.from_mapping(item)
    return total.as_dict()


def usage_by_model(
    ingestion: Mapping[str, Any], qa_model: str | None = None, qa: Mapping[str, Any] | None = None
) -> dict[str, dict[str, int]]:
    """Every model's row of a run: the rows of the ingestion usage (``Usage.as_dict`` form) and, when a QA model
    answered, its calls and tokens as the row ``"<name> (QA)"`` (the QA model may be the ingestion model)."""
    from mycelian_agent.agent.report import Usage

    usage = Usage.from_mapping(ingestion)
    if qa_model and qa and qa.get("llm_calls"):
        usage += Usage.of(
            f"{qa_model} (QA)",
            **{key: int(qa.get(key) or 0) for key in ("llm_calls", "prompt_tokens", "completion_tokens")},
        )
    return {name: row.as_dict() for name, row in usage.rows()}


def report_notes(
    summary: dict[str, Any], *, recorded: str, this_run: str, usage: Any, extra: Sequence[str] = ()
) -> list[str]:
    """The text lines under a runner's recall tables, from its ``summary``.

    ``recorded``: what is recorded in total; ``this_run``: what this run did, before its wall time (shown only
    when the summary has a ``this_run``); ``usage``: the ingestion model usage (its totals; the summary's
    ``usage_by_model`` gives a line per model); ``extra``: lines before the failures.
    """
    ing, run = summary["ingestion"], summary["this_run"]
    rate = run.get("messages_per_s")
    speed = f", {rate:.1f} messages/s" if rate else ""
    lines = [
        recorded + (f" (this run: {this_run}{run.get('wall_s', 0):.1f} s wall{speed})" if run else ""),
        f"ingestion (all recorded): {ing['messages']} messages, {ing['entries']} entries, {ing['contexts']} context "
        f"documents; model {summary['model']}",
        f"model usage (ingestion): { ({k: v for k, v in usage.items() if k != 'by_model'}) }",
        *_model_lines(summary.get("usage_by_model") or {}),
        *extra,
    ]
    if summary["failed"]:
        lines.append(
            f"FAILED ({len(summary['failed'])}; re-run to retry): "
            + "; ".join(f"{k}: {v}" for k, v in list(summary["failed"].items())[:5])
        )
    return lines


def progress_bar(enabled: bool) -> Any:
    """A rich progress display on stderr (a no-op one when disabled or when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    # Off when stderr is not a terminal: redirected logs would get only a final static bar.
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
    )


def _model_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    from mycelian_agent.agent.report import ModelUsage

    return [f"  {name}: {ModelUsage.from_mapping(row).describe()}" for name, row in rows.items()]
