"""mycelian-agent: long-term memory for chat pipelines."""
__version__ = "0.1.0"
