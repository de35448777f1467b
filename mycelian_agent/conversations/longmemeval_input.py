"""The LongMemEval input format: one :class:`Conversation` per question record, its haystack sessions in order and
the turns flagged ``has_answer`` kept as evidence. Keys the format does not use are ignored."""

from __future__ import annotations

from typing import Any

from .input_checks import Answer, Content, Date, Input, Lenient, RoleIn, Text, at, duplicate
from .model import Conversation, Message, Question, Session

__all__ = ["build_longmemeval"]


class _LongMemEvalTurn(Lenient):
    role: RoleIn
    content: Content
    has_answer: bool = False


class _LongMemEvalIn(Lenient):
    question_id: Text
    question_type: Text
    question: Text
    answer: Answer
    question_date: Date | None = None
    haystack_session_ids: list[Text]
    haystack_dates: list[Date]
    haystack_sessions: list[list[_LongMemEvalTurn]]
    answer_session_ids: list[str]


def build_longmemeval(inp: Input, obj: Any, path: str, default_id: str) -> Conversation:
    record = inp.check(_LongMemEvalIn.model_validate, obj, path)
    ids, dates, haystack = record.haystack_session_ids, record.haystack_dates, record.haystack_sessions
    if not len(ids) == len(dates) == len(haystack):
        raise inp.fail(
            path,
            f"haystack lists differ in length: haystack_sessions {len(haystack)}, "
            f"haystack_session_ids {len(ids)}, haystack_dates {len(dates)}",
        )
    if (i := duplicate(ids)) is not None:
        raise inp.fail(f"{at(path, 'haystack_session_ids')}[{i}]", f"duplicate session id {ids[i]!r}")
    sessions: list[Session] = []
    evidence_turns: list[str] = []
    for sid, date, turns in zip(ids, dates, haystack):
        messages = []
        for ti, turn in enumerate(turns):
            tags = {"session_id": sid, "turn": str(ti)}
            if turn.has_answer:
                tags["has_answer"] = "true"
                evidence_turns.append(f"{sid}:{ti}")
            messages.append(Message(turn.role, turn.content, tags))
        sessions.append(Session(sid, date, tuple(messages)))
    question = Question(
        record.question_id,
        record.question,
        record.answer,
        record.question_type,
        record.question_date,
        tuple(record.answer_session_ids),
        tuple(evidence_turns),
    )
    return Conversation(record.question_id, tuple(sessions), inp.source, "longmemeval", (question,))
