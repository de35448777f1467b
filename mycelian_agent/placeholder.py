"""The placeholder context of a new memory, and recognising placeholders (ours and upstream's).

A Mycelian server answers ``get_context`` with a placeholder until a context is stored; every client must treat one
as empty, whichever server wrote it. Our server answers with it and the client side (the agent, recall, the CLI)
recognises it, so it lives below both; ``mycelian_agent.memory_server`` offers it at its front too.
"""

from __future__ import annotations

__all__ = ["PLACEHOLDER_CONTEXT", "is_placeholder_context"]

#: What ``get_context`` answers for a memory that has no stored context yet. Clients must treat it as empty.
PLACEHOLDER_CONTEXT = (
    "This is the default context placeholder of a new memory: no context has been stored yet. Treat it as empty."
)

# Upstream's placeholder wording is not a stable contract, so recognise the gist: a short text that
# calls itself a default/placeholder context or says there is no context.
_MARKERS = ("default context", "placeholder", "no context")
_MAX_PLACEHOLDER_CHARS = 400


def is_placeholder_context(text: str | None) -> bool:
    """True if ``text`` is not a real context document: empty, ours, or a short upstream-like placeholder."""
    if text is None:
        return True
    stripped = text.strip()
    if not stripped or stripped == PLACEHOLDER_CONTEXT:
        return True
    if len(stripped) > _MAX_PLACEHOLDER_CHARS:
        return False
    lowered = " ".join(stripped.lower().split())
    return any(marker in lowered for marker in _MARKERS)
