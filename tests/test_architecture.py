"""The package's architecture, checked: rooms import only downwards, no import circle (lazy imports included),
no module over 600 lines, and a module over 500 lines says at its top why it is one module. The benchmarks
(``bench/mycelian_bench``) are held to the same circles and sizes, and the package never imports them."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mycelian_agent"
ROOT = "mycelian_agent"
BENCH = "mycelian_bench"
PACKAGES = (PACKAGE, REPO / "bench" / BENCH)
MAX_LINES = 600
EXPLAIN_OVER = 500

# memory_server's rooms, lowest first: a room may import its own modules and the rooms before it, never after.
ROOMS = ["text", "storage", "retrieval", "server", "transport"]
MS = f"{ROOT}.memory_server"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            parts = path.relative_to(package.parent).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()
assert MODULES, f"no modules under {PACKAGE}"


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _imports(name: str, path: Path) -> set[str]:
    """Every package module ``name`` imports, at module level or inside functions (lazy imports count)."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in MODULES else source)
    found = set()
    for target in targets:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target.startswith((ROOT, BENCH)) and target != name:
            found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _room(name: str) -> str | None:
    if not name.startswith(MS + "."):
        return None
    head = name[len(MS) + 1:].split(".")[0]
    return head if head in ROOMS else None


def test_rooms_import_only_downwards() -> None:
    upward = []
    for name, targets in GRAPH.items():
        room = _room(name)
        if room is None:
            continue
        for target in targets:
            other = _room(target)
            if target.startswith(MS) and other is None and target != MS:
                upward.append(f"{name} -> {target} (outside the rooms)")
            elif other is not None and ROOMS.index(other) > ROOMS.index(room):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports up the rooms " + " > ".join(ROOMS) + ":\n" + "\n".join(sorted(upward))


def test_the_package_never_imports_the_benchmarks() -> None:
    # `mycelian-agent bench` names mycelian_bench.cli in a string, loaded when the command runs (cli/__init__.py).
    upward = [f"{name} -> {target}" for name, targets in GRAPH.items() if name.startswith(ROOT)
              for target in targets if target.startswith(BENCH)]
    assert BENCH in MODULES and not upward, "the package imports the benchmarks:\n" + "\n".join(sorted(upward))


def test_no_import_circle() -> None:
    # A package's __init__ importing its own submodules is not a circle: Python initialises the package first.
    def edges(name: str) -> set[str]:
        return {t for t in GRAPH[name] if not (_is_package(name) and t.startswith(name + "."))}

    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(edges(name)):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [])
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_modules_stay_small() -> None:
    too_long, unexplained = [], []
    for name, path in sorted(MODULES.items()):
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            too_long.append(f"{name}: {lines} lines")
        elif lines > EXPLAIN_OVER:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if "one module" not in doc.lower():
                unexplained.append(f"{name}: {lines} lines")
    assert not too_long, f"modules over {MAX_LINES} lines:\n" + "\n".join(too_long)
    assert not unexplained, (f"modules over {EXPLAIN_OVER} lines whose docstring does not say why they are one module "
                             "(a sentence with 'one module'):\n" + "\n".join(unexplained))
