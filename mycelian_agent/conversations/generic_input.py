"""The generic input formats: ``messages`` (one session) and ``sessions``. Strict: unknown keys are errors (they are
usually typos), and user tags may not take the names the loader and the agent set."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import field_validator

from ..limits import TAG_KEY_MAX_CHARS, TAG_VALUE_MAX_CHARS, TAGS_MAX_KEYS
from .input_checks import Content, Date, Input, Name, Problem, RoleIn, Strict, Text, at, duplicate, rule
from .model import Conversation, Kind, Message, Session

__all__ = ["build_generic"]

# Tags the loader or the agent set; user-supplied tags may not override them.
_RESERVED_TAGS = frozenset({"session_id", "turn", "role", "thread", "msg", "part"})
# Room left for a message's own tags: the loader sets session_id and turn, the agent role, thread, msg, part and
# (for a named speaker) speaker.
_USER_TAGS_MAX = TAGS_MAX_KEYS - 7


class _MessageIn(Strict):
    role: RoleIn
    content: Content
    name: Name | None = None
    tags: dict[str, str] | None = None

    @field_validator("tags")
    @classmethod
    def _user_tags(cls, tags: dict[str, str] | None) -> dict[str, str] | None:
        if len(tags or {}) > _USER_TAGS_MAX:
            raise ValueError(
                f"{len(tags or {})} tags; at most {_USER_TAGS_MAX} (the server keeps {TAGS_MAX_KEYS} per "
                f"entry, {TAGS_MAX_KEYS - _USER_TAGS_MAX} of them set by the loader and the agent)"
            )
        for key, value in (tags or {}).items():
            if not key.strip():
                raise Problem("tag names must not be empty", key)
            if len(key) > TAG_KEY_MAX_CHARS:
                raise Problem(f"tag name of {len(key)} characters; at most {TAG_KEY_MAX_CHARS}", key)
            if len(value) > TAG_VALUE_MAX_CHARS:
                raise Problem(f"tag value of {len(value)} characters; at most {TAG_VALUE_MAX_CHARS}", key)
            if key in _RESERVED_TAGS:
                reserved = ", ".join(sorted(_RESERVED_TAGS))
                raise Problem(f"reserved tag name (set by the loader or the agent: {reserved})", key)
        return tags


_Messages = Annotated[list[_MessageIn], rule(len, "must hold at least one message")]


class _MessagesIn(Strict):
    conversation_id: Text | None = None
    conversation_time: Date | None = None
    messages: _Messages


class _SessionIn(Strict):
    session_id: Text
    conversation_time: Date | None = None
    messages: _Messages


class _SessionsIn(Strict):
    conversation_id: Text | None = None
    sessions: Annotated[list[_SessionIn], rule(len, "must hold at least one session")]


def build_generic(inp: Input, obj: Any, path: str, default_id: str) -> Conversation:
    conv: _MessagesIn | _SessionsIn
    if "sessions" not in obj:
        conv = inp.check(_MessagesIn.model_validate, obj, path)
        runs = [("session_1", conv.conversation_time, conv.messages)]
    elif "messages" in obj:
        raise inp.fail(path, "has both 'messages' and 'sessions'; use one")
    else:
        conv = inp.check(_SessionsIn.model_validate, obj, path)
        runs = [(s.session_id, s.conversation_time, s.messages) for s in conv.sessions]
        if (i := duplicate([sid for sid, _, _ in runs])) is not None:
            raise inp.fail(f"{at(path, 'sessions')}[{i}].session_id", f"duplicate session id {runs[i][0]!r}")
    sessions = tuple(
        Session(
            sid,
            time,
            tuple(
                Message(m.role, m.content, {**(m.tags or {}), "session_id": sid, "turn": str(i)}, m.name)
                for i, m in enumerate(messages)
            ),
        )
        for sid, time, messages in runs
    )
    kind: Kind = "sessions" if isinstance(conv, _SessionsIn) else "messages"
    return Conversation(conv.conversation_id or default_id, sessions, inp.source, kind)
