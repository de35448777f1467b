"""The memory agent: a checkpointed LangGraph ``StateGraph`` (``observe`` ⇄ ``tools``) driven by a ControlState.

- ``control``: the controls and the sequence of steps each runs (``PLANS``: data, read at a glance);
- ``state``: the bounded checkpointed state (``turn``: a message in it); ``report``: the typed report of one
  invocation and usage totals;
- ``model_tools``: what the model may write (one pydantic model per tool); ``entries``: one message as entries (the
  add_entry task, the checks of what a model writes, the arguments code owns; no LangChain);
  ``replies``: how a model's reply is read and checked; ``writer``: asking the model, with corrections and fallback;
- ``prompts``: the two prompts; ``graph``: the agent itself (the graph, its public calls, tool execution);
- ``steps``: what each step does (its tool calls, the state update from their results); ``inputs``: what callers
  give, checked at the edge; ``invocation``: one invocation's runtime context; ``tool_results``: the server's answers;
- ``invoker``: counting, flush cadence, sessions; ``oneshot``: one message stored as a new thread's first, with the
  extractive model, without the graph (``mycelian-agent add``);
- ``checkpointers``: "memory" | "sqlite:PATH" | "postgresql://…" and pruning.

Public names are exported from :mod:`mycelian_agent`; this package imports nothing at import time.
"""
