"""Option values converted without building a pydantic validator for each option, when the value is
one that validator would return unchanged or convert the obvious way (issue 32: one CLI call under
200 ms).

typer ≥ 0.2x converts every option of the command it runs through a pydantic `TypeAdapter` built
for that option (typer/core.py `_TyperParameter.get_runtime_param` → typer/_coercion.py
`build_runtime_param` → typer/_adapters.py `try_build_adapter`): ~25 validators for `floor`, ~16 ms
of a call, and the first one imports pydantic's plugin loader with `importlib.metadata` and `email`
(~10 ms more). The values a call converts are plain: a `str` stays itself, `--batch 64` becomes
`64`, `--gpus 8` an int, `--tpot-ms 50` a float, `--attn dp` an enum member, a default its own
value. `install()` puts a runtime parameter in front of typer's that returns those values itself
and hands every other value (and every other kind of option: lists, paths, files, ranges, custom
parsers) to typer's own adapter, built then, so any value typer would refuse is refused by typer,
with its message, and any value typer would convert otherwise is converted by typer.

What the fast path accepts, and what pydantic's lax mode returns for the same input (the adapter
typer builds; tests/cli/test_fast_coercion.py checks each against it):
- `str` option: a `str` value → itself (typer: `_parse_cli_str` → `str(value)`, then `str`);
- `int`: an `int` (not `bool`) → itself; a `str` of plain decimal digits, optional `-`, no leading
  zero, ≤ 18 digits → `int(value)`;
- `float`: a `float` → itself; an `int` (not `bool`) → `float(value)`; a `str` of decimal digits
  with an optional `-` and fraction, no leading zero, ≤ 15 digits → `float(value)`;
- `bool`: a `bool` → itself;
- an `Enum`: typer's own `coerce_cli_choice` (typer/_param_types.py; no pydantic in it), the
  function typer's choice validator calls.
Anything else, or an exception in the fast path, goes to typer's adapter.

Does not: change what typer parses, prints or refuses (tests/cli/test_startup.py compares ~30
commands' bytes with main's), or apply when typer lacks the private names it wraps (a typer
without `typer._coercion.RuntimeParam` runs as it is, slower).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_MISS = object()


def _fast_value(annotation: Any, value: Any, info: Any, ctx: Any) -> Any:
    """The value typer's adapter would return, or _MISS where this can't tell."""
    t = type(value)
    if annotation is str:
        return value if t is str else _MISS
    if annotation is int:
        if t is int:
            return value
        if t is str and _INT.fullmatch(value):
            return int(value)
        return _MISS
    if annotation is float:
        if t is float:
            return value
        if t is int:
            return float(value)
        if t is str and _FLOAT.fullmatch(value):
            return float(value)
        return _MISS
    if annotation is bool:
        return value if t is bool else _MISS
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        from typer._param_types import coerce_cli_choice

        try:
            return coerce_cli_choice(value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
        except Exception:  # typer's adapter raises its own error for it
            return _MISS
    return _MISS


def _plain(descriptor: Any) -> bool:
    """An option whose values the fast path may convert: one of the types above, no file, no
    custom parser, no range or clamp."""
    info, ann = descriptor.parameter_info, descriptor.annotation
    if descriptor.file_annotation is not None or info.parser is not None or getattr(info, "click_type", None) is not None:
        return False
    if info.min is not None or info.max is not None or info.clamp:
        return False
    return ann in (str, int, float, bool) or (isinstance(ann, type) and issubclass(ann, Enum))


def install() -> bool:
    """Wrap typer's `build_runtime_param` (once per process); False where this typer lacks it."""
    try:
        from dataclasses import dataclass, field

        import typer.core as core
        from typer._coercion import RuntimeParam
    except ImportError:
        return False
    original = getattr(core, "build_runtime_param", None)
    if original is None or getattr(original, "_floorfirst_fast", False):
        return original is not None

    @dataclass(frozen=True)
    class FastRuntimeParam(RuntimeParam):  # type: ignore[misc]
        descriptor: Any = None
        _slow: list = field(default_factory=list, compare=False, repr=False)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            out = _fast_value(self.annotation, value, self.parameter_info, ctx)
            if out is not _MISS:
                return out
            if not self._slow:
                self._slow.append(original(self.descriptor))
            return self._slow[0]._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor: Any) -> Any:
        if _plain(descriptor):
            return FastRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                                    descriptor=descriptor)
        return original(descriptor)

    build_runtime_param._floorfirst_fast = True  # type: ignore[attr-defined]
    build_runtime_param.original = original  # type: ignore[attr-defined]
    core.build_runtime_param = build_runtime_param
    return True
