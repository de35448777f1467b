"""The SQLite backend: :class:`Store` (WAL, one writer), its FTS5 lexical SQL and its migrations."""

from __future__ import annotations

from mycelian_agent.memory_server.storage.sqlite.store import Store

__all__ = ["Store"]
