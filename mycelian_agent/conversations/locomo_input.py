"""The LoCoMo input format: ``speaker_a`` becomes ``user``, ``speaker_b`` ``assistant``, each message keeps its
speaker's name; questions are ``"<sample_id>:<index in qa>"`` with their evidence as dialogue ids. Keys the format
does not use are ignored (``observation``, ``session_summary``, ``event_summary`` and image URLs are never
ingested)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, TypeAdapter

from ..limits import name_problem
from .input_checks import Answer, Date, Input, Lenient, Text, at
from .model import Conversation, Message, Question, Role, Session

__all__ = ["build_locomo", "normalise_dia_id"]


class _LocomoTurn(Lenient):
    speaker: Text
    dia_id: Text
    text: str
    blip_caption: str | None = None


class _LocomoQuestion(Lenient):
    question: Text
    answer: Answer | None = None
    # Category 5 (adversarial) carries adversarial_answer instead of answer.
    adversarial_answer: Answer | None = None
    category: int
    evidence: list[str]


class _LocomoSpeakers(Lenient):
    # The sessions are the other keys (session_<N>, session_<N>_date_time), validated one by one when building.
    model_config = ConfigDict(extra="allow")

    speaker_a: Text
    speaker_b: Text


class _LocomoIn(Lenient):
    sample_id: Text
    conversation: _LocomoSpeakers
    qa: list[_LocomoQuestion] | None = None


_LOCOMO_TURNS = TypeAdapter(list[_LocomoTurn])
_LOCOMO_DATE = TypeAdapter(Date | None, config=ConfigDict(strict=True))


def _locomo_session(inp: Input, conv: _LocomoSpeakers, path: str, key: str) -> Session:
    """Session ``key`` of a LoCoMo conversation (at ``path``): its turns and its ``<key>_date_time``."""
    extra = conv.model_extra or {}
    if f"{key}_date_time" not in extra:
        raise inp.fail(f"{path}.{key}_date_time", "missing (required key: the session's date)")
    when = inp.check(_LOCOMO_DATE.validate_python, extra[f"{key}_date_time"], f"{path}.{key}_date_time")
    speakers: dict[str, Role] = {conv.speaker_a: "user", conv.speaker_b: "assistant"}
    messages = []
    for ti, turn in enumerate(inp.check(_LOCOMO_TURNS.validate_python, extra[key], f"{path}.{key}")):
        if turn.speaker not in speakers:
            expected = " or ".join(map(repr, speakers))
            raise inp.fail(f"{path}.{key}[{ti}].speaker", f"unknown speaker {turn.speaker!r} (expected {expected})")
        text, caption = turn.text, (turn.blip_caption or "").strip()
        if caption:
            text = f"{text} [shares a photo: {caption}]" if text.strip() else f"[shares a photo: {caption}]"
        if not text.strip():
            raise inp.fail(f"{path}.{key}[{ti}].text", "content is empty or whitespace only")
        tags = {"session_id": key, "turn": str(ti), "dia_id": normalise_dia_id(turn.dia_id), "speaker": turn.speaker}
        role = speakers[turn.speaker]
        messages.append(Message(role, text, tags, _locomo_name(turn.speaker)))
    return Session(key, when, tuple(messages))


def _locomo_name(speaker: str) -> str | None:
    """The speaker's name as a message name; None when it is not one (a benchmark file is not refused for it)."""
    return None if name_problem(speaker) else speaker.strip()


def build_locomo(inp: Input, obj: Any, path: str, default_id: str) -> Conversation:
    sample = inp.check(_LocomoIn.model_validate, obj, path)
    conv, cpath = sample.conversation, at(path, "conversation")
    if conv.speaker_a == conv.speaker_b:
        raise inp.fail(f"{cpath}.speaker_b", f"same name as speaker_a ({conv.speaker_b!r}): roles would be ambiguous")
    # session_<N>_date_time keys without a session_<N> occur upstream (conv-26); they hold no conversation text.
    numbers = sorted(int(m[1]) for key in conv.model_extra or {} if (m := re.fullmatch(r"session_(\d+)", key)))
    if not numbers:
        raise inp.fail(cpath, "no session_<N> keys")
    sessions = tuple(_locomo_session(inp, conv, cpath, f"session_{n}") for n in numbers)
    questions = []
    for qi, qa in enumerate(sample.qa or ()):
        answer = qa.answer if qa.answer is not None else qa.adversarial_answer
        if answer is None:
            raise inp.fail(
                f"{at(path, 'qa')}[{qi}].answer", "missing (required key; 'adversarial_answer' also accepted)"
            )
        # Upstream evidence sometimes packs several ids in one string ("D8:6; D9:17"): split, keep order, dedupe.
        evidence = tuple(
            dict.fromkeys(normalise_dia_id(p) for item in qa.evidence for p in re.split(r"[;,\s]+", item) if p)
        )
        questions.append(Question(f"{sample.sample_id}:{qi}", qa.question, answer, str(qa.category), None, evidence))
    return Conversation(sample.sample_id, sessions, inp.source, "locomo", tuple(questions))


_DIA_ID = re.compile(r"D\s*:?\s*0*(\d+)\s*:\s*0*(\d+)", re.I)


def normalise_dia_id(text: str) -> str:
    """A LoCoMo dialogue id in its canonical form ``D<session>:<turn>``.

    Upstream annotations contain variants (``D30:05``, ``D:11:26``, ``d5:3``); they are mapped to the form the
    turns carry. Text that is no dialogue id is returned unchanged, so the runners report it as missing from the
    conversation rather than dropping it.
    """
    match = _DIA_ID.fullmatch(text.strip())
    return f"D{int(match[1])}:{int(match[2])}" if match else text
