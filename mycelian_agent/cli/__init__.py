"""The ``mycelian-agent`` command: replay conversations into memory, add, list, show, search, export, get, update,
history and delete, serve the memory, embed it, run the benchmarks.

Configuration comes from flags, with environment-variable fallbacks (``MYCELIAN_DB``, ``MYCELIAN_SERVER``,
``MYCELIAN_TOKEN``, ``MYCELIAN_MODEL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...); nothing deeper reads the
environment. The commands live by concern: :mod:`.replay`, :mod:`.memory` (the commands on one memory server),
``memory_server.cli`` (``serve``, ``embeddings``), ``models.local_llm`` (``local-llm``) and, outside the package,
``mycelian_bench.cli`` (``bench``: the benchmarks' own project in ``bench/``, installed from a clone with
``pip install -e '.[bench]'``); this module builds the tree and runs it.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click
from rich.markup import escape

from ..errors import MycelianError
from .common import err_console

__all__ = ["cli", "main"]

#: Each command: the module that defines it (relative to this package) and its name there. A command's module is
#: imported when the command runs (or ``--help`` lists it): ``list`` or ``add`` does not load ``replay``'s, the
#: benchmarks' or the local model's (urllib, ssl) modules.
_COMMANDS = {
    "add": (".memory", "add"),
    "bench": ("mycelian_bench.cli", "bench"),
    "check": ("..memory_server.cli", "check_command"),
    "delete": (".memory", "delete"),
    "embeddings": ("..memory_server.cli", "embeddings_group"),
    "export": (".memory", "export"),
    "get": (".memory", "get"),
    "history": (".memory", "history"),
    "list": (".memory", "list_"),
    "local-llm": ("..models.local_llm.cli", "local_llm"),
    "recall": (".memory", "recall"),
    "replay": (".replay", "replay"),
    "search": (".memory", "search"),
    "serve": ("..memory_server.cli", "serve_command"),
    "show": (".memory", "show"),
    "update": (".memory", "update"),
}


class _Commands(click.Group):
    """The command tree, each command imported on first use (:data:`_COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, name = _COMMANDS[cmd_name]
        try:
            command = getattr(importlib.import_module(module, __name__), name)
        except ModuleNotFoundError as exc:
            if exc.name != module.partition(".")[0] or module.startswith("."):
                raise
            return _not_installed(cmd_name, exc.name)
        assert isinstance(command, click.Command)
        return command


#: How to install a command whose code lives outside this package (its top-level package is missing).
_INSTALL = {
    "mycelian_bench": "from a clone of the repository: pip install -e '.[bench]' (the benchmarks live in its "
    "bench/ folder, outside the mycelian-agent package)"
}


def _not_installed(cmd_name: str, package: str) -> click.Command:
    """A command whose code is not installed: listed by ``--help``, and run (with any arguments, ``--help`` too)
    it says how to install it in one line, exit status 2 (click's status for a usage error)."""
    how = _INSTALL.get(package, f"install the {package} package")
    message = f"'{cmd_name}' is not installed; {how}"

    def refuse(args: tuple[str, ...]) -> None:
        err_console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        sys.exit(2)

    return click.Command(
        cmd_name,
        callback=refuse,
        add_help_option=False,
        short_help=f"(not installed) {how}",
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True},
    )


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mycelian-agent")
def cli() -> None:
    """Long-term memory for chat pipelines: a LangGraph memory agent over a Mycelian-compatible MCP server."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: MycelianError becomes a one-line message and exit status 1."""
    # psycopg's note on a pipeline a lost connection cut short: the error that follows names the server.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.NoSuchOption as exc:
        if not exc.option_name.startswith("--"):
            # `search "-5 degrees"`: a query (or a message) that starts with a dash reads as an option.
            command = exc.ctx.command_path if exc.ctx else "mycelian-agent COMMAND"
            exc = click.NoSuchOption(
                exc.option_name,
                exc.message + " (if that is text starting with '-', put it "
                f"after '--': {command} [OPTIONS] -- \"TEXT\")",
                exc.possibilities,
                exc.ctx,
            )
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except MycelianError as exc:
        # One line however long (a log reader or a pipe gets no wrapping), and the text as it is: "[postgres]" in
        # a message is not markup.
        err_console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(1)
