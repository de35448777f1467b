"""Any user id or namespace label a user's system has, as a Mycelian memory title, and back.

A memory title is 1-50 ASCII letters, digits or hyphens (upstream's rule), but user ids are UUIDs, e-mail
addresses, ``user_1`` or names with accents. :func:`memory_title` maps a user, and :func:`namespace_memory_title` a
LangGraph namespace, to a title:

- a user that already is a title (``alice``, ``u-1042``) is its own title, so databases written before keep their
  memories; so is a namespace whose labels are, joined with ``-`` (``("memories", "alice")`` -> ``memories-alice``);
- anything else is encoded as ``<readable part>--<16 base32 digits of the SHA-256 of its labels' JSON>``
  (``alice@example.com`` -> ``alice-example-com--...``). A title of that shape given as a plain user is encoded too,
  so a plain title is never mistaken for an encoded one and two ids never share a memory.

The title of an encoded memory cannot be read back, so the memory's description keeps the original
(:func:`user_description`, :func:`namespace_description`; :func:`described_labels` reads either back) and the read
side shows it. The rare hash collision is caught there: a memory whose description names other labels is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence

from ..errors import InputError
from ..limits import DESCRIPTION_MAX_CHARS, TITLE_MAX_CHARS, unicode_problem

__all__ = [
    "USER_MAX_CHARS",
    "check_label",
    "described_labels",
    "is_encoded",
    "memory_title",
    "namespace_description",
    "namespace_memory_title",
    "user_description",
]

#: Characters of a user id or namespace label (an e-mail address has at most 254).
USER_MAX_CHARS = 255

_TITLE_RE = re.compile(r"[A-Za-z0-9-]{1,50}")
_DIGITS = 16  # base32 digits: 80 bits of SHA-256
_ENCODED_RE = re.compile(rf"[A-Za-z0-9-]*--[a-z2-7]{{{_DIGITS}}}")
_SLUG_MAX = TITLE_MAX_CHARS - 2 - _DIGITS
#: Description prefixes that keep a memory's labels: a user's (a JSON string) and a namespace's (a JSON list).
_USER_MARK = "long-term memory of user "
_NAMESPACE_MARK = "LangGraph store namespace "


def check_label(label: object, what: str = "user") -> str:
    """``label`` when it can name a memory (a string of 1 to :data:`USER_MAX_CHARS` characters, not all blank, that
    can be stored: no NUL, no lone surrogate), else an :class:`InputError` naming it and the rule."""
    if not isinstance(label, str):
        raise InputError(f"{what} must be a string, got {type(label).__name__} {label!r:.80}")
    if not label.strip():
        raise InputError(
            f"{what} {label!r} is empty: give the id your system uses (e.g. 'alice', a UUID or an e-mail address)"
        )
    if len(label) > USER_MAX_CHARS:
        raise InputError(f"{what} {label[:40]!r}... has {len(label)} characters; at most {USER_MAX_CHARS}")
    if problem := unicode_problem(label):
        raise InputError(f"{what} {label!r}: {problem}")
    return label


def is_encoded(title: str) -> bool:
    """Whether ``title`` has the shape of an encoded one (its labels are in the memory's description)."""
    return _ENCODED_RE.fullmatch(title) is not None


def _encoded(labels: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps(list(labels), ensure_ascii=False).encode("utf-8")).digest()
    code = base64.b32encode(digest).decode("ascii").lower()[:_DIGITS]
    ascii_text = unicodedata.normalize("NFKD", "-".join(labels)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", ascii_text).strip("-")[:_SLUG_MAX].strip("-")
    return f"{slug or 'id'}--{code}"


def memory_title(user: object) -> str:
    """The title of ``user``'s memory (see the module docstring); :class:`InputError` for a user that cannot be
    one (see :func:`check_label`, or too long to keep in a description once its control characters are escaped)."""
    user = check_label(user)
    if _TITLE_RE.fullmatch(user) and not is_encoded(user):
        return user
    if len(user_description(user)) > DESCRIPTION_MAX_CHARS:  # escaped control characters, 6 characters each
        raise InputError(
            f"user {user[:40]!r}... is too long to keep in a memory's description (at most "
            f"{DESCRIPTION_MAX_CHARS} characters as JSON)"
        )
    return _encoded([user])


def namespace_memory_title(namespace: Sequence[str]) -> str:
    """The title of the memory holding ``namespace`` (checked labels, at least one): the labels joined with ``-``
    when they are titles and the joined one is too, else encoded. A one-label namespace is that user's memory."""
    if len(namespace) == 1:
        return memory_title(namespace[0])
    joined = "-".join(namespace)
    if (
        all(_TITLE_RE.fullmatch(label) for label in namespace)
        and _TITLE_RE.fullmatch(joined)
        and not is_encoded(joined)
    ):
        return joined
    return _encoded(namespace)


def user_description(user: str) -> str:
    """The description of ``user``'s memory: it keeps the user as given (an encoded title cannot be read back)."""
    return _USER_MARK + json.dumps(user, ensure_ascii=False)


def namespace_description(namespace: Sequence[str]) -> str:
    """The description of a memory the LangGraph store creates for ``namespace``: it keeps the labels."""
    return _NAMESPACE_MARK + json.dumps(list(namespace), ensure_ascii=False)


def described_labels(description: str) -> tuple[str, ...] | None:
    """The labels a memory's description keeps (a user is one label), or None when it keeps none (a memory made by
    hand, or before ids were encoded: its user is its title)."""
    for mark in (_USER_MARK, _NAMESPACE_MARK):
        if description.startswith(mark):
            try:
                kept = json.loads(description[len(mark) :])
            except json.JSONDecodeError:
                return None
            kept = [kept] if mark == _USER_MARK else kept
            if isinstance(kept, list) and kept and all(isinstance(label, str) for label in kept):
                return tuple(kept)
    return None
