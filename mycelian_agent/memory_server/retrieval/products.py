"""Products of stored vectors with a query vector, on the calling thread: :func:`rows_dot`.

``matrix @ vector`` goes to numpy's BLAS, which splits a large product over its own threads and then keeps them
spinning for a while. On a 2-core machine those spinning threads hold the core the query encoder's second thread
needs (a hybrid search in process: 16.6 ms p50 with BLAS on one thread, 29.6 with its threads; BENCHMARKS.md §3,
"Hybrid search latency"). ``einsum`` without optimisation is numpy's own loop, on the calling thread, and on one
thread faster than BLAS for these shapes (10,000 x 384 float32: 0.58 against 0.75 ms).
"""

from __future__ import annotations

from typing import Any

__all__ = ["rows_dot"]


def rows_dot(matrix: Any, vector: Any) -> Any:
    """``matrix @ vector`` (one float per row) computed on the calling thread, never on BLAS threads."""
    import numpy as np

    return np.einsum("ij,j->i", matrix, vector, optimize=False)
