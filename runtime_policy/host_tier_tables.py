"""Step-time tables of a deployment with a host KV tier (planner.host_tier): what the serving loop,
the policy and the simulator need to run with it, derived from the planner once at compile.

`compile_tables` probes the planner as usual (a tiered deployment's base, prefill and prefix probes
carry no misses: 1-token contexts and prefill chunks fetch nothing; HiSparse is decode-side), then
`with_host_tier` rewrites three things:

- the host-link term: a decode request's misses per step are top-k · (1 − r) · f · amplification
  rows, with f = 1 − b/L. The tables' per-request terms are Σ min(L, top-k) (c1) and Σ L (c2), so
  the host-link resource's c1 is the planner's host-link seconds of one request at a far probe
  context divided by top-k · f there (f in each tiered group's entries: `far_host_fraction`):
  every decode is priced at f = 1. NOTE: exact to within b/L
  for requests past their budget (3 % at 128K with 4,096 slots), and it charges requests shorter
  than their budget misses they don't have — conservative for the tier, and what a per-request
  term of the tables can say;
- the KV wall: the loop counts a request as its context + the tables' slack at the tables' rate
  (runtime_policy/kv_ledger.py) against `kv_pool_bytes`. With the tier a request costs HBM for its
  resident components plus a fixed budget (and its states, in the KV pool where they share it),
  and host memory for its tiered entries, so each layout's pool becomes the ledger's bytes of the
  requests both walls admit at the tier's `reference_context_tokens` (planner.host_capacity's
  walls, on the planner's busiest-rank shares; `held_at_reference`): exact for requests at that
  context (tests/runtime_policy/test_host_tier_tables.py holds it to `tier_walls(...).held`);
- moves: a request moved between owners takes its host pages along; the tables say which fraction
  of a token's KV bytes lives in host memory and the host link's rate, so a transition prices that
  part over the host link (runtime_policy/transitions.py).

With `compile_tables(..., tier_choice=True)` (`twin_tables`) the tables carry 2L layouts: the L
HBM-only layouts as compiled without the tier, then their tiered twins named "<layout>+host" (the
same base, prefill and prefix rows — a tiered deployment's probes fetch nothing, so they are the
HBM-only ones; the host-link term, pool and host fraction from `with_host_tier`). `LayoutInfo`
says which layouts run tiered (`host_tier`), their host fraction, each one's twin, and each one's
move budget in the loop's KV-equivalent bytes (HBM-only: the engine's static budget; a twin: that
plus what the tier adds to its layout's pool, the rule `with_host_tier` applies to the
deployment's layout). The policy then weighs a twin like any layout, and transitions.py prices a
switch that turns the tier on (spill) or off (fill). Without twins (a fixed tiered run, or none)
the tables are as before.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import planner
from planner.deployment import replace_deployment
from planner.errors import SpecError
from planner.host_capacity import decode_tier
from planner.host_tier import entry_bytes, host_fraction, tiered_groups
from planner.resources.vector import TIMED_RESOURCES

HOST = TIMED_RESOURCES.index("host_link")
FAR_PROBE_BUDGETS = 64.0  # the far probe's context, in budgets (f = 1 − 1/64 there)
# LayoutInfo's per-layout arrays a twin copies from the tiered tables
PER_LAYOUT = ("kv_pool_bytes", "weights_bytes", "attn_weights_bytes", "group_share", "owner_groups", "extra_slack_tokens",
              "max_requests")
TWIN_SUFFIX = "+host"  # a tiered twin's name: its HBM-only layout's name + this


def twin_name(layout: str) -> str:
    return layout + TWIN_SUFFIX


def twin_layout_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The layouts of twin tables: `names`, then their twins, in that order (their indices)."""
    return tuple(names) + tuple(twin_name(n) for n in names)


def _tiered_fraction(dep, rate: float) -> float:
    """Of the ledger's bytes per token (`rate`, tables.kv_bytes_per_token), the part a host tier
    keeps in host memory: planner.host_tier.tiered_kv_fraction is of the bytes below every window
    (DSV3.2 bf16: 0.897, the same figure), rescaled to the rate past them (DeepSeek-V4-Flash:
    21 C4 layers × 146 B / 3,850.25 B = 0.796, where below the windows it was 0.106)."""
    from planner.host_tier import tiered_kv_fraction

    f = tiered_kv_fraction(dep.model, dep.kv_dtype)
    below = dep.model.kv_bytes_per_token(dep.kv_dtype)
    return f if rate == below else f * below / rate


def far_host_fraction(model, kv_dtype: str, far_tokens: float, budget: float) -> float:
    """f = 1 − b/E at the far probe, each tiered group in its own entries (planner.host_tier
    host_fraction with its pattern's tokens_per_entry: DSA 1 − b/L; a V4 C4 layer 1 − b/(L/4)).
    NOTE: groups of different entry sizes are weighted by the bytes their selections read
    (layers × selected entries × entry bytes), the host link's share of each (one group in every
    registered model: exact there)."""
    groups = tiered_groups(model)
    w = [n * pat.selected_entries * entry_bytes(v, pat, kv_dtype) for v, n, pat in groups]
    f = [float(host_fraction(far_tokens, budget, pat.tokens_per_entry)) for _, _, pat in groups]
    return sum(a * b for a, b in zip(w, f)) / sum(w) if sum(w) > 0 else 1.0


def held_at_reference(d, ref: float) -> float:
    """Requests of `ref` tokens the busiest rank of `d` holds with the tier (its owner group's),
    fractional: the smaller of the HBM wall — resident components + budgets, and the
    per-request states (DeepSeek-V4's compressor rings) where they share the KV pool, else their
    own pool's cap — and the host wall (planner.host_capacity's walls, on the same busiest-rank
    shares: `tier_walls(...).held` is this, floored, times the owners)."""
    from planner.step import decode_resident_bytes

    load = planner.DecodeLoad.equal(float(d.placement.owner_groups), ref)  # one request per owner group
    probe = decode_tier(d, load)
    hbm, host = float(probe.hbm_kv_resident_bytes[0]), float(probe.host_kv_resident_bytes[0])
    state = float(decode_resident_bytes(d, load)[1][0]) if d.model.has_state else 0.0
    plan = d.memory
    walls = [probe.host_pool_bytes / host if host > 0 else np.inf]
    if plan.state_wall_bytes is None:
        hbm += state
    elif state > 0:
        walls.append(plan.state_wall_bytes / state)
    walls.append(plan.kv_pool_bytes / hbm if hbm > 0 else np.inf)
    return float(min(walls))


def with_host_tier(tables, dep, model, deps: list) -> object:
    """`tables` (compiled for `dep`, which has a host tier) with the tier's host-link term, KV walls
    and host fraction; `deps` the per-layout deployments compile_tables probed (None: can't run)."""
    spec = dep.host_tier
    c1 = tables.c1_s.copy()
    c2 = tables.c2_s.copy()
    pools = tables.info.kv_pool_bytes.copy()
    ref = float(spec.reference_context_tokens)
    far = max(FAR_PROBE_BUDGETS * spec.hbm_budget_tokens, 2.0 * tables.topk)
    f_far = far_host_fraction(dep.model, dep.kv_dtype, far, spec.hbm_budget_tokens)
    per_request = (ref + tables.request_slack_tokens) * tables.kv_bytes_per_token  # the ledger's bytes at ref
    for i, d in enumerate(deps):
        if d is None:
            continue
        cost = planner.step_cost(d, planner.DecodeLoad.equal(1.0, far), pricing=None)
        c1[i, HOST] = float(model.terms_s(cost)[HOST, 0]) / (min(far, tables.topk) * f_far)
        c2[i, HOST] = 0.0
        if d.memory.kv_pool_bytes > 0:
            pools[i] = held_at_reference(d, ref) * per_request * float(tables.info.group_share[i])
    k = tables.layouts.index(dep.attn)
    budget = tables.memory_budget_bytes + (float(pools[k]) - float(tables.info.kv_pool_bytes[k]))
    for a in (c1, c2, pools):
        a.setflags(write=False)
    info = replace(tables.info, kv_pool_bytes=pools)
    pricing = planner.Pricing.datasheet(dep.hardware)
    return replace(tables, c1_s=c1, c2_s=c2, info=info, memory_budget_bytes=budget,
                   host_kv_fraction=_tiered_fraction(dep, tables.kv_bytes_per_token),
                   host_link_bytes_per_s=pricing.host_link_bytes_per_s)


def twin_tables(dep, model, max_batch: int, max_prefill_tokens: int):
    """The tables of `dep` (which has a host tier) with both tier choices: L HBM-only layouts, then
    their L tiered twins (module docstring). SpecError (one line) without a tier."""
    from runtime_policy.tables import compile_tables, layout_deployments

    if dep.host_tier is None:
        raise SpecError("tier_choice needs a deployment with a host tier (host_tier is None)")
    plain = compile_tables(replace_deployment(dep, host_tier=None), model, max_batch, max_prefill_tokens)
    # NOTE: the tiered half is `with_host_tier` of the HBM-only tables: compile_tables of the tiered
    # deployment probes the same base, prefill and prefix rows (they fetch nothing), so this saves
    # a second compile (tests/runtime_policy/test_host_tier_twins.py holds the two equal)
    tiered = with_host_tier(plain, dep, model, layout_deployments(dep, plain.layouts))
    n, p, t = len(plain.layouts), plain.info, tiered.info
    cat = lambda a, b, axis=0: np.concatenate([a, b], axis=axis)  # noqa: E731
    runs = p.kv_pool_bytes >= 0
    budget = cat(np.full(n, plain.memory_budget_bytes),
                 np.where(runs, plain.memory_budget_bytes + t.kv_pool_bytes - p.kv_pool_bytes, -1.0))
    both = {f: cat(getattr(p, f), getattr(t, f)) for f in PER_LAYOUT}
    info = replace(p, placements=p.placements * 2, schedulers=p.schedulers * 2, host_tier=cat(np.zeros(n, dtype=bool), runs),
                   host_kv_fraction=cat(np.zeros(n), np.where(runs, tiered.host_kv_fraction, 0.0)),
                   twin=cat(np.arange(n, 2 * n), np.arange(n)), memory_budget_bytes=budget, **both)
    base = cat(plain.base_s, tiered.base_s, 1)
    chunk = cat(plain.chunk_rows_s, tiered.chunk_rows_s, 1)
    nr = len(TIMED_RESOURCES)
    c1, c2 = cat(plain.c1_s, tiered.c1_s), cat(plain.c2_s, tiered.c2_s)
    for a in (base, chunk, c1, c2, info.host_tier, info.host_kv_fraction, info.twin, budget, *both.values()):
        a.setflags(write=False)
    return replace(plain, layouts=twin_layout_names(plain.layouts), base_s=base,
                   base_rows_py=base[: len(plain.base_rows_py)].tolist(), chunk_rows_s=chunk,
                   prefill_s=chunk[..., 0:nr], prefix_lo_s=chunk[..., nr:2 * nr], prefix_hi_s=chunk[..., 2 * nr:3 * nr],
                   c1_s=c1, c2_s=c2, info=info, host_kv_fraction=tiered.host_kv_fraction,
                   host_link_bytes_per_s=tiered.host_link_bytes_per_s)
