"""Replay conversation JSON files into memory (the library behind `mycelian-agent replay`).

Usable as a module (``from runners.replay_conversation import replay_files``) and as a script::

    python runners/replay_conversation.py examples/quickstart_conversation.json --db memory.db --state state.db
"""

from __future__ import annotations

import sys
from pathlib import Path

from mycelian_agent.builder import build_agent
from mycelian_agent.conversations.formats import load_conversations
from mycelian_agent.conversations.replay import ReplayStats, replay_conversation

__all__ = ["replay_files", "main"]


async def replay_files(paths: list[str | Path], **build_options) -> ReplayStats:
    """Replay every conversation of ``paths`` into one memory (``build_agent`` options, e.g. ``db``, ``memory``)."""
    conversations = [c for path in paths for c in load_conversations(path)]
    stats = ReplayStats()
    async with build_agent(**build_options) as invoker:
        for conversation in conversations:
            await replay_conversation(invoker, conversation, stats=stats)
    return stats


def main(argv: list[str] | None = None) -> None:
    """Script entry: the same options as ``mycelian-agent replay``."""
    from mycelian_agent.cli import main as cli_main

    cli_main(["replay", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
