"""Every entry point, run as a user runs it, without the optional extras and with bad paths: each says what is wrong
in one line (no traceback) and exits non-zero.

The commands run as real processes (``python -m ...``, the console scripts' own entry functions) with
``tests/no_extras`` first on PYTHONPATH: its ``sitecustomize`` makes the extras' packages (torch, numpy,
psycopg, matplotlib, pyinstrument, ...) unimportable, as in a ``pip install mycelian-agent`` without
extras, so one test environment holding every extra also tests the install without them. The bad paths: a missing
folder, a folder where a file is expected, a file where a folder is expected, /dev/full (writes fail with ENOSPC)
and an unreadable file. The walk covers the whole ``mycelian-agent`` command tree and every module of the package
that runs with ``python -m``: a command or module added without a case here fails the coverage tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parent.parent
NO_EXTRAS = Path(__file__).resolve().parent / "no_extras"
EXAMPLE = REPO / "examples" / "quickstart_conversation.json"
PG_URL = "postgresql://nobody@127.0.0.1:1/nothing"  # never reached: the missing client is reported first
INSTALL_POSTGRES = "mycelian-agent[postgres]"
INSTALL_EMBEDDINGS = "mycelian-agent[dense]"
INSTALL_BENCH = "pip install -e '.[bench]'"

pytestmark = pytest.mark.timeout(300)

LOCOMO_SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a dog named Pixel."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!"},
        ],
    },
    "qa": [{"question": "What is the dog's name?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4}],
}
LONGMEMEVAL_RECORD = {
    "question_id": "q1",
    "question_type": "single-session-user",
    "question": "What is my cat called?",
    "answer": "Luna",
    "question_date": "2023/06/01 (Thu) 09:00",
    "haystack_session_ids": ["s_a"],
    "haystack_dates": ["2023/05/20 (Sat) 02:21"],
    "answer_session_ids": ["s_a"],
    "haystack_sessions": [
        [
            {"role": "user", "content": "My cat is called Luna.", "has_answer": True},
            {"role": "assistant", "content": "A lovely name."},
        ]
    ],
}


@dataclass(frozen=True)
class Case:
    """``python ARGV`` must exit non-zero with one error line containing every string of ``names``."""

    argv: tuple[str, ...]
    names: tuple[str, ...]
    ok: bool = False  # a control case: must succeed (the extras' absence leaves the base install working)
    hide: str = ""  # more packages made unimportable (tests/no_extras' MYCELIAN_TEST_HIDE)

    @property
    def id(self) -> str:
        return " ".join(self.argv).replace(str(REPO), "REPO")


@dataclass
class Paths:
    root: Path
    folder: Path  # a folder (where a file is expected)
    under_file: Path  # "a file's child": its parent is a regular file
    unreadable: Path  # a file that cannot be read
    db: Path  # a memory database holding the example's memory
    data: Path  # an empty data folder (no locomo/ or longmemeval/)
    locomo: Path  # a LoCoMo file (one small sample)
    longmemeval: Path  # a LongMemEval file (one small record)


def _cli(*args: str) -> tuple[str, ...]:
    return ("-m", "mycelian_agent.cli", *args)


def _runner(script: str, *args: str) -> tuple[str, ...]:
    """A script of runners/, run as a user runs it: ``python runners/SCRIPT ...``."""
    return (str(REPO / "runners" / script), *args)


def _script(name: str, *args: str) -> tuple[str, ...]:
    """A console script of pyproject.toml, run as its installed wrapper runs it: ``sys.exit(function())``."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, function = target.split(":")
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; sys.exit({function}())"
    return ("-c", code, *args)


#: An entry id no database holds.
ENTRY = "00000000-0000-4000-8000-000000000000"


def _cases(p: Paths) -> list[Case]:
    db = ("--db", str(p.db))
    ex, lme, locomo = str(EXAMPLE), str(p.longmemeval), str(p.locomo)
    memory = ("--memory", "quickstart-lisbon-trip")
    reader = ("--reader", "extractive")
    numbers = iter(range(1000))

    def missing() -> str:  # a path in a folder that does not exist (one per case: some commands create it)
        return str(p.root / f"missing{next(numbers)}" / "x.json")

    def out() -> str:  # a fresh output folder
        return str(p.root / f"out{next(numbers)}")

    cases = [
        Case(_cli("replay", ex, "--db", str(p.root / "control.db"), "--json"), (), ok=True),
        # replay: its files, --db and --state (a missing folder of --db or --state is created)
        Case(_cli("replay", m := missing()), (m, "does not exist")),
        Case(_cli("replay", str(p.folder)), (str(p.folder), "directory")),
        Case(_cli("replay", str(p.unreadable)), (str(p.unreadable),)),
        Case(_cli("replay", ex, "--db", str(p.folder)), (str(p.folder),)),
        Case(_cli("replay", ex, "--db", str(p.under_file)), (str(p.under_file), "in the way")),
        Case(_cli("replay", ex, "--db", "/dev/full"), ("/dev/full",)),
        Case(_cli("replay", ex, "--db", str(p.unreadable)), (str(p.unreadable),)),
        Case(_cli("replay", ex, "--db", PG_URL), (INSTALL_POSTGRES,)),
        Case(_cli("replay", ex, "--db", str(p.root / "s1.db"), "--state", str(p.under_file)), (str(p.under_file),)),
        Case(_cli("replay", ex, "--db", str(p.root / "s2.db"), "--state", str(p.folder)), (str(p.folder), "folder")),
        Case(_cli("replay", ex, "--db", str(p.root / "s3.db"), "--state", "/dev/full"), ("/dev/full",)),
        Case(_cli("replay", ex, "--db", str(p.root / "s4.db"), "--state", PG_URL), (INSTALL_POSTGRES,)),
        # the read and edit commands
        Case(_cli("list", "--db", m := missing()), (m,)),
        Case(_cli("list", "--db", str(p.folder)), (str(p.folder), "folder")),
        Case(_cli("list", "--db", "/dev/full"), ("/dev/full",)),
        Case(_cli("list", "--db", str(p.unreadable)), (str(p.unreadable),)),
        Case(_cli("list", "--db", PG_URL), (INSTALL_POSTGRES,)),
        Case(_cli("show", "--db", m := missing(), *memory), (m,)),
        Case(_cli("search", "bike", "--db", str(p.folder), *memory), (str(p.folder),)),
        Case(_cli("recall", "bike", "--db", str(p.under_file), *memory), (str(p.under_file),)),
        Case(_cli("add", "hello", "--db", str(p.under_file), *memory), (str(p.under_file),)),
        Case(_cli("add", "hello", "--db", str(p.folder), *memory), (str(p.folder),)),
        Case(_cli("delete", "--db", m := missing(), *memory, "--yes"), (m,)),
        Case(_cli("get", ENTRY, "--db", m := missing(), *memory), (m,)),
        Case(_cli("history", ENTRY, "--db", str(p.folder), *memory), (str(p.folder),)),
        Case(_cli("update", ENTRY, "new text", "--db", str(p.under_file), *memory), (str(p.under_file),)),
        Case(_cli("get", "not-an-id", *db, *memory), ("'not-an-id' is not an entry id",)),
        Case(_cli("export", "--db", str(p.unreadable), *memory), (str(p.unreadable),)),
        Case(_cli("export", *db, *memory, "--out", m := missing()), (m,)),
        Case(_cli("export", *db, *memory, "--out", str(p.folder)), (str(p.folder),)),
        Case(_cli("export", *db, *memory, "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("export", *db, *memory, "--out", str(p.under_file)), (str(p.under_file),)),
        # the embedded server, three ways in
        Case(_cli("serve", "--db", str(p.folder)), (str(p.folder),)),
        Case(_cli("serve", "--db", str(p.under_file)), (str(p.under_file),)),
        Case(_script("mycelian-memory-server", "--db", "/dev/full"), ("/dev/full",)),
        Case(_script("mycelian-memory-server", "--db", PG_URL), (INSTALL_POSTGRES,)),
        Case(("-m", "mycelian_agent.memory_server", "--db", str(p.unreadable)), (str(p.unreadable),)),
        Case(_script("mycelian-agent", "list", "--db", str(p.folder)), (str(p.folder),)),
        # benchmarks: outputs, inputs, and the extras they need
        Case(_cli("bench", "overhead", "--quick", "--out", "/dev/full"), ("/dev/full", "in the way")),
        Case(_cli("bench", "overhead", "--quick", "--out", str(p.under_file)), (str(p.under_file),)),
        Case(_cli("bench", "prompts", "--quick", "--data", m := missing(), "--out", out()), (m,)),
        Case(_cli("bench", "prompts", "--quick", "--lme", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_cli("bench", "prompts", "--quick", "--lme", lme, "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "recall", "--quick", "--data", str(p.data), "--out", out()), (str(p.data), "--locomo")),
        Case(_cli("bench", "recall", "--quick", "--locomo", str(p.folder), "--out", out()), (str(p.folder),)),
        Case(_cli("bench", "ablation", "--quick", "--locomo", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_cli("bench", "scores", "--locomo", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_cli("bench", "scores", "--locomo", locomo, "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "small", "--quick", "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "throughput", "--quick", "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "server", "--quick", "--out", str(p.under_file)), (str(p.under_file),)),
        Case(_cli("bench", "server", "--quick", "--embeddings", "--out", out()), (INSTALL_EMBEDDINGS,)),
        Case(_cli("bench", "suite", "overhead", "--quick", "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "suite", "prompts", "--quick", "--data", m := missing(), "--out", out()), (m,)),
        Case(_cli("bench", "longmemeval", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_cli("bench", "longmemeval", lme, "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "locomo", str(p.folder), "--out", out()), (str(p.folder),)),
        Case(_cli("bench", "locomo", locomo, "--out", out(), "--state", str(p.folder)), (str(p.folder),)),
        Case(_cli("bench", "qa", "--reader", "extractive", "--data", m := missing(), "--out", out()), (m,)),
        Case(_cli("bench", "qa", *reader, "--locomo", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_cli("bench", "qa", *reader, "--locomo", locomo, "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "scale", "--out", out()), (INSTALL_POSTGRES, "--backend sqlite")),
        Case(_cli("bench", "scale", "--backend", "sqlite", "--out", "/dev/full"), ("/dev/full",)),
        Case(_cli("bench", "scale", "--backend", "sqlite", "--out", str(p.under_file)), (str(p.under_file),)),
        Case(_cli("bench", "scaleout", "--out", out()), (INSTALL_POSTGRES,)),
        Case(_cli("bench", "dense-pg", "--out", out()), (INSTALL_POSTGRES,)),
        Case(_cli("bench", "embeddings", "ingest", "--messages", "2"), (INSTALL_EMBEDDINGS,)),
        Case(_cli("bench", "embeddings", "parity", "--locomo", str(p.folder)), (str(p.folder),)),
        Case(_cli("bench", "embeddings", "replay", "--locomo", str(p.folder)), (str(p.folder),)),
        Case(_cli("bench", "embeddings", "oneshot", "--runs", "0"), ("--runs", "0")),
        Case(
            _cli("bench", "embeddings", "parity", "--locomo", locomo, "--lexical", "--out", out()), (INSTALL_POSTGRES,)
        ),
        # an install without the benchmarks (a wheel: bench/ is not in it) says how to install them
        Case(
            _cli("bench", "suite", "--quick", "--out", out()),
            ("'bench' is not installed", INSTALL_BENCH),
            hide="mycelian_bench",
        ),
        Case(_cli("bench", "--help"), ("'bench' is not installed", INSTALL_BENCH), hide="mycelian_bench"),
        # the runner scripts
        Case(_runner("single_question_runner.py", str(p.unreadable), "--out", out()), (str(p.unreadable),)),
        Case(_runner("locomo_runner.py", str(p.folder), "--out", out()), (str(p.folder),)),
        Case(_runner("replay_conversation.py", m := missing()), (m, "does not exist")),
        Case(_runner("bench.py", "overhead", "--quick", "--out", "/dev/full"), ("/dev/full",)),
        Case(_runner("bench_server.py", "--quick", "--out", str(p.under_file)), (str(p.under_file),)),
        # the local model: bad folders only (a good one would download the model)
        Case(_cli("local-llm", "install", "--dir", "/dev/full"), ("/dev/full",)),
        Case(_cli("local-llm", "install", "--dir", str(p.under_file)), (str(p.under_file),)),
        Case(_cli("local-llm", "path", "--dir", m := missing()), ("missing",)),
        Case(_cli("local-llm", "serve", "--dir", str(p.under_file), "--port", "0"), (str(p.under_file),)),
        Case(_cli("local-llm", "xllamacpp-server", "--model", missing()), ("xllamacpp", "local-llm install")),
        Case(("-m", "mycelian_agent.models.local_llm", "install", "--dir", str(p.under_file)), (str(p.under_file),)),
        # dense vectors of a database
        Case(_cli("embeddings", "backfill", str(p.db)), (INSTALL_EMBEDDINGS,)),
        Case(_cli("embeddings", "status", m := missing()), (m, "no memory database")),
        # a memory file's integrity
        Case(_cli("check", m := missing()), (m, "no such file")),
        Case(_cli("check", str(p.unreadable)), (str(p.unreadable),)),
    ]
    if os.geteuid() != 0:  # root reads any file: /proc/self/mem above stands for the unreadable file there
        cases.append(Case(_cli("replay", "/proc/self/mem"), ("/proc/self/mem",)))
    return cases


def _one_error_line(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not click's usage lines (``Usage: ...``, ``Try '... --help'``)."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.startswith(("Usage: ", "usage: ", "Try '", "       "))
    ]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    root = tmp_path_factory.mktemp("entry-points")
    (root / "folder").mkdir()
    (root / "data").mkdir()
    (root / "plain.txt").write_text("a file\n")
    if os.geteuid() == 0:
        unreadable = Path("/proc/self/mem")  # exists, is a file, and reading it fails (EIO) even for root
    else:
        unreadable = root / "secret.json"
        unreadable.write_text("{}")
        unreadable.chmod(0)
    db = root / "memory.db"
    made = subprocess.run(
        [sys.executable, "-m", "mycelian_agent.cli", "replay", str(EXAMPLE), "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env={**os.environ, "PYTHONPATH": _pythonpath(with_extras=True)},
    )
    assert made.returncode == 0, made.stderr
    locomo, longmemeval = root / "locomo.json", root / "longmemeval.json"
    locomo.write_text(json.dumps([LOCOMO_SAMPLE]))
    longmemeval.write_text(json.dumps([LONGMEMEVAL_RECORD]))
    return Paths(
        root=root,
        folder=root / "folder",
        under_file=root / "plain.txt" / "x.json",
        unreadable=unreadable,
        db=db,
        data=root / "data",
        locomo=locomo,
        longmemeval=longmemeval,
    )


def _pythonpath(with_extras: bool = False) -> str:
    parts = ([] if with_extras else [str(NO_EXTRAS)]) + [str(REPO)]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


@dataclass
class Outcome:
    returncode: int | None
    stdout: str
    stderr: str
    cpu_s: float = 0.0  # the process's CPU time (user + system, its children included)


def _run(case: Case, cwd: Path) -> Outcome:
    env = {
        **os.environ,
        "PYTHONPATH": _pythonpath(),
        "MYCELIAN_LLM_CACHE": str(cwd / "llm-cache"),
        "MYCELIAN_TEST_HIDE": case.hide,
    }
    for name in ("MYCELIAN_DB", "MYCELIAN_SERVER", "MYCELIAN_DATA", "MYCELIAN_LOCAL_LLM_DIR", "COLUMNS"):
        env.pop(name, None)
    # The CPU time is measured by a wrapper (the child's rusage), for the slowest-cases line below.
    timed = [
        "-c",
        "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
        "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "sys.stderr.write(f'\\n@cpu {r.ru_utime + r.ru_stime:.3f}\\n'); sys.exit(code)",
    ]
    try:
        done = subprocess.run(
            [sys.executable, *timed, sys.executable, *case.argv],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=90,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome(None, str(exc.stdout or ""), f"timed out after 90 s: {exc.stderr or ''}")
    stderr, _, cpu = done.stderr.rpartition("\n@cpu ")
    return Outcome(done.returncode, done.stdout, stderr, float(cpu or 0))


@pytest.fixture(scope="module")
def outcomes(paths: Paths) -> dict[str, tuple[Case, Outcome]]:
    cases = _cases(paths)
    cwd = paths.root / "cwd"
    cwd.mkdir()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: _run(case, cwd), cases))
    return {case.id: (case, outcome) for case, outcome in zip(cases, results)}


def test_every_entry_point_says_what_is_wrong_in_one_line(outcomes: dict[str, tuple[Case, Outcome]]) -> None:
    failures = []
    for name, (case, outcome) in outcomes.items():
        lines = _one_error_line(outcome.stderr)
        if case.ok:
            problem = None if outcome.returncode == 0 else "failed"
        elif outcome.returncode is None:
            problem = "hung"
        elif outcome.returncode == 0:
            problem = "exited 0"
        elif "Traceback" in outcome.stderr:
            problem = "traceback"
        elif len(lines) != 1:
            problem = f"{len(lines)} error lines"
        elif missing := [n for n in case.names if n.lower() not in lines[0].lower()]:
            problem = f"does not name {missing}"
        else:
            problem = None
        if problem:
            failures.append(f"{name}\n    -> {problem} (exit {outcome.returncode}): {outcome.stderr.strip()[-1500:]}")
    slowest = sorted(outcomes.items(), key=lambda item: -item[1][1].cpu_s)[:5]
    print(
        f"\nCPU {sum(o.cpu_s for _, o in outcomes.values()):.1f} s for {len(outcomes)} cases; slowest:\n"
        + "\n".join(f"  {o.cpu_s:.2f} s {name[:140]}" for name, (_, o) in slowest)
    )
    assert not failures, f"{len(failures)} of {len(outcomes)} entry points:\n" + "\n".join(failures)


def _command_paths(command: click.Command, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if isinstance(command, click.Group):  # asked as click asks (the groups load their commands lazily)
        ctx = click.Context(command)
        subs = {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}
        return {path for name, sub in subs.items() if sub is not None for path in _command_paths(sub, (*prefix, name))}
    return {prefix}


def test_the_walk_covers_every_command(paths: Paths) -> None:
    from mycelian_agent.cli import cli

    walked = {case.argv[2:] for case in _cases(paths) if case.argv[:2] == ("-m", "mycelian_agent.cli")}
    missing = [" ".join(path) for path in _command_paths(cli) if not any(argv[: len(path)] == path for argv in walked)]
    assert not missing, f"commands without a case in the walk: {missing}"


def test_the_walk_covers_every_python_dash_m_module(paths: Paths) -> None:
    package = REPO / "mycelian_agent"
    runnable = set()
    for file in package.rglob("*.py"):
        text = file.read_text(encoding="utf-8")
        if file.name == "__main__.py" or re.search(r"^if __name__ == .__main__.:", text, re.MULTILINE):
            module = ".".join(file.relative_to(REPO).with_suffix("").parts)
            runnable.add(module.removesuffix(".__main__"))
    walked = {case.argv[1] for case in _cases(paths) if case.argv[0] == "-m"}
    assert runnable - walked == set(), f"python -m modules without a case: {sorted(runnable - walked)}"


def test_the_walk_covers_every_runner_script(paths: Paths) -> None:
    scripts = {str(path) for path in (REPO / "runners").glob("*.py")}
    walked = {case.argv[0] for case in _cases(paths)}
    assert scripts - walked == set(), f"runner scripts without a case: {sorted(scripts - walked)}"


DOCS = ("README.md", "BENCHMARKS.md", *sorted(f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")))


def _repository_files() -> set[str] | None:
    """The files a clone has (git's index); None outside a git checkout (then the files on disk count)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], capture_output=True, cwd=REPO, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(listed.stdout.decode().split("\0")) - {""}


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_refer_only_to_files_a_clone_has(doc: str) -> None:
    # Markdown links and `path/like/references.ext`: each must be a file or folder of the repository (relative to
    # the document, the repository's top, the package or the memory server's rooms), not something beside it
    # (../shared/...) or out of git.
    tracked = _repository_files()
    text = (REPO / doc).read_text(encoding="utf-8")
    references = re.findall(r"\]\(([^)\s]+)\)", text)
    references += re.findall(r"`([^`\s<>*]+/[^`\s<>*]+\.(?:md|py|json|png|toml|txt|sh|yml|yaml))`", text)
    broken = []
    for reference in references:
        target = reference.split("#")[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target) or re.match(r"[A-Z]+/", target):
            continue  # a URL, an anchor in the page, or a placeholder (OUT/summary.json)
        found = False
        # memory_server/server/app.py: in the package; storage/base.py: in the memory server's rooms
        for base in ((REPO / doc).parent, REPO, REPO / "mycelian_agent", REPO / "mycelian_agent" / "memory_server"):
            path = (base / target).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                continue
            relative = path.relative_to(REPO).as_posix()
            if tracked is None or relative in tracked or any(f.startswith(relative + "/") for f in tracked):
                found = True
        if not found:
            broken.append(reference)
    assert not broken, f"{doc} refers to files a clone does not have: {broken}"


def _heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lower case, punctuation dropped, spaces as hyphens)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)  # a '# comment' is no heading
    return {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#{1,6} (.+)$", prose, flags=re.MULTILINE)
    }


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_link_to_headings_that_exist(doc: str) -> None:
    # The README's reference moved into docs/ pages that link each other by section: a renamed heading must not
    # leave a link landing at the top of a long page.
    text = (REPO / doc).read_text(encoding="utf-8")
    broken = []
    for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        page = (REPO / doc).parent / target if target else REPO / doc
        if not page.is_file() or anchor not in _heading_anchors(page.read_text(encoding="utf-8")):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc} links to headings that do not exist: {broken}"


async def test_library_edges_name_a_bad_store_path(tmp_path: Path) -> None:
    # The same checks without the CLI in front: a checkpointer or a connection given a path that cannot work.
    from mycelian_agent.agent.checkpointers import open_checkpointer
    from mycelian_agent.builder import connect
    from mycelian_agent.errors import ConfigError

    (tmp_path / "plain.txt").write_text("a file")
    for spec, problem in (
        (f"sqlite:{tmp_path}", "is a folder"),
        ("sqlite:/dev/full", "/dev/full"),
        (f"sqlite:{tmp_path / 'plain.txt' / 's.db'}", "a file of that name is in the way"),
    ):
        with pytest.raises(ConfigError, match=problem):
            async with open_checkpointer(spec):
                pass
    with pytest.raises(ConfigError, match="--db .*plain.txt.*in the way"):
        connect("embedded", db=tmp_path / "plain.txt" / "m.db")
