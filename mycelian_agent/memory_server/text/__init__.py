"""Text analysis shared by writes and searches: stemming and tokenising (below storage and retrieval both)."""
