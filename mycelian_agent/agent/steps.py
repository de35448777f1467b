"""What each step of a plan does (:class:`StepRunner`): the tool calls that start it and the state update its results
make.

:meth:`StepRunner.begin` emits a step's calls as an AIMessage (none: the step is done or skipped) and
:meth:`StepRunner.absorb` takes in its results. Direct calls (get_context, list_entries, await_consistency) are built
in code; add_entry, add_entries and put_context arguments come from the model through the
:class:`~mycelian_agent.agent.writer.ToolArgumentWriter`. Code owns every identifier and the verbatim text.
The graph that runs the steps is in :mod:`~mycelian_agent.agent.graph`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ..errors import MemoryServerError, MycelianError
from ..limits import ADD_ENTRIES_MAX_ITEMS
from ..placeholder import is_placeholder_context
from .control import PLANS, ControlState, Step
from .entries import entry_args, split_parts
from .invocation import Invocation, bump_progress, inherit_time, plain_turn, thread_totals
from .model_tools import direct_call
from .prompts import BatchItem, PromptSet, build_add_entries_prompt, build_add_entry_prompt, build_put_context_prompt
from .settings import AgentSettings
from .tool_results import count_results, record_stored, tool_text
from .turn import PendingTurn, Turn
from .writer import ToolArgumentWriter

__all__ = ["StepRunner"]


@dataclass(frozen=True)
class StepRunner:
    """The steps of the agent's plans over one model writer and one server's tools (shared by every memory the
    agent writes to: the memory of an invocation is in its :class:`Invocation`).

    ``idempotency``: the server's add_entry takes an idempotency key (upstream Mycelian's does not); ``bulk``: the
    server has ``add_entries`` (one transaction per call); ``consistency_vault``: its await_consistency takes the
    vault too.
    """

    settings: AgentSettings
    prompts: PromptSet
    writer: ToolArgumentWriter
    idempotency: bool
    bulk: bool
    consistency_vault: bool

    async def begin(
        self, step: Step, state: Mapping[str, Any], history: Sequence[BaseMessage], run: Invocation
    ) -> tuple[dict[str, Any], AIMessage | None]:
        """The state update and tool calls that start ``step`` (no calls: the step is done or skipped)."""
        if step is Step.READ_MEMORY:
            if await run.resolve_memory(create=False) is None:  # the agent's own memory, never written
                return self._after_read(state, []), None
            return {}, direct_call(
                ("get_context", run.ids), ("list_entries", {**run.ids, "limit": self.settings.recent_entries})
            )
        if step is Step.ACCEPT:
            return self._accept(state, run), None
        if step is Step.ADD_ENTRIES:
            if not state.get("pending"):
                return {}, None
            await run.resolve_memory(create=True)
            return {}, await self._entries_call(state, run)
        if step is Step.ADD_ENTRY:
            await run.resolve_memory(create=True)
            part = count_results(history, "add_entry") - run.batch_entries
            update = inherit_time(state, run) if part == 0 else {}
            return update, await self._entry_call({**state, **update}, part, run)
        if step is Step.AWAIT_CONSISTENCY:
            # Upstream's await_consistency takes the memory alone; ours also takes the vault, which a token limited
            # to some vaults needs.
            if await run.resolve_memory(create=False) is None:  # nothing was written to it: nothing to await
                return {}, None
            ids = run.ids if self.consistency_vault else {"memory_id": run.memory_id}
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
            await run.resolve_memory(create=True)
            if run.batch_context is not None:  # written by the ADD_ENTRIES call of this invocation
                return {}, direct_call(("put_context", {**run.ids, "content": run.batch_context}))
            return {}, await self._context_call(state, run)
        if step is Step.CLOSE_SESSION:
            return {"session_open": False, "progress": bump_progress(state, sessions_ended=1)}, None
        raise MycelianError(f"memory agent: step {step.value} has no start")

    async def absorb(
        self,
        step: Step,
        state: Mapping[str, Any],
        history: Sequence[BaseMessage],
        results: list[ToolMessage],
        run: Invocation,
    ) -> tuple[dict[str, Any], bool]:
        """The state update from ``step``'s tool results, and whether the step runs again (another part)."""
        if step is Step.READ_MEMORY:
            return self._after_read(state, results), False
        if step is Step.ADD_ENTRIES:
            return self._after_entries(state, results, run), False
        if step is Step.ADD_ENTRY:
            return self._after_entry(state, count_results(history, "add_entry") - run.batch_entries, results, run)
        if step is Step.AWAIT_CONSISTENCY:
            return {}, False
        if step is Step.PUT_CONTEXT:
            written = next(m for m in reversed(history) if isinstance(m, AIMessage) and m.tool_calls)
            run.report.context_written = True
            return {
                "context": written.tool_calls[0]["args"]["content"],
                "since_flush": [],
                "fresh_since_flush": 0,
                "progress": bump_progress(state, flushes=1),
            }, False
        raise MycelianError(f"memory agent: step {step.value} makes no tool calls")

    # -- the steps ----------------------------------------------------------------------------------------------

    def _after_read(self, state: Mapping[str, Any], results: list[ToolMessage]) -> dict[str, Any]:
        by_name = {m.name: tool_text(m) for m in results}
        context = by_name.get("get_context", "")
        context = "" if is_placeholder_context(context) else context
        window: list[Turn] = list(state.get("window") or [])
        try:
            entries = json.loads(by_name.get("list_entries") or "{}").get("entries", [])
        except (json.JSONDecodeError, AttributeError):
            raise MemoryServerError(
                "list_entries returned a result that is not the expected JSON object", tool="list_entries"
            ) from None
        if entries:
            lines = [
                f"- [{e.get('conversationTime') or e.get('creationTime', '')}] "
                f"{(e.get('tags') or {}).get('role', '?')}: {e.get('summary', '')}"
                for e in reversed(entries)
            ]
            window.append(Turn(role="system", content="Recent entries from earlier sessions:\n" + "\n".join(lines)))
            if self.settings.history_window is not None:
                window = window[-self.settings.history_window :]
        return {
            "context": context,
            "window": window,
            "since_flush": state.get("since_flush") or [],
            "session_open": True,
            "progress": bump_progress(state, sessions_started=1),
        }

    async def _entry_call(self, state: Mapping[str, Any], part: int, run: Invocation) -> AIMessage:
        message: Turn = state["message"]
        parts = split_parts(message["content"], self.settings.entry_max_chars)
        number = thread_totals(state)[0].messages + len(state.get("pending") or []) + 1
        run.report.message_index = number
        if part == 0:
            run.report.accepted += (number,)
        prompt = build_add_entry_prompt(
            self.prompts,
            message=message,
            content=parts[part],
            recent=state.get("window") or [],
            context=state.get("context", ""),
            part=(part + 1, len(parts)),
            recent_message_chars=self.settings.recent_message_chars,
            context_chars=self.settings.entry_context_chars,
        )
        written = await self.writer.write("add_entry", prompt, run.report)
        return direct_call(
            (
                "add_entry",
                entry_args(
                    run.ids,
                    run.thread_id,
                    message,
                    number,
                    (part, len(parts)),
                    parts[part],
                    written,
                    state.get("message_tags") or {},
                    idempotency=self.idempotency,
                ),
            )
        )

    def _after_entry(
        self, state: Mapping[str, Any], stored_parts: int, results: list[ToolMessage], run: Invocation
    ) -> tuple[dict[str, Any], bool]:
        record_stored(results, run)
        message: Turn = state["message"]
        parts = len(split_parts(message["content"], self.settings.entry_max_chars))
        if stored_parts < parts:
            return {}, True
        number = run.report.message_index
        if number is None:  # set by the step's first call (_entry_call)
            raise MycelianError("memory agent: ADD_ENTRY stored a message that has no number")
        run.report.written += (number,)
        fresh = int(run.report.deduplicated < parts)
        update = {
            **self._remembered(state, [message], run, fresh),
            "progress": bump_progress(state, messages=1, entries=parts),
        }
        if message.get("conversation_time"):
            update["last_time"] = message["conversation_time"]
        return update, False

    def _remembered(
        self, state: Mapping[str, Any], messages: Sequence[Turn], run: Invocation, fresh: int
    ) -> dict[str, Any]:
        """The history window and the messages since the last flush, with ``messages`` (just stored; ``fresh``
        of them stored anew, not deduplicated) added."""
        s = self.settings
        window = [*(state.get("window") or []), *(plain_turn(m, s.recent_message_chars) for m in messages)]
        since = [*(state.get("since_flush") or []), *(plain_turn(m, s.flush_message_chars) for m in messages)]
        if s.history_window is not None:
            window = window[-s.history_window :]
        if s.since_flush_cap is not None and len(since) > s.since_flush_cap:
            run.report.notes += (
                f"more than {s.since_flush_cap} messages since the last flush: oldest dropped from the context prompt",
            )
            since = since[-s.since_flush_cap :]
        # Messages since the last context that the server stored anew: 0 means a re-run whose context already
        # covers them (see PUT_CONTEXT).
        fresh_since = (state.get("fresh_since_flush") or 0) + fresh
        return {"window": window, "since_flush": since, "fresh_since_flush": fresh_since}

    # -- batched mode -----------------------------------------------------------------------------------------

    def _accept(self, state: Mapping[str, Any], run: Invocation) -> dict[str, Any]:
        """Keep the message in the thread's pending list (checkpointed when the invocation ends); no tool call."""
        if run.incoming is not None:
            return self._accept_many(state, run.incoming, run)
        update = inherit_time(state, run)
        message: Turn = update.get("message") or state["message"]
        pending = list(state.get("pending") or [])
        number = thread_totals(state)[0].messages + len(pending) + 1
        run.report.message_index = number
        run.report.accepted += (number,)
        entry = PendingTurn(
            **message, number=number, tags=dict(state.get("message_tags") or {}), accepted_at=time.time()
        )
        update = {"message": message, "pending": [*pending, entry]}
        if message.get("conversation_time"):
            update["last_time"] = message["conversation_time"]
        return update

    def _accept_many(
        self, state: Mapping[str, Any], incoming: Sequence[tuple[Turn, dict[str, str]]], run: Invocation
    ) -> dict[str, Any]:
        """Accept ``incoming`` in order, as :meth:`_accept` accepts one message each (numbers, inherited times)."""
        pending = list(state.get("pending") or [])
        number = thread_totals(state)[0].messages + len(pending)
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
            pending.append(PendingTurn(**message, number=number, tags=tags, accepted_at=now))
            run.report.accepted += (number,)
        run.report.message_index = number
        if inherited:
            run.report.notes += (
                f"{inherited} message(s) sent without a time: stored with the session's time (the "
                "later of the session's start and its last message)",
            )
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
            parts = split_parts(message["content"], s.entry_max_chars)
            recent = earlier if s.history_window is None else earlier[-s.history_window :]
            for part, text in enumerate(parts):
                items.append(
                    BatchItem(
                        item=len(items) + 1,
                        message=plain_turn(message, None),
                        content=text,
                        part=(part + 1, len(parts)),
                        recent=recent,
                    )
                )
                keys[len(items)] = (message, part, len(parts))
            earlier = [*earlier, plain_turn(message, s.recent_message_chars)]
        control = ControlState(state["control"])
        plan = PLANS[control]
        rest = plan[plan.index(Step.ADD_ENTRIES) + 1 :]
        with_context = (
            s.batch_context and Step.PUT_CONTEXT in rest and Step.ADD_ENTRY not in rest and not s.flush_from_history
        )
        since = [*(state.get("since_flush") or []), *(plain_turn(m, s.flush_message_chars) for m in pending)]
        if s.since_flush_cap is not None:
            since = since[-s.since_flush_cap :]
        limit = s.batch_history_window
        shown = window if limit is None else window[-limit:] if limit else []
        by_number = {item.item: item for item in items}

        def build(numbers: Sequence[int], context_too: bool, note: str) -> list[BaseMessage]:
            return build_add_entries_prompt(
                self.prompts,
                items=[by_number[n] for n in numbers],
                recent=shown,
                context=state.get("context", ""),
                recent_message_chars=s.recent_message_chars,
                context_chars=s.entry_context_chars,
                with_context=context_too,
                since_flush=since,
                earlier=max(0, len(since) - len(pending)),
                max_chars=s.context_max_chars,
                message_chars=s.flush_message_chars,
                note=note,
            )

        written, context = await self.writer.write_batch(build, list(by_number), run.report, with_context=with_context)
        run.batch_context = context
        calls = []
        for number, (message, part, count) in keys.items():
            calls.append(
                (
                    "add_entry",
                    entry_args(
                        run.ids,
                        run.thread_id,
                        message,
                        message["number"],
                        (part, count),
                        by_number[number].content,
                        written[number],
                        message.get("tags") or {},
                        idempotency=self.idempotency,
                    ),
                )
            )
        if self.bulk:  # one transaction per call: all of its entries or none
            bulk = [{k: v for k, v in args.items() if k not in ("vault_id", "memory_id")} for _, args in calls]
            return direct_call(
                *(
                    ("add_entries", {**run.ids, "entries": bulk[i : i + ADD_ENTRIES_MAX_ITEMS]})
                    for i in range(0, len(bulk), ADD_ENTRIES_MAX_ITEMS)
                )
            )
        run.batch_entries += len(calls)
        return direct_call(*calls)

    def _after_entries(self, state: Mapping[str, Any], results: list[ToolMessage], run: Invocation) -> dict[str, Any]:
        deduplicated = run.report.deduplicated
        stored = record_stored(results, run)
        fresh = stored - (run.report.deduplicated - deduplicated)  # parts stored anew
        pending: list[PendingTurn] = list(state.get("pending") or [])
        run.report.written += tuple(m["number"] for m in pending)
        return {
            **self._remembered(state, pending, run, fresh),
            "pending": [],
            "progress": bump_progress(state, messages=len(pending), entries=stored),
        }

    async def _context_call(self, state: Mapping[str, Any], run: Invocation) -> AIMessage:
        s = self.settings
        prompt = build_put_context_prompt(
            self.prompts,
            previous_context=state.get("context", ""),
            messages=(state.get("window") if s.flush_from_history else state.get("since_flush")) or [],
            max_chars=s.context_max_chars,
            message_chars=s.flush_message_chars,
        )
        written = await self.writer.write("put_context", prompt, run.report)
        return direct_call(("put_context", {**run.ids, "content": written["content"]}))
