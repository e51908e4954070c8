"""floorfirst as a Model Context Protocol server built on the MCP SDK: the planning, triage,
calibration and simulation commands as MCP tools with typed inputs — what `floorfirst mcp --sdk`
serves over stdio, and what a program or a test talks to in-process (`mcp.Client(build_server())`).
Plain `floorfirst mcp` answers the same through cli/mcp_stdio.py without importing the SDK; the
tools themselves (which commands, their inputs, descriptions, annotations) are cli/mcp_tools.py's.

Each tool returns exactly the document `floorfirst <command> … --json` prints (the contracts in
schemas/ and docs/json-contracts.md), produced by cli.inprocess's WorkerPool: each call runs in a
worker process under a time limit, an argument-size limit, an output-size limit and a memory
limit, calls run side by side (a FIFO given as a workload or a very long simulate never holds up
`models`), and no lock is held while a call runs. A user error, a call stopped at a limit, an
argument the schema refuses, and an internal error all come back as an MCP tool error of one line.

A tool's inputs are its command's options (cli.tool_options): an argument the command has no
option for is refused, in one line naming it and the nearest valid name.

Every call is confined to one root folder (`floorfirst mcp --root DIR`, default the working
directory; planner.path_policy): every path a tool reads or writes resolves inside it, symlinks
resolved first; a path outside reads as missing, in the same words; a tool writes only a new file
unless the call passes `overwrite: true`; error lines quote no value read from a file. Model and
hardware names resolve to the built-ins first. Tool annotations say which tools only read
(readOnlyHint) and which may replace a file (destructiveHint). An abandoned call (the client
cancels it or goes away) is stopped at once. docs/mcp-security.md is the whole security model.

Does not: compute anything itself, shell out, or expose `microbench` (it needs a GPU and torch;
run it on the machine). Needs the `mcp` extra (`pip install '.[mcp]'` in a clone); only
`floorfirst mcp --sdk` and the tests import this module.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from cli.inprocess import MCP_COMMAND_MODULES, CommandError, CommandRunner, Limits, WorkerPool
from cli.mcp_tools import INSTRUCTIONS, TOOLS, ToolSpec, command_values, description, tool_signature
from cli.mcp_tools import validation_line as _validation_line
from cli.tool_options import unknown_arguments

COMMAND_MODULES = MCP_COMMAND_MODULES  # the modules whose commands are tools (cli.inprocess)
__all__ = ["COMMAND_MODULES", "INSTRUCTIONS", "TOOLS", "ToolSpec", "build_server", "serve"]


def _bind(spec: ToolSpec, command, runner: "CommandRunner | WorkerPool") -> Callable[..., Any]:
    """The tool function: the command's options as its signature (and `overwrite` for a tool that
    writes), answered by running the command. NOTE: async, and the call runs in a thread it may
    abandon: when the client cancels the request or goes away, the call's worker is stopped at
    once (WorkerPool's cancel flag) instead of running on to its time limit."""
    import threading

    import anyio

    options, sig = tool_signature(spec, command)
    pooled = isinstance(runner, WorkerPool)

    async def tool(**kwargs: Any) -> dict[str, Any]:
        values, overwrite = command_values(spec, options, kwargs)
        cancel = threading.Event()

        def call() -> dict[str, Any]:
            if pooled:
                return runner.call(spec.command, values, overwrite=overwrite, cancel=cancel)
            return runner.call(spec.command, values)

        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except CommandError as exc:
            raise ToolError(str(exc)) from None
        finally:
            cancel.set()  # NOTE: a no-op after an answer; stops the worker of an abandoned call

    tool.__name__ = spec.name
    tool.__doc__ = description(spec, command)
    tool.__signature__ = sig
    return tool


class FloorfirstServer(MCPServer):
    """MCPServer whose tool errors are one line: an argument the schema refuses names the argument,
    its value and the rule (not pydantic's multi-line dump); a crash names its exception type."""

    async def call_tool(self, name, arguments, context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            line = unknown_arguments(name, arguments or {}, list(tool.parameters.get("properties", {})))
            if line:
                raise ToolError(line)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_validation_line(name, cause)) from None
            first = (str(cause).splitlines() or [""])[0][:200] if cause else ""
            raise ToolError(f"{name}: internal error: {type(cause).__name__}: {first}") from None
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_validation_line(name, exc.__cause__)) from None
            raise


def build_server(runner: "CommandRunner | WorkerPool | None" = None, root: str | None = None) -> MCPServer:
    """An MCP server with one tool per floorfirst command that exists in this checkout, answered by
    `runner` (default: a WorkerPool with the default Limits, confined to `root`, default the working
    directory; a CommandRunner runs calls in this process one at a time, unconfined, for tests of the
    tools themselves)."""
    if runner is None:
        runner = WorkerPool(COMMAND_MODULES, root=root or os.getcwd())
        runner.warm()
    group = runner.group
    server = FloorfirstServer("floorfirst", instructions=INSTRUCTIONS)
    for spec in TOOLS:
        if spec.command in runner.commands:
            hints = spec.annotations
            server.add_tool(_bind(spec, group.commands[spec.command], runner), name=spec.name,
                            annotations=ToolAnnotations(read_only_hint=hints.read_only, destructive_hint=hints.destructive,
                                                        idempotent_hint=hints.idempotent, open_world_hint=hints.open_world))
    return server


def serve(workers: int = 4, limits: Limits = Limits(), root: str | None = None, pool: WorkerPool | None = None) -> None:
    """Serve over stdio until the client closes the connection; every call confined to `root`
    (default: the working directory; planner.path_policy, docs/mcp-security.md). `pool`: a pool
    already started (floorfirst mcp starts it before this module imports the SDK); it is closed here."""
    if pool is None:
        pool = WorkerPool(COMMAND_MODULES, workers=workers, limits=limits, root=root or os.getcwd())
        pool.warm()
    try:
        build_server(pool).run("stdio")
    finally:
        pool.close()
