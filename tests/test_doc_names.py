"""The names the documentation gives exist: every module file (``retrieval/ranking.py``), dotted module path
(``mycelian_agent.memory_server.storage``) and module member (``ranking.with_context``, ``invoker.aflush``) named in
docs/*.md or in the package's docstrings and comments is in the code, so a move or a rename cannot leave stale text
behind. Read from the source (no module is imported)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mycelian_agent"
# Written like a module member but naming something else: a variable (a compiled graph, a chat model, a LangGraph
# store, a Recall), or a table's column.
NOT_MODULES = {"graph.compile", "model.bind_tools", "store.put", "recall.as_prompt", "entries.terms"}

_FILE = re.compile(r"(?<![\w./-])[\w/-]+\.py\b")
_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w.])")
_PACKAGE_PATH = re.compile(r"\bmycelian_agent(?:\.\w+)+")
# A dotted name ending so is a file (``memory.db``, ``data.json``), not a module member.
_EXTENSIONS = {
    "py",
    "db",
    "md",
    "json",
    "jsonl",
    "toml",
    "txt",
    "yaml",
    "yml",
    "whl",
    "gguf",
    "csv",
    "html",
    "sh",
    "log",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
# The repository's Python files, outside hidden folders (.venv, .git).
FILES = {
    str(path.relative_to(REPO))
    for top in REPO.iterdir()
    if not top.name.startswith(".")
    for path in ([top] if top.is_file() else top.rglob("*.py"))
    if path.suffix == ".py"
}


def _classes() -> dict[str, tuple[set[str], list[str]]]:
    """Every class of the package: its members (methods, attributes, ``self.x``) and the names of its bases."""
    found: dict[str, tuple[set[str], list[str]]] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            members: set[str] = set()
            for inner in ast.walk(node):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(inner.name)
                elif isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    members.add(inner.id)
                elif isinstance(inner, ast.Attribute) and getattr(inner.value, "id", None) == "self":
                    members.add(inner.attr)
            bases = [
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, (ast.Name, ast.Attribute))
            ]
            old = found.get(node.name, (set(), []))
            found[node.name] = (old[0] | members, old[1] + bases)
    return found


CLASSES = _classes()


def _members(cls: str, seen: frozenset[str] = frozenset()) -> set[str]:
    members, bases = CLASSES.get(cls, (set(), []))
    return members.union(*(_members(b, seen | {cls}) for b in bases if b not in seen))


def _top_level(path: Path) -> dict[str, set[str]]:
    """A module's top-level names (definitions, assignments, imports, also under a top-level ``if``/``try``), each
    with its members if it is a class."""
    names: dict[str, set[str]] = {}
    statements = list(ast.parse(path.read_text()).body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.If, ast.Try)):
            statements += (
                node.body
                + node.orelse
                + getattr(node, "finalbody", [])
                + [s for handler in getattr(node, "handlers", []) for s in handler.body]
            )
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, _members(node.name) if isinstance(node, ast.ClassDef) else set())
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({n.id: set() for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
    return names


NAMES = {name: _top_level(path) for name, path in MODULES.items()}


def _dotted_problem(ref: str) -> str | None:
    """Why ``ref`` (``a.b.c``, its head a module path or the end of one) names nothing; None when it does, or when
    no module's path ends with its head (not a reference to our code)."""
    parts = ref.split(".")
    for k in range(len(parts), 0, -1):
        suffix = "." + ".".join(parts[:k])
        modules = [m for m in MODULES if ("." + m).endswith(suffix)]
        if not modules:
            continue
        rest = parts[k:]
        if not rest:
            return None
        for module in modules:
            names = NAMES[module]
            members = set().union(*names.values())
            if f"{module}.{rest[0]}" in MODULES or rest[0] in members:
                return None
            if rest[0] in names and (len(rest) == 1 or not names[rest[0]] or rest[1] in names[rest[0]]):
                return None
        return f"no {'.'.join(rest[:2])!r} in {', '.join(sorted(modules))}"
    return "no such module" if parts[0] == "mycelian_agent" else None


def _problems(text: str, where: str, tick: str) -> list[str]:
    """What names nothing in ``text``: any ``x.py`` file named in it, and the dotted names of its code spans (between
    ``tick``s) and its ``mycelian_agent.`` paths."""

    def line(at: int) -> str:
        return f"{where}:{text.count(chr(10), 0, at) + 1}"

    found = [
        f"{line(m.start())}: `{m.group(0)}`: no such file"
        for m in _FILE.finditer(text)
        if not any(f == m.group(0) or f.endswith("/" + m.group(0)) for f in FILES)
    ]
    for span in re.finditer(f"{tick}([^`\n]+?){tick}", text):
        for ref in _DOTTED.finditer(span.group(1)):
            if ref.group(0) in NOT_MODULES or ref.group(0).rpartition(".")[2] in _EXTENSIONS:
                continue
            if problem := _dotted_problem(ref.group(0)):
                found.append(f"{line(span.start())}: `{ref.group(0)}`: {problem}")
    for match in _PACKAGE_PATH.finditer(text):
        if problem := _dotted_problem(match.group(0)):
            found.append(f"{line(match.start())}: `{match.group(0)}`: {problem}")
    return found


def test_the_names_the_docs_give_exist() -> None:
    problems = []
    for name, path in sorted(MODULES.items()):
        problems += _problems(path.read_text(), str(path.relative_to(REPO)), "``")
    for path in sorted((REPO / "docs").glob("*.md")):
        problems += _problems(path.read_text(), str(path.relative_to(REPO)), "`")
    assert not problems, "names in the docs that the code does not have:\n" + "\n".join(problems)


def test_a_stale_name_is_found() -> None:
    text = "see ``retrieval/nowhere.py``, ``ranking.no_such_step`` and mycelian_agent.memory_server.nowhere"
    assert [p.split(": ", 1)[1] for p in _problems(text, "x", "``")] == [
        "`retrieval/nowhere.py`: no such file",
        "`ranking.no_such_step`: no 'no_such_step' in mycelian_agent.memory_server.retrieval.ranking",
        "`mycelian_agent.memory_server.nowhere`: no 'nowhere' in mycelian_agent.memory_server",
    ]
