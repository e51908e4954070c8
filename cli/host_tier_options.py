"""The `--host-tier` options (capacity, compare, walls, simulate): a host KV tier for sparse attention
(planner.host_tier), its per-request HBM budget, locality and fetch unit, and the line that says
which layer groups it tiers."""

from __future__ import annotations

from typing import Annotated

import typer

from floorfirst.planning import tier_document  # noqa: F401  (the JSON view, shared with the Python API)
from floorfirst.points import host_tier_spec as _host_tier_spec
from planner.host_tier import DEFAULT_BUDGET_TOKENS, DEFAULT_LOCALITY, HostTierSpec, tiered_groups

HostTierOpt = Annotated[bool, typer.Option("--host-tier", help="Keep sparse attention's KV in host memory with a per-request HBM budget; misses cross the host link (priced as host_link).")]
BudgetOpt = Annotated[int, typer.Option("--hbm-budget-tokens", help="With --host-tier: HBM slots per request and tiered layer, in entries (DeepSeek-V4 C4: compressed entries of 4 tokens; SGLang HiSparse device_buffer_size).")]
LocalityOpt = Annotated[float, typer.Option("--locality", help="With --host-tier: fraction of a request's top-k its previous step touched (default 0.8, a stated choice: see planner/host_tier.py).")]
HostPageOpt = Annotated[int, typer.Option("--host-page-rows", help="With --host-tier: rows per host-link fetch unit (1: entries; 64: pages).")]


def host_tier_spec(enabled: bool, budget: int = DEFAULT_BUDGET_TOKENS, locality: float = DEFAULT_LOCALITY,
                   page_rows: int = 1) -> HostTierSpec | None:
    """The tier the options describe, or None without --host-tier; one SpecError line if invalid."""
    return _host_tier_spec(enabled, budget, locality, page_rows)


def tier_line(dep) -> str:
    """One line: which layer groups the tier keeps in host memory, which stay whole in HBM."""
    m, spec = dep.model, dep.host_tier
    tiered = tiered_groups(m)
    names = {id(v) for v, _, _ in tiered}
    rest = [f"{v.describe()}×{n}" for v, n in m.mixers if v is not None and id(v) not in names]
    head = "; ".join(f"{'+'.join(p.tiered)} of {v.describe()}×{n} in host memory ({', '.join(p.resident)} in HBM)"
                     for v, n, p in tiered)
    tail = f"; {', '.join(rest)} whole in HBM" if rest else ""
    return (f"host tier ({m.num_layers} layers): {head}{tail}; {spec.hbm_budget_tokens:,} HBM slots per request and "
            f"tiered layer, locality {spec.locality:g}, {spec.page_rows}-row fetches")
