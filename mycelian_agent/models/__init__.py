"""Chat models for the agent: ``resolve`` turns ``"extractive"`` / ``"openai:<model>"`` / a LangChain chat model
into the model the agent binds; ``extractive`` is the deterministic no-network default."""
