"""Replaying conversations into memory, resumably and exactly once.

Each conversation is one thread: for every session, START_SESSION, each message, END_SESSION. The position of a
thread is read from its checkpoint (messages stored, sessions started and ended), so re-running a replay after an
interruption continues where it stopped; add_entry's idempotency key makes the message that was in flight at the
interruption land once. In batched mode a session's messages are sent in one call (one invocation per batch) and
the position counts accepted messages too: they are in the checkpoint and are written by the next write (at the
latest when the session ends), each exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..agent.invoker import MycelianAgentInvoker
from ..agent.report import InvocationResult, ThreadStatus, Usage
from ..errors import InputError
from .formats import Conversation

__all__ = ["ReplayStats", "replay_conversation", "resume_position"]


@dataclass
class ReplayStats:
    """Totals of a replay, summed over conversations."""

    conversations: int = 0
    messages: int = 0  # messages stored (batched mode: accepted) by this run
    written: int = 0  # messages written by this run (batched mode: may include messages accepted by an earlier run)
    skipped: int = 0  # messages already stored by an earlier run (resumed)
    entries: int = 0
    deduplicated: int = 0
    contexts: int = 0
    sessions: int = 0
    usage: Usage = field(default_factory=Usage)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    memories: list[str] = field(default_factory=list)  # titles (or ids) of the memories written, in order
    reconnects: int = 0  # new sessions opened to an HTTP memory server that went away

    def add(self, result: InvocationResult) -> None:
        """Account one invocation."""
        self.entries += len(result.entry_ids)
        self.written += len(result.written)
        self.deduplicated += result.deduplicated
        self.contexts += int(result.context_written)
        self.usage += result.usage
        self.errors.extend(result.errors)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready totals, usage flattened beside the others."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "usage"}
        return {**data, **self.usage.as_dict(), "messages_per_s": round(self.messages_per_s, 1)}

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.elapsed_s if self.elapsed_s else 0.0


def resume_position(conversation: Conversation, status: ThreadStatus) -> tuple[int, bool, int]:
    """Where a replay of ``conversation`` resumes: (session index, whether it was started, messages done in it).

    Raises :class:`InputError` if the thread's checkpoint does not match this conversation (e.g. the file changed
    or the thread id is shared with another conversation).
    """
    ended = status.progress.sessions_ended
    started = status.progress.sessions_started
    before = sum(len(s.messages) for s in conversation.sessions[:ended])
    within = status.accepted - before
    if (
        ended > len(conversation.sessions)
        or within < 0
        or (ended < len(conversation.sessions) and within > len(conversation.sessions[ended].messages))
        or (ended == len(conversation.sessions) and within != 0)
    ):
        raise InputError(
            f"thread {status.thread_id!r} has a checkpoint ({status.accepted} messages, {ended} sessions ended) "
            f"that does not match conversation {conversation.conversation_id!r} of {conversation.source} "
            f"({conversation.message_count} messages in {len(conversation.sessions)} sessions); "
            "use another --state file or thread id"
        )
    return ended, started > ended, within


async def replay_conversation(
    invoker: MycelianAgentInvoker,
    conversation: Conversation,
    *,
    thread_id: str | None = None,
    stats: ReplayStats | None = None,
    on_message: Callable[[InvocationResult], None] | None = None,
    bulk: bool = True,
) -> ReplayStats:
    """Replay ``conversation`` into the invoker's memory (resuming from the thread's checkpoint).

    ``on_message`` is called with the report of every invocation that took messages in (``result.accepted``): one
    per message, or in batched mode (``invoker.batch_size > 1``) one per batch, since a session's messages are
    then sent together (:meth:`MycelianAgentInvoker.aprocess_conversation_messages`; ``bulk=False``: one call per
    message, one invocation and checkpoint write each, as in unbatched mode).
    """
    stats = stats or ReplayStats()
    thread = thread_id or conversation.conversation_id
    started_at = time.perf_counter()
    status = await invoker.aclaim_thread(thread)  # under the thread's lease: no other process moves it now
    first, open_, done = resume_position(conversation, status)
    stats.skipped += sum(len(s.messages) for s in conversation.sessions[:first]) + done
    for index in range(first, len(conversation.sessions)):
        session = conversation.sessions[index]
        if not (index == first and open_):
            stats.add(await invoker.astart_session(thread, session.conversation_time))
        rest = session.messages[done if index == first else 0 :]

        def taken(result: InvocationResult) -> None:
            stats.add(result)
            stats.messages += len(result.accepted)
            if on_message is not None:
                on_message(result)

        if bulk and invoker.batch_size > 1 and rest:
            # Batched: the session's messages in one call, accepted one batch per invocation (one checkpoint each).
            await invoker.aprocess_conversation_messages(
                thread, [_message(m) for m in rest], session.conversation_time, on_result=taken
            )
        else:
            for message in rest:
                taken(
                    await invoker.aprocess_conversation_message(
                        message.role,
                        message.content,
                        thread,
                        session.conversation_time,
                        tags=message.tags,
                        name=message.name,
                    )
                )
        stats.add(await invoker.aend_session(thread, session.conversation_time))
        stats.sessions += 1
    stats.conversations += 1
    stats.elapsed_s += time.perf_counter() - started_at
    return stats


def _message(message: Any) -> dict[str, Any]:
    """A loaded message as :meth:`MycelianAgentInvoker.aprocess_conversation_messages` takes it."""
    item: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name is not None:
        item["name"] = message.name
    if message.tags:
        item["tags"] = message.tags
    return item
