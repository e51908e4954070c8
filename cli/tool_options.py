"""MCP tool signatures read from the CLI's own option definitions, and tool arguments turned back
into the values of the command function's parameters (or the command line those options parse).

Each tool's inputs are its command's click parameters (registered by `cli.commands.*`, so layout,
MoE and engine choices come from the planner's registries): the name is the long flag
(`--measured-ms` → `measured_ms`), the description its help, the default its default. The types
take what agents send: integers or strings for counts and sizes (pydantic's lax mode reads "8"),
a number or a string for token counts (`8192`, `"8k"`), a list where the CLI takes a comma list
(`context`, `layouts`) or a repeated option (`profile`, `set`). Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field

# Options where the CLI takes a comma list: a list argument is joined with commas.
COMMA_LISTS = frozenset({"context", "layouts"})
Scalar = Union[str, int, float]


@dataclass(frozen=True)
class ToolOption:
    name: str  # the tool argument (the long flag, underscores)
    flag: str  # the CLI option it becomes
    param: str  # the command function's parameter it is (click's name)
    annotation: Any
    default: Any  # inspect.Parameter.empty: required
    multiple: bool
    is_flag: bool


def long_flag(param) -> str:
    """The option's long flag; '' for a positional argument."""
    flags = [o for o in param.opts if o.startswith("--")]
    return max(flags, key=len) if flags else ""


def _annotation(param, name: str) -> Any:
    d = param.type_descriptor
    if getattr(param, "is_flag", False):
        return bool
    if d.is_choice:
        return Literal[tuple(getattr(c, "value", c) for c in d.choices)]
    if param.multiple:
        return Union[str, list[Scalar]]
    if d.annotation is int:
        return int
    if d.annotation is float:
        return float
    if name in COMMA_LISTS:
        return Union[Scalar, list[Scalar]]
    return Scalar


def tool_options(command, drop: tuple[str, ...] = (), only: tuple[str, ...] | None = None,
                 required: tuple[str, ...] = ()) -> list[ToolOption]:
    """The tool's options, from a click command's parameters (`--json` is the runner's)."""
    out = []
    for p in command.params:
        flag = long_flag(p)
        name = flag[2:].replace("-", "_") if flag else p.name
        if name == "json" or getattr(p, "hidden", False) or name in drop or (only is not None and name not in only):
            continue
        ann = _annotation(p, name)
        if name in required or p.required:
            default = inspect.Parameter.empty
        else:
            default = p.default.value if isinstance(p.default, Enum) else p.default
            if isinstance(default, (list, tuple)):
                default = list(default) or None
            if default is None:
                ann = Optional[ann]
        out.append(ToolOption(name, flag, p.name, Annotated[ann, Field(description=p.help or "")], default,
                              bool(p.multiple), bool(getattr(p, "is_flag", False))))
    return out


def signature(options: list[ToolOption]) -> inspect.Signature:
    req = [o for o in options if o.default is inspect.Parameter.empty]
    rest = [o for o in options if o.default is not inspect.Parameter.empty]
    return inspect.Signature([inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                                annotation=o.annotation) for o in req + rest],
                             return_annotation=dict[str, Any])


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def command_line(options: list[ToolOption], arguments: dict[str, Any]) -> list[str]:
    """Validated tool arguments → argv. None and False leave the option out (the CLI default applies)."""
    by = {o.name: o for o in options}
    argv: list[str] = []
    positional: list[str] = []
    for key, value in arguments.items():
        o = by[key]
        if value is None or value is False or (o.default is not inspect.Parameter.empty and value == o.default):
            continue
        if not o.flag:
            positional.append(_text(value))
        elif o.is_flag:
            argv.append(o.flag)
        elif o.multiple:
            for v in (value if isinstance(value, list) else [value]):
                argv += [o.flag, _text(v)]
        elif isinstance(value, list):
            argv += [o.flag, ",".join(_text(v) for v in value)]
        else:
            argv += [o.flag, _text(value)]
    return argv + (["--", *positional] if positional else [])


def parameter_values(options: list[ToolOption], arguments: dict[str, Any]) -> dict[str, Any]:
    """Validated tool arguments → the command's parameter values by parameter name, as a command
    line's parser hands them over (command_line's text: a string, a list of them for a repeated
    option, True for a flag); None, False and a default leave the parameter to its default."""
    by = {o.name: o for o in options}
    values: dict[str, Any] = {}
    for key, value in arguments.items():
        o = by[key]
        if value is None or value is False or (o.default is not inspect.Parameter.empty and value == o.default):
            continue
        if o.is_flag:
            values[o.param] = True
        elif o.multiple:
            values[o.param] = [_text(v) for v in (value if isinstance(value, list) else [value])]
        elif isinstance(value, list):
            values[o.param] = ",".join(_text(v) for v in value)
        else:
            values[o.param] = _text(value)
    return values


def unknown_arguments(tool: str, given: dict[str, Any], known: list[str]) -> str | None:
    """One line naming the first argument the tool doesn't take and the nearest one it does."""
    bad = [k for k in given if k not in known]
    if not bad:
        return None
    k = bad[0]
    near = difflib.get_close_matches(k, known, n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else f"; it takes {', '.join(known)}"
    from planner.launch import is_engine_flag

    if "engine_args" in known and is_engine_flag(k):
        hint = f"; an engine launch flag goes in engine_args (e.g. engine_args: \"--{k.replace('_', '-')} …\")"
    more = f" (and {len(bad) - 1} more unknown)" if len(bad) > 1 else ""
    return f"{tool}: unknown argument '{k}'{hint}{more}"
