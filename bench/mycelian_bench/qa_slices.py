"""The slices ``bench qa`` asks about: consecutive whole sessions of a LoCoMo sample of about ``slice_tokens``
tokens each, with the questions of categories 1-4 whose evidence lies inside, and the questions picked round-robin
over the slices and their categories."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from mycelian_agent.conversations.formats import LOCOMO_CATEGORIES, Conversation, Question, valid_title
from mycelian_agent.errors import ConfigError
from mycelian_agent.recall.hits import estimate_tokens, when_label
from mycelian_bench.locomo import load_locomo

__all__ = ["QASlice", "QATurn", "make_slices", "pick_questions", "slice_conversation", "slice_turns"]


@dataclass(frozen=True)
class QASlice:
    """Consecutive whole sessions of one LoCoMo sample and the questions answerable from them alone.

    ``conversation`` holds the slice's sessions and its kept questions; ``question_date`` is the date of the
    session after the slice (None for the sample's last slice); ``tokens`` the estimated size of its turn lines.
    """

    slice_id: str
    sample_id: str
    conversation: Conversation
    question_date: str | None
    tokens: int

    @property
    def title(self) -> str:
        """The memory title (and thread id) of the slice."""
        return valid_title(self.slice_id.replace("/", "-"))

    def describe(self) -> dict[str, Any]:
        """JSON-ready: id, sessions, size, question date and the number of kept questions."""
        sessions = self.conversation.sessions
        return {
            "slice_id": self.slice_id,
            "sessions": [s.session_id for s in sessions],
            "messages": self.conversation.message_count,
            "tokens": self.tokens,
            "question_date": self.question_date,
            "questions": len(self.conversation.questions),
        }


@dataclass(frozen=True)
class QATurn:
    """One turn of a slice as the reader sees it: ``line`` is ``[date] speaker: words``."""

    position: int
    dia_id: str
    text: str
    line: str


def slice_turns(conversation: Conversation) -> list[QATurn]:
    """Every turn of ``conversation`` in order, dated, with its speaker."""
    turns: list[QATurn] = []
    for session in conversation.sessions:
        for message in session.messages:
            speaker = message.name or message.tags.get("speaker") or message.role
            turns.append(
                QATurn(
                    len(turns),
                    message.tags.get("dia_id", ""),
                    message.content,
                    f"[{when_label(session.conversation_time)}] {speaker}: {message.content}",
                )
            )
    return turns


def slice_conversation(conversation: Conversation, slice_tokens: int) -> list[QASlice]:
    """Cut a LoCoMo sample into slices of consecutive whole sessions of at most ``slice_tokens`` tokens (estimated
    over the dated turn lines; a larger session is a slice of its own), each with the questions of categories 1-4
    whose evidence turns all lie inside it."""
    if slice_tokens < 1:
        raise ConfigError(f"slice_tokens must be >= 1, got {slice_tokens}")
    groups: list[list[int]] = []
    size = 0
    for index, session in enumerate(conversation.sessions):
        tokens = sum(estimate_tokens(t.line) + 1 for t in slice_turns(replace(conversation, sessions=(session,))))
        if groups and groups[-1] and size + tokens <= slice_tokens:
            groups[-1].append(index)
            size += tokens
        else:
            groups.append([index])
            size = tokens
    slices = []
    for group in groups:
        sessions = tuple(conversation.sessions[i] for i in group)
        ids = {m.tags.get("dia_id") for s in sessions for m in s.messages}
        questions = tuple(
            q
            for q in conversation.questions
            if q.category in LOCOMO_CATEGORIES and not q.is_abstention and q.evidence and set(q.evidence) <= ids
        )
        after = group[-1] + 1
        part = replace(conversation, sessions=sessions, questions=questions)
        slices.append(
            QASlice(
                slice_id=f"{conversation.conversation_id}/s{group[0] + 1}-{group[-1] + 1}",
                sample_id=conversation.conversation_id,
                conversation=part,
                question_date=conversation.sessions[after].conversation_time
                if after < len(conversation.sessions)
                else None,
                tokens=sum(estimate_tokens(t.line) + 1 for t in slice_turns(part)),
            )
        )
    return slices


def make_slices(paths: Sequence[str | os.PathLike[str]], slice_tokens: int) -> list[QASlice]:
    """The slices of every LoCoMo sample of ``paths``, in file order."""
    return [s for conversation in load_locomo(paths) for s in slice_conversation(conversation, slice_tokens)]


def _interleaved(questions: Sequence[Question], start: int) -> list[Question]:
    """``questions`` with their categories taking turns (file order within a category), the first turn going to
    the ``start``-th category (modulo their number): so that a few questions per slice still cover them all."""
    by_category: dict[str, list[Question]] = {}
    for question in questions:
        by_category.setdefault(question.category, []).append(question)
    names = sorted(by_category)
    if not names:
        return []
    names = names[start % len(names) :] + names[: start % len(names)]
    order: list[Question] = []
    for depth in range(max(len(v) for v in by_category.values())):
        order += [by_category[name][depth] for name in names if depth < len(by_category[name])]
    return order


def pick_questions(slices: Sequence[QASlice], limit: int | None) -> list[tuple[QASlice, list[Question]]]:
    """Up to ``limit`` questions (all: None), taken round-robin over the slices (one question of every slice,
    then a second, ...; within a slice the categories take turns, starting with a different one per slice),
    grouped back by slice in slice order; slices left without a question are dropped. Raises
    :class:`ConfigError` when the slices hold no question."""
    if limit is not None and limit < 1:
        raise ConfigError(f"questions must be >= 1, got {limit}")
    total = sum(len(s.conversation.questions) for s in slices)
    if not total:
        raise ConfigError(
            f"no questions: the {len(slices)} slice(s) hold no question of categories 1-4 whose "
            "evidence lies inside one slice; raise --slice-tokens or give other LoCoMo files"
        )
    wanted = total if limit is None else min(limit, total)
    taken: dict[int, int] = {}
    depth = 0
    while sum(taken.values()) < wanted:
        for index, piece in enumerate(slices):
            if sum(taken.values()) >= wanted:
                break
            if depth < len(piece.conversation.questions):
                taken[index] = taken.get(index, 0) + 1
        depth += 1
    return [
        (piece, _interleaved(piece.conversation.questions, i)[: taken[i]])
        for i, piece in enumerate(slices)
        if taken.get(i)
    ]
