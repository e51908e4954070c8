"""floorfirst's MCP tools without the MCP SDK: which commands are tools, each tool's inputs and
description, and one tool call answered — the pieces both servers share: `floorfirst mcp`'s own
stdio server (cli/mcp_stdio.py) and the SDK's server (cli/mcp_server.py, `floorfirst mcp --sdk`,
and what tests and an embedding program talk to in-process).

`ToolTable` answers `tools/list` and `tools/call` as the SDK's `MCPServer` does for these tools
(mcp 2.x, python-sdk src/mcp/server/mcpserver/tools/base.py `Tool.from_function` / `Tool.run`,
utilities/func_metadata.py `func_metadata`, `FuncMetadata.convert_result`): the same pydantic
argument model (`<tool>Arguments`) gives the same input schema and the same validation, the same
`<tool>DictOutput` output schema, and the same content (the document as indented JSON text, and
as structured content). tests/agent/test_mcp_stdio.py holds the two servers' answers equal.

Does not: speak any transport (cli/mcp_stdio.py does), compute anything (a WorkerPool or a
CommandRunner runs the command), or import the MCP SDK.
"""

from __future__ import annotations

import inspect
import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cli.tool_options import ToolOption, parameter_values, signature, tool_options, unknown_arguments

if TYPE_CHECKING:
    from cli.inprocess import CommandRunner, WorkerPool

INSTRUCTIONS = """floorfirst prices an LLM decode step on a deployment from first principles: five resources on the
busiest rank (HBM bytes, FLOPs, network bytes, network messages, KV capacity), an optimistic floor
(max) and a pessimistic one (sum). Work floor-first: estimate with floor/compare/capacity/walls before
measuring; after a measurement call triage and open a profiler only when it says profile=true, on
profile_resource. Compare layouts by walls (which binds first, where), not by grid search. Do no
arithmetic yourself: every figure you report comes from a tool's JSON (units are in the key names)."""


@dataclass(frozen=True)
class Hints:
    """A tool's MCP annotations (ToolAnnotations' four hints)."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool

    def wire(self) -> dict[str, bool]:
        return {"destructiveHint": self.destructive, "idempotentHint": self.idempotent,
                "openWorldHint": self.open_world, "readOnlyHint": self.read_only}


# NOTE: what the annotations promise (docs/mcp-security.md). A read-only tool reads files inside the
# root and writes none. A writing tool writes one file inside the root (a plot, a calibration) and
# replaces an existing one when the call passes overwrite: true, so it is destructive (it may
# replace a file) and not idempotent (a second call meets the file the first wrote).
READ_ONLY = Hints(read_only=True, destructive=False, idempotent=True, open_world=False)
WRITES = Hints(read_only=False, destructive=True, idempotent=False, open_world=False)
OVERWRITE_HELP = ("Replace an existing file at the output path (inside the server's root). Default false: the "
                  "call writes only a file that does not exist yet.")


@dataclass(frozen=True)
class ToolSpec:
    """A tool: the CLI command that answers it, and which of its options the tool takes. NOTE: the
    inputs themselves are read from the command's registered options (cli.tool_options), so a
    tool's schema can't drift from the CLI and a new layout or engine needs no edit here."""

    name: str
    command: str
    annotations: Hints
    drop: tuple[str, ...] = ()  # CLI options the tool leaves out
    only: tuple[str, ...] | None = None  # the only CLI options the tool takes
    required: tuple[str, ...] = ()  # options the tool requires though the CLI checks them itself
    contract: str = ""  # its document (default: the command's)
    summary: str = ""  # prepended to the command's help

    @property
    def writes(self) -> bool:
        """A tool that may write a file takes `overwrite` (the root's rule: new files only without it)."""
        return not self.annotations.read_only


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


def description(spec: ToolSpec, command) -> str:
    from cli.common import SCHEMA_VERSION, SCHEMA_VERSIONS

    contract = spec.contract or spec.command.replace("-", "_")
    text = spec.summary or (command.help or "").strip().split("\n\n")[0]
    return f"{text} Returns the floorfirst.{contract}/{SCHEMA_VERSIONS.get(contract, SCHEMA_VERSION)} document."


def tool_signature(spec: ToolSpec, command) -> tuple[list[ToolOption], inspect.Signature]:
    """The tool's options and its function signature: the command's options (and `overwrite` for a
    tool that writes)."""
    options = tool_options(command, spec.drop, spec.only, spec.required)
    sig = signature(options)
    if spec.writes:
        extra = inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=False,
                                  annotation=Annotated[bool, Field(description=OVERWRITE_HELP)])
        sig = sig.replace(parameters=[*sig.parameters.values(), extra])
    return options, sig


def command_values(spec: ToolSpec, options: list[ToolOption], arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Validated tool arguments → (the command's parameter values, overwrite)."""
    arguments = dict(arguments)
    overwrite = bool(arguments.pop("overwrite", False))
    values = parameter_values(options, arguments)
    if overwrite and spec.command == "calibrate":
        values["force"] = True
    return values, overwrite


def validation_line(tool: str, exc: ValidationError) -> str:
    from planner.inputs import shown

    errs = exc.errors()
    e = errs[0]
    loc = ".".join(str(x) for x in e["loc"]) or "(arguments)"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{tool}: argument '{loc}'={shown(e.get('input'))}: {e['msg']}{more}"


class _ArgModelBase(BaseModel):
    # NOTE: as the SDK's ArgModelBase (func_metadata.py); no docstring, which would become the
    # schema's description
    model_config = ConfigDict(arbitrary_types_allowed=True)


def argument_model(name: str, sig: inspect.Signature) -> type[BaseModel]:
    """The pydantic model of a tool's arguments, built as the SDK's `func_metadata` builds it
    (`<name>Arguments`; a parameter named like a BaseModel method gets a `field_` name and an alias)."""
    from pydantic import create_model

    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        field_name, kwargs = p.name, {}
        if hasattr(BaseModel, field_name) and callable(getattr(BaseModel, field_name)):
            kwargs["alias"], field_name = field_name, f"field_{field_name}"
        ann = Annotated[(p.annotation, Field(**kwargs))]
        fields[field_name] = ann if p.default is inspect.Parameter.empty else (ann, p.default)
    return create_model(f"{name}Arguments", __base__=_ArgModelBase, **fields)


def _pre_parse_json(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """A JSON text given for a list or object argument, parsed (what the SDK's
    `FuncMetadata.pre_parse_json` does for clients that send `"[\\"a\\", \\"b\\"]"`)."""
    fields = {}
    for name, info in model.model_fields.items():
        fields[name] = info
        if info.alias:
            fields[info.alias] = info
    out = dict(data)
    for key, value in data.items():
        info = fields.get(key)
        if info is None or not isinstance(value, str) or info.annotation is str:
            continue
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if not isinstance(parsed, (str, int, float)):
            out[key] = parsed
    return out


@dataclass(frozen=True)
class _Tool:
    spec: ToolSpec
    options: list[ToolOption]
    sig: inspect.Signature  # its arguments (the argument model is built from it on the tool's first call)
    wire: dict[str, Any]  # its tools/list entry


# NOTE: the packages whose code makes the tools (their options, help, registries' choices); a change to
# any .py file in them makes a cached table stale
CODE_PACKAGES = ("cli", "planner", "floorfirst", "calibration", "runtime_policy")
CACHE_FORMAT = 1


class ToolTable:
    """The tools of the commands `runner` has, built on first use; `listing()` is the tools/list
    result and `call()` a tools/call result, as plain JSON-ready dicts.

    `cache`: keep the built table (each tool's options, signature and tools/list entry) in the user's
    cache folder (planner.spec_cache.cache_dir), keyed by the code that makes it, so the next server
    lists its tools without importing the command modules (numpy, the planner: ~0.3 s of CPU the
    first worker needs at the same moment). A missing, stale or unreadable entry is rebuilt."""

    def __init__(self, runner: "CommandRunner | WorkerPool", cache: bool = False):
        self.runner = runner
        self._cache = cache
        self._tools: dict[str, _Tool] | None = None
        self._models: dict[str, type[BaseModel]] = {}
        self._lock = threading.Lock()
        self._output = None

    def _build(self) -> dict[str, _Tool]:
        with self._lock:
            if self._tools is None:
                where = _cache_entry() if self._cache else None
                tools = _load(where[2]) if where is not None else None
                if tools is None:
                    tools = self._make()
                    if where is not None:
                        from planner.spec_cache import store_entry

                        store_entry(*where, tools)
                self._tools = tools
            return self._tools

    def _make(self) -> dict[str, _Tool]:
        group, tools = self.runner.group, {}
        for spec in TOOLS:
            if spec.command not in self.runner.commands:
                continue
            command = group.commands[spec.command]
            options, sig = tool_signature(spec, command)
            model = self._models[spec.name] = argument_model(spec.name, sig)
            wire = {"annotations": spec.annotations.wire(), "description": description(spec, command),
                    "inputSchema": model.model_json_schema(by_alias=True), "name": spec.name,
                    # NOTE: what the SDK publishes for a `-> dict[str, Any]` tool (func_metadata
                    # `_create_output_model`: Annotated[dict[str, Any], Field(title=f"{name}DictOutput")])
                    "outputSchema": {"type": "object", "additionalProperties": True,
                                     "title": f"{spec.name}DictOutput"}}
            tools[spec.name] = _Tool(spec, options, sig, wire)
        return tools

    def _model(self, tool: _Tool) -> type[BaseModel]:
        with self._lock:
            if tool.spec.name not in self._models:
                self._models[tool.spec.name] = argument_model(tool.spec.name, tool.sig)
            return self._models[tool.spec.name]

    def listing(self) -> dict[str, Any]:
        return {"tools": [t.wire for t in self._build().values()]}

    def names(self) -> list[str]:
        return list(self._build())

    def call(self, name: str, arguments: dict[str, Any], cancel: threading.Event | None = None) -> dict[str, Any]:
        """One tools/call: the document as content and structured content, or `isError` with one line."""
        from cli.inprocess import CommandError, WorkerPool

        tool = self._build().get(name)
        if tool is None:
            return _error(f"Unknown tool: {name}")
        line = unknown_arguments(name, arguments, list(tool.wire["inputSchema"].get("properties", {})))
        if line:
            return _error(line)
        model = self._model(tool)
        try:
            validated = model.model_validate(_pre_parse_json(model, arguments))
        except ValidationError as exc:
            return _error(validation_line(name, exc))
        kwargs = {(info.alias or field): getattr(validated, field) for field, info in type(validated).model_fields.items()}
        try:
            values, overwrite = command_values(tool.spec, tool.options, kwargs)
            if isinstance(self.runner, WorkerPool):
                doc = self.runner.call(tool.spec.command, values, overwrite=overwrite, cancel=cancel)
            else:
                doc = self.runner.call(tool.spec.command, values)
            return self._result(name, doc)
        except CommandError as exc:
            return _error(f"Error executing tool {name}: {exc}")
        except Exception as exc:  # a bug: its type and first line, as the SDK server says it
            first = (str(exc).splitlines() or [""])[0][:200]
            return _error(f"{name}: internal error: {type(exc).__name__}: {first}")

    def _result(self, name: str, doc: dict[str, Any]) -> dict[str, Any]:
        """As the SDK's FuncMetadata.convert_result for a `dict[str, Any]` result: indented JSON text
        (pydantic_core.to_json, as it) and the document, validated and dumped in JSON mode."""
        import pydantic_core
        from pydantic import TypeAdapter

        if self._output is None:
            self._output = TypeAdapter(dict[str, Any])
        text = pydantic_core.to_json(doc, fallback=str, indent=2).decode()
        structured = self._output.dump_python(self._output.validate_python(doc), mode="json")
        return {"content": [{"text": text, "type": "text"}], "isError": False, "structuredContent": structured}


def _cache_entry():
    """Where this code's tool table is kept: the cache folder's `mcp-tools-<checkout>-<code>.pickle`, the
    code's key the .py files of CODE_PACKAGES and the Python, pydantic and typer versions
    (planner.spec_cache.tree_fingerprint, ~2 ms)."""
    import sys
    import zlib
    from pathlib import Path

    import pydantic
    import typer

    from planner.spec_cache import cache_dir, tree_fingerprint

    root = Path(__file__).resolve().parent.parent
    code = tree_fingerprint(tuple(str(root / p) for p in CODE_PACKAGES),
                            (CACHE_FORMAT, sys.version, pydantic.VERSION, typer.__version__))
    # NOTE: named by the checkout too: two checkouts (a release and a clone) keep an entry each instead
    # of dropping each other's on every start
    stem = f"mcp-tools-{zlib.crc32(str(root).encode()):08x}-"
    return cache_dir(), stem, cache_dir() / f"{stem}{code:08x}.pickle"


def _load(entry) -> dict[str, _Tool] | None:
    import pickle

    try:
        with open(entry, "rb") as f:
            tools = pickle.load(f)
            from planner.spec_cache import refresh

            refresh(f.fileno(), entry)  # used now: kept by the folder's age and size bounds
        return tools if isinstance(tools, dict) and all(isinstance(t, _Tool) for t in tools.values()) else None
    except Exception:  # noqa: BLE001 - missing, corrupt, from other code: all mean "rebuild"
        return None


def _error(line: str) -> dict[str, Any]:
    return {"content": [{"text": line, "type": "text"}], "isError": True}
