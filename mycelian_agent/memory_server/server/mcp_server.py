"""The MCP server class: FastMCP with strict argument checking, per-token vault access, a store shared by all
sessions, and results answered as upstream's text plus MCP structured content.

The tools themselves, and the table that registers them, are in ``app.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.fastmcp.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from mycelian_agent.errors import MycelianError, describe_cause
from mycelian_agent.memory_server.server.access import vaults_of
from mycelian_agent.memory_server.server.arguments import check_arguments
from mycelian_agent.memory_server.server.runtime import StoreHandle, StoreRunner
from mycelian_agent.memory_server.storage.base import MemoryStore

__all__ = ["AppContext", "MemoryServer", "app_context", "token_vaults"]

_log = logging.getLogger("mycelian_agent.memory_server")

# Tools whose vault_id is optional upstream; required over HTTP (MemoryServer.require_vault).
_VAULT_SCOPED = ("search_memories",)


@dataclass(frozen=True)
class AppContext:
    """What each MCP session's lifespan yields to the tools."""

    store: StoreRunner
    prompts_dir: Path | None


class MemoryServer(FastMCP[AppContext]):
    """FastMCP with strict argument checking and a store shared by all sessions.

    FastMCP validates arguments in pydantic's lax mode (``"5"`` becomes ``5``, a JSON string becomes an object),
    and ignores unknown arguments. This server first checks the raw arguments strictly and rejects unknown ones
    (:func:`~.arguments.check_arguments`), so a wrong type is an error that names the argument, never a silent
    conversion. A tool's value is answered by :func:`_answer` (JSON text, and structured content when the tool
    declares an output schema); any exception becomes an MCP error result (``isError``).
    """

    def __init__(
        self, handle: StoreHandle, *, tools: list[Tool], token: str | None, prompts_dir: Path | None, **settings: Any
    ):
        super().__init__(lifespan=_lifespan, tools=tools, **settings)
        self.handle = handle
        self.token = token
        self.prompts_dir = prompts_dir
        self._strict_models: dict[str, type[BaseModel]] = {t.name: t.fn_metadata.arg_model for t in tools}
        self._tools_by_name = {t.name: t for t in tools}
        #: Whether search_memories must name its vault (set for HTTP, where several clients share the server).
        self.require_vault = False

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """Check ``arguments`` strictly and against the token's vaults, then run the tool and answer its value as
        :func:`_answer` does (errors become MCP error results)."""
        model = self._strict_models.get(name)
        if model is not None:
            check_arguments(name, model, arguments)
        if self.require_vault and name in _VAULT_SCOPED and arguments.get("vault_id") is None:
            raise ToolError(
                f"{name} needs vault_id on this server: a search is confined to the vault it names "
                "(pass the UUID of the memory's vault)"
            )
        context = self.get_context()
        allowed = token_vaults(context)
        if allowed is not None and model is not None:
            await self._check_vault_access(name, model, arguments, allowed)
        tool = self._tools_by_name.get(name)
        if tool is None:
            return await super().call_tool(name, arguments)
        try:
            value = await tool.run(arguments, context=context)
        except ToolError as exc:
            cause = exc.__cause__
            if cause is None or isinstance(cause, (MycelianError, ToolError)):
                raise
            # Not one of our errors: a bug or a fault of the machine. The client hears what it was (FastMCP would
            # send the bare message), the server's log keeps where.
            _log.error("tool %s failed unexpectedly", name, exc_info=cause)
            raise ToolError(f"Error executing tool {name}: {describe_cause(cause)}") from cause
        return _answer(tool, value)

    async def _check_vault_access(
        self, name: str, model: type[BaseModel], arguments: dict[str, Any], allowed: frozenset[str]
    ) -> None:
        # A limited token sees another vault exactly as a vault that does not exist.
        if name == "create_vault":
            if arguments.get("title") not in allowed:
                raise ToolError(
                    f"this token may not create vault {arguments.get('title')!r}: it is limited to the "
                    f"vaults {', '.join(sorted(allowed))} (the server's tokens file)"
                )
            return
        if "vault_id" not in model.model_fields:
            return
        vault_id = arguments.get("vault_id")
        if vault_id is None:
            raise ToolError(
                f"{name} needs vault_id with this token: it is limited to the vaults {', '.join(sorted(allowed))}"
            )
        runner = self.get_context().request_context.lifespan_context.store
        titles = {v["vaultId"]: v["title"] for v in await runner.call(MemoryStore.list_vaults)}
        if titles.get(vault_id) not in allowed:
            raise ToolError(f"vault {vault_id} not found")

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[StoreRunner]:
        """Keep the database open across sessions (e.g. a ``:memory:`` database between test sessions)."""
        async with self.handle.hold() as runner:
            yield runner


@asynccontextmanager
async def _lifespan(server: FastMCP[AppContext]) -> AsyncIterator[AppContext]:
    assert isinstance(server, MemoryServer)
    async with server.handle.hold() as runner:
        yield AppContext(store=runner, prompts_dir=server.prompts_dir)


def app_context(ctx: Context) -> AppContext:
    """What the session's lifespan gave the tools: the store and the prompts folder."""
    return ctx.request_context.lifespan_context


def token_vaults(ctx: Context) -> frozenset[str] | None:
    """The vault titles the HTTP request's bearer token is limited to (None: every vault; stdio, in-process)."""
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return None
    return vaults_of(getattr(request, "scope", None))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _answer(tool: Tool, value: Any) -> CallToolResult | list[TextContent]:
    """A tool's result as MCP content: the JSON text upstream clients parse (compact, one text content, arrays
    too) plus, for a tool with an output schema, the same value as structured content. FastMCP's own conversion
    would indent the text, split an array into one text per item and fill absent optional keys with null."""
    if tool.output_schema is None:
        return [TextContent(type="text", text=value)]
    structured = {"result": value} if tool.fn_metadata.wrap_output else value
    return CallToolResult(content=[TextContent(type="text", text=_json(value))], structuredContent=structured)
