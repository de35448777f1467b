"""MycelianMemoryAgent: a checkpointed ``StateGraph`` with ``observe`` and ``tools`` nodes, driven by a ControlState.

An invocation runs the steps its control lists in :data:`~mycelian_agent.agent.control.PLANS`. ``observe`` takes in
the results of the step that just ran (``_absorb_*``) and emits the next step's tool calls (``_begin_*``) as an
AIMessage; ``tools`` is a ``ToolNode`` over the memory server's MCP tools that executes them. Direct calls
(get_context, list_entries, await_consistency) are built in code; add_entry and put_context arguments come from the
model, bound to that one tool with a forced choice. Code owns every identifier and the verbatim text. In batched
mode a message is first accepted into the checkpointed ``pending`` list (no tool call; :meth:`aaccept_messages`
accepts many in one invocation); ``ADD_ENTRIES`` then asks the model once for the summaries and tags of every
pending message and stores one entry per message in one tools pass: one ``add_entries`` call (one transaction on
the server) when the server offers that tool, else one ``add_entry`` call per entry.

The invocation's report (:class:`InvocationResult`) travels in LangGraph's runtime context, never in the
checkpoint; the checkpoint holds only the thread's bounded state (:mod:`~mycelian_agent.agent.state`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from datetime import datetime
from typing import Any, Mapping, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, RemoveMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from .._sync import run_sync
from ..dates import normalise_time
from ..errors import InputError, MemoryServerError, MycelianError, describe_cause, is_transient_text
from ..limits import ADD_ENTRIES_MAX_ITEMS, TAG_VALUE_MAX_CHARS, clip_tags, name_problem, split_oversize, unicode_problem
from mycelian_agent.memory_server.storage.placeholder import is_placeholder_context
from ..models.extractive import ExtractiveChatModel
from .checkpointers import prune_thread
from .control import PLANS, ControlState, Step
from .model_tools import ToolArgumentWriter, direct_call, entry_tags, idempotency_key
from .prompts import BatchItem, PromptSet, build_add_entries_prompt, build_add_entry_prompt, build_put_context_prompt
from .report import InvocationResult, ThreadProgress, ThreadStatus, Usage
from .settings import AgentSettings
from .state import AgentState, PendingTurn, Turn

__all__ = ["MESSAGE_KEYS", "MycelianMemoryAgent", "Invocation"]

ROLES = ("user", "assistant")
#: The keys of one message given to :meth:`MycelianMemoryAgent.aaccept_messages` as a mapping.
MESSAGE_KEYS = ("role", "content", "name", "conversation_time", "tags")
_REQUIRED_TOOLS = ("get_context", "list_entries", "add_entry", "await_consistency", "put_context")


@dataclass
class Invocation:
    """The runtime context of one invocation: where it writes and the report it fills in (not checkpointed)."""

    thread_id: str
    vault_id: str
    memory_id: str
    report: InvocationResult
    batch_entries: int = 0  # add_entry calls made by ADD_ENTRIES in this invocation (ADD_ENTRY counts its own)
    incoming: list[tuple[Turn, dict[str, str]]] | None = None  # aaccept_messages: the checked messages to accept
    batch_context: str | None = None  # the context document written by the ADD_ENTRIES call, for PUT_CONTEXT
    tools_in_flight: int = 0  # tool calls of one pass run concurrently: their time is counted once (the union)
    tools_since: float = 0.0
    #: The state changes of the steps done so far, written to the checkpoint only by the invocation's last step.
    staged: dict[str, Any] = field(default_factory=dict)

    @property
    def ids(self) -> dict[str, str]:
        return {"vault_id": self.vault_id, "memory_id": self.memory_id}


class MycelianMemoryAgent:
    """The memory agent: one compiled graph, one memory (vault and memory ids), a checkpointer per thread state.

    ``tools`` are the memory server's tools (from :class:`~mycelian_agent.mcp.MemoryConnection`). ``model`` writes
    summaries, tags and context documents; ``fallback_model`` (default: the extractive model) writes them when the
    model fails to produce a valid tool call.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        *,
        vault_id: str,
        memory_id: str,
        checkpointer: Any,
        settings: AgentSettings | None = None,
        prompts: PromptSet | None = None,
        fallback_model: BaseChatModel | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if checkpointer is None:
            raise MycelianError("MycelianMemoryAgent needs a checkpointer (e.g. langgraph's InMemorySaver)")
        self.model = model
        self.vault_id = vault_id
        self.memory_id = memory_id
        self.settings = settings or AgentSettings()
        self.prompts = prompts or PromptSet.load()
        self.fallback_model = fallback_model or ExtractiveChatModel()
        self.checkpointer = checkpointer
        self._tools = {tool.name: tool for tool in tools}
        missing = [name for name in _REQUIRED_TOOLS if name not in self._tools]
        if missing:
            raise MemoryServerError(f"the memory server lacks tool(s) {', '.join(missing)}; is it a Mycelian server?")
        schema = getattr(self._tools["add_entry"], "args_schema", None) or {}
        # Upstream Mycelian has no idempotency keys; send one only where the server declares it.
        self._server_idempotency = "idempotency_key" in (schema.get("properties", {}) if isinstance(schema, Mapping) else {})
        self._consistency_vault = "vault_id" in _declared(self._tools["await_consistency"])
        # Our server's batch write (one transaction per call); a server without it gets one add_entry per entry.
        self._server_bulk = self._server_idempotency and "add_entries" in self._tools
        s = self.settings
        self._writer = ToolArgumentWriter(model, self.fallback_model, max_corrections=s.max_corrections,
                                          fallback_on_model_error=s.fallback_on_model_error,
                                          context_max_chars=s.context_max_chars,
                                          tool_choice_mode=s.tool_choice_mode, model_attempts=s.model_attempts,
                                          model_backoff_s=s.model_backoff_s)
        self._loop = loop
        self._invocations: dict[str, int] = {}
        self._running: dict[str, InvocationResult] = {}  # the report of each thread's invocation in progress
        self._exits: dict[str, list[asyncio.Future[Any]]] = {}  # per thread: LangGraph's saves left running (asettle)
        self.graph = self._build_graph()

    # -- public API -------------------------------------------------------------------------------------------

    def with_memory(self, vault_id: str, memory_id: str) -> MycelianMemoryAgent:
        """The same agent (graph, model, tools, checkpointer) writing to another memory."""
        clone = object.__new__(MycelianMemoryAgent)
        clone.__dict__.update(self.__dict__)
        clone.vault_id, clone.memory_id = vault_id, memory_id
        return clone

    async def ainvoke(
        self,
        control: ControlState | str,
        thread_id: str,
        to_process: ChatMessage | Mapping[str, Any] | None = None,
        conversation_time: str | datetime | None = None,
        *,
        tags: Mapping[str, str] | None = None,
        name: str | None = None,
        memory: Mapping[str, str] | None = None,
    ) -> InvocationResult:
        """Run one control step for ``thread_id`` and return what it did.

        ``to_process`` is required for PROCESS_MESSAGE[_AND_FLUSH]: a ``{"role", "content", "name"?}`` mapping or a
        ChatMessage (its ``name`` is used too); ``name`` (here or in ``to_process``) is who spoke ("Caroline"): it goes
        into the prompts and the summary, the role stays ``user`` or ``assistant``. ``tags`` are stored with the
        entry (e.g. the session id and turn of a replayed message).

        Times: START_SESSION's ``conversation_time`` becomes the session's time. A message sent without a time gets
        the later of the session's time and the time of the last message stored since START_SESSION; when neither
        is known it is stored without one (the server then stamps its creation time).

        ``memory`` binds the thread to a memory (``{"vault_id", "memory_id", "user"}``, kept in the checkpoint):
        this and every later invocation of the thread read and write there instead of the agent's own memory
        (the invoker's ``user=`` does this; it checks that a thread never changes memory).

        Raises a :class:`MycelianError` on any failure (an invalid message or name before anything is written); a
        failed or cancelled invocation leaves the thread's position, context and pending messages as they were, so
        it can be retried: the message gets the same number and so the same idempotency key (add_entry is
        idempotent). Only an invocation cancelled after its checkpoint was written (at its very end) has taken the
        message in: :class:`~mycelian_agent.agent.invoker.MycelianAgentInvoker` tells that apart when the message
        is sent again.
        """
        started = time.perf_counter()
        control = _control(control)
        _check_thread(thread_id)
        message: Turn | None = None
        if control.stores_message:
            if to_process is None:
                raise InputError(f"{control.name} needs a message to process (to_process)")
            message = _turn(to_process, normalise_time(conversation_time), name)
        elif to_process is not None or name is not None:
            raise InputError(f"{control.name} takes no message; send it with PROCESS_MESSAGE")
        tags = _checked_tags(tags)
        parts = len(message["content"]) // max(1, self.settings.entry_max_chars) if message else 0
        state_in: dict[str, Any] = {"message": message, "message_tags": tags}
        if control is ControlState.START_SESSION:  # a new session: its own time, no message time yet
            state_in |= {"session_time": normalise_time(conversation_time), "last_time": None}
        state_in |= _binding(memory)
        return await self._run(control, thread_id, state_in, started, recursion=64 + 4 * parts)

    async def aaccept_messages(
        self,
        thread_id: str,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        conversation_time: str | datetime | None = None,
        *,
        control: ControlState | str = ControlState.ACCEPT_MESSAGE,
        memory: Mapping[str, str] | None = None,
    ) -> InvocationResult:
        """Accept many messages in one invocation: one graph run and one checkpoint write for all of them.

        Batched mode's bulk form of ``ACCEPT_MESSAGE``: each message gets its number in the thread (and so its
        idempotency key) in order, and joins the checkpointed ``pending`` list. ``control`` may also be
        ``ACCEPT_MESSAGE_AND_WRITE`` (then write every pending message: one model call) or
        ``ACCEPT_MESSAGE_AND_FLUSH`` (also write the context document). A message is a ChatMessage or a mapping
        with ``role`` and ``content`` and optionally ``name``, ``conversation_time`` (default: the
        ``conversation_time`` argument, else the session's, as for one message) and ``tags``.

        Every message is checked before anything is accepted: a bad one raises :class:`InputError` naming it
        (``messages[3]: ...``) and the thread is unchanged. The caller keeps ``pending`` within a batch
        (:meth:`MycelianAgentInvoker.aprocess_conversation_messages` splits a long list at the batch and flush
        boundaries). ``memory`` binds the thread to a memory, as in :meth:`ainvoke`.
        """
        started = time.perf_counter()
        control = _control(control)
        if PLANS[control][0] is not Step.ACCEPT:
            accepted = ", ".join(c.name for c in ControlState if PLANS[c][0] is Step.ACCEPT)
            raise InputError(f"aaccept_messages takes an accepting control ({accepted}), got {control.name}")
        _check_thread(thread_id)
        incoming = self.check_messages(messages, conversation_time)
        state_in: dict[str, Any] = {"message": None, "message_tags": {}, **_binding(memory)}
        return await self._run(control, thread_id, state_in, started, recursion=64, incoming=incoming)

    def check_messages(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                       conversation_time: str | datetime | None = None) -> list[tuple[Turn, dict[str, str]]]:
        """Check every message of ``messages`` (see :meth:`aaccept_messages`): ``(turn, tags)`` each, or raise
        :class:`InputError` naming the first bad one."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise InputError(f"messages must be a list of messages, got {type(messages).__name__}")
        if not messages:
            raise InputError("messages is empty: there is nothing to accept")
        default_time = normalise_time(conversation_time)
        checked = []
        for index, item in enumerate(messages):
            try:
                if isinstance(item, Mapping):
                    unknown = [str(key) for key in item if key not in MESSAGE_KEYS]
                    if unknown:
                        raise InputError(f"unknown key(s) {', '.join(map(repr, unknown))} "
                                         f"(a message has {', '.join(MESSAGE_KEYS)})")
                    when = item.get("conversation_time")
                    turn = _turn({k: item[k] for k in ("role", "content", "name") if k in item},
                                 normalise_time(when) if when is not None else default_time)
                    tags = item.get("tags")
                    if tags is not None and not isinstance(tags, Mapping):
                        raise InputError(f"tags must be a mapping of string to string, got {type(tags).__name__}")
                    checked.append((turn, _checked_tags(tags)))
                else:
                    checked.append((_turn(item, default_time), {}))
            except InputError as exc:
                raise InputError(f"messages[{index}]: {exc}; nothing was accepted") from None
        return checked

    async def _run(self, control: ControlState, thread_id: str, state_in: dict[str, Any], started: float, *,
                   recursion: int, incoming: list[tuple[Turn, dict[str, str]]] | None = None) -> InvocationResult:
        """One invocation of the graph with a checked input; its report."""
        report = InvocationResult(control=control, thread_id=thread_id)
        self._running[thread_id] = report
        state_in = {**state_in, "control": control.value, "step": 0,
                    "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]}
        config = {"configurable": {"thread_id": thread_id}, "recursion_limit": recursion}
        context = Invocation(thread_id, self.vault_id, self.memory_id, report, incoming=incoming)
        # durability="exit": one checkpoint per invocation, written when the run ends. A run that fails or is
        # cancelled also saves one (the state of its last finished step), but that holds only this invocation's
        # input and tool flow: the thread's position and memory are staged until the last step (see _observe).
        try:
            await self.graph.ainvoke(state_in, config, context=context, durability="exit")
        except asyncio.CancelledError as exc:
            # Cancelled while LangGraph saved the run's last checkpoint: that save goes on in a task of its own,
            # which LangGraph hands over in the error; the thread's next invocation waits for it (asettle).
            exits = [arg for arg in exc.args if isinstance(arg, asyncio.Future) and not arg.done()]
            if exits:
                self._exits[thread_id] = exits
            raise
        self._running.pop(thread_id, None)
        await self._maybe_prune(thread_id)
        report.duration_s = time.perf_counter() - started
        return report

    async def asettle(self, thread_id: str, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for the checkpoint save of ``thread_id``'s last invocation when that
        invocation was cancelled during the save, so that the next read of the thread sees where it stands."""
        exits = self._exits.pop(thread_id, None)
        if exits:
            await asyncio.wait(exits, timeout=timeout)

    def unfinished_writes(self) -> int:
        """Messages whose entry the server acknowledged in invocations that did not finish (interrupted or failed
        after add_entry). A retry stores them again only as a deduplicated answer; summaries count them as stored."""
        return sum(1 for report in self._running.values() if report.acknowledged_entries)

    def accept_messages(self, thread_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                        conversation_time: str | datetime | None = None, *,
                        control: ControlState | str = ControlState.ACCEPT_MESSAGE) -> InvocationResult:
        """Synchronous :meth:`aaccept_messages` (not for use inside a running event loop)."""
        return run_sync(self.aaccept_messages(thread_id, messages, conversation_time, control=control), self._loop)

    def invoke(self, control: ControlState | str, thread_id: str, to_process: Any = None,
               conversation_time: str | datetime | None = None, *, tags: Mapping[str, str] | None = None,
               name: str | None = None) -> InvocationResult:
        """Synchronous :meth:`ainvoke` (not for use inside a running event loop)."""
        return run_sync(self.ainvoke(control, thread_id, to_process, conversation_time, tags=tags, name=name),
                        self._loop)

    async def aget_thread(self, thread_id: str) -> ThreadStatus:
        """The checkpointed position and totals of ``thread_id`` (zeros for a new thread)."""
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        values = snapshot.values or {}
        progress, usage = _totals(values)
        return ThreadStatus(thread_id=thread_id, progress=progress, usage=usage,
                            session_open=bool(values.get("session_open")), context=values.get("context", ""),
                            pending=len(values.get("pending") or []),
                            memory_id=(values.get("memory") or {}).get("memory_id"),
                            user=(values.get("memory") or {}).get("user") or None)

    async def _maybe_prune(self, thread_id: str) -> None:
        every = self.settings.prune_every
        if every is None:
            return
        count = self._invocations[thread_id] = self._invocations.get(thread_id, 0) + 1
        if count % every == 0:
            await prune_thread(self.checkpointer, thread_id)

    # -- graph ------------------------------------------------------------------------------------------------

    def _build_graph(self) -> Any:
        builder = StateGraph(AgentState, context_schema=Invocation)
        builder.add_node("observe", self._observe)
        builder.add_node("tools", ToolNode(list(self._tools.values()), messages_key="tool_history",
                                           awrap_tool_call=self._run_tool))
        builder.add_edge(START, "observe")
        builder.add_conditional_edges("observe", _route, {"tools": "tools", END: END})
        builder.add_edge("tools", "observe")
        return builder.compile(checkpointer=self.checkpointer)

    async def _observe(self, state: AgentState, runtime: Runtime[Invocation]) -> dict[str, Any]:
        """Take in the results of the step that ran, then emit the next step's calls, or finish the invocation."""
        run = runtime.context
        bound = state.get("memory")
        if bound:  # the thread's own memory (a user's), fixed when the thread was bound
            run.vault_id, run.memory_id = bound["vault_id"], bound["memory_id"]
        plan = PLANS[ControlState(state["control"])]
        index = state.get("step", 0)
        # The thread's state as this invocation has changed it so far. The changes stay in the runtime context
        # until the invocation ends: LangGraph saves the state of the last finished step when a run fails or is
        # cancelled (durability "exit" included), and a position advanced there (a message counted, accepted or
        # flushed by a run that did not finish) would give the same message the next number when it is sent again.
        state = {**state, **run.staged}  # type: ignore[assignment]
        update: dict[str, Any] = {}
        history = state.get("tool_history") or []
        results = _last_results(history)
        if results:
            run.report.tool_calls += tuple(m.name or "" for m in results)
            update, again = await self._absorb(plan[index], state, history, results, run)
            index += 0 if again else 1
        while index < len(plan):
            step_update, call = await self._begin(plan[index], {**state, **update}, history, run)
            update.update(step_update)
            if call is not None:
                run.staged.update(update)
                return {"step": index, "tool_history": [call]}
            index += 1
        usage = _totals({**state, **update})[1] + run.report.usage
        run.report.pending = len({**state, **update}.get("pending") or [])
        # The tool flow is in the report and the message is stored: clearing both keeps checkpoints small.
        return {**run.staged, **update, "usage": usage.as_dict(), "message": None, "step": 0,
                "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]}

    async def _begin(self, step: Step, state: Mapping[str, Any], history: list[BaseMessage],
                     run: Invocation) -> tuple[dict[str, Any], AIMessage | None]:
        """The state update and tool calls that start ``step`` (no calls: the step is done or skipped)."""
        if step is Step.READ_MEMORY:
            return {}, direct_call(("get_context", run.ids),
                                   ("list_entries", {**run.ids, "limit": self.settings.recent_entries}))
        if step is Step.ACCEPT:
            return self._accept(state, run), None
        if step is Step.ADD_ENTRIES:
            if not state.get("pending"):
                return {}, None
            return {}, await self._entries_call(state, run)
        if step is Step.ADD_ENTRY:
            part = _count(history, "add_entry") - run.batch_entries
            update = _inherit_time(state, run) if part == 0 else {}
            return update, await self._entry_call({**state, **update}, part, run)
        if step is Step.AWAIT_CONSISTENCY:
            # Upstream's await_consistency takes the memory alone; ours also takes the vault, which a token limited
            # to some vaults needs.
            ids = run.ids if self._consistency_vault else {"memory_id": run.memory_id}
            return {}, direct_call(("await_consistency", ids))
        if step is Step.PUT_CONTEXT:
            if not state.get("since_flush") and self.settings.skip_empty_flush:
                run.report.notes += ("no messages since the last flush: context unchanged",)
                return {}, None
            if state.get("fresh_since_flush") == 0 and self.settings.skip_empty_flush:
                # A re-run (e.g. replay without --state): the server already held every message since the last
                # context, so that context already covers them; another snapshot would only pile up.
                run.report.notes += ("every message since the last flush was already stored: context unchanged",)
                return {}, None
            if run.batch_context is not None:  # written by the ADD_ENTRIES call of this invocation
                return {}, direct_call(("put_context", {**run.ids, "content": run.batch_context}))
            return {}, await self._context_call(state, run)
        if step is Step.CLOSE_SESSION:
            return {"session_open": False, "progress": _bump(state, sessions_ended=1)}, None
        raise MycelianError(f"memory agent: step {step.value} has no start")

    async def _absorb(self, step: Step, state: AgentState, history: list[BaseMessage], results: list[ToolMessage],
                      run: Invocation) -> tuple[dict[str, Any], bool]:
        """The state update from ``step``'s tool results, and whether the step runs again (another part)."""
        if step is Step.READ_MEMORY:
            return self._after_read(state, results), False
        if step is Step.ADD_ENTRIES:
            return self._after_entries(state, results, run), False
        if step is Step.ADD_ENTRY:
            return self._after_entry(state, _count(history, "add_entry") - run.batch_entries, results, run)
        if step is Step.AWAIT_CONSISTENCY:
            return {}, False
        if step is Step.PUT_CONTEXT:
            written = next(m for m in reversed(history) if isinstance(m, AIMessage) and m.tool_calls)
            run.report.context_written = True
            return {"context": written.tool_calls[0]["args"]["content"], "since_flush": [], "fresh_since_flush": 0,
                    "progress": _bump(state, flushes=1)}, False
        raise MycelianError(f"memory agent: step {step.value} makes no tool calls")

    async def _run_tool(self, request: Any, execute: Any) -> Any:
        """Execute one tool call; retry transient failures with backoff (same arguments, so the same idempotency
        key); raise :class:`MemoryServerError` on any other error."""
        run: Invocation = request.runtime.context
        report = run.report
        name = request.tool_call["name"]
        if run.tools_in_flight == 0:
            run.tools_since = time.perf_counter()
        run.tools_in_flight += 1
        retrying = AsyncRetrying(stop=stop_after_attempt(self.settings.tool_attempts),
                                 wait=wait_exponential(multiplier=self.settings.retry_backoff_s),
                                 retry=retry_if_exception(_is_transient), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        report.usage += Usage(retries=1)
                    result = await _execute_checked(name, request, execute)
            if name == "add_entry":
                report.acknowledged_entries += 1
            elif name == "add_entries":
                report.acknowledged_entries += len(request.tool_call["args"].get("entries") or ())
            return result
        except MemoryServerError as error:
            retries = retrying.statistics.get("attempt_number", 1) - 1
            if retries:
                error.args = (f"{error.args[0]} (after {retries} retries)",)
            raise
        finally:
            run.tools_in_flight -= 1
            if run.tools_in_flight == 0:
                report.tool_s += time.perf_counter() - run.tools_since

    # -- steps ------------------------------------------------------------------------------------------------

    def _after_read(self, state: AgentState, results: list[ToolMessage]) -> dict[str, Any]:
        by_name = {m.name: _tool_text(m) for m in results}
        context = by_name.get("get_context", "")
        context = "" if is_placeholder_context(context) else context
        window: list[Turn] = list(state.get("window") or [])
        try:
            entries = json.loads(by_name.get("list_entries") or "{}").get("entries", [])
        except (json.JSONDecodeError, AttributeError):
            raise MemoryServerError("list_entries returned a result that is not the expected JSON object",
                                    tool="list_entries") from None
        if entries:
            lines = [f"- [{e.get('conversationTime') or e.get('creationTime', '')}] "
                     f"{(e.get('tags') or {}).get('role', '?')}: {e.get('summary', '')}" for e in reversed(entries)]
            window.append(Turn(role="system", content="Recent entries from earlier sessions:\n" + "\n".join(lines)))
            if self.settings.history_window is not None:
                window = window[-self.settings.history_window:]
        return {"context": context, "window": window, "since_flush": state.get("since_flush") or [],
                "session_open": True, "progress": _bump(state, sessions_started=1)}

    async def _entry_call(self, state: Mapping[str, Any], part: int, run: Invocation) -> AIMessage:
        message: Turn = state["message"]
        parts = _split(message["content"], self.settings.entry_max_chars)
        number = _totals(state)[0].messages + len(state.get("pending") or []) + 1
        run.report.message_index = number
        if part == 0:
            run.report.accepted += (number,)
        prompt = build_add_entry_prompt(
            self.prompts, message=message, content=parts[part], recent=state.get("window") or [],
            context=state.get("context", ""), part=(part + 1, len(parts)),
            recent_message_chars=self.settings.recent_message_chars, context_chars=self.settings.entry_context_chars,
        )
        written = await self._writer.write("add_entry", prompt, run.report)
        code_tags = {"role": message["role"], "thread": run.thread_id[:TAG_VALUE_MAX_CHARS], "msg": str(number),
                     **_speaker_tag(message)}
        if len(parts) > 1:
            code_tags["part"] = f"{part + 1}/{len(parts)}"
        args: dict[str, Any] = {**run.ids, "raw_entry": parts[part], "summary": written["summary"],
                                "tags": entry_tags(written["tags"], state.get("message_tags") or {}, code_tags)}
        if message.get("conversation_time"):
            args["conversation_time"] = message["conversation_time"]
        if self._server_idempotency:
            args["idempotency_key"] = idempotency_key(run.thread_id, number, message["content"], part, len(parts))
        return direct_call(("add_entry", args))

    def _after_entry(self, state: AgentState, stored_parts: int, results: list[ToolMessage],
                     run: Invocation) -> tuple[dict[str, Any], bool]:
        _record_stored(results, run)
        message: Turn = state["message"]
        parts = len(_split(message["content"], self.settings.entry_max_chars))
        if stored_parts < parts:
            return {}, True
        run.report.written += (run.report.message_index,)  # type: ignore[operator]
        fresh = int(run.report.deduplicated < parts)
        update = {**self._remembered(state, [message], run, fresh),
                  "progress": _bump(state, messages=1, entries=parts)}
        if message.get("conversation_time"):
            update["last_time"] = message["conversation_time"]
        return update, False

    def _remembered(self, state: Mapping[str, Any], messages: Sequence[Turn], run: Invocation,
                    fresh: int) -> dict[str, Any]:
        """The history window and the messages since the last flush, with ``messages`` (just stored; ``fresh``
        of them stored anew, not deduplicated) added."""
        s = self.settings
        window = [*(state.get("window") or []), *(_plain(m, s.recent_message_chars) for m in messages)]
        since = [*(state.get("since_flush") or []), *(_plain(m, s.flush_message_chars) for m in messages)]
        if s.history_window is not None:
            window = window[-s.history_window:]
        if s.since_flush_cap is not None and len(since) > s.since_flush_cap:
            run.report.notes += (f"more than {s.since_flush_cap} messages since the last flush: "
                                 "oldest dropped from the context prompt",)
            since = since[-s.since_flush_cap:]
        # Messages since the last context that the server stored anew: 0 means a re-run whose context already
        # covers them (see PUT_CONTEXT).
        fresh_since = (state.get("fresh_since_flush") or 0) + fresh
        return {"window": window, "since_flush": since, "fresh_since_flush": fresh_since}

    # -- batched mode -----------------------------------------------------------------------------------------

    def _accept(self, state: Mapping[str, Any], run: Invocation) -> dict[str, Any]:
        """Keep the message in the thread's pending list (checkpointed when the invocation ends); no tool call."""
        if run.incoming is not None:
            return self._accept_many(state, run.incoming, run)
        update = _inherit_time(state, run)
        message: Turn = update.get("message") or state["message"]
        pending = list(state.get("pending") or [])
        number = _totals(state)[0].messages + len(pending) + 1
        run.report.message_index = number
        run.report.accepted += (number,)
        entry = PendingTurn(**message, number=number,  # type: ignore[typeddict-item]
                            tags=dict(state.get("message_tags") or {}), accepted_at=time.time())
        update = {"message": message, "pending": [*pending, entry]}
        if message.get("conversation_time"):
            update["last_time"] = message["conversation_time"]
        return update

    def _accept_many(self, state: Mapping[str, Any], incoming: Sequence[tuple[Turn, dict[str, str]]],
                     run: Invocation) -> dict[str, Any]:
        """Accept ``incoming`` in order, as :meth:`_accept` accepts one message each (numbers, inherited times)."""
        pending = list(state.get("pending") or [])
        number = _totals(state)[0].messages + len(pending)
        session_time, last_time = state.get("session_time"), state.get("last_time")
        now, inherited = time.time(), 0
        for message, tags in incoming:
            if not message.get("conversation_time"):
                known = [t for t in (session_time, last_time) if t]
                if known:
                    message = {**message, "conversation_time": max(known)}
                    inherited += 1
            if message.get("conversation_time"):
                last_time = message["conversation_time"]
            number += 1
            pending.append(PendingTurn(**message, number=number, tags=tags, accepted_at=now))  # type: ignore[typeddict-item]
            run.report.accepted += (number,)  # type: ignore[operator]
        run.report.message_index = number
        if inherited:
            run.report.notes += (f"{inherited} message(s) sent without a time: stored with the session's time (the "
                                 "later of the session's start and its last message)",)
        return {"pending": pending, "last_time": last_time}

    async def _entries_call(self, state: Mapping[str, Any], run: Invocation) -> AIMessage:
        """One model call for the summaries and tags of every pending message, then one add_entry per message
        (per part of a long one) in a single tools pass."""
        s = self.settings
        pending: list[PendingTurn] = list(state["pending"])
        window: list[Turn] = list(state.get("window") or [])
        items: list[BatchItem] = []
        keys: dict[int, tuple[PendingTurn, int, int]] = {}
        earlier: list[Turn] = list(window)
        for message in pending:
            parts = _split(message["content"], s.entry_max_chars)
            recent = earlier if s.history_window is None else earlier[-s.history_window:]
            for part, text in enumerate(parts):
                items.append(BatchItem(item=len(items) + 1, message=_plain(message, None), content=text,
                                       part=(part + 1, len(parts)), recent=recent))
                keys[len(items)] = (message, part, len(parts))
            earlier = [*earlier, _plain(message, s.recent_message_chars)]
        control = ControlState(state["control"])
        plan = PLANS[control]
        rest = plan[plan.index(Step.ADD_ENTRIES) + 1:]
        with_context = (s.batch_context and Step.PUT_CONTEXT in rest and Step.ADD_ENTRY not in rest
                        and not s.flush_from_history)
        since = [*(state.get("since_flush") or []), *(_plain(m, s.flush_message_chars) for m in pending)]
        if s.since_flush_cap is not None:
            since = since[-s.since_flush_cap:]
        limit = s.batch_history_window
        shown = window if limit is None else window[-limit:] if limit else []
        by_number = {item.item: item for item in items}

        def build(numbers: Sequence[int], context_too: bool, note: str) -> list[BaseMessage]:
            return build_add_entries_prompt(
                self.prompts, items=[by_number[n] for n in numbers], recent=shown, context=state.get("context", ""),
                recent_message_chars=s.recent_message_chars, context_chars=s.entry_context_chars,
                with_context=context_too, since_flush=since, earlier=max(0, len(since) - len(pending)),
                max_chars=s.context_max_chars, message_chars=s.flush_message_chars, note=note)

        written, context = await self._writer.write_batch(build, list(by_number), run.report, with_context=with_context)
        run.batch_context = context
        calls = []
        for number, (message, part, parts) in keys.items():
            code_tags = {"role": message["role"], "thread": run.thread_id[:TAG_VALUE_MAX_CHARS],
                         "msg": str(message["number"]), **_speaker_tag(message)}
            if parts > 1:
                code_tags["part"] = f"{part + 1}/{parts}"
            args: dict[str, Any] = {**run.ids, "raw_entry": by_number[number].content,
                                    "summary": written[number]["summary"],
                                    "tags": entry_tags(written[number]["tags"], message.get("tags") or {}, code_tags)}
            if message.get("conversation_time"):
                args["conversation_time"] = message["conversation_time"]
            if self._server_idempotency:
                args["idempotency_key"] = idempotency_key(run.thread_id, message["number"], message["content"], part,
                                                          parts)
            calls.append(("add_entry", args))
        if self._server_bulk:  # one transaction per call: all of its entries or none
            bulk = [{k: v for k, v in args.items() if k not in ("vault_id", "memory_id")} for _, args in calls]
            return direct_call(*(("add_entries", {**run.ids, "entries": bulk[i:i + ADD_ENTRIES_MAX_ITEMS]})
                                 for i in range(0, len(bulk), ADD_ENTRIES_MAX_ITEMS)))
        run.batch_entries += len(calls)
        return direct_call(*calls)

    def _after_entries(self, state: AgentState, results: list[ToolMessage], run: Invocation) -> dict[str, Any]:
        deduplicated = run.report.deduplicated
        stored = _record_stored(results, run)
        fresh = stored - (run.report.deduplicated - deduplicated)  # parts stored anew
        pending: list[PendingTurn] = list(state.get("pending") or [])
        run.report.written += tuple(m["number"] for m in pending)
        return {**self._remembered(state, pending, run, fresh), "pending": [],
                "progress": _bump(state, messages=len(pending), entries=stored)}

    async def _context_call(self, state: Mapping[str, Any], run: Invocation) -> AIMessage:
        s = self.settings
        prompt = build_put_context_prompt(
            self.prompts, previous_context=state.get("context", ""),
            messages=(state.get("window") if s.flush_from_history else state.get("since_flush")) or [],
            max_chars=s.context_max_chars, message_chars=s.flush_message_chars,
        )
        written = await self._writer.write("put_context", prompt, run.report)
        return direct_call(("put_context", {**run.ids, "content": written["content"]}))


# -- helpers ------------------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _split(content: str, limit: int) -> tuple[str, ...]:
    """The parts of a message (``split_oversize``), computed once: ADD_ENTRY asks for them at each of its steps (one
    per part), so splitting again each time made a long message cost the square of its size."""
    return tuple(split_oversize(content, limit))


def _declared(tool: BaseTool) -> set[str]:
    """The parameter names ``tool`` declares (its JSON schema's properties)."""
    schema = getattr(tool, "args_schema", None) or {}
    return set(schema.get("properties", {})) if isinstance(schema, Mapping) else set()


def _speaker_tag(message: Mapping[str, Any]) -> dict[str, str]:
    """``{"speaker": name}`` when the message names its speaker: read back as the speaker of a search hit."""
    name = message.get("name")
    return {"speaker": name[:TAG_VALUE_MAX_CHARS]} if name else {}


def _binding(memory: Mapping[str, str] | None) -> dict[str, Any]:
    """The state update that binds a thread to ``memory`` (nothing when None)."""
    if memory is None:
        return {}
    missing = [key for key in ("vault_id", "memory_id") if not memory.get(key)]
    if missing:
        raise InputError(f"memory must give {' and '.join(missing)} (got {dict(memory)!r})")
    return {"memory": {"vault_id": memory["vault_id"], "memory_id": memory["memory_id"],
                       "user": memory.get("user") or ""}}


async def _route(state: AgentState) -> str:  # async: LangGraph runs sync callables in a thread pool
    history = state.get("tool_history") or []
    if history and isinstance(history[-1], AIMessage) and history[-1].tool_calls:
        return "tools"
    return END


async def _execute_checked(name: str, request: Any, execute: Any) -> Any:
    try:
        result = await execute(request)
    except MycelianError:
        raise
    except Exception as exc:  # transport failures come in many types
        raise MemoryServerError(f"{name} failed: {describe_cause(exc)}", tool=name, transient=True) from exc
    if isinstance(result, ToolMessage) and result.status == "error":
        text = _tool_text(result)
        raise MemoryServerError(f"{name} failed: {text}", tool=name, transient=is_transient_text(text))
    return result


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, MemoryServerError) and exc.transient


def _check_thread(thread_id: Any) -> None:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InputError("thread_id must be a non-empty string")
    if problem := unicode_problem(thread_id):
        raise InputError(f"thread_id: {problem}")


def _checked_tags(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """Input tags stored with a message's entry, clipped to the server's limits (text that cannot be stored is
    refused)."""
    for key, value in (tags or {}).items():
        if problem := next(filter(None, (unicode_problem(str(key)), unicode_problem(str(value)))), None):
            raise InputError(f"tag {str(key).encode('utf-8', 'backslashreplace').decode()!r}: {problem}")
    return clip_tags(tags or {})


def _control(value: ControlState | str) -> ControlState:
    try:
        return ControlState(value)
    except ValueError:
        accepted = ", ".join(c.value for c in ControlState)
        raise InputError(f"unknown control {value!r} (accepted: {accepted})") from None


def _turn(to_process: Any, conversation_time: str | None, name: Any = None) -> Turn:
    """The message to store, checked once here, at the agent's public edge."""
    given = None
    if isinstance(to_process, ChatMessage):
        role, content, given = to_process.role, to_process.content, to_process.name
    elif isinstance(to_process, Mapping):
        role, content, given = to_process.get("role"), to_process.get("content"), to_process.get("name")
    elif isinstance(to_process, BaseMessage):
        role, content = {"human": "user", "ai": "assistant"}.get(to_process.type, to_process.type), to_process.content
        given = to_process.name
    else:
        raise InputError(f"to_process must be a ChatMessage or a {{'role', 'content', 'name'?}} mapping, "
                         f"got {type(to_process).__name__}")
    if name is not None and given is not None and name != given:
        raise InputError(f"two speaker names for one message: name={name!r} but to_process has {given!r}")
    name = name if name is not None else given
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}: a message's role must be one of {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise InputError(f"message content must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InputError("message content is empty: there is nothing to store")
    if problem := unicode_problem(content):
        raise InputError(f"message content: {problem}")
    turn = Turn(role=role, content=content)
    if conversation_time:
        turn["conversation_time"] = conversation_time
    if name is not None:
        if problem := name_problem(name):
            raise InputError(f"invalid name {name!r}: {problem}")
        turn["name"] = name.strip()
    return turn


def _inherit_time(state: Mapping[str, Any], run: Invocation) -> dict[str, Any]:
    """A message without a time takes the later of the session's time and the last message's (a state update)."""
    message: Turn = state["message"]
    if message.get("conversation_time"):
        return {}
    known = [t for t in (state.get("session_time"), state.get("last_time")) if t]
    if not known:
        return {}  # no time known at all: the server stamps the entry with its creation time
    inherited = max(known)  # same fixed-width UTC form (normalise_time): the string order is the time order
    run.report.notes += (f"message sent without a time: stored with the session's time {inherited} "
                         "(the later of the session's start and its last message)",)
    return {"message": {**message, "conversation_time": inherited}}


def _totals(values: Mapping[str, Any]) -> tuple[ThreadProgress, Usage]:
    """A thread's progress and usage from its state (checkpoints of 0.1 kept both in one ``counters`` dict)."""
    legacy = values.get("counters")
    return (ThreadProgress.from_mapping(values.get("progress") or legacy),
            Usage.from_mapping(values.get("usage") or legacy))


def _bump(state: Mapping[str, Any], **deltas: int) -> dict[str, int]:
    progress = _totals(state)[0]
    return replace(progress, **{k: getattr(progress, k) + v for k, v in deltas.items()}).as_dict()


def _last_results(history: list[BaseMessage]) -> list[ToolMessage]:
    """The tool results of the last tools pass (those after the last AIMessage)."""
    results: list[ToolMessage] = []
    for message in reversed(history):
        if not isinstance(message, ToolMessage):
            break
        results.append(message)
    return results[::-1]


def _count(history: list[BaseMessage], tool: str) -> int:
    return sum(1 for m in history if isinstance(m, ToolMessage) and m.name == tool)


def _tool_text(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") if isinstance(block, dict) else str(block) for block in content)


def _clip(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit]


def _plain(message: Mapping[str, Any], limit: int | None) -> Turn:
    """The message as a plain Turn (no batch bookkeeping), its content clipped to ``limit``."""
    turn = Turn(role=message["role"], content=_clip(message["content"], limit))
    for key in ("conversation_time", "name"):
        if message.get(key):
            turn[key] = message[key]  # type: ignore[literal-required]
    return turn


def _record_stored(results: list[ToolMessage], run: Invocation) -> int:
    """Entry ids and deduplicated writes of add_entry and add_entries results, into the report; the number of
    entries the results stand for."""
    count = 0
    for result in results:
        try:
            answer = json.loads(_tool_text(result))
        except json.JSONDecodeError:
            count += 1
            continue  # upstream answers "enqueued": no entry id to report
        stored = answer.get("entries") if result.name == "add_entries" and isinstance(answer, Mapping) else [answer]
        if not isinstance(stored, list):
            raise MemoryServerError("add_entries returned a result without its list of entries", tool="add_entries")
        for entry in stored:
            count += 1
            if isinstance(entry, Mapping):
                if entry.get("entryId"):
                    run.report.entry_ids += (entry["entryId"],)
                run.report.deduplicated += bool(entry.get("deduplicated"))
    return count
