"""Where the prompt files live, and reading them. No LangChain imports: the memory server uses this too."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .errors import PromptError

__all__ = ["PROMPT_NAMES", "prompts_dir", "read_prompt"]

#: The rule files served by ``get_default_prompts`` and attached to the agent's prompts.
PROMPT_NAMES = ("entry_capture_prompt", "summary_prompt", "context_prompt")


def prompts_dir() -> Path:
    """The directory holding ``*.md`` prompt files.

    In a wheel they ship as ``mycelian_agent/_prompts``; in a source checkout (editable install) they are the
    repository's top-level ``prompts/``.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "_prompts", here.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise PromptError(f"prompt files not found: looked in {here / '_prompts'} and {here.parent / 'prompts'}")


@lru_cache(maxsize=64)
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def read_prompt(name: str, directory: Path | None = None) -> str:
    """Return the text of prompt ``name`` (without ``.md``) from ``directory`` or the package's prompts."""
    base = directory or prompts_dir()
    path = base / f"{name}.md"
    if not path.is_file():
        available = sorted(p.stem for p in base.glob("*.md"))
        raise PromptError(f"prompt {name!r} not found in {base} (available: {', '.join(available) or 'none'})")
    return _read(path)
