"""MycelianMemoryAgent: a checkpointed ``StateGraph`` with ``observe`` and ``tools`` nodes, driven by a ControlState.

``observe`` decides the next tool call from the control and the tools already run in this invocation; ``tools``
is a ``ToolNode`` over the memory server's MCP tools. Direct calls (get_context, list_entries, await_consistency)
are AIMessages built in code; add_entry and put_context arguments come from the model, bound to that one tool
with a forced choice. Code owns every identifier and the verbatim text (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolNode

from .._sync import run_sync
from .checkpointers import prune_thread
from .control import ControlState
from ..limits import split_oversize
from ..errors import InputError, MemoryServerError, MycelianError, ToolCallError
from ..models.extractive import ExtractiveChatModel
from ..mcp import _cause, is_transient_text
from ..memory_server.placeholder import is_placeholder_context
from .prompts import PromptSet, build_add_entry_prompt, build_put_context_prompt
from .report import InvocationResult, ThreadStatus
from .state import AgentState, Turn, empty_counters
from .model_tools import (
    CODE_TAGS,
    MAX_TAGS,
    MODEL_TOOL_SCHEMAS,
    idempotency_key,
    validate_reply,
)

__all__ = ["MycelianMemoryAgent", "AgentSettings"]

ROLES = ("user", "assistant")
@dataclass(frozen=True)
class AgentSettings:
    """Bounds and recovery settings. ``AgentSettings.naive()`` is the protocol's unbounded form (benchmarks only)."""

    history_window: int | None = 12  # messages the add_entry prompt sees; None = the whole history
    recent_message_chars: int | None = 600  # each recent message is clipped to this in prompts and state
    flush_message_chars: int | None = 2000  # each message since the last flush, in the put_context prompt
    since_flush_cap: int | None = 64  # messages kept for the next put_context; None = the whole history
    context_max_chars: int = 5000  # size cap of the context document (upstream Mycelian's rules use 5,000 too)
    entry_context_chars: int | None = 2000  # the add_entry prompt carries the context document's first N chars
    recent_entries: int = 10  # entries read back at session start
    entry_max_chars: int = 9000  # longer messages are stored as several entries (parts)
    max_corrections: int = 2  # re-prompts after a reply without a valid tool call, before the fallback
    fallback_on_model_error: bool = True  # a model exception falls back to the extractive model (counted)
    tool_attempts: int = 3  # attempts for a transient tool failure
    retry_backoff_s: float = 0.2  # first backoff; doubles per attempt
    skip_empty_flush: bool = True  # END_SESSION writes no context when nothing arrived since the last flush
    flush_from_history: bool = False  # put_context reads the history window instead of the messages since a flush
    prune_every: int | None = 16  # keep only a thread's newest checkpoint, pruning every N invocations; None = keep all

    @classmethod
    def naive(cls) -> "AgentSettings":
        """The protocol as first written: whole history in state and prompts. Used by the benchmarks only."""
        return cls(history_window=None, recent_message_chars=None, flush_message_chars=None, entry_context_chars=None,
                   since_flush_cap=None, skip_empty_flush=False, flush_from_history=True, prune_every=None)


def _normalise_time(value: str | datetime | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"conversation_time {value!r} is not an RFC 3339 timestamp "
                             "(e.g. 2024-03-05T14:30:00Z)") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _coerce_message(to_process: Any) -> ChatMessage:
    if isinstance(to_process, ChatMessage):
        role, content = to_process.role, to_process.content
    elif isinstance(to_process, Mapping):
        role, content = to_process.get("role"), to_process.get("content")
    elif isinstance(to_process, BaseMessage):
        role, content = {"human": "user", "ai": "assistant"}.get(to_process.type, to_process.type), to_process.content
    else:
        raise InputError(f"to_process must be a ChatMessage or a {{'role', 'content'}} mapping, got {type(to_process).__name__}")
    if role not in ROLES:
        raise InputError(f"unknown role {role!r}: a message's role must be one of {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise InputError(f"message content must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InputError("message content is empty: there is nothing to store")
    return ChatMessage(role=role, content=content)


def _tool_text(message: ToolMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") if isinstance(block, dict) else str(block) for block in content)


def _clip(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit]


def _direct_call(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(content="", tool_calls=[
        {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"}
        for name, args in calls
    ])


def _new_run() -> dict[str, Any]:
    return {"tool_calls": [], "entry_ids": [], "deduplicated": 0, "llm_calls": 0, "prompt_tokens": 0,
            "completion_tokens": 0, "retries": 0, "corrections": 0, "fallbacks": 0, "errors": [], "notes": [],
            "context_written": False, "message_index": None, "tool_s": 0.0, "model_s": 0.0}


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
        required = ("get_context", "list_entries", "add_entry", "await_consistency", "put_context")
        missing = [name for name in required if name not in self._tools]
        if missing:
            raise MemoryServerError(f"the memory server lacks tool(s) {', '.join(missing)}; is it a Mycelian server?")
        add_entry_fields = (getattr(self._tools["add_entry"], "args_schema", None) or {})
        fields = add_entry_fields.get("properties", {}) if isinstance(add_entry_fields, Mapping) else {}
        # Upstream Mycelian has no idempotency keys; send one only where the server declares it.
        self._server_idempotency = "idempotency_key" in fields
        self._loop = loop
        self._bound: dict[tuple[int, str], Any] = {}
        self._invocations: dict[str, int] = {}
        self.graph = self._build_graph()

    # -- public API -------------------------------------------------------------------------------------------

    def with_memory(self, vault_id: str, memory_id: str) -> "MycelianMemoryAgent":
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
    ) -> InvocationResult:
        """Run one control step for ``thread_id`` and return what it did.

        ``to_process`` is required for PROCESS_MESSAGE[_AND_FLUSH]; ``tags`` are stored with the entry (e.g. the
        session id and turn of a replayed message). Raises a :class:`MycelianError` on any failure; a failed
        invocation leaves the thread's checkpoint as it was, so it can be retried (add_entry is idempotent).
        """
        started = time.perf_counter()
        control = ControlState(control)
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise InputError("thread_id must be a non-empty string")
        message: list[ChatMessage] = []
        if control.stores_message:
            if to_process is None:
                raise InputError(f"{control.name} needs a message to process (to_process)")
            message = [_coerce_message(to_process)]
        elif to_process is not None:
            raise InputError(f"{control.name} takes no message; send it with PROCESS_MESSAGE")
        clean_tags = {str(k)[:64]: str(v)[:512] for k, v in (tags or {}).items()}
        state_in: dict[str, Any] = {
            "control": control.value,  # a plain string: checkpoints then hold no custom types
            "to_process": message,
            "conversation_time": _normalise_time(conversation_time),
            "message_tags": clean_tags,
            "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
            "run": _new_run(),
        }
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "vault_id": self.vault_id, "memory_id": self.memory_id},
            "recursion_limit": 64 + 4 * (len(message[0].content) // max(1, self.settings.entry_max_chars) if message else 0),
        }
        # durability="exit": one checkpoint per invocation, written only when it succeeds.
        state = await self.graph.ainvoke(state_in, config, durability="exit")
        await self._maybe_prune(thread_id)
        return InvocationResult.from_run(state["run"], control=control, thread_id=thread_id,
                                         duration_s=time.perf_counter() - started)

    def invoke(self, control: ControlState | str, thread_id: str, to_process: Any = None,
               conversation_time: str | datetime | None = None, *, tags: Mapping[str, str] | None = None) -> InvocationResult:
        """Synchronous :meth:`ainvoke` (not for use inside a running event loop)."""
        return run_sync(self.ainvoke(control, thread_id, to_process, conversation_time, tags=tags), self._loop)

    async def aget_thread(self, thread_id: str) -> ThreadStatus:
        """The checkpointed position and totals of ``thread_id`` (zeros for a new thread)."""
        snapshot = await self.graph.aget_state({"configurable": {"thread_id": thread_id}})
        values = snapshot.values or {}
        counters = {**empty_counters(), **values.get("counters", {})}
        return ThreadStatus(thread_id=thread_id, messages=counters["messages"],
                            session_open=bool(values.get("session_open")), context=values.get("context", ""),
                            counters=counters)

    async def _maybe_prune(self, thread_id: str) -> None:
        every = self.settings.prune_every
        if every is None:
            return
        count = self._invocations[thread_id] = self._invocations.get(thread_id, 0) + 1
        if count % every == 0:
            await prune_thread(self.checkpointer, thread_id)

    # -- graph ------------------------------------------------------------------------------------------------

    def _build_graph(self):
        builder = StateGraph(AgentState)
        builder.add_node("observe", self._observe)
        builder.add_node("tools", ToolNode(list(self._tools.values()), messages_key="tool_history",
                                           awrap_tool_call=self._run_tool))
        builder.add_edge(START, "observe")
        builder.add_conditional_edges("observe", _route, {"tools": "tools", END: END})
        builder.add_edge("tools", "observe")
        return builder.compile(checkpointer=self.checkpointer)

    async def _run_tool(self, request: Any, execute: Any) -> Any:
        """Execute one tool call; retry transient failures with backoff; raise on any other error."""
        name = request.tool_call["name"]
        retries = 0
        started = time.perf_counter()
        for attempt in range(1, self.settings.tool_attempts + 1):
            try:
                result = await execute(request)
            except MycelianError:
                raise
            except Exception as exc:  # transport failures come in many types
                error = MemoryServerError(f"{name} failed: {_cause(exc)}", tool=name, transient=True)
            else:
                if not (isinstance(result, ToolMessage) and result.status == "error"):
                    if isinstance(result, ToolMessage):
                        result.additional_kwargs["elapsed_s"] = time.perf_counter() - started
                        if retries:
                            result.additional_kwargs["retries"] = retries
                    return result
                text = _tool_text(result)
                error = MemoryServerError(f"{name} failed: {text}", tool=name, transient=is_transient_text(text))
            if not error.transient or attempt == self.settings.tool_attempts:
                if retries:
                    error.args = (f"{error.args[0]} (after {retries} retries)",)
                raise error
            retries += 1
            await asyncio.sleep(self.settings.retry_backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    async def _observe(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        ids = {"vault_id": config["configurable"]["vault_id"], "memory_id": config["configurable"]["memory_id"]}
        control = ControlState(state["control"])
        history = state.get("tool_history") or []
        results = [m for m in history if isinstance(m, ToolMessage)]
        done = [m.name for m in results]
        last = done[-1] if done else None
        run = dict(state.get("run") or _new_run())
        if results:
            run["tool_calls"] = done
            run["retries"] = sum(m.additional_kwargs.get("retries", 0) for m in results)
            run["tool_s"] = sum(m.additional_kwargs.get("elapsed_s", 0.0) for m in results)

        if control is ControlState.START_SESSION:
            if not done:
                return {"run": run, "tool_history": [_direct_call(
                    ("get_context", ids), ("list_entries", {**ids, "limit": self.settings.recent_entries}))]}
            return self._finish_start(state, results, run)

        if control.stores_message:
            parts = self._parts(state)
            stored = done.count("add_entry")
            if last in (None, "add_entry") and stored < len(parts):
                call = await self._entry_call(state, ids, parts, stored, run, config)
                return {"run": run, "tool_history": [call]}
            if last == "add_entry":
                update = self._after_store(state, results, parts, run)
                if control is ControlState.PROCESS_MESSAGE:
                    return self._finish(update, run)
                return {**update, "run": run, "tool_history": [_direct_call(("await_consistency", {"memory_id": ids["memory_id"]}))]}

        if control is ControlState.END_SESSION and not done:
            return {"run": run, "tool_history": [_direct_call(("await_consistency", {"memory_id": ids["memory_id"]}))]}

        if last == "await_consistency":
            since = state.get("since_flush") or []
            if control is ControlState.END_SESSION and not since and self.settings.skip_empty_flush:
                run["notes"] = [*run["notes"], "no messages since the last flush: context unchanged"]
                return self._finish(self._session_end(state), run)
            call = await self._context_call(state, ids, run)
            return {"run": run, "tool_history": [call]}

        if last == "put_context":
            written = next(m for m in reversed(history) if isinstance(m, AIMessage) and m.tool_calls)
            update = {"context": written.tool_calls[0]["args"]["content"], "since_flush": []}
            counters = dict(state.get("counters") or empty_counters())
            counters["flushes"] += 1
            update["counters"] = counters
            run["context_written"] = True
            if control is ControlState.END_SESSION:
                update.update(self._session_end({**state, **update}))
            return self._finish(update, run)
        raise MycelianError(f"memory agent reached an unexpected step: control={control.name}, tools run={done}")

    # -- steps ------------------------------------------------------------------------------------------------

    def _finish(self, update: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
        counters = dict(update.get("counters") or {})
        if counters:
            for key in ("llm_calls", "prompt_tokens", "completion_tokens", "retries", "corrections", "fallbacks"):
                counters[key] += run[key]
            update["counters"] = counters
        # The tool flow is reported in ``run`` and the message is stored: clearing both keeps checkpoints small.
        return {**update, "run": run, "to_process": [], "tool_history": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]}

    def _finish_start(self, state: AgentState, results: list[ToolMessage], run: dict[str, Any]) -> dict[str, Any]:
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
        counters = dict(state.get("counters") or empty_counters())
        counters["sessions_started"] += 1
        return self._finish({"context": context, "window": window, "since_flush": state.get("since_flush") or [],
                             "session_open": True, "counters": counters}, run)

    def _session_end(self, state: Mapping[str, Any]) -> dict[str, Any]:
        counters = dict(state.get("counters") or empty_counters())
        counters["sessions_ended"] += 1
        return {"session_open": False, "counters": counters}

    def _parts(self, state: AgentState) -> list[str]:
        return split_oversize(state["to_process"][0].content, self.settings.entry_max_chars)

    async def _entry_call(self, state: AgentState, ids: dict[str, str], parts: list[str], index: int,
                          run: dict[str, Any], config: RunnableConfig) -> AIMessage:
        message = state["to_process"][0]
        when = state.get("conversation_time")
        counters = state.get("counters") or empty_counters()
        number = counters["messages"] + 1
        run["message_index"] = number
        window = state.get("window") or []
        stamped = ChatMessage(role=message.role, content=message.content,
                              additional_kwargs={"conversation_time": when} if when else {})
        prompt = build_add_entry_prompt(
            self.prompts, message=stamped, content=parts[index], recent=window,
            context=state.get("context", ""), part=(index + 1, len(parts)),
            recent_message_chars=self.settings.recent_message_chars,
            context_chars=self.settings.entry_context_chars,
        )
        written = await self._model_args("add_entry", prompt, run)
        thread_id = config["configurable"]["thread_id"]
        code_tags = {"role": message.role, "thread": thread_id[:512], "msg": str(number)}
        if len(parts) > 1:
            code_tags["part"] = f"{index + 1}/{len(parts)}"
        input_tags = {k: v for k, v in (state.get("message_tags") or {}).items() if k not in CODE_TAGS}
        room = MAX_TAGS - len(code_tags) - len(input_tags)
        model_tags = dict(list((k, v) for k, v in written["tags"].items() if k not in input_tags)[:max(0, room)])
        args: dict[str, Any] = {**ids, "raw_entry": parts[index], "summary": written["summary"],
                                "tags": {**model_tags, **input_tags, **code_tags}}
        if when:
            args["conversation_time"] = when
        if self._server_idempotency:
            args["idempotency_key"] = idempotency_key(thread_id, number, message.content, index, len(parts))
        return _direct_call(("add_entry", args))

    def _after_store(self, state: AgentState, results: list[ToolMessage], parts: list[str],
                     run: dict[str, Any]) -> dict[str, Any]:
        for result in [m for m in results if m.name == "add_entry"]:
            try:
                stored = json.loads(_tool_text(result))
            except json.JSONDecodeError:
                continue  # upstream answers "enqueued": no entry id to report
            if isinstance(stored, Mapping):
                if stored.get("entryId"):
                    run["entry_ids"] = [*run["entry_ids"], stored["entryId"]]
                run["deduplicated"] += bool(stored.get("deduplicated"))
        message = state["to_process"][0]
        when = state.get("conversation_time")
        extra = {"conversation_time": when} if when else {}
        s = self.settings
        window = [*(state.get("window") or []),
                  Turn(role=message.role, content=_clip(message.content, s.recent_message_chars), **extra)]
        since = [*(state.get("since_flush") or []),
                 Turn(role=message.role, content=_clip(message.content, s.flush_message_chars), **extra)]
        if s.history_window is not None:
            window = window[-s.history_window:]
        if s.since_flush_cap is not None and len(since) > s.since_flush_cap:
            run["notes"] = [*run["notes"], f"more than {s.since_flush_cap} messages since the last flush: oldest dropped from the context prompt"]
            since = since[-s.since_flush_cap:]
        counters = dict(state.get("counters") or empty_counters())
        counters["messages"] += 1
        counters["entries"] += len(parts)
        return {"window": window, "since_flush": since, "counters": counters}

    async def _context_call(self, state: AgentState, ids: dict[str, str], run: dict[str, Any]) -> AIMessage:
        prompt = build_put_context_prompt(
            self.prompts, previous_context=state.get("context", ""),
            messages=(state.get("window") if self.settings.flush_from_history else state.get("since_flush")) or [],
            max_chars=self.settings.context_max_chars, message_chars=self.settings.flush_message_chars,
        )
        written = await self._model_args("put_context", prompt, run)
        return _direct_call(("put_context", {**ids, "content": written["content"]}))

    def _bind(self, model: BaseChatModel, tool_name: str) -> Any:
        key = (id(model), tool_name)
        if key not in self._bound:
            self._bound[key] = model.bind_tools([MODEL_TOOL_SCHEMAS[tool_name]], tool_choice=tool_name)
        return self._bound[key]

    async def _model_args(self, tool_name: str, prompt: list[BaseMessage], run: dict[str, Any]) -> dict[str, Any]:
        """Ask the model for the tool's arguments: bounded corrective re-prompts, then the fallback model."""
        messages = list(prompt)
        for attempt in range(self.settings.max_corrections + 1):
            started = time.perf_counter()
            try:
                reply = await self._bind(self.model, tool_name).ainvoke(messages)
            except Exception as exc:  # provider errors come in many types
                if not self.settings.fallback_on_model_error:
                    raise ToolCallError(f"the model failed while writing {tool_name}: {_cause(exc)}") from exc
                run["errors"] = [*run["errors"], f"model error on {tool_name}: {_cause(exc)}"]
                break
            finally:
                run["model_s"] += time.perf_counter() - started
            _count_usage(reply, run)
            args, problem = validate_reply(tool_name, reply, self.settings.context_max_chars)
            if problem is None:
                return args
            run["errors"] = [*run["errors"], f"{tool_name}: reply unusable: {problem}"]
            if attempt == self.settings.max_corrections:
                break
            run["corrections"] += 1
            messages += [AIMessage(content=str(reply.content or "(no tool call)")),
                         HumanMessage(f"That reply cannot be used: {problem}. Call the `{tool_name}` tool exactly once, "
                                      "with the arguments its schema asks for.")]
        run["fallbacks"] += 1
        started = time.perf_counter()
        reply = await self._bind(self.fallback_model, tool_name).ainvoke(prompt)
        run["model_s"] += time.perf_counter() - started
        args, problem = validate_reply(tool_name, reply, self.settings.context_max_chars)
        if problem is not None:
            raise ToolCallError(f"neither the model nor the fallback produced a usable {tool_name} call: {problem}")
        return args


async def _route(state: AgentState) -> str:  # async: LangGraph runs sync callables in a thread pool
    history = state.get("tool_history") or []
    if history and isinstance(history[-1], AIMessage) and history[-1].tool_calls:
        return "tools"
    return END


def _count_usage(reply: BaseMessage, run: dict[str, Any]) -> None:
    run["llm_calls"] += 1
    usage = getattr(reply, "usage_metadata", None) or {}
    run["prompt_tokens"] += int(usage.get("input_tokens", 0) or 0)
    run["completion_tokens"] += int(usage.get("output_tokens", 0) or 0)
