"""MycelianMemoryAgent: a checkpointed ``StateGraph`` with ``observe`` and ``tools`` nodes, driven by a ControlState.

An invocation runs the steps its control lists in :data:`~mycelian_agent.agent.control.PLANS`. ``observe`` takes in
the results of the step that just ran and emits the next step's tool calls as an AIMessage (what each step does is
in :mod:`~mycelian_agent.agent.steps`); ``tools`` is a ``ToolNode`` over the memory server's MCP tools that executes
them, retrying transient failures. In batched mode a message is first accepted into the checkpointed ``pending``
list (no tool call; :meth:`~MycelianMemoryAgent.aaccept_messages` accepts many in one invocation); ``ADD_ENTRIES``
then asks the model once for the summaries and tags of every pending message and stores them in one tools pass.

Around it: :mod:`~mycelian_agent.agent.inputs` checks what callers give (at this public edge),
:mod:`~mycelian_agent.agent.invocation` is the runtime context of one invocation (its report travels there, never in
the checkpoint; the checkpoint holds only the thread's bounded state, :mod:`~mycelian_agent.agent.state`) and
:mod:`~mycelian_agent.agent.tool_results` reads the server's answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, RemoveMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime

from .._sync import sync_twin
from ..dates import normalise_time
from ..errors import InputError, MemoryServerError, MycelianError
from ..models.extractive import ExtractiveChatModel
from .checkpointers import checkpoint_problem, prune_thread
from .control import PLANS, ControlState, Step
from .entries import entry_tags
from .inputs import MESSAGE_KEYS, check_messages, check_thread, checked_tags, memory_binding, parse_control, to_turn
from .invocation import Invocation, thread_totals
from .prompts import PromptSet, build_add_entry_prompt
from .report import InvocationResult, ThreadStatus, Usage
from .resends import message_digest, recent_digests
from .settings import AgentSettings
from .state import AgentState
from .steps import StepRunner
from .tool_results import declared_params, execute_checked, last_results
from .turn import Turn
from .writer import ToolArgumentWriter

__all__ = ["MESSAGE_KEYS", "Invocation", "MycelianMemoryAgent", "OwnMemory"]


class OwnMemory(Protocol):
    """Where an agent built without a memory id finds its own memory (a :class:`~mycelian_agent.recall.MemoryReader`:
    the memory of its default user, created by the first write)."""

    default_memory_id: str | None

    async def default_memory(self, *, create: bool = False) -> str | None: ...  # pragma: no cover - a protocol


_REQUIRED_TOOLS = ("get_context", "list_entries", "add_entry", "await_consistency", "put_context")


class MycelianMemoryAgent:
    """The memory agent: one compiled graph, one memory (vault and memory ids), a checkpointer per thread state.

    ``tools`` are the memory server's tools (from :class:`~mycelian_agent.mcp.MemoryConnection`). ``model`` writes
    summaries, tags and context documents; ``fallback_model`` (default: the extractive model) writes them when the
    model fails to produce a valid tool call. ``loop`` is the event loop the tools' MCP session is bound to: the
    sync twins (``invoke``, ...) run their work there (:func:`~mycelian_agent._sync.sync_twin`).
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        *,
        vault_id: str,
        memory_id: str | None,
        checkpointer: Any,
        settings: AgentSettings | None = None,
        prompts: PromptSet | None = None,
        fallback_model: BaseChatModel | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        own_memory: OwnMemory | None = None,
    ) -> None:
        if checkpointer is None:
            raise MycelianError("MycelianMemoryAgent needs a checkpointer (e.g. langgraph's InMemorySaver)")
        self.model = model
        self.vault_id = vault_id
        self._memory_id = memory_id
        self._own_memory = own_memory
        if memory_id is None and own_memory is None:
            raise MycelianError("MycelianMemoryAgent needs a memory_id, or own_memory to find and create its memory")
        self.settings = settings or AgentSettings()
        self.prompts = prompts or PromptSet.load()
        self.fallback_model = fallback_model or ExtractiveChatModel()
        self.checkpointer = checkpointer
        self._tools = {tool.name: tool for tool in tools}
        missing = [name for name in _REQUIRED_TOOLS if name not in self._tools]
        if missing:
            raise MemoryServerError(f"the memory server lacks tool(s) {', '.join(missing)}; is it a Mycelian server?")
        s = self.settings
        writer = ToolArgumentWriter(
            model,
            self.fallback_model,
            max_corrections=s.max_corrections,
            fallback_on_model_error=s.fallback_on_model_error,
            context_max_chars=s.context_max_chars,
            tool_choice_mode=s.tool_choice_mode,
            model_attempts=s.model_attempts,
            model_backoff_s=s.model_backoff_s,
        )
        # Upstream Mycelian has no idempotency keys; send one only where the server declares it.
        idempotency = "idempotency_key" in declared_params(self._tools["add_entry"])
        self._steps = StepRunner(
            s,
            self.prompts,
            writer,
            idempotency=idempotency,
            # Our server's batch write (one transaction per call); a server without it gets one add_entry per entry.
            bulk=idempotency and "add_entries" in self._tools,
            consistency_vault="vault_id" in declared_params(self._tools["await_consistency"]),
        )
        #: The event loop the tools' MCP session is bound to, where the sync twins run (None: a fresh loop each).
        self.loop = loop
        self._invocations: dict[str, int] = {}
        self._running: dict[str, InvocationResult] = {}  # the report of each thread's invocation in progress
        self._exits: dict[str, list[asyncio.Future[Any]]] = {}  # per thread: LangGraph's saves left running
        self.graph = self._build_graph()

    # -- public API -------------------------------------------------------------------------------------------

    @property
    def memory_id(self) -> str | None:
        """The agent's own memory (of threads bound to no user); None while it does not exist: built with
        ``own_memory`` (as ``build_agent`` does), it is created by the first write to it."""
        if self._memory_id is None and self._own_memory is not None:
            return self._own_memory.default_memory_id
        return self._memory_id

    async def _resolve_own(self, create: bool) -> str | None:
        if self._memory_id is not None or self._own_memory is None:
            return self._memory_id
        return await self._own_memory.default_memory(create=create)

    def with_memory(self, vault_id: str, memory_id: str) -> MycelianMemoryAgent:
        """The same agent (graph, model, tools, checkpointer) writing to another memory."""
        clone = object.__new__(MycelianMemoryAgent)
        clone.__dict__.update(self.__dict__)
        clone.vault_id, clone._memory_id = vault_id, memory_id
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
        control = parse_control(control)
        check_thread(thread_id)
        message: Turn | None = None
        if control.stores_message:
            if to_process is None:
                raise InputError(f"{control.name} needs a message to process (to_process)")
            message = to_turn(to_process, normalise_time(conversation_time), name)
        elif to_process is not None or name is not None:
            raise InputError(f"{control.name} takes no message; send it with PROCESS_MESSAGE")
        tags = checked_tags(tags)
        parts = len(message["content"]) // max(1, self.settings.entry_max_chars) if message else 0
        state_in: dict[str, Any] = {"message": message, "message_tags": tags}
        if control is ControlState.START_SESSION:  # a new session: its own time, no message time yet
            state_in |= {"session_time": normalise_time(conversation_time), "last_time": None}
        state_in |= memory_binding(memory)
        digests = (message_digest(message["role"], message["content"], message.get("name")),) if message else ()
        return await self._run(control, thread_id, state_in, started, recursion=64 + 4 * parts, digests=digests)

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
        control = parse_control(control)
        if PLANS[control][0] is not Step.ACCEPT:
            accepted = ", ".join(c.name for c in ControlState if PLANS[c][0] is Step.ACCEPT)
            raise InputError(f"aaccept_messages takes an accepting control ({accepted}), got {control.name}")
        check_thread(thread_id)
        incoming = check_messages(messages, conversation_time)
        state_in: dict[str, Any] = {"message": None, "message_tags": {}, **memory_binding(memory)}
        digests = tuple(message_digest(turn["role"], turn["content"], turn.get("name")) for turn, _ in incoming)
        return await self._run(control, thread_id, state_in, started, recursion=64, incoming=incoming, digests=digests)

    async def awrite_entry_fields(
        self,
        message: ChatMessage | Mapping[str, Any],
        conversation_time: str | datetime | None = None,
        *,
        tags: Mapping[str, str] | None = None,
        context: str = "",
    ) -> dict[str, Any]:
        """The ``summary`` and ``tags`` of an entry holding ``message`` (a ``{"role", "content", "name"?}``
        mapping or a ChatMessage), written as an ``add_entry`` step writes them: the same prompt (with
        ``context``, no recent turns), the same corrective re-prompts and the same fallback to the extractive
        model. ``tags`` are code's (kept over the model's, which fill the room left). Nothing is stored. An
        invalid message, or one that does not fit one entry (over ``settings.entry_max_chars``), raises
        :class:`InputError`."""
        turn = to_turn(message, normalise_time(conversation_time))
        limit = self.settings.entry_max_chars
        if len(turn["content"]) > limit:
            raise InputError(f"the text has {len(turn['content'])} characters; one entry holds at most {limit}")
        report = InvocationResult(control=ControlState.PROCESS_MESSAGE, thread_id="")
        prompt = build_add_entry_prompt(
            self.prompts,
            message=turn,
            content=turn["content"],
            recent=[],
            context=context,
            recent_message_chars=self.settings.recent_message_chars,
            context_chars=self.settings.entry_context_chars,
        )
        written = await self._steps.writer.write("add_entry", prompt, report)  # report: the writer's bookkeeping
        return {"summary": written["summary"], "tags": entry_tags(written["tags"], {}, checked_tags(tags))}

    def check_messages(
        self, messages: Sequence[ChatMessage | Mapping[str, Any]], conversation_time: str | datetime | None = None
    ) -> list[tuple[Turn, dict[str, str]]]:
        """Check every message of ``messages`` (see :meth:`aaccept_messages`): ``(turn, tags)`` each, or raise
        :class:`InputError` naming the first bad one."""
        return check_messages(messages, conversation_time)

    async def _run(
        self,
        control: ControlState,
        thread_id: str,
        state_in: dict[str, Any],
        started: float,
        *,
        recursion: int,
        incoming: list[tuple[Turn, dict[str, str]]] | None = None,
        digests: tuple[str, ...] = (),
    ) -> InvocationResult:
        """One invocation of the graph with a checked input; its report."""
        report = InvocationResult(control=control, thread_id=thread_id)
        self._running[thread_id] = report
        state_in = {
            **state_in,
            "control": control.value,
            "step": 0,
            "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        }
        config = {"configurable": {"thread_id": thread_id}, "recursion_limit": recursion}
        context = Invocation(
            thread_id,
            self.vault_id,
            self.memory_id,
            report,
            incoming=incoming,
            digests=digests,
            own_memory=self._resolve_own,
        )
        # durability="exit": one checkpoint per invocation, written when the run ends. A run that fails or is
        # cancelled also saves one (the state of its last finished step), but that holds only this invocation's
        # input and tool flow: the thread's position and memory are staged until the last step (see _observe).
        try:
            await self.graph.ainvoke(state_in, config, context=context, durability="exit")
        except asyncio.CancelledError as exc:
            # Cancelled while LangGraph saved the run's last checkpoint: that save goes on in a task of its own,
            # which LangGraph hands over in the error; the thread's next invocation waits for it
            # (wait_for_cancelled_save).
            exits = [arg for arg in exc.args if isinstance(arg, asyncio.Future) and not arg.done()]
            if exits:
                self._exits[thread_id] = exits
            raise
        except Exception as exc:
            if (problem := checkpoint_problem(exc, self.checkpointer)) is None:
                raise
            raise problem from exc
        self._running.pop(thread_id, None)
        await self._maybe_prune(thread_id)
        report.duration_s = time.perf_counter() - started
        return report

    async def wait_for_cancelled_save(self, thread_id: str, timeout: float = 30.0) -> None:
        """Wait (at most ``timeout`` seconds) for the checkpoint save of ``thread_id``'s last invocation when that
        invocation was cancelled during the save, so that the next read of the thread sees where it stands. The
        invoker's bookkeeping between two calls of a thread, on the agent's loop: no sync twin."""
        exits = self._exits.pop(thread_id, None)
        if exits:
            await asyncio.wait(exits, timeout=timeout)

    def unfinished_writes(self) -> int:
        """Messages whose entry the server acknowledged in invocations that did not finish (interrupted or failed
        after add_entry). A retry stores them again only as a deduplicated answer; summaries count them as stored."""
        return sum(1 for report in self._running.values() if report.acknowledged_entries)

    async def aget_thread(self, thread_id: str) -> ThreadStatus:
        """The checkpointed position and totals of ``thread_id`` (zeros for a new thread)."""
        try:
            snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        except Exception as exc:
            if (problem := checkpoint_problem(exc, self.checkpointer)) is None:
                raise
            raise problem from exc
        values = snapshot.values or {}
        progress, usage = thread_totals(values)
        return ThreadStatus(
            thread_id=thread_id,
            progress=progress,
            usage=usage,
            session_open=bool(values.get("session_open")),
            context=values.get("context", ""),
            pending=len(values.get("pending") or []),
            memory_id=(values.get("memory") or {}).get("memory_id"),
            user=(values.get("memory") or {}).get("user") or None,
            recent=tuple(values.get("recent") or ()),
        )

    invoke = sync_twin(ainvoke)
    accept_messages = sync_twin(aaccept_messages)
    write_entry_fields = sync_twin(awrite_entry_fields)
    get_thread = sync_twin(aget_thread)

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
        builder.add_node(
            "tools", ToolNode(list(self._tools.values()), messages_key="tool_history", awrap_tool_call=self._run_tool)
        )
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
        current: dict[str, Any] = {**state, **run.staged}
        update: dict[str, Any] = {}
        history: list[BaseMessage] = current.get("tool_history") or []
        results = last_results(history)
        if results:
            run.report.tool_calls += tuple(m.name or "" for m in results)
            update, again = await self._steps.absorb(plan[index], current, history, results, run)
            index += 0 if again else 1
        while index < len(plan):
            step_update, call = await self._steps.begin(plan[index], {**current, **update}, history, run)
            update.update(step_update)
            if call is not None:
                run.staged.update(update)
                return {"step": index, "tool_history": [call]}
            index += 1
        usage = thread_totals({**current, **update})[1] + run.report.usage
        run.report.pending = len({**current, **update}.get("pending") or [])
        # The tool flow is in the report and the message is stored: clearing both keeps checkpoints small.
        update |= recent_digests({**current, **update}, ControlState(state["control"]), run)
        return {
            **run.staged,
            **update,
            "usage": usage.as_dict(),
            "message": None,
            "step": 0,
            "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        }

    async def _run_tool(self, request: Any, execute: Any) -> Any:
        """Execute one tool call; retry transient failures with backoff (same arguments, so the same idempotency
        key); raise :class:`MemoryServerError` on any other error."""
        run: Invocation = request.runtime.context
        report = run.report
        name = request.tool_call["name"]
        if run.tools_in_flight == 0:
            run.tools_since = time.perf_counter()
        run.tools_in_flight += 1
        retrying = self.settings.tool_retrying()
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        report.usage += Usage(retries=1)
                    result = await execute_checked(name, request, execute)
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


async def _route(state: AgentState) -> str:  # async: LangGraph runs sync callables in a thread pool
    history = state.get("tool_history") or []
    if history and isinstance(history[-1], AIMessage) and history[-1].tool_calls:
        return "tools"
    return END
