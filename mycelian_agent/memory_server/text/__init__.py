"""Text analysis shared by writes and searches (below storage and retrieval both): :mod:`.analysis` (tokens, stems,
the index columns' words, query terms, feedback words) and :mod:`.porter` (FTS5's Porter stemmer, in Python)."""
