"""``python -m mycelian_agent.memory_server``: the same as the ``mycelian-memory-server`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
