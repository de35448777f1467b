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

This module picks the format and reads files; the pieces are beside it: :mod:`.model` (the dataclasses),
:mod:`.json_text` (JSON text with every failure named), :mod:`.input_checks` (the field types and the error
paths every format shares), one module per format (:mod:`.generic_input`, :mod:`.longmemeval_input`,
:mod:`.locomo_input`) and :mod:`.titles`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..dates import to_rfc3339
from ..errors import InputError
from .generic_input import build_generic
from .input_checks import Input, check_tree, json_kind
from .json_text import MAX_DEPTH, parse_json_text
from .locomo_input import build_locomo, normalise_dia_id
from .longmemeval_input import build_longmemeval
from .model import (
    FORMATS,
    LOCOMO_CATEGORIES,
    ROLE_ALIASES,
    Conversation,
    Message,
    PositionedMessage,
    Question,
    Session,
    iter_messages,
)
from .titles import valid_title

__all__ = [
    "FORMATS",
    "LOCOMO_CATEGORIES",
    "MAX_DEPTH",
    "ROLE_ALIASES",
    "Conversation",
    "Message",
    "PositionedMessage",
    "Question",
    "Session",
    "iter_messages",
    "load_conversations",
    "normalise_dia_id",
    "parse_conversation_data",
    "parse_json_text",
    "to_rfc3339",
    "valid_title",
]


#: Builds one conversation from a JSON object: (input, object, its JSON path, the id it takes when it has none).
Builder = Callable[[Input, Any, str, str], Conversation]
# The key that identifies each format, in the order they are tried.
_BUILDERS: dict[str, Builder] = {
    "haystack_sessions": build_longmemeval,
    "conversation": build_locomo,
    "messages": build_generic,
    "sessions": build_generic,
}


def _parse_one(inp: Input, obj: Any, path: str, default_id: str) -> Conversation:
    if not isinstance(obj, dict):
        raise inp.fail(path, f"expected a conversation object, got {json_kind(obj)}")
    build = next((builder for key, builder in _BUILDERS.items() if key in obj), None)
    if build is None:
        raise inp.fail(
            path,
            f"unknown format (keys: {', '.join(map(repr, list(obj)[:8])) or 'none'}); accepted: 'messages' "
            "{messages: [...]}, 'sessions' {sessions: [...]}, 'longmemeval' (records with haystack_sessions), "
            "'locomo' (samples with conversation)",
        )
    return build(inp, obj, path, default_id)


def parse_conversation_data(data: Any, source: str = "<memory>") -> list[Conversation]:
    """Normalise already-parsed JSON (one conversation object or an array of them) into conversations.

    ``source`` names the input in errors and in :attr:`Conversation.source`. Conversations without an id of their
    own are named after the source file's stem (``<stem>-<n>``, 1-based, inside an array; ``conversation`` for
    ``"<memory>"``). Conversation ids must be unique within one input.
    """
    inp = Input(source)
    check_tree(inp, data)
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
