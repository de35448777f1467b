"""What every input reader shares: the pydantic field types and base models that check an input's shape, and
:class:`Input`, which turns the first problem found into an :class:`InputError` naming the file, the JSON path and
the problem."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from ..dates import to_rfc3339
from ..errors import InputError
from ..limits import name_problem, unicode_problem
from .json_text import MAX_DEPTH
from .model import ROLE_ALIASES, Role

__all__ = [
    "Answer",
    "Content",
    "Date",
    "Input",
    "Lenient",
    "Name",
    "Problem",
    "RoleIn",
    "Strict",
    "Text",
    "at",
    "check_tree",
    "duplicate",
    "json_kind",
    "rule",
]

_ROLES_ACCEPTED = "accepted: user, assistant; also human → user, ai → assistant"
_T = TypeVar("_T")


class Problem(ValueError):
    """A validator's finding about ``path`` below the value it checks (pydantic only knows the value's own place)."""

    def __init__(self, problem: str, *path: str | int) -> None:
        super().__init__(problem)
        self.path = path


def json_kind(value: Any) -> str:
    """What a JSON value is, for errors: ``"a string"``, ``"an array"``, ``"null"``..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {str: "a string", list: "an array", dict: "an object"}
    return next((n for t, n in names.items() if isinstance(value, t)), "a number")


def rule(ok: Callable[[Any], Any], problem: str) -> AfterValidator:
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
        raise ValueError(f"must be a string or a number, got {json_kind(value)}")
    return str(value)


Text = Annotated[str, rule(str.strip, "must not be empty")]
Content = Annotated[str, rule(str.strip, "content is empty or whitespace only")]
Name = Annotated[str, AfterValidator(_name)]
RoleIn = Annotated[Role, BeforeValidator(_role)]
Date = Annotated[str, AfterValidator(_date)]
Answer = Annotated[str, BeforeValidator(_answer)]


class Strict(BaseModel):
    """Generic formats: unknown keys are errors (usually typos)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        # Reported here rather than by extra="forbid" so that the message can list the accepted keys.
        for key in data if isinstance(data, dict) else ():
            if key not in cls.model_fields:
                raise Problem(f"unknown key (accepted: {', '.join(cls.model_fields)})", key)
        return data


class Lenient(BaseModel):
    """Benchmark formats: keys they do not use are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


_EXPECTED = {
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "int_type": "an integer",
    "bool_type": "true or false",
}


def at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class Input:
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
            problem = f"must be {_EXPECTED[error['type']]}, got {json_kind(error['input'])}"
        else:
            problem = "missing (required key)" if error["type"] == "missing" else error["msg"]
        for key in loc:
            path = at(path, key)
        raise self.fail(path, problem)


def duplicate(ids: Sequence[str]) -> int | None:
    """Index of the first id that repeats an earlier one."""
    return next((i for i, sid in enumerate(ids) if sid in ids[:i]), None)


def check_tree(inp: Input, data: Any) -> None:
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
            stack.append((item, at(path, key), depth + 1))
