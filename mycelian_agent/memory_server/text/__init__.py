"""Text analysis shared by writes and searches (below storage and retrieval both): :mod:`.analysis` (tokens, stems,
the index columns' words, query stems, feedback words; on ``mycelian_agent/words.py``'s word rules) and
:mod:`.porter` (FTS5's Porter stemmer, in Python)."""
