"""AgentSettings: the agent's bounds and recovery settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..errors import ConfigError, is_transient
from ..limits import RAW_ENTRY_MAX_CHARS

if TYPE_CHECKING:
    from tenacity import AsyncRetrying

__all__ = ["AgentSettings"]


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
    entry_max_chars: int = RAW_ENTRY_MAX_CHARS  # longer messages are stored as several entries (parts)
    max_corrections: int = 2  # re-prompts after a reply without a valid tool call, before the fallback
    fallback_on_model_error: bool = True  # a model exception falls back to the extractive model (counted)
    tool_attempts: int = 3  # attempts for a transient tool failure
    retry_backoff_s: float = 0.2  # first backoff; doubles per attempt
    model_attempts: int = 3  # attempts of a model call failing transiently (429, 5xx, timeout), then the fallback
    model_backoff_s: float = 0.5  # first backoff between model attempts; doubles per attempt
    skip_empty_flush: bool = True  # END_SESSION writes no context when nothing arrived since the last flush
    flush_from_history: bool = False  # put_context reads the history window instead of the messages since a flush
    prune_every: int | None = 16  # keep only a thread's newest checkpoint, pruning every N invocations; None = keep all
    # How the tool is forced: "named" (OpenAI's object form naming the tool), "required" (the string form, for
    # llama.cpp's server and other OpenAI-compatible servers that ignore the object form) or "auto". Replies that
    # write the call as JSON text are read in every mode (agent/replies.py).
    tool_choice_mode: Literal["named", "required", "auto"] = "named"
    # Batched mode (opt-in): messages are accepted into the thread's checkpoint and every `batch_size` of them (and
    # at a flush, a session end, an explicit flush, or `max_delay_s` after the oldest was accepted) one model call
    # writes all their summaries and tags. 1 = one model call per message (the protocol's default form).
    batch_size: int = 1
    max_delay_s: float | None = None  # write pending messages at most this long after the oldest was accepted
    batch_context: bool = True  # when a flush coincides with a batch write, the same model call writes the context
    batch_history_window: int | None = 4  # recent messages shown before a batch (the batch itself is context too)

    def __post_init__(self) -> None:
        if self.tool_choice_mode not in ("named", "required", "auto"):
            raise ConfigError(f"tool_choice_mode must be 'named', 'required' or 'auto'; got {self.tool_choice_mode!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if self.max_delay_s is not None and (
            isinstance(self.max_delay_s, bool)
            or not isinstance(self.max_delay_s, (int, float))
            or not self.max_delay_s > 0
        ):
            raise ConfigError(f"max_delay_s must be a positive number of seconds or None, got {self.max_delay_s!r}")

    @property
    def batched(self) -> bool:
        """Whether messages are accepted and written in batches (``batch_size > 1``)."""
        return self.batch_size > 1

    def tool_retrying(self) -> AsyncRetrying:
        """How a tool call is retried: a transient failure up to ``tool_attempts`` attempts in all, waiting
        ``retry_backoff_s`` doubled at each; any other failure is raised at once (the last one after the attempts)."""
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

        return AsyncRetrying(
            stop=stop_after_attempt(self.tool_attempts),
            wait=wait_exponential(multiplier=self.retry_backoff_s),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )

    @classmethod
    def naive(cls) -> AgentSettings:
        """The protocol as first written: whole history in state and prompts. Used by the benchmarks only."""
        return cls(
            history_window=None,
            recent_message_chars=None,
            flush_message_chars=None,
            entry_context_chars=None,
            since_flush_cap=None,
            skip_empty_flush=False,
            flush_from_history=True,
            prune_every=None,
        )
