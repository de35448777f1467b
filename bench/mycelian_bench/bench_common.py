"""What the benchmark suite shares: results, tables, JSON and plots, percentiles, the machine, generated chat text.

Every benchmark returns a :class:`BenchResult` and writes ``<out>/<name>.json`` (and ``<out>/<name>.png`` when
matplotlib is installed; without it the plot is skipped and the result says so). Numbers that depend on this
machine's speed are reported next to a baseline measured in the same run (ratios), never judged on their own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the MCP SDK only where a benchmark talks to a server
    from mcp import ClientSession

__all__ = [
    "QA_CONDITIONS",
    "BenchResult",
    "Target",
    "call_server",
    "elapsed",
    "embeddings_available",
    "file_bytes",
    "fmt_bytes",
    "fmt_ms",
    "generate_messages",
    "have_module",
    "machine_info",
    "md_table",
    "save_plot",
    "summarize",
    "write_result",
]

#: The conditions of ``bench qa`` (bench_qa.CONDITIONS), in the order they are reported: here, where the command
#: line checks them without loading the benchmark.
QA_CONDITIONS = ("recall", "bm25", "full", "none")


def have_module(name: str) -> bool:
    """Whether ``name`` can be imported in this interpreter (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def embeddings_available() -> bool:
    """Whether a dense model's package can be imported here (a spawned server uses this interpreter)."""
    from mycelian_agent.memory_server.retrieval.dense.encoders import installed_models

    return bool(installed_models())


@dataclass
class Target:
    """A target of the issue: what it asks, what was measured, and whether it is met."""

    name: str
    goal: str
    measured: str
    met: bool
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "goal": self.goal, "measured": self.measured, "met": self.met, "why": self.why}

    def line(self) -> str:
        status = "MET" if self.met else "MISSED"
        return f"- target {self.name}: {self.goal}; measured {self.measured} -> {status}" + (
            f" ({self.why})" if self.why and not self.met else ""
        )


@dataclass
class BenchResult:
    """One benchmark's outcome: JSON-ready ``data``, Markdown ``tables``, ``notes``, ``targets`` and plot files."""

    name: str
    data: dict[str, Any]
    tables: list[tuple[str, str]] = field(default_factory=list)  # (title, markdown table)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "benchmark": self.name,
            "seconds": round(self.seconds, 2),
            **self.data,
            "targets": [t.as_dict() for t in self.targets],
            "notes": self.notes,
            "plots": self.plots,
        }

    def format(self) -> str:
        parts = [f"## {self.name} ({self.seconds:.1f} s)", ""]
        for title, table in self.tables:
            parts += [f"### {title}", "", table, ""]
        parts += [t.line() for t in self.targets]
        parts += [f"- {n}" for n in self.notes]
        return "\n".join(parts).rstrip() + "\n"


def write_result(result: BenchResult, out: Path) -> Path:
    """Write ``<out>/<name>.json`` (atomically) and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result.name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def save_plot(
    result: BenchResult,
    out: Path,
    draw: Callable[[Any], None],
    *,
    size: tuple[float, float] = (11, 4.5),
    ncols: int = 2,
    grid: str = "both",
) -> None:
    """Draw ``draw(axes)`` into ``<out>/<name>.png``; with matplotlib missing, add a note instead.

    Every axis then gets the suite's look: a light ``grid`` (``"both"``, ``"x"`` or ``"y"``) and a small legend.
    """
    if not have_module("matplotlib"):
        result.notes.append("plot skipped: matplotlib is not installed (pip install 'mycelian-agent[bench]')")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    try:
        draw(list(axes[0]))
        for ax in axes[0]:
            ax.grid(alpha=0.3, axis=grid)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{result.name}.png"
        fig.savefig(path, dpi=110)
        result.plots.append(path.name)
    finally:
        plt.close(fig)


async def call_server(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """Call ``tool`` on an MCP client session and parse its JSON, as the agent's connection calls: without the SDK's
    check of the result against the tool's output schema, so a benchmark times the server, not the check."""
    from mycelian_agent.mcp import call_tool_unchecked
    from mycelian_agent.memory_server.testing import result_text

    return json.loads(result_text(tool, await call_tool_unchecked(session, tool, arguments)))


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table; floats are printed as given (format them first)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p95, mean and max of ``values`` (in the values' unit); only ``n`` when there are none.

    Percentiles interpolate linearly between the closest ranks (``statistics.quantiles``' "inclusive" method).
    """
    if not values:
        return {"n": 0}
    # quantiles() needs two points (before Python 3.13); one value is every percentile of itself.
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"n": len(values), "p50": cuts[49], "p95": cuts[94], "mean": sum(values) / len(values), "max": max(values)}


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def file_bytes(path: Path) -> int:
    """Size of a SQLite file with its ``-wal`` (what the file takes on disk now)."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def elapsed(started: float) -> float:
    return time.perf_counter() - started


def _meminfo_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """The machine and software the numbers were measured on (load average: others may share the cores)."""
    try:
        commit = (
            subprocess.run(
                ["git", "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
                cwd=Path(__file__).resolve().parent,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": _meminfo_gib(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "commit": commit,
        "packages": {
            name: _version(name)
            for name in ("langgraph", "langchain-core", "mcp", "langgraph-checkpoint-sqlite", "langchain-mcp-adapters")
        },
        "executable": sys.executable,
    }


# ---------------------------------------------------------------------------------------------- generated chat

_NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lucia", "Omar", "Priya", "Sven", "Chloe", "Diego", "Hannah", "Ravi"]
_RELATIONS = ["sister", "brother", "mother", "friend", "colleague", "neighbor", "cousin", "partner", "boss"]
_CITIES = ["Denver", "Lisbon", "Osaka", "Toronto", "Nairobi", "Berlin", "Austin", "Melbourne", "Seville", "Oslo"]
_HOBBIES = [
    "hiking",
    "pottery",
    "chess",
    "salsa dancing",
    "birdwatching",
    "rock climbing",
    "baking sourdough",
    "painting watercolors",
    "playing guitar",
    "running",
    "gardening",
    "photography",
]
_USER = [
    "I went {hobby} with my {relation} {name} last weekend near {city}, and it was {feeling}.",
    "Can you help me plan a trip to {city}? I have about {n} days and a budget of ${money}.",
    "My {relation} {name} just started {hobby}; what gear would you recommend for a beginner?",
    "I decided to move my {hobby} class to Thursdays because work got busy with the {project} project.",
    "Remind me: I promised {name} I would send the {project} report by the {day}th.",
    "I'm thinking about adopting a dog. We live in a small apartment in {city}. Any breed suggestions?",
    "The {project} milestone slipped again; the team now expects it in {n} weeks. I'm a bit {feeling} about it.",
    "I finally tried that {hobby} workshop in {city}. {name} came along and loved it.",
]
_ASSISTANT = [
    "That sounds {feeling}! For {hobby} around {city}, mornings are usually quieter; bring water and layers.",
    (
        "Here is a simple plan for {city}: day one, the old town; day two, a food market; then a day trip. "
        "With ${money} you can stay central."
    ),
    "For a beginner in {hobby}, start with a basic kit and a class or two before buying anything expensive.",
    "Noted: the {project} report for {name} is due on the {day}th. Want me to draft an outline now?",
    "A smaller breed or an adult rescue tends to suit apartments; ask the shelter in {city} about temperament.",
    "Slipping {n} weeks is frustrating. It may help to list what blocks {project} and who owns each item.",
]
_FEELINGS = ["great", "exhausting", "relaxing", "stressful", "wonderful", "a bit chaotic"]
_PROJECTS = ["Falcon", "Atlas", "Beacon", "Juniper", "Orion"]


def generate_messages(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` deterministic chat messages ``(role, content)``, user and assistant alternating (60-220 chars)."""
    rng = random.Random(seed)
    messages = []
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        template = rng.choice(_USER if role == "user" else _ASSISTANT)
        text = template.format(
            hobby=rng.choice(_HOBBIES),
            relation=rng.choice(_RELATIONS),
            name=rng.choice(_NAMES),
            city=rng.choice(_CITIES),
            feeling=rng.choice(_FEELINGS),
            n=rng.randint(2, 14),
            money=rng.randint(3, 60) * 100,
            project=rng.choice(_PROJECTS),
            day=rng.randint(2, 28),
        )
        messages.append((role, re.sub(r"\s+", " ", text)))
    return messages
