"""floorfirst as a Model Context Protocol server: the planning, triage, calibration and
simulation commands as MCP tools with typed inputs, served over stdio by `floorfirst mcp`.

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
run it on the machine). Needs the `mcp` extra (`pip install '.[mcp]'` in a clone); nothing else
imports this module, so plain CLI start-up never loads the SDK.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from cli.inprocess import MCP_COMMAND_MODULES, CommandError, CommandRunner, Limits, WorkerPool
from cli.tool_options import parameter_values, signature, tool_options, unknown_arguments
from planner.inputs import shown

COMMAND_MODULES = MCP_COMMAND_MODULES  # the modules whose commands are tools (cli.inprocess)

INSTRUCTIONS = """floorfirst prices an LLM decode step on a deployment from first principles: five resources on the
busiest rank (HBM bytes, FLOPs, network bytes, network messages, KV capacity), an optimistic floor
(max) and a pessimistic one (sum). Work floor-first: estimate with floor/compare/capacity/walls before
measuring; after a measurement call triage and open a profiler only when it says profile=true, on
profile_resource. Compare layouts by walls (which binds first, where), not by grid search. Do no
arithmetic yourself: every figure you report comes from a tool's JSON (units are in the key names)."""

# NOTE: what the annotations promise (docs/mcp-security.md). A read-only tool reads files inside the
# root and writes none. A writing tool writes one file inside the root (a plot, a calibration) and
# replaces an existing one when the call passes overwrite: true, so it is destructive (it may
# replace a file) and not idempotent (a second call meets the file the first wrote).
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
OVERWRITE_HELP = ("Replace an existing file at the output path (inside the server's root). Default false: the "
                  "call writes only a file that does not exist yet.")


@dataclass(frozen=True)
class ToolSpec:
    """A tool: the CLI command that answers it, and which of its options the tool takes. NOTE: the
    inputs themselves are read from the command's registered options (cli.tool_options), so a
    tool's schema can't drift from the CLI and a new layout or engine needs no edit here."""

    name: str
    command: str
    annotations: ToolAnnotations
    drop: tuple[str, ...] = ()  # CLI options the tool leaves out
    only: tuple[str, ...] | None = None  # the only CLI options the tool takes
    required: tuple[str, ...] = ()  # options the tool requires though the CLI checks them itself
    contract: str = ""  # its document (default: the command's)
    summary: str = ""  # prepended to the command's help

    @property
    def writes(self) -> bool:
        """A tool that may write a file takes `overwrite` (the root's rule: new files only without it)."""
        return not self.annotations.read_only_hint


# NOTE: microbench needs a GPU and torch (run it on the machine); serve and mcp are not tools.
TOOLS = (
    ToolSpec("models", "models", READ_ONLY), ToolSpec("hardware", "hardware", READ_ONLY),
    ToolSpec("floor", "floor", READ_ONLY), ToolSpec("compare", "compare", READ_ONLY),
    ToolSpec("capacity", "capacity", READ_ONLY), ToolSpec("walls", "walls", WRITES), ToolSpec("regimes", "regimes", WRITES),
    ToolSpec("triage", "triage", READ_ONLY, drop=("profile",), required=("measured_ms",),
             summary="A measured step against its floors: verdict (below_floor | inside | above_sum), overlap quality "
                     "or residual, and whether and what to profile."),
    ToolSpec("triage_profile", "triage", READ_ONLY, only=("profile", "threshold", "calibration", "set"),
             required=("profile",), contract="triage_profile",
             summary="Every row of a profile file triaged against its floors."),
    # NOTE: --force (replace a file that is not a calibration) is the tool's overwrite: under the root
    # any existing file is replaced only when the call says so, whatever it holds
    ToolSpec("calibrate", "calibrate", WRITES, drop=("force",), required=("profile", "out")),
    ToolSpec("validate", "validate", READ_ONLY, required=("calibration", "profile")),
    ToolSpec("simulate", "simulate", WRITES),
    ToolSpec("explain_launch", "explain-launch", READ_ONLY),
)


def _description(spec: ToolSpec, command) -> str:
    from cli.common import SCHEMA_VERSION, SCHEMA_VERSIONS

    contract = spec.contract or spec.command.replace("-", "_")
    text = spec.summary or (command.help or "").strip().split("\n\n")[0]
    return f"{text} Returns the floorfirst.{contract}/{SCHEMA_VERSIONS.get(contract, SCHEMA_VERSION)} document."


def _bind(spec: ToolSpec, command, runner: "CommandRunner | WorkerPool") -> Callable[..., Any]:
    """The tool function: the command's options as its signature (and `overwrite` for a tool that
    writes), answered by running the command. NOTE: async, and the call runs in a thread it may
    abandon: when the client cancels the request or goes away, the call's worker is stopped at
    once (WorkerPool's cancel flag) instead of running on to its time limit."""
    import threading

    import anyio

    options = tool_options(command, spec.drop, spec.only, spec.required)
    pooled = isinstance(runner, WorkerPool)

    async def tool(**kwargs: Any) -> dict[str, Any]:
        overwrite = bool(kwargs.pop("overwrite", False))
        values = parameter_values(options, kwargs)
        if overwrite and spec.command == "calibrate":
            values["force"] = True
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

    sig = signature(options)
    if spec.writes:
        extra = inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=False,
                                  annotation=Annotated[bool, Field(description=OVERWRITE_HELP)])
        sig = sig.replace(parameters=[*sig.parameters.values(), extra])
    tool.__name__ = spec.name
    tool.__doc__ = _description(spec, command)
    tool.__signature__ = sig
    return tool


def _validation_line(tool: str, exc: ValidationError) -> str:
    errs = exc.errors()
    e = errs[0]
    loc = ".".join(str(x) for x in e["loc"]) or "(arguments)"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{tool}: argument '{loc}'={shown(e.get('input'))}: {e['msg']}{more}"


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
            server.add_tool(_bind(spec, group.commands[spec.command], runner), name=spec.name,
                            annotations=spec.annotations)
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
