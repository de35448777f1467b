"""Conversation input formats, normalised into :class:`Conversation` / :class:`Session` / :class:`Message`.

Accepted inputs (auto-detected by their keys; a JSON array may hold several):

- ``messages``: ``{"conversation_id"?, "conversation_time"?, "messages": [{"role", "content", "tags"?}]}``
  (one session).
- ``sessions``: ``{"conversation_id"?, "sessions": [{"session_id", "conversation_time"?, "messages": [...]}]}``.
- ``longmemeval``: LongMemEval question records — one :class:`Conversation` per question.
- ``locomo``: LoCoMo samples — ``speaker_a`` becomes ``user``, ``speaker_b`` becomes ``assistant``.

Roles are ``user`` and ``assistant``; ``human`` and ``ai`` (LangChain's message types) are accepted and mapped to
them. Nothing is skipped silently: every problem raises :class:`InputError` naming the file, the position as a JSON
path and the problem. The generic formats are strict (unknown keys are errors, catching typos); the benchmark formats
ignore keys they do not use (LoCoMo's ``observation``, ``session_summary``, ``event_summary`` and image URLs are
never ingested).

Every message carries the tags ``session_id`` and ``turn`` (0-based index in its session); LongMemEval adds
``has_answer: "true"`` on evidence turns, LoCoMo adds ``dia_id`` and ``speaker``. User tags in the generic formats
may not use those names or the agent's (``role``, ``thread``, ``msg``). Generic conversations need at least one
message in every session; benchmark sessions may be empty (they are kept, with their date).

Ids: generic conversations take ``conversation_id`` or the file stem; LongMemEval conversations and questions take
``question_id``; LoCoMo conversations take ``sample_id`` and questions ``"<sample_id>:<index in qa>"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from mycelian_agent.errors import InputError

__all__ = [
    "FORMATS", "LOCOMO_CATEGORIES", "ROLE_ALIASES", "Conversation", "Message",
    "PositionedMessage", "Question", "Session", "iter_messages", "load_conversations", "parse_conversation_data",
    "to_rfc3339", "valid_title",
]

ROLE_ALIASES = {"user": "user", "assistant": "assistant", "human": "user", "ai": "assistant"}
_ROLES_ACCEPTED = "accepted: user, assistant; also human → user, ai → assistant"
FORMATS = ("messages", "sessions", "longmemeval", "locomo")
LOCOMO_CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
# Tags the loader or the agent set; user-supplied tags may not override them.
_RESERVED_TAGS = frozenset({"session_id", "turn", "role", "thread", "msg"})

Role = Literal["user", "assistant"]
Kind = Literal["messages", "sessions", "longmemeval", "locomo"]


@dataclass(frozen=True)
class Message:
    """One chat message. ``tags`` are string→string and must not be mutated (excluded from hashing)."""

    role: Role
    content: str
    tags: dict[str, str] = field(default_factory=dict, hash=False)


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


# ---------------------------------------------------------------------------------------------------------- dates

_LME_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{3}\))?\s*(\d{1,2}):(\d{2})(?::(\d{2}))?")
_LOCOMO_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})", re.I)
_MONTHS = "january february march april may june july august september october november december".split()


def to_rfc3339(text: str) -> str:
    """Normalise a date to RFC 3339 UTC (``"2023-05-20T02:21:00Z"``).

    Accepts LongMemEval ``"2023/05/20 (Sat) 02:21"`` (the weekday is not checked), LoCoMo
    ``"1:56 pm on 8 May, 2023"`` and ISO 8601 / RFC 3339 (offsets are converted to UTC; a value without an
    offset is taken as UTC; a bare date means midnight). Benchmark dates carry no zone and are taken as UTC.
    Raises :class:`InputError` when the text is none of these.
    """
    if not isinstance(text, str):
        raise InputError(f"date must be a string, got {type(text).__name__}")
    s = text.strip()
    try:
        if m := _LME_DATE.fullmatch(s):
            y, mo, d, h, mi, sec = (int(g or 0) for g in m.groups())
            dt = datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
        elif m := _LOCOMO_DATE.fullmatch(s):
            hour, minute, ampm, day, month, year = m.groups()
            # Full English month names or abbreviations of at least three letters ("Sept").
            month = month.lower()
            month_no = next((i + 1 for i, n in enumerate(_MONTHS) if len(month) >= 3 and n.startswith(month)), 0)
            if not 1 <= int(hour) <= 12 or not month_no:
                raise ValueError(s)
            h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
            dt = datetime(int(year), month_no, int(day), h, int(minute), tzinfo=UTC)
        elif re.match(r"\d{4}-?\d{2}", s):
            dt = datetime.fromisoformat(s)
            dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
        else:
            raise ValueError(s)
    except (ValueError, OverflowError):
        raise InputError(
            f"unparseable date {text!r} (expected RFC 3339 like '2023-05-20T02:21:00Z', LongMemEval like "
            "'2023/05/20 (Sat) 02:21' or LoCoMo like '1:56 pm on 8 May, 2023')"
        ) from None
    return dt.isoformat().replace("+00:00", "Z")


# ------------------------------------------------------------------------------------------------------ titles

_TITLE_OK = re.compile(r"[A-Za-z0-9-]{1,50}")


def valid_title(text: str) -> str:
    """Turn any id into a valid upstream title: 1 to 50 ASCII letters, digits and hyphens.

    A valid ``text`` is returned unchanged. Otherwise runs of other characters become one hyphen, the result is
    cut to 41 characters and ``-`` plus the first 8 hex digits of the SHA-1 of the original is appended, so
    different ids stay distinct (``"gpt4_2c50253f"`` → ``"gpt4-2c50253f-<hash>"``). Deterministic.
    """
    if _TITLE_OK.fullmatch(text):
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    base = re.sub(r"[^A-Za-z0-9-]+", "-", text)[:41].strip("-")
    return f"{base}-{digest}" if base else digest


# ------------------------------------------------------------------------------------------------------ parsing


class _Ctx:
    """The input being parsed, for error messages."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> InputError:
        return InputError(f"{self.source}: {path or 'top level'}: {problem}")


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {str: "a string", list: "an array", dict: "an object"}
    return next((n for t, n in names.items() if isinstance(value, t)), "a number")


def _get(ctx: _Ctx, obj: dict, key: str, path: str, typ: type, *, required: bool = True, text: bool = False) -> Any:
    """``obj[key]`` checked to be a ``typ`` (``text``: a non-blank string); None if optional and absent/null."""
    if obj.get(key) is None and not (required and key in obj):
        if required:
            raise ctx.fail(_at(path, key), "missing (required key)")
        return None
    value = obj[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        want = {str: "a string", list: "an array", dict: "an object", int: "an integer"}[typ]
        raise ctx.fail(_at(path, key), f"must be {want}, got {_kind(value)}")
    if text and isinstance(value, str) and not value.strip():
        raise ctx.fail(_at(path, key), "must not be empty")
    return value


def _str_list(ctx: _Ctx, obj: dict, key: str, path: str) -> list[str]:
    items = _get(ctx, obj, key, path, list)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ctx.fail(_at(_at(path, key), i), f"must be a string, got {_kind(item)}")
    return items


def _date(ctx: _Ctx, value: Any, path: str) -> str | None:
    try:
        return None if value is None else to_rfc3339(value)
    except InputError as exc:
        raise ctx.fail(path, str(exc)) from None


def _answer(ctx: _Ctx, value: Any, path: str) -> str:
    # Some benchmark answers are numbers; they are compared as text.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ctx.fail(path, f"answer must be a string or a number, got {_kind(value)}")
    return str(value)


def _no_unknown_keys(ctx: _Ctx, obj: dict, path: str, accepted: tuple[str, ...]) -> None:
    for key in obj:
        if key not in accepted:
            raise ctx.fail(_at(path, key), f"unknown key (accepted: {', '.join(accepted)})")


def _content(ctx: _Ctx, value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ctx.fail(path, f"content must be a string, got {_kind(value)}")
    if not value.strip():
        raise ctx.fail(path, "content is empty or whitespace only")
    return value


def _message(ctx: _Ctx, obj: Any, path: str, tags: dict[str, str]) -> Message:
    """A ``{role, content}`` object (generic formats and LongMemEval)."""
    if not isinstance(obj, dict):
        raise ctx.fail(path, f"a message must be an object, got {_kind(obj)}")
    for key in ("role", "content"):
        if key not in obj:
            raise ctx.fail(_at(path, key), "missing (required key)")
    role = obj["role"]
    if not isinstance(role, str) or role not in ROLE_ALIASES:
        raise ctx.fail(_at(path, "role"), f"unknown role {role!r} ({_ROLES_ACCEPTED})")
    content = _content(ctx, obj["content"], _at(path, "content"))
    return Message(ROLE_ALIASES[role], content, tags)  # type: ignore[arg-type]


def _generic_session(ctx: _Ctx, obj: dict, path: str, session_id: str, time_key: str) -> Session:
    items = _get(ctx, obj, "messages", path, list)
    if not items:
        raise ctx.fail(_at(path, "messages"), "must hold at least one message")
    messages = []
    for i, item in enumerate(items):
        mpath = _at(_at(path, "messages"), i)
        if isinstance(item, dict):
            _no_unknown_keys(ctx, item, mpath, ("role", "content", "tags"))
        tags = (_get(ctx, item, "tags", mpath, dict, required=False) if isinstance(item, dict) else None) or {}
        for key, value in tags.items():
            tpath = _at(_at(mpath, "tags"), key)
            if not key.strip():
                raise ctx.fail(tpath, "tag names must not be empty")
            if key in _RESERVED_TAGS:
                reserved = ", ".join(sorted(_RESERVED_TAGS))
                raise ctx.fail(tpath, f"reserved tag name (set by the loader or the agent: {reserved})")
            if not isinstance(value, str):
                raise ctx.fail(tpath, f"tag values must be strings, got {_kind(value)}")
        messages.append(_message(ctx, item, mpath, {**tags, "session_id": session_id, "turn": str(i)}))
    return Session(session_id, _date(ctx, obj.get(time_key), _at(path, time_key)), tuple(messages))


def _parse_generic(ctx: _Ctx, obj: dict, path: str, default_id: str) -> Conversation:
    if "sessions" not in obj:
        _no_unknown_keys(ctx, obj, path, ("conversation_id", "conversation_time", "messages"))
        cid = _get(ctx, obj, "conversation_id", path, str, required=False, text=True) or default_id
        session = _generic_session(ctx, obj, path, "session_1", "conversation_time")
        return Conversation(cid, (session,), ctx.source, "messages")
    _no_unknown_keys(ctx, obj, path, ("conversation_id", "sessions"))
    cid = _get(ctx, obj, "conversation_id", path, str, required=False, text=True) or default_id
    items = _get(ctx, obj, "sessions", path, list)
    if not items:
        raise ctx.fail(_at(path, "sessions"), "must hold at least one session")
    sessions: list[Session] = []
    for i, item in enumerate(items):
        spath = _at(_at(path, "sessions"), i)
        if not isinstance(item, dict):
            raise ctx.fail(spath, f"a session must be an object, got {_kind(item)}")
        _no_unknown_keys(ctx, item, spath, ("session_id", "conversation_time", "messages"))
        sid = _get(ctx, item, "session_id", spath, str, text=True)
        if any(s.session_id == sid for s in sessions):
            raise ctx.fail(_at(spath, "session_id"), f"duplicate session id {sid!r}")
        sessions.append(_generic_session(ctx, item, spath, sid, "conversation_time"))
    return Conversation(cid, tuple(sessions), ctx.source, "sessions")


def _parse_longmemeval(ctx: _Ctx, obj: dict, path: str) -> Conversation:
    qid = _get(ctx, obj, "question_id", path, str, text=True)
    ids = _str_list(ctx, obj, "haystack_session_ids", path)
    dates = _get(ctx, obj, "haystack_dates", path, list)
    haystack = _get(ctx, obj, "haystack_sessions", path, list)
    if not len(ids) == len(dates) == len(haystack):
        raise ctx.fail(
            path,
            f"haystack lists differ in length: haystack_sessions {len(haystack)}, "
            f"haystack_session_ids {len(ids)}, haystack_dates {len(dates)}",
        )
    sessions: list[Session] = []
    evidence_turns: list[str] = []
    for si, (sid, date, turns) in enumerate(zip(ids, dates, haystack, strict=True)):
        spath, id_path, date_path = (
            _at(_at(path, k), si) for k in ("haystack_sessions", "haystack_session_ids", "haystack_dates")
        )
        if not sid.strip() or any(s.session_id == sid for s in sessions):
            raise ctx.fail(id_path, f"duplicate session id {sid!r}" if sid.strip() else "must not be empty")
        if not isinstance(turns, list):
            raise ctx.fail(spath, f"a session must be an array of messages, got {_kind(turns)}")
        if date is None:
            raise ctx.fail(date_path, "date is null")
        messages: list[Message] = []
        for ti, turn in enumerate(turns):
            message = _message(ctx, turn, _at(spath, ti), {"session_id": sid, "turn": str(ti)})
            has_answer = turn.get("has_answer", False)
            if not isinstance(has_answer, bool):
                raise ctx.fail(_at(_at(spath, ti), "has_answer"), f"must be true or false, got {_kind(has_answer)}")
            if has_answer:
                message.tags["has_answer"] = "true"
                evidence_turns.append(f"{sid}:{ti}")
            messages.append(message)
        sessions.append(Session(sid, _date(ctx, date, date_path), tuple(messages)))
    if "answer" not in obj:
        raise ctx.fail(_at(path, "answer"), "missing (required key)")
    question = Question(
        question_id=qid,
        question=_get(ctx, obj, "question", path, str, text=True),
        answer=_answer(ctx, obj["answer"], _at(path, "answer")),
        category=_get(ctx, obj, "question_type", path, str, text=True),
        question_date=_date(ctx, obj.get("question_date"), _at(path, "question_date")),
        evidence=tuple(_str_list(ctx, obj, "answer_session_ids", path)),
        evidence_turns=tuple(evidence_turns),
    )
    return Conversation(qid, tuple(sessions), ctx.source, "longmemeval", (question,))


def _dia_ids(raw: list[str]) -> tuple[str, ...]:
    # Upstream evidence sometimes packs several ids in one string ("D8:6; D9:17"): split, keep order, dedupe.
    pieces = (p for item in raw for p in re.split(r"[;,\s]+", item) if p)
    return tuple(dict.fromkeys(pieces))


def _locomo_session(ctx: _Ctx, conv: dict, cpath: str, key: str, speakers: dict[str, str]) -> Session:
    spath = _at(cpath, key)
    turns = _get(ctx, conv, key, cpath, list)
    if f"{key}_date_time" not in conv:
        raise ctx.fail(_at(cpath, f"{key}_date_time"), "missing (required key: the session's date)")
    when = _date(ctx, conv[f"{key}_date_time"], _at(cpath, f"{key}_date_time"))
    messages: list[Message] = []
    for ti, turn in enumerate(turns):
        tpath = _at(spath, ti)
        if not isinstance(turn, dict):
            raise ctx.fail(tpath, f"a turn must be an object, got {_kind(turn)}")
        speaker = _get(ctx, turn, "speaker", tpath, str, text=True)
        if speaker not in speakers:
            expected = " or ".join(map(repr, speakers))
            raise ctx.fail(_at(tpath, "speaker"), f"unknown speaker {speaker!r} (expected {expected})")
        dia_id = _get(ctx, turn, "dia_id", tpath, str, text=True)
        text = _get(ctx, turn, "text", tpath, str)
        caption = (_get(ctx, turn, "blip_caption", tpath, str, required=False) or "").strip()
        if caption:
            text = f"{text} [shares a photo: {caption}]" if text.strip() else f"[shares a photo: {caption}]"
        tags = {"session_id": key, "turn": str(ti), "dia_id": dia_id, "speaker": speaker}
        content = _content(ctx, text, _at(tpath, "text"))
        messages.append(Message(speakers[speaker], content, tags))  # type: ignore[arg-type]
    return Session(key, when, tuple(messages))


def _parse_locomo(ctx: _Ctx, obj: dict, path: str) -> Conversation:
    sample_id = _get(ctx, obj, "sample_id", path, str, text=True)
    cpath = _at(path, "conversation")
    conv = _get(ctx, obj, "conversation", path, dict)
    speaker_a = _get(ctx, conv, "speaker_a", cpath, str, text=True)
    speaker_b = _get(ctx, conv, "speaker_b", cpath, str, text=True)
    if speaker_a == speaker_b:
        raise ctx.fail(_at(cpath, "speaker_b"), f"same name as speaker_a ({speaker_b!r}): roles would be ambiguous")
    speakers = {speaker_a: "user", speaker_b: "assistant"}
    # session_<N>_date_time keys without a session_<N> occur upstream (conv-26); they hold no conversation text.
    numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    if not numbers:
        raise ctx.fail(cpath, "no session_<N> keys")
    sessions = tuple(_locomo_session(ctx, conv, cpath, f"session_{n}", speakers) for n in numbers)
    questions: list[Question] = []
    for qi, qa in enumerate(_get(ctx, obj, "qa", path, list, required=False) or []):
        qpath = _at(_at(path, "qa"), qi)
        if not isinstance(qa, dict):
            raise ctx.fail(qpath, f"a question must be an object, got {_kind(qa)}")
        # Category 5 (adversarial) carries adversarial_answer instead of answer.
        key = "answer" if qa.get("answer") is not None else "adversarial_answer"
        if key not in qa:
            raise ctx.fail(_at(qpath, "answer"), "missing (required key; 'adversarial_answer' also accepted)")
        questions.append(
            Question(
                question_id=f"{sample_id}:{qi}",
                question=_get(ctx, qa, "question", qpath, str, text=True),
                answer=_answer(ctx, qa[key], _at(qpath, key)),
                category=str(_get(ctx, qa, "category", qpath, int)),
                question_date=None,
                evidence=_dia_ids(_str_list(ctx, qa, "evidence", qpath)),
            )
        )
    return Conversation(sample_id, sessions, ctx.source, "locomo", tuple(questions))


def _parse_one(ctx: _Ctx, obj: Any, path: str, default_id: str) -> Conversation:
    if not isinstance(obj, dict):
        raise ctx.fail(path, f"expected a conversation object, got {_kind(obj)}")
    if "haystack_sessions" in obj:
        return _parse_longmemeval(ctx, obj, path)
    if "conversation" in obj:
        return _parse_locomo(ctx, obj, path)
    if "messages" in obj and "sessions" in obj:
        raise ctx.fail(path, "has both 'messages' and 'sessions'; use one")
    if "messages" in obj or "sessions" in obj:
        return _parse_generic(ctx, obj, path, default_id)
    raise ctx.fail(
        path,
        f"unknown format (keys: {', '.join(map(repr, list(obj)[:8])) or 'none'}); accepted: 'messages' "
        "{messages: [...]}, 'sessions' {sessions: [...]}, 'longmemeval' (records with haystack_sessions), "
        "'locomo' (samples with conversation)",
    )


def parse_conversation_data(data: Any, source: str = "<memory>") -> list[Conversation]:
    """Normalise already-parsed JSON (one conversation object or an array of them) into conversations.

    ``source`` names the input in errors and in :attr:`Conversation.source`. Conversations without an id of their
    own are named after the source file's stem (``<stem>-<n>``, 1-based, inside an array; ``conversation`` for
    ``"<memory>"``). Conversation ids must be unique within one input.
    """
    ctx = _Ctx(source)
    stem = Path(source).stem if source != "<memory>" else "conversation"
    if isinstance(data, list):
        if not data:
            raise ctx.fail("", "empty array: no conversations")
        conversations = [_parse_one(ctx, item, f"[{i}]", f"{stem}-{i + 1}") for i, item in enumerate(data)]
    else:
        conversations = [_parse_one(ctx, data, "", stem)]
    for i, conv in enumerate(conversations):
        if any(c.conversation_id == conv.conversation_id for c in conversations[:i]):
            raise ctx.fail(f"[{i}]", f"duplicate conversation id {conv.conversation_id!r}")
    return conversations


def load_conversations(path: str | os.PathLike[str]) -> list[Conversation]:
    """Read a UTF-8 JSON file and return its conversations (see :func:`parse_conversation_data`).

    Raises :class:`InputError` for an unreadable file, malformed JSON (with line and column), an unknown format
    or any invalid field.
    """
    source = os.fspath(path)
    try:
        data = json.loads(Path(source).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{source}: cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: line {exc.lineno} column {exc.colno}: malformed JSON: {exc.msg}") from None
    return parse_conversation_data(data, source)
