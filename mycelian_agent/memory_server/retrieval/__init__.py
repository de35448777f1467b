"""Retrieval: how a question finds entries — BM25 scoring, neighbouring-turn context, query feedback, names,
time in the question, and fusion with dense similarities (:mod:`.dense`)."""
