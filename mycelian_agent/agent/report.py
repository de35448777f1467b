"""What an invocation did and what a thread has done: one definition of each.

- :class:`Usage`: model calls, tokens and recoveries. The one place these counters are named: the invocation
  report, a thread's checkpointed totals, replay totals and the benchmarks all add :class:`Usage` values.
- :class:`InvocationResult`: the typed report of one invocation, filled in while it runs and returned by it.
- :class:`ThreadProgress` / :class:`ThreadStatus`: a thread's checkpointed position and totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self

from langchain_core.messages import BaseMessage

from .control import ControlState

__all__ = ["InvocationResult", "ModelUsage", "ThreadProgress", "ThreadStatus", "Usage"]


@dataclass(frozen=True)
class _Counts:
    """Integer counters kept as plain dicts in checkpoints and reports (each subclass a frozen dataclass of ints)."""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Self:
        """The counters in ``values`` (other keys ignored, missing ones 0)."""
        values = values or {}
        return cls(**{f.name: int(values.get(f.name, 0) or 0) for f in fields(cls)})

    def as_dict(self) -> dict[str, int]:
        """Plain data, as checkpoints and JSON reports hold it."""
        return asdict(self)


@dataclass(frozen=True)
class ModelUsage(_Counts):
    """One model's share of a :class:`Usage`: its calls, tokens and recoveries.

    ``fallbacks`` are the steps this model could not write (the fallback model wrote them), ``fallback_entries``
    the entries among them (a context document is a step, not an entry); ``stand_ins`` are the steps this model
    wrote as the fallback for another, and ``stand_in_entries`` the entries among them. A fallback's own calls
    are counted there, not in ``llm_calls``, so the rows' calls add up to the total.
    """

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    corrections: int = 0
    fallbacks: int = 0
    fallback_entries: int = 0
    model_retries: int = 0
    stand_ins: int = 0
    stand_in_entries: int = 0

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def describe(self) -> str:
        """One line for a report: calls and tokens, then the recoveries that happened."""
        parts = [f"{self.llm_calls} calls, {self.prompt_tokens:,} / {self.completion_tokens:,} tokens"]
        if self.corrections:
            parts.append(f"{self.corrections} corrections")
        if self.model_retries:
            parts.append(f"{self.model_retries} retries")
        if self.fallbacks:
            parts.append(f"{self.fallbacks} steps to the fallback ({self.fallback_entries} entries)")
        if self.stand_ins:
            parts.append(f"wrote {self.stand_ins} steps as the fallback ({self.stand_in_entries} entries)")
        return ", ".join(parts)


#: The counters a model row and the totals share; the totals are their sums over the rows.
_SHARED = ("llm_calls", "prompt_tokens", "completion_tokens", "corrections", "fallbacks", "model_retries")


@dataclass(frozen=True)
class Usage(_Counts):
    """Model usage and recoveries; values add up with ``+``.

    The integer fields are the totals. ``by_model`` breaks them down by model name (``"openai:gpt-4o-mini"``,
    ``"extractive"``): each row is a :class:`ModelUsage`, and the rows' shared counters add up to the totals
    (``retries``, memory-server retries, belong to no model). Build a model's counts with :meth:`of`.
    """

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0  # transient memory-server failures retried
    corrections: int = 0  # re-prompts after a reply without a usable tool call
    fallbacks: int = 0  # steps whose arguments the fallback (extractive) model wrote
    model_retries: int = 0  # model calls repeated after a transient failure (HTTP 429 / 5xx, timeout, connection)
    by_model: Mapping[str, ModelUsage] = field(default_factory=dict)

    def __add__(self, other: Usage) -> Usage:
        totals = {name: getattr(self, name) + getattr(other, name) for name in _TOTALS}
        rows = dict(self.by_model)
        for model, row in other.by_model.items():
            rows[model] = rows[model] + row if model in rows else row
        return Usage(**totals, by_model=rows)

    @classmethod
    def of(cls, model: str, **counts: int) -> Usage:
        """``counts`` (:class:`ModelUsage` fields) of the model named ``model``, with the totals they add to."""
        row = ModelUsage(**counts)
        return cls(**{name: getattr(row, name) for name in _SHARED}, by_model={model: row})

    @classmethod
    def of_reply(cls, reply: BaseMessage, model: str | None = None) -> Usage:
        """One model call, with the token counts the provider reported (0 where it reported none); counted for
        ``model`` when it is named."""
        usage = getattr(reply, "usage_metadata", None) or {}
        prompt, completion = int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)
        if model is None:
            return cls(llm_calls=1, prompt_tokens=prompt, completion_tokens=completion)
        return cls.of(model, llm_calls=1, prompt_tokens=prompt, completion_tokens=completion)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Usage:
        """The counters in ``values`` (other keys ignored, missing ones 0), ``by_model`` rows included."""
        values = values or {}
        rows = values.get("by_model") or {}
        if not isinstance(rows, Mapping):
            rows = {}
        return cls(
            **{name: int(values.get(name, 0) or 0) for name in _TOTALS},
            by_model={
                str(model): ModelUsage.from_mapping(row) for model, row in rows.items() if isinstance(row, Mapping)
            },
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data: the totals under their names, and ``by_model`` (model name → counters)."""
        return {
            **{name: getattr(self, name) for name in _TOTALS},
            "by_model": {model: row.as_dict() for model, row in self.by_model.items()},
        }

    def rows(self) -> list[tuple[str, ModelUsage]]:
        """The per-model rows, the most called model first."""
        return sorted(self.by_model.items(), key=lambda item: (-item[1].llm_calls, -item[1].stand_ins, item[0]))


_TOTALS = tuple(f.name for f in fields(Usage) if f.name != "by_model")


@dataclass
class InvocationResult:
    """What one invocation did: tools called, entries written, model usage, recoveries, timings.

    The agent fills it in while the invocation runs and returns it when it ends. The usage counters are also
    readable directly (``result.llm_calls`` is ``result.usage.llm_calls``).
    """

    control: ControlState
    thread_id: str
    tool_calls: tuple[str, ...] = ()
    entry_ids: tuple[str, ...] = ()
    message_index: int | None = None  # the number of the message stored or accepted (1-based, per thread)
    accepted: tuple[int, ...] = ()  # numbers of the messages this invocation took in
    written: tuple[int, ...] = ()  # numbers of the messages this invocation wrote (stored, now searchable)
    pending: int = 0  # messages accepted and not yet written when the invocation ended (batched mode)
    deduplicated: int = 0  # add_entry calls the server answered from an earlier identical write
    acknowledged_entries: int = 0  # add_entry calls the server answered (as they happen, before the step ends)
    context_written: bool = False
    usage: Usage = field(default_factory=Usage)
    errors: tuple[str, ...] = ()  # recovered problems (unusable replies, model errors)
    notes: tuple[str, ...] = ()
    duration_s: float = 0.0  # wall time of the invocation
    tool_s: float = 0.0  # of which in memory-server tool calls
    model_s: float = 0.0  # of which in the model (and fallback model)

    def __getattr__(self, name: str) -> Any:
        if name in _USAGE_FIELDS:
            return getattr(self.usage, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def framework_s(self) -> float:
        """Time spent in the agent itself (graph, checkpoints, prompt building): total minus tools and model."""
        return max(0.0, self.duration_s - self.tool_s - self.model_s)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: the control as its value, usage flattened beside the other fields."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "usage"}
        data["control"] = self.control.value
        for key in ("tool_calls", "entry_ids", "accepted", "written", "errors", "notes"):
            data[key] = list(data[key])
        return {**data, **self.usage.as_dict(), "framework_s": self.framework_s}


_USAGE_FIELDS = frozenset(f.name for f in fields(Usage))  # by_model included


@dataclass(frozen=True)
class ThreadProgress(_Counts):
    """Where a thread stands; kept in its checkpoint so a resumed thread keeps its cadence."""

    messages: int = 0  # messages stored (the number of the thread's last message)
    entries: int = 0  # entries written (a long message takes several)
    flushes: int = 0  # context documents written
    sessions_started: int = 0
    sessions_ended: int = 0


@dataclass(frozen=True)
class ThreadStatus:
    """The checkpointed position and totals of one thread."""

    thread_id: str
    progress: ThreadProgress = field(default_factory=ThreadProgress)
    usage: Usage = field(default_factory=Usage)
    session_open: bool = False
    context: str = ""
    pending: int = 0  # messages accepted and not yet written (batched mode)
    memory_id: str | None = None  # the memory the thread is bound to (None: the agent's own)
    user: str | None = None  # the user it was bound for (None: not bound to a user)
    recent: tuple[str, ...] = ()  # digests of the last messages taken in, the last one last (see AgentState)

    @property
    def messages(self) -> int:
        """Messages stored in this thread so far."""
        return self.progress.messages

    @property
    def accepted(self) -> int:
        """Messages taken in so far: stored, plus accepted and waiting to be written (the next message's number
        minus one)."""
        return self.progress.messages + self.pending
