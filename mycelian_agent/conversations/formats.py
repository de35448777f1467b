"""Conversation input formats, normalised into :class:`Conversation` / :class:`Session` / :class:`Message`.

Accepted inputs (auto-detected by their keys; a JSON array may hold several):

- ``messages``: ``{"conversation_id"?, "conversation_time"?, "messages": [{"role", "content", "name"?, "tags"?}]}``
  (one session; ``name`` is who spoke, e.g. ``"Caroline"``: non-empty, at most 100 characters, one line).
- ``sessions``: ``{"conversation_id"?, "sessions": [{"session_id", "conversation_time"?, "messages": [...]}]}``.
- ``longmemeval``: LongMemEval question records — one :class:`Conversation` per question.
- ``locomo``: LoCoMo samples — ``speaker_a`` becomes ``user``, ``speaker_b`` becomes ``assistant``; each message keeps
  its speaker's name as :attr:`Message.name`.

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

Parsing is two steps: pydantic models (``_...In``) check the JSON's shape and types, then one builder per format
checks what spans fields (unique ids, known speakers) and makes the frozen dataclasses the rest of the package uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic import field_validator, model_validator

from mycelian_agent.limits import TAG_KEY_MAX_CHARS, TAG_VALUE_MAX_CHARS, TAGS_MAX_KEYS, name_problem, unicode_problem
from mycelian_agent.dates import to_rfc3339
from mycelian_agent.errors import InputError

__all__ = [
    "FORMATS", "LOCOMO_CATEGORIES", "ROLE_ALIASES", "normalise_dia_id", "Conversation", "Message",
    "MAX_DEPTH", "PositionedMessage", "Question", "Session", "iter_messages", "load_conversations",
    "parse_conversation_data", "parse_json_text",
    "to_rfc3339", "valid_title",
]

ROLE_ALIASES = {"user": "user", "assistant": "assistant", "human": "user", "ai": "assistant"}
_ROLES_ACCEPTED = "accepted: user, assistant; also human → user, ai → assistant"
FORMATS = ("messages", "sessions", "longmemeval", "locomo")
LOCOMO_CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
# Tags the loader or the agent set; user-supplied tags may not override them.
_RESERVED_TAGS = frozenset({"session_id", "turn", "role", "thread", "msg", "part"})
# Room left for a message's own tags: the loader sets session_id and turn, the agent role, thread, msg, part and
# (for a named speaker) speaker.
_USER_TAGS_MAX = TAGS_MAX_KEYS - 7

Role = Literal["user", "assistant"]
Kind = Literal["messages", "sessions", "longmemeval", "locomo"]
_T = TypeVar("_T")


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


# ------------------------------------------------------------------------------------------- input models


class _Problem(ValueError):
    """A validator's finding about ``path`` below the value it checks (pydantic only knows the value's own place)."""

    def __init__(self, problem: str, *path: str | int) -> None:
        super().__init__(problem)
        self.path = path


def _kind(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {str: "a string", list: "an array", dict: "an object"}
    return next((n for t, n in names.items() if isinstance(value, t)), "a number")


def _rule(ok: Callable[[Any], Any], problem: str) -> AfterValidator:
    def check(value: _T) -> _T:
        if not ok(value):
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _role(value: Any) -> Any:
    if not isinstance(value, str) or value not in ROLE_ALIASES:
        raise ValueError(f"unknown role {value!r} ({_ROLES_ACCEPTED})")
    return ROLE_ALIASES[value]


def _date(text: str) -> str:
    try:
        return to_rfc3339(text)
    except InputError as exc:
        raise ValueError(str(exc)) from None


def _name(value: Any) -> Any:
    if isinstance(value, str) and (problem := name_problem(value)):
        raise ValueError(problem)
    return value.strip() if isinstance(value, str) else value


def _answer(value: Any) -> Any:
    # Some benchmark answers are numbers; they are compared as text.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be a string or a number, got {_kind(value)}")
    return str(value)


_Text = Annotated[str, _rule(str.strip, "must not be empty")]
_Content = Annotated[str, _rule(str.strip, "content is empty or whitespace only")]
_Name = Annotated[str, AfterValidator(_name)]
_Role = Annotated[Role, BeforeValidator(_role)]
_Date = Annotated[str, AfterValidator(_date)]
_Answer = Annotated[str, BeforeValidator(_answer)]


class _Strict(BaseModel):
    """Generic formats: unknown keys are errors (usually typos)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # Reported here rather than by extra="forbid" so that the message can list the accepted keys.
        for key in data if isinstance(data, dict) else ():
            if key not in cls.model_fields:
                raise _Problem(f"unknown key (accepted: {', '.join(cls.model_fields)})", key)
        return data


class _Lenient(BaseModel):
    """Benchmark formats: keys they do not use are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


class _MessageIn(_Strict):
    role: _Role
    content: _Content
    name: _Name | None = None
    tags: dict[str, str] | None = None

    @field_validator("tags")
    @classmethod
    def _user_tags(cls, tags: dict[str, str] | None) -> dict[str, str] | None:
        if len(tags or {}) > _USER_TAGS_MAX:
            raise ValueError(f"{len(tags or {})} tags; at most {_USER_TAGS_MAX} (the server keeps {TAGS_MAX_KEYS} per "
                             f"entry, {TAGS_MAX_KEYS - _USER_TAGS_MAX} of them set by the loader and the agent)")
        for key, value in (tags or {}).items():
            if not key.strip():
                raise _Problem("tag names must not be empty", key)
            if len(key) > TAG_KEY_MAX_CHARS:
                raise _Problem(f"tag name of {len(key)} characters; at most {TAG_KEY_MAX_CHARS}", key)
            if len(value) > TAG_VALUE_MAX_CHARS:
                raise _Problem(f"tag value of {len(value)} characters; at most {TAG_VALUE_MAX_CHARS}", key)
            if key in _RESERVED_TAGS:
                reserved = ", ".join(sorted(_RESERVED_TAGS))
                raise _Problem(f"reserved tag name (set by the loader or the agent: {reserved})", key)
        return tags


_Messages = Annotated[list[_MessageIn], _rule(len, "must hold at least one message")]


class _MessagesIn(_Strict):
    conversation_id: _Text | None = None
    conversation_time: _Date | None = None
    messages: _Messages


class _SessionIn(_Strict):
    session_id: _Text
    conversation_time: _Date | None = None
    messages: _Messages


class _SessionsIn(_Strict):
    conversation_id: _Text | None = None
    sessions: Annotated[list[_SessionIn], _rule(len, "must hold at least one session")]


class _LongMemEvalTurn(_Lenient):
    role: _Role
    content: _Content
    has_answer: bool = False


class _LongMemEvalIn(_Lenient):
    question_id: _Text
    question_type: _Text
    question: _Text
    answer: _Answer
    question_date: _Date | None = None
    haystack_session_ids: list[_Text]
    haystack_dates: list[_Date]
    haystack_sessions: list[list[_LongMemEvalTurn]]
    answer_session_ids: list[str]


class _LocomoTurn(_Lenient):
    speaker: _Text
    dia_id: _Text
    text: str
    blip_caption: str | None = None


class _LocomoQuestion(_Lenient):
    question: _Text
    answer: _Answer | None = None
    # Category 5 (adversarial) carries adversarial_answer instead of answer.
    adversarial_answer: _Answer | None = None
    category: int
    evidence: list[str]


class _LocomoSpeakers(_Lenient):
    # The sessions are the other keys (session_<N>, session_<N>_date_time), validated one by one when building.
    model_config = ConfigDict(extra="allow")

    speaker_a: _Text
    speaker_b: _Text


class _LocomoIn(_Lenient):
    sample_id: _Text
    conversation: _LocomoSpeakers
    qa: list[_LocomoQuestion] | None = None


_LOCOMO_TURNS = TypeAdapter(list[_LocomoTurn])
_LOCOMO_DATE = TypeAdapter(_Date | None, config=ConfigDict(strict=True))

# ------------------------------------------------------------------------------------------------- building

_EXPECTED = {
    "string_type": "a string", "list_type": "an array", "dict_type": "an object", "model_type": "an object",
    "int_type": "an integer", "bool_type": "true or false",
}


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class _Input:
    """The input being read: ``source`` names it in errors and in :attr:`Conversation.source`."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> InputError:
        return InputError(f"{self.source}: {path or 'top level'}: {problem}")

    def check(self, validate: Callable[[Any], _T], data: Any, path: str) -> _T:
        """``validate(data)``; its first error raised as ``InputError("<source>: <path><loc>: <problem>")``."""
        try:
            return validate(data)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
        loc, cause = error["loc"], (error.get("ctx") or {}).get("error")
        if isinstance(cause, ValueError):  # raised by a validator of this module, its message written for users
            problem = str(cause)
            loc += getattr(cause, "path", ())
        elif error["type"] in _EXPECTED:
            problem = f"must be {_EXPECTED[error['type']]}, got {_kind(error['input'])}"
        else:
            problem = "missing (required key)" if error["type"] == "missing" else error["msg"]
        for key in loc:
            path = _at(path, key)
        raise self.fail(path, problem)


def _duplicate(ids: Sequence[str]) -> int | None:
    """Index of the first id that repeats an earlier one."""
    return next((i for i, sid in enumerate(ids) if sid in ids[:i]), None)


def _generic(inp: _Input, obj: Any, path: str, default_id: str) -> Conversation:
    conv: _MessagesIn | _SessionsIn
    if "sessions" not in obj:
        conv = inp.check(_MessagesIn.model_validate, obj, path)
        runs = [("session_1", conv.conversation_time, conv.messages)]
    elif "messages" in obj:
        raise inp.fail(path, "has both 'messages' and 'sessions'; use one")
    else:
        conv = inp.check(_SessionsIn.model_validate, obj, path)
        runs = [(s.session_id, s.conversation_time, s.messages) for s in conv.sessions]
        if (i := _duplicate([sid for sid, _, _ in runs])) is not None:
            raise inp.fail(f"{_at(path, 'sessions')}[{i}].session_id", f"duplicate session id {runs[i][0]!r}")
    sessions = tuple(
        Session(sid, time, tuple(
            Message(m.role, m.content, {**(m.tags or {}), "session_id": sid, "turn": str(i)}, m.name)
            for i, m in enumerate(messages)
        ))
        for sid, time, messages in runs
    )
    kind: Kind = "sessions" if isinstance(conv, _SessionsIn) else "messages"
    return Conversation(conv.conversation_id or default_id, sessions, inp.source, kind)


def _longmemeval(inp: _Input, obj: Any, path: str, default_id: str) -> Conversation:
    record = inp.check(_LongMemEvalIn.model_validate, obj, path)
    ids, dates, haystack = record.haystack_session_ids, record.haystack_dates, record.haystack_sessions
    if not len(ids) == len(dates) == len(haystack):
        raise inp.fail(path, f"haystack lists differ in length: haystack_sessions {len(haystack)}, "
                             f"haystack_session_ids {len(ids)}, haystack_dates {len(dates)}")
    if (i := _duplicate(ids)) is not None:
        raise inp.fail(f"{_at(path, 'haystack_session_ids')}[{i}]", f"duplicate session id {ids[i]!r}")
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
    question = Question(record.question_id, record.question, record.answer, record.question_type,
                        record.question_date, tuple(record.answer_session_ids), tuple(evidence_turns))
    return Conversation(record.question_id, tuple(sessions), inp.source, "longmemeval", (question,))


def _locomo_session(inp: _Input, conv: _LocomoSpeakers, path: str, key: str) -> Session:
    """Session ``key`` of a LoCoMo conversation (at ``path``): its turns and its ``<key>_date_time``."""
    extra = conv.model_extra or {}
    if f"{key}_date_time" not in extra:
        raise inp.fail(f"{path}.{key}_date_time", "missing (required key: the session's date)")
    when = inp.check(_LOCOMO_DATE.validate_python, extra[f"{key}_date_time"], f"{path}.{key}_date_time")
    speakers = {conv.speaker_a: "user", conv.speaker_b: "assistant"}
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
        messages.append(Message(role, text, tags, _locomo_name(turn.speaker)))  # type: ignore[arg-type]
    return Session(key, when, tuple(messages))


def _locomo_name(speaker: str) -> str | None:
    """The speaker's name as a message name; None when it is not one (a benchmark file is not refused for it)."""
    return None if name_problem(speaker) else speaker.strip()


def _locomo(inp: _Input, obj: Any, path: str, default_id: str) -> Conversation:
    sample = inp.check(_LocomoIn.model_validate, obj, path)
    conv, cpath = sample.conversation, _at(path, "conversation")
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
            raise inp.fail(f"{_at(path, 'qa')}[{qi}].answer",
                           "missing (required key; 'adversarial_answer' also accepted)")
        # Upstream evidence sometimes packs several ids in one string ("D8:6; D9:17"): split, keep order, dedupe.
        evidence = tuple(dict.fromkeys(normalise_dia_id(p) for item in qa.evidence
                                       for p in re.split(r"[;,\s]+", item) if p))
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


# The key that identifies each format, in the order they are tried.
_BUILDERS = {"haystack_sessions": _longmemeval, "conversation": _locomo, "messages": _generic, "sessions": _generic}


def _parse_one(inp: _Input, obj: Any, path: str, default_id: str) -> Conversation:
    if not isinstance(obj, dict):
        raise inp.fail(path, f"expected a conversation object, got {_kind(obj)}")
    build = next((builder for key, builder in _BUILDERS.items() if key in obj), None)
    if build is None:
        raise inp.fail(
            path,
            f"unknown format (keys: {', '.join(map(repr, list(obj)[:8])) or 'none'}); accepted: 'messages' "
            "{messages: [...]}, 'sessions' {sessions: [...]}, 'longmemeval' (records with haystack_sessions), "
            "'locomo' (samples with conversation)",
        )
    return build(inp, obj, path, default_id)


#: JSON nested deeper than this is refused before it is parsed into conversations (real inputs need about 6 levels).
MAX_DEPTH = 64


def _check_tree(inp: _Input, data: Any) -> None:
    """Refuse what no format can store, wherever it is: nesting deeper than :data:`MAX_DEPTH` and strings (keys
    included) that are not valid Unicode. Iterative, so that no input can exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if problem := unicode_problem(value):
                raise inp.fail(path, problem)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise inp.fail(path, f"nested more than {MAX_DEPTH} levels deep (no accepted format nests that deep)")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in reversed(list(items)):
            if isinstance(key, str) and (problem := unicode_problem(key)):
                raise inp.fail(path, f"key {key.encode('utf-8', 'backslashreplace').decode()!r}: {problem}")
            stack.append((item, _at(path, key), depth + 1))


def parse_conversation_data(data: Any, source: str = "<memory>") -> list[Conversation]:
    """Normalise already-parsed JSON (one conversation object or an array of them) into conversations.

    ``source`` names the input in errors and in :attr:`Conversation.source`. Conversations without an id of their
    own are named after the source file's stem (``<stem>-<n>``, 1-based, inside an array; ``conversation`` for
    ``"<memory>"``). Conversation ids must be unique within one input.
    """
    inp = _Input(source)
    _check_tree(inp, data)
    stem = Path(source).stem if source != "<memory>" else "conversation"
    if isinstance(data, list):
        if not data:
            raise inp.fail("", "empty array: no conversations")
        conversations = [_parse_one(inp, item, f"[{i}]", f"{stem}-{i + 1}") for i, item in enumerate(data)]
    else:
        conversations = [_parse_one(inp, data, "", stem)]
    for i, conv in enumerate(conversations):
        if any(c.conversation_id == conv.conversation_id for c in conversations[:i]):
            raise inp.fail(f"[{i}]", f"duplicate conversation id {conv.conversation_id!r}")
    return conversations


def load_conversations(path: str | os.PathLike[str]) -> list[Conversation]:
    """Read a UTF-8 JSON file and return its conversations (see :func:`parse_conversation_data`).

    Raises :class:`InputError` for an unreadable file, malformed JSON (with line and column), an unknown format
    or any invalid field.
    """
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{source}: cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    return parse_conversation_data(parse_json_text(text, source), source)


def _line_col(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line} column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


def _too_deep_at(text: str, limit: int) -> int:
    """Offset of the first bracket nested deeper than ``limit`` (outside strings), or 0."""
    depth = 0
    # Strings are skipped whole by the regular expression (a character loop in Python took ~1 s for 5 MB of text).
    for match in _JSON_TOKENS.finditer(text):
        char = match.group()[0]
        if char in "[{":
            depth += 1
            if depth > limit:
                return match.start()
        elif char in "]}":
            depth -= 1
    return 0


def parse_json_text(text: str, source: str = "<memory>") -> Any:
    """``json.loads(text)`` whose every failure is an :class:`InputError` naming ``source`` and the position:
    malformed JSON, nesting deeper than :data:`MAX_DEPTH` and numbers too long to read included."""
    if (deep := _too_deep_at(text, MAX_DEPTH)):
        raise InputError(f"{source}: {_line_col(text, deep)}: JSON nested more than {MAX_DEPTH} levels deep "
                         "(no accepted format nests that deep)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: line {exc.lineno} column {exc.colno}: malformed JSON: {exc.msg}") from None
    except RecursionError:  # not reached after the depth check; kept so that no input escapes as a traceback
        raise InputError(f"{source}: JSON nested too deep to read") from None
    except ValueError:  # a number longer than Python reads (sys.get_int_max_str_digits)
        match = re.search(r"\d{1000,}", text)
        where = f"{_line_col(text, match.start())}: " if match else ""
        raise InputError(f"{source}: {where}number too long to read (more than {sys.get_int_max_str_digits()} "
                         "digits); write it as a string if it is an id") from None
