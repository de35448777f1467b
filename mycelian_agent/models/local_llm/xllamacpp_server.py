"""The CPU runtime: llama.cpp's server (:data:`~.pins.CPU_RUNTIME`, ``xllamacpp``) inside a Python process.

:class:`~.server.LocalLLMServer` starts it as ``python -m mycelian_agent.models.local_llm xllamacpp-server`` with
llama-server's arguments; the hidden CLI command reads them into :class:`ServerOptions`.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .pins import CPU_RUNTIME, MODEL_ALIAS, LocalLLMError

__all__ = ["ServerOptions", "serve_xllamacpp", "xllamacpp_params"]


@dataclass(frozen=True)
class ServerOptions:
    """The llama-server arguments that :meth:`~.server.LocalLLMServer.command` passes."""

    model: str
    port: int
    alias: str = MODEL_ALIAS
    host: str = "127.0.0.1"
    threads: int = 2
    ctx_size: int = 8192
    jinja: bool = False
    chat_template_file: str | None = None
    parallel: int = 1


def xllamacpp_params(options: ServerOptions, xlc: Any) -> Any:
    """``xlc.CommonParams`` for ``options``. ``xlc`` is the ``xllamacpp`` module (a compiled extension without type
    information, hence ``Any``)."""
    params = xlc.CommonParams()
    params.model.path = options.model
    params.model_alias = {options.alias}
    params.hostnames = [options.host]
    params.port = options.port
    params.n_ctx = options.ctx_size
    params.n_parallel = options.parallel
    params.cpuparams.n_threads = options.threads
    params.cpuparams_batch.n_threads = options.threads
    params.use_jinja = options.jinja
    if options.chat_template_file:
        params.chat_template = Path(options.chat_template_file).read_text(encoding="utf-8")
    return params


def serve_xllamacpp(options: ServerOptions) -> None:
    """Serve with :data:`CPU_RUNTIME` until SIGTERM or SIGINT: its ``Server`` answers HTTP on its own threads."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise LocalLLMError(
            f"the CPU runtime {CPU_RUNTIME[0]} is not installed ({exc}): run `mycelian-agent local-llm install`"
        ) from None

    params = xllamacpp_params(options, xllamacpp)
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server's threads start, so they inherit the mask
    server = xllamacpp.Server(params)
    print(f"{CPU_RUNTIME[0]} {CPU_RUNTIME[1]}: listening on {server.listening_address}", file=sys.stderr, flush=True)
    signal.sigwait(stop)
    sys.stderr.flush()
    os._exit(0)  # the OS frees the model and threads at once; the server's destructor could wait on clients
