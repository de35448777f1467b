"""The model's chat template: read from the GGUF file's metadata (a minimal reader of the GGUF v2/v3 header) and
rewritten to ask for a bare ``{"name", "arguments"}`` object instead of ``<tool_call>`` tags, which this model never
writes."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import IO

from .pins import LocalLLMError

__all__ = ["read_chat_template", "tool_call_template"]

# The one instruction of Qwen2.5's template that this model does not follow (``<tool_call>`` tags), and what we ask
# for instead. In the template's source text, newlines and quotes are escaped (``\n``, ``\"``).
_TOOL_CALL_TAGS = re.compile(r"For each function call, return a json object .*?</tool_call>(?=<\|im_end\|>)")
_BARE_OBJECT = (
    "For each function call, return only a json object with function name and arguments, with no other "
    'text and no code fence:\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'
)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read(f: IO[bytes], fmt: str) -> int:
    """One unsigned integer of the header (``fmt``: ``"<I"`` or ``"<Q"``)."""
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise LocalLLMError("truncated GGUF header")
    return int(struct.unpack(fmt, data)[0])


def _string(f: IO[bytes]) -> bytes:
    return f.read(_read(f, "<Q"))


def _skip(f: IO[bytes], kind: int) -> None:
    if kind == 8:
        f.seek(_read(f, "<Q"), 1)
    elif kind == 9:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if item in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
        else:
            for _ in range(count):
                _skip(f, item)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
    else:
        raise LocalLLMError(f"unknown GGUF value type {kind}")


def read_chat_template(model: Path) -> str:
    """The ``tokenizer.chat_template`` metadata of a GGUF file (a minimal reader of the GGUF v2/v3 header)."""
    with model.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise LocalLLMError(f"{model} is not a GGUF file")
        _read(f, "<I")  # version
        _read(f, "<Q")  # tensor count
        for _ in range(_read(f, "<Q")):
            key, kind = _string(f), _read(f, "<I")
            if key == b"tokenizer.chat_template" and kind == 8:
                return _string(f).decode("utf-8")
            _skip(f, kind)
    raise LocalLLMError(f"{model} has no tokenizer.chat_template")


def tool_call_template(template: str) -> str:
    """Qwen2.5's template asking for a bare ``{"name", "arguments"}`` object instead of ``<tool_call>`` tags."""
    changed, count = _TOOL_CALL_TAGS.subn(lambda _match: _BARE_OBJECT, template)
    if count != 1:
        raise LocalLLMError("the model's chat template does not contain the expected <tool_call> instruction")
    return changed
