"""Entry versions: the statement both backends run to keep an entry's current row before ``update_entry`` replaces
it (``entry_versions``: SQLite migration 6, PostgreSQL migration 8), written once for both dialects."""

from __future__ import annotations

__all__ = ["keep_version"]


def keep_version(mark: str) -> str:
    """The statement copying entry ``seq``'s current row into ``entry_versions``, with parameters ``(replaced_at,
    seq)`` marked ``mark`` (``?`` or ``%s``)."""
    return (
        "INSERT INTO entry_versions (seq, version, entry_id, memory_id, vault_id, creation_time, conversation_time, "
        "raw_entry, summary, tags, replaced_at) SELECT seq, version, entry_id, memory_id, vault_id, creation_time, "
        f"conversation_time, raw_entry, summary, tags, {mark} FROM entries WHERE seq = {mark}"
    )
