"""The ``mycelian-agent`` command: replay conversations into memory, add, list, show, search, export, get, update,
history and delete, serve the memory, embed it, run the benchmarks.

Configuration comes from flags, with environment-variable fallbacks (``MYCELIAN_DB``, ``MYCELIAN_SERVER``,
``MYCELIAN_TOKEN``, ``MYCELIAN_MODEL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...); nothing deeper reads the
environment. The commands live by concern: :mod:`.replay`, :mod:`.memory` (the commands on one memory server),
``memory_server.cli`` (``serve``, ``embeddings``), ``benchmarks.cli`` (``bench``) and ``models.local_llm``
(``local-llm``); this module builds the tree and runs it.
"""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from ..errors import MycelianError
from .common import err_console
from .replay import checkpointer_spec

__all__ = ["checkpointer_spec", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mycelian-agent")
def cli() -> None:
    """Long-term memory for chat pipelines: a LangGraph memory agent over a Mycelian-compatible MCP server."""


def _add_commands() -> None:
    # Each module imports only click and rich at the top; a command imports what it runs when it runs.
    from ..benchmarks.cli import bench
    from ..memory_server.cli import embeddings_group, serve_command
    from ..models.local_llm.cli import local_llm
    from . import memory, replay

    for command in (replay.replay, memory.add, memory.get, memory.update, memory.history, memory.delete,
                    memory.export, memory.list_, memory.recall, memory.search, memory.show, serve_command,
                    embeddings_group, bench):
        cli.add_command(command)
    cli.add_command(local_llm)


_add_commands()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: MycelianError becomes a one-line message and exit status 1."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.NoSuchOption as exc:
        if not exc.option_name.startswith("--"):
            # `search "-5 degrees"`: a query (or a message) that starts with a dash reads as an option.
            command = exc.ctx.command_path if exc.ctx else "mycelian-agent COMMAND"
            exc = click.NoSuchOption(exc.option_name, exc.message + " (if that is text starting with '-', put it "
                                     f"after '--': {command} [OPTIONS] -- \"TEXT\")", exc.possibilities, exc.ctx)
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
