"""The task as data: what the agent attaches to each prompt for models that read data rather than text.

The agent's prompts put the task in ``HumanMessage.additional_kwargs[TASK_KEY]`` beside its text (OpenAI-compatible
serialisers ignore that field); the extractive model reads it. The shapes are in docs/ARCHITECTURE.md,
"Agent ↔ model contract".
"""

from __future__ import annotations

__all__ = ["TASK_KEY"]

#: Key in ``HumanMessage.additional_kwargs`` carrying the task as data.
TASK_KEY = "mycelian_task"
