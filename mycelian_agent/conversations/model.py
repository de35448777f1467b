"""The conversation model the rest of the package uses: frozen :class:`Conversation` / :class:`Session` /
:class:`Message` / :class:`Question`, as the input readers (:mod:`.formats`) make them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = [
    "FORMATS",
    "LOCOMO_CATEGORIES",
    "ROLE_ALIASES",
    "Conversation",
    "Kind",
    "Message",
    "PositionedMessage",
    "Question",
    "Role",
    "Session",
    "iter_messages",
]

Role = Literal["user", "assistant"]
Kind = Literal["messages", "sessions", "longmemeval", "locomo"]

ROLE_ALIASES: dict[str, Role] = {"user": "user", "assistant": "assistant", "human": "user", "ai": "assistant"}
FORMATS = ("messages", "sessions", "longmemeval", "locomo")
LOCOMO_CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}


@dataclass(frozen=True)
class Message:
    """One chat message. ``tags`` are string→string and must not be mutated (excluded from hashing).

    ``name`` is who spoke in that role ("Caroline"), when the input says (LoCoMo speakers, ``name`` in the generic
    formats); None otherwise.
    """

    role: Role
    content: str
    tags: dict[str, str] = field(default_factory=dict, hash=False)
    name: str | None = None


@dataclass(frozen=True)
class Session:
    """A run of messages sharing one ``conversation_time`` (RFC 3339 UTC, or None when the input has none)."""

    session_id: str
    conversation_time: str | None
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Question:
    """A benchmark question with its gold evidence.

    ``evidence``: LongMemEval ``answer_session_ids``; LoCoMo evidence ``dia_id``s (``"D<session>:<turn>"``).
    ``evidence_turns``: LongMemEval turns flagged ``has_answer``, as ``"<session_id>:<turn>"``; empty for LoCoMo
    (its ``evidence`` is already turn-level). ``category``: LongMemEval ``question_type``; LoCoMo category number
    as a string (names in :data:`LOCOMO_CATEGORIES`).
    """

    question_id: str
    question: str
    answer: str
    category: str
    question_date: str | None
    evidence: tuple[str, ...]
    evidence_turns: tuple[str, ...] = ()

    @property
    def is_abstention(self) -> bool:
        """True for questions whose answer is not in the history (LongMemEval ``_abs``, LoCoMo category 5).

        LongMemEval's own retrieval evaluation skips these; their ``evidence`` is kept exactly as the file gives it.
        """
        return self.question_id.endswith("_abs") or self.category in ("abstention", "5")


@dataclass(frozen=True)
class Conversation:
    """One conversation to replay: its sessions in order, where it came from, and any benchmark questions."""

    conversation_id: str
    sessions: tuple[Session, ...]
    source: str
    kind: Kind
    questions: tuple[Question, ...] = ()

    @property
    def message_count(self) -> int:
        return sum(len(s.messages) for s in self.sessions)


class PositionedMessage(NamedTuple):
    session_index: int
    message_index: int
    session: Session
    message: Message


def iter_messages(conversation: Conversation) -> Iterator[PositionedMessage]:
    """Yield every message of ``conversation`` in order with its (session index, index in session) position."""
    for si, session in enumerate(conversation.sessions):
        for mi, message in enumerate(session.messages):
            yield PositionedMessage(si, mi, session, message)
