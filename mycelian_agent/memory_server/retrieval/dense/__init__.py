"""Dense retrieval (optional): packaged sentence encoders (``encoders``), the index written with entries and searched
beside BM25 (``dense_vectors``), its write-behind writer (``writer``), which model a server loads (``loading``), the
backfill (``backfill``), and their front (``index``: the names other rooms import; the commands are in
``memory_server/cli.py``). Its SQL is storage's (``storage/vectors.py``)."""
