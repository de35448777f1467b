"""``python -m mycelian_agent.cli``: the same as the ``mycelian-agent`` command."""

from . import main

if __name__ == "__main__":
    main()
