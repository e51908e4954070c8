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

Does not: compute anything itself, shell out, or expose `microbench` (it needs a GPU and torch;
run it on the machine). Needs the `mcp` extra (`pip install '.[mcp]'` in a clone); nothing else
imports this module, so plain CLI start-up never loads the SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from cli.inprocess import CommandError, CommandRunner, Limits, WorkerPool
from cli.tool_options import command_line, signature, tool_options, unknown_arguments
from planner.inputs import shown

COMMAND_MODULES = ("specs", "floor", "walls", "triage", "calibration", "simulate", "launch")

INSTRUCTIONS = """floorfirst prices an LLM decode step on a deployment from first principles: five resources on the
busiest rank (HBM bytes, FLOPs, network bytes, network messages, KV capacity), an optimistic floor
(max) and a pessimistic one (sum). Work floor-first: estimate with floor/compare/capacity/walls before
measuring; after a measurement call triage and open a profiler only when it says profile=true, on
profile_resource. Compare layouts by walls (which binds first, where), not by grid search. Do no
arithmetic yourself: every figure you report comes from a tool's JSON (units are in the key names)."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


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
    ToolSpec("calibrate", "calibrate", WRITES, required=("profile", "out")),
    ToolSpec("validate", "validate", READ_ONLY, required=("calibration", "profile")),
    ToolSpec("simulate", "simulate", WRITES),
    ToolSpec("explain_launch", "explain-launch", READ_ONLY),
)


def _description(spec: ToolSpec, command) -> str:
    from cli.common import SCHEMA_VERSION, SCHEMA_VERSIONS

    contract = spec.contract or spec.command.replace("-", "_")
    text = spec.summary or (command.help or "").strip().split("\n\n")[0]
    return f"{text} Returns the floorfirst.{contract}/{SCHEMA_VERSIONS.get(contract, SCHEMA_VERSION)} document."


def _bind(spec: ToolSpec, command, runner: "CommandRunner | WorkerPool") -> Callable[..., dict[str, Any]]:
    """The tool function: the command's options as its signature, answered by running the command."""
    options = tool_options(command, spec.drop, spec.only, spec.required)

    def tool(**kwargs: Any) -> dict[str, Any]:
        try:
            return runner.run(spec.command, command_line(options, kwargs))
        except CommandError as exc:
            raise ToolError(str(exc)) from None

    tool.__name__ = spec.name
    tool.__doc__ = _description(spec, command)
    tool.__signature__ = signature(options)
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


def build_server(runner: "CommandRunner | WorkerPool | None" = None) -> MCPServer:
    """An MCP server with one tool per floorfirst command that exists in this checkout, answered by
    `runner` (default: a WorkerPool with the default Limits; a CommandRunner runs calls in this
    process one at a time, for tests of the tools themselves)."""
    if runner is None:
        runner = WorkerPool(COMMAND_MODULES)
        runner.warm()
    group = runner.group
    server = FloorfirstServer("floorfirst", instructions=INSTRUCTIONS)
    for spec in TOOLS:
        if spec.command in runner.commands:
            server.add_tool(_bind(spec, group.commands[spec.command], runner), name=spec.name,
                            annotations=spec.annotations)
    return server


def serve(workers: int = 4, limits: Limits = Limits()) -> None:
    """Serve over stdio until the client closes the connection."""
    pool = WorkerPool(COMMAND_MODULES, workers=workers, limits=limits)
    pool.warm()
    try:
        build_server(pool).run("stdio")
    finally:
        pool.close()
