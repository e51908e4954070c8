"""Option choices read from the planner's registries when a command is registered.

An option typed `Annotated[str, typer.Option(...), LAYOUTS]` takes the attention layouts the
planner's registry holds at the moment its command is registered (`live(command)` in each command
module's `register`), so a new layout module — or a test's toy layout — shows up in `--attn`, in the
MCP tool schemas (cli/mcp_server.py reads the registered commands) and in the generated JSON
schemas (schemas/generate.py) with no CLI, MCP or schema edit. The command body receives the
plain string.

NOTE: typer builds its choices from an Enum in the signature; the Enum is made here, per
registration, from the registry, instead of being typed as a class at import (which is when the
layout names used to be restated).
"""

from __future__ import annotations

import functools
import inspect
from enum import Enum
from typing import Annotated, Callable, Optional, Sequence, get_args, get_origin


class Choices:
    """An Annotated marker: the option's choices are `names()` when the command is registered."""

    def __init__(self, what: str, names: Callable[[], Sequence[str]]):
        self.what = what
        self.names = names

    def __repr__(self) -> str:
        return f"Choices({self.what})"


def layout_names() -> tuple[str, ...]:
    """The attention layouts in the planner's registry order (`planner.ATTN_LAYOUTS`: each layout's
    declared `order`, then by name), which runtime_policy.tables.layout_names also reads."""
    import planner

    return tuple(planner.ATTN_LAYOUTS)


def moe_names() -> tuple[str, ...]:
    from planner.layouts.base import moe_splits

    return tuple(moe_splits())


def engine_choices() -> tuple[str, ...]:
    from planner.engines import engine_names

    return tuple(engine_names())


def policy_names() -> tuple[str, ...]:
    return (*layout_names(), "dynamic")


def variant_names() -> tuple[str, ...]:
    """Attention variant kinds, sorted: their registration order follows import order, which a
    process's history changes (a generated schema must not)."""
    from planner.models.attention.base import _REGISTRY

    return tuple(sorted(_REGISTRY.discover()))


def mlp_variant_names() -> tuple[str, ...]:
    from planner.models.mlp.base import _REGISTRY

    return tuple(sorted(_REGISTRY.discover()))


LAYOUTS = Choices("attention layout", layout_names)
MOE_SPLITS = Choices("MoE split", moe_names)
ENGINES = Choices("engine", engine_choices)
POLICIES = Choices("policy", policy_names)

# What schemas/generate.py fills each `"x-registry"` marker with.
REGISTRIES: dict[str, Callable[[], Sequence[str]]] = {
    "attention_layouts": layout_names, "moe_splits": moe_names, "engines": engine_choices,
    "policies": policy_names, "attention_variants": variant_names, "mlp_variants": mlp_variant_names,
}


def _choices(meta: Sequence) -> Choices | None:
    return next((m for m in meta if isinstance(m, Choices)), None)


def live(func: Callable) -> Callable:
    """`func` with every Choices-marked option typed as an Enum of its registry's names now."""
    sig = inspect.signature(func, eval_str=True)
    params, marked = [], set()
    for p in sig.parameters.values():
        ann = p.annotation
        if get_origin(ann) is Annotated and (mark := _choices(ann.__metadata__)) is not None:
            base = get_args(ann)[0]
            choice = Enum(f"{p.name.title()}Choice", {n: n for n in mark.names()}, type=str)
            typed = Optional[choice] if type(None) in get_args(base) else choice
            ann = Annotated[(typed, *(m for m in ann.__metadata__ if m is not mark))]
            marked.add(p.name)
        params.append(p.replace(annotation=ann))

    @functools.wraps(func)
    def command(*args, **kwargs):
        for k in marked:
            if isinstance(kwargs.get(k), Enum):
                kwargs[k] = kwargs[k].value
        return func(*args, **kwargs)

    command.__signature__ = sig.replace(parameters=params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command
