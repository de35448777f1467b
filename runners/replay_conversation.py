"""Replay conversation JSON files into memory: ``python runners/replay_conversation.py FILE... [options]``.

The same command as ``mycelian-agent replay`` (``--help`` lists the options); in code, use
``mycelian_agent.build_agent`` with ``mycelian_agent.conversations.replay.replay_conversation``.
"""

import sys

from mycelian_agent.cli import main

if __name__ == "__main__":
    main(["replay", *sys.argv[1:]])
