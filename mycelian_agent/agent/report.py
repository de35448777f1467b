"""Typed results of agent invocations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .control import ControlState

__all__ = ["InvocationResult", "ThreadStatus"]


@dataclass(frozen=True)
class InvocationResult:
    """What one invocation did: tools called, entries written, model usage, recoveries."""

    control: ControlState
    thread_id: str
    tool_calls: tuple[str, ...] = ()
    entry_ids: tuple[str, ...] = ()
    message_index: int | None = None
    deduplicated: int = 0
    context_written: bool = False
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    corrections: int = 0
    fallbacks: int = 0
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    duration_s: float = 0.0  # wall time of the invocation
    tool_s: float = 0.0  # of which in memory-server tool calls
    model_s: float = 0.0  # of which in the model (and fallback model)

    @property
    def framework_s(self) -> float:
        """Time spent in the agent itself (graph, checkpoints, prompt building): total minus tools and model."""
        return max(0.0, self.duration_s - self.tool_s - self.model_s)

    @classmethod
    def from_run(cls, run: Mapping[str, Any], *, control: ControlState, thread_id: str, duration_s: float):
        """Build from the ``run`` report the graph leaves in its state."""
        return cls(
            control=control,
            thread_id=thread_id,
            tool_calls=tuple(run.get("tool_calls", ())),
            entry_ids=tuple(run.get("entry_ids", ())),
            message_index=run.get("message_index"),
            deduplicated=run.get("deduplicated", 0),
            context_written=run.get("context_written", False),
            llm_calls=run.get("llm_calls", 0),
            prompt_tokens=run.get("prompt_tokens", 0),
            completion_tokens=run.get("completion_tokens", 0),
            retries=run.get("retries", 0),
            corrections=run.get("corrections", 0),
            fallbacks=run.get("fallbacks", 0),
            errors=tuple(run.get("errors", ())),
            notes=tuple(run.get("notes", ())),
            duration_s=duration_s,
            tool_s=run.get("tool_s", 0.0),
            model_s=run.get("model_s", 0.0),
        )


@dataclass(frozen=True)
class ThreadStatus:
    """The checkpointed position and totals of one thread."""

    thread_id: str
    messages: int = 0
    session_open: bool = False
    context: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)
