"""``python -m mycelian_agent.models.local_llm``: the ``local-llm`` commands (also how the CPU runtime is started)."""

from .cli import main

main()
