"""Cancel an agent call at its N-th await, for every N, and check that memory and checkpoint stay consistent.

Every task the event loop creates while the harness runs is a counting task: each time any task resumes (one
await done), the clock ticks. A trial arms the clock at N: just before the N-th resumption after the call starts,
the call's task is cancelled (as ``asyncio.wait_for`` cancels a web request that timed out), wherever it awaits
then (a model call, a memory tool call over stdio or in-process, a checkpoint read or write, a lease, LangGraph's
own exit). The same message is then sent again, at once, as a client retrying the request would. After each trial
the memory must hold every message sent so far exactly once (read with ``list_entries``), the thread's checkpoint
must count exactly the messages sent, and the next message must work.

``python tests/cancel_harness.py [in-process] [embedded]`` prints the whole matrix (scenario x server: trials,
cancelled, completed, lost, duplicated); tests/test_cancellation.py runs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from asyncio.tasks import _PyTask  # type: ignore[attr-defined]  # the Python Task: its step can be wrapped
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.outputs import ChatGeneration, ChatResult

from mycelian_agent import AgentSettings, build_agent
from mycelian_agent.testing import ScriptedChatModel, tool_call_message

__all__ = ["SCENARIOS", "Outcome", "Scenario", "ToolModel", "run_scenario"]


class ToolModel(ScriptedChatModel):
    """The scripted model, answering whatever tool it is bound to (a cancelled call makes the number of model
    calls vary, so a fixed script cannot be used): add_entry, put_context, add_entries[_and_context]."""

    responses: list[Any] = []
    tool: str | None = None

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> ToolModel:
        bound = super().bind_tools(tools, tool_choice=tool_choice, **kwargs)
        return bound.model_copy(update={"tool": tool_choice})

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls.append(list(messages))
        text = str(messages[-1].content)
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        if self.tool == "add_entry":
            args: dict[str, Any] = {"summary": f"A message ({digest}).", "tags": {"topic": "test"}}
        elif self.tool == "put_context":
            args = {"content": f"Context after {digest}."}
        elif self.tool in ("add_entries", "add_entries_and_context"):
            items = [int(n) for n in re.findall(r'<message item="(\d+)"', text)]
            args = {"entries": [{"item": n, "summary": f"Message item {n}.", "tags": {"topic": "test"}} for n in items]}
            if self.tool == "add_entries_and_context":
                args["context"] = f"Context after {digest}."
        else:
            raise AssertionError(f"ToolModel: unexpected tool {self.tool!r}")
        return ChatResult(generations=[ChatGeneration(message=tool_call_message(self.tool, args))])

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        await asyncio.sleep(0)  # a real model call awaits the network
        return self._generate(messages, stop, **kwargs)


class Clock:
    """Counts task resumptions; cancels ``target`` just before resumption number ``cancel_at``."""

    def __init__(self) -> None:
        self.steps = 0
        self.cancel_at: int | None = None
        self.target: asyncio.Task[Any] | None = None
        self.fired = False

    def arm(self, target: asyncio.Task[Any], after: int) -> None:
        self.target, self.cancel_at, self.fired = target, self.steps + after, False

    def disarm(self) -> None:
        self.target, self.cancel_at = None, None

    def tick(self) -> None:
        self.steps += 1
        if self.cancel_at is not None and self.steps >= self.cancel_at:
            target, self.cancel_at = self.target, None
            if target is not None and not target.done():
                target.cancel()
                self.fired = True


def counting_tasks(loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
    """Make every task ``loop`` creates from now on tick ``clock`` at each of its steps."""

    class CountingTask(_PyTask):  # type: ignore[misc, valid-type]
        def _Task__step(self, exc: BaseException | None = None) -> None:  # the step of the Python Task
            clock.tick()
            super()._Task__step(exc)

    loop.set_task_factory(lambda loop, coro, **kwargs: CountingTask(coro, loop=loop, **kwargs))


@dataclass(frozen=True)
class Scenario:
    """One kind of call: the invoker's cadence and how messages are sent (one per call, or a list per call)."""

    name: str
    flush_every: int = 10**6
    batch_size: int = 1
    per_call: int = 1  # messages per call: 1 uses aprocess_conversation_message, more the bulk form
    long: bool = False  # messages of three parts each
    cycle: int = 1  # calls per trial: each is cancelled at the same N (covers every control of the cadence)


SCENARIOS = (
    Scenario("process", flush_every=10**6),
    Scenario("process+flush", flush_every=1),
    Scenario("parts", long=True),
    Scenario("batched", batch_size=2, cycle=2),
    Scenario("batched+flush", batch_size=2, flush_every=2, cycle=2),
    Scenario("bulk", per_call=3, flush_every=3),
    Scenario("bulk batched", per_call=3, batch_size=2, flush_every=4, cycle=2),
)

ENTRY_MAX_CHARS = 200


@dataclass
class Outcome:
    """What the trials of one scenario on one server did."""

    scenario: str
    server: str
    trials: int = 0
    cancelled: int = 0
    completed: int = 0  # calls that finished before their cancellation point
    lost: int = 0
    duplicated: int = 0
    problems: list[str] = field(default_factory=list)
    cancelled_steps: Counter[str] = field(default_factory=Counter)


def _message(number: int, long: bool) -> str:
    text = f"Message {number}: the user talks about topic number {number} and nothing else."
    if long:  # three parts of ENTRY_MAX_CHARS at most
        text = " ".join([text] * (2 * ENTRY_MAX_CHARS // len(text) + 2))
    return text


async def _entries(invoker: Any) -> list[dict[str, Any]]:
    agent, found, after = invoker.agent, [], "1970-01-01T00:00:00Z"
    while True:
        page = await invoker.connection.call_json(
            "list_entries", {"vault_id": agent.vault_id, "memory_id": agent.memory_id, "limit": 50, "after": after}
        )
        found += page["entries"]
        if not page.get("next_after"):
            return found
        after = page["next_after"]


async def _check(invoker: Any, sent: list[str], outcome: Outcome, label: str) -> None:
    """Every message of ``sent`` stored exactly once (all parts), none other; the checkpoint counts them all."""
    await invoker.aflush("t")  # batched mode: write what is pending, so the memory holds every message
    status = await invoker.athread_status("t")
    stored = Counter(e["rawEntry"] for e in await _entries(invoker))
    want: Counter[str] = Counter()
    for text in sent:
        want.update(_parts(text))
    lost = sum((want - stored).values())
    extra = sum((stored - want).values())
    if lost or extra or status.accepted != len(sent) or status.pending:
        outcome.lost += bool(lost)
        outcome.duplicated += bool(extra)
        outcome.problems.append(
            f"{label}: {lost} part(s) lost, {extra} extra, checkpoint counts {status.accepted} "
            f"of {len(sent)} messages ({status.pending} pending)"
        )


def _parts(text: str) -> list[str]:
    from mycelian_agent.limits import split_oversize

    return list(split_oversize(text, ENTRY_MAX_CHARS))


async def _send(invoker: Any, scenario: Scenario, texts: list[str]) -> Any:
    if scenario.per_call == 1:
        return await invoker.aprocess_conversation_message("user", texts[0], "t")
    return await invoker.aprocess_conversation_messages("t", [{"role": "user", "content": t} for t in texts])


async def run_scenario(
    scenario: Scenario, server: str, workdir: Path, *, max_trials: int = 2000, stride: int = 1, resend: str = "at once"
) -> Outcome:
    """Trials at N = 1, 1 + stride, ... until a whole cycle of calls finishes before its cancellation point."""
    loop = asyncio.get_running_loop()
    clock = Clock()
    counting_tasks(loop, clock)
    outcome = Outcome(scenario.name, server)
    workdir.mkdir(parents=True, exist_ok=True)
    settings = AgentSettings(entry_max_chars=ENTRY_MAX_CHARS, retry_backoff_s=0.001, prune_every=3)
    sent: list[str] = []
    try:
        # In process, BM25 alone: the trials cancel the agent's and the store's awaits, and a batch's vectors (written
        # behind, on a thread no cancellation reaches) would only make each trial wait for its encoding (~10x the
        # time). Over stdio the server's default, hybrid, runs.
        async with build_agent(
            ToolModel(),
            server=server,
            db=workdir / "memory.db",
            checkpointer=f"sqlite:{workdir / 'state.db'}",
            flush_every=scenario.flush_every,
            batch_size=scenario.batch_size,
            settings=settings,
            embeddings=False if server == "in-process" else None,
        ) as invoker:
            await invoker.astart_session("t")
            n = 1
            while outcome.trials < max_trials:
                finished = 0
                for _ in range(scenario.cycle):
                    texts = [_message(len(sent) + 1 + i, scenario.long) for i in range(scenario.per_call)]
                    call = asyncio.ensure_future(_send(invoker, scenario, texts))
                    clock.arm(call, n)
                    await asyncio.wait([call])
                    clock.disarm()
                    outcome.trials += 1
                    if call.cancelled():
                        outcome.cancelled += 1
                        if resend == "later":
                            await asyncio.sleep(0.05)
                        try:
                            await _send(invoker, scenario, texts)
                        except Exception as exc:
                            outcome.problems.append(f"N={n}: the re-send failed: {type(exc).__name__}: {exc}")
                            return outcome
                    else:
                        if call.exception() is not None:
                            outcome.problems.append(f"N={n}: the call failed: {call.exception()!r}")
                            return outcome
                        outcome.completed += 1
                        finished += 1
                    sent += texts
                    await _check(invoker, sent, outcome, f"N={n}")
                if finished == scenario.cycle:
                    break
                n += stride
            await invoker.aend_session("t")
            await _check(invoker, sent, outcome, "end")
    finally:
        loop.set_task_factory(None)
    return outcome


async def _main(servers: tuple[str, ...], root: Path) -> None:
    import time

    print(f"{'scenario':16} {'server':10} {'trials':>6} {'cancel':>6} {'done':>5} {'lost':>4} {'dup':>4}  secs")
    for scenario in SCENARIOS:
        for server in servers:
            started = time.perf_counter()
            out = await run_scenario(scenario, server, root / f"{scenario.name.replace(' ', '_')}-{server}")
            print(
                f"{out.scenario:16} {out.server:10} {out.trials:6} {out.cancelled:6} {out.completed:5} "
                f"{out.lost:4} {out.duplicated:4}  {time.perf_counter() - started:.1f}",
                flush=True,
            )
            for problem in out.problems[:5]:
                print("    ", problem, flush=True)


if __name__ == "__main__":
    import sys
    import tempfile

    chosen = tuple(sys.argv[1:]) or ("in-process", "embedded")
    with tempfile.TemporaryDirectory(prefix="cancel-") as tmp:
        asyncio.run(_main(chosen, Path(tmp)))
