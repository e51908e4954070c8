"""Step-time tables of a deployment with a host KV tier (planner.host_tier): what the serving loop,
the policy and the simulator need to run with it, derived from the planner once at compile.

`compile_tables` probes the planner as usual (a tiered deployment's base, prefill and prefix probes
carry no misses: 1-token contexts and prefill chunks fetch nothing; HiSparse is decode-side), then
`with_host_tier` rewrites three things:

- the host-link term: a decode request's misses per step are top-k · (1 − r) · f · amplification
  rows, with f = 1 − b/L. The tables' per-request terms are Σ min(L, top-k) (c1) and Σ L (c2), so
  the host-link resource's c1 is the planner's host-link seconds of one request at a far probe
  context divided by top-k · f there: every decode is priced at f = 1. NOTE: exact to within b/L
  for requests past their budget (3 % at 128K with 4,096 slots), and it charges requests shorter
  than their budget misses they don't have — conservative for the tier, and what a per-request
  term of the tables can say;
- the KV wall: the loop counts context tokens against `kv_pool_bytes / kv_bytes_per_token`. With
  the tier a request costs HBM for its resident components plus a fixed budget, and host memory for
  its tiered tokens, so each layout's pool becomes the KV-equivalent bytes of the tokens both walls
  admit at the tier's `reference_context_tokens` (planner.host_capacity's walls, on the planner's
  busiest-rank shares): exact for requests at that context;
- moves: a request moved between owners takes its host pages along; the tables say which fraction
  of a token's KV bytes lives in host memory and the host link's rate, so a transition prices that
  part over the host link (runtime_policy/transitions.py).

Does not: switch the tier on or off at run time (a tiered and an HBM-only deployment are two
compiled tables; the simulator compares them).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import planner
from planner.host_capacity import decode_tier
from planner.host_tier import access_pattern, host_fraction
from planner.resources.vector import TIMED_RESOURCES

HOST = TIMED_RESOURCES.index("host_link")
FAR_PROBE_BUDGETS = 64.0  # the far probe's context, in budgets (f = 1 − 1/64 there)


def _tiered_fraction(dep) -> float:
    from planner.host_tier import tiered_kv_fraction  # the layer-weighted fraction over every layer group

    return tiered_kv_fraction(dep.model, dep.kv_dtype)


def with_host_tier(tables, dep, model, deps: list) -> object:
    """`tables` (compiled for `dep`, which has a host tier) with the tier's host-link term, KV walls
    and host fraction; `deps` the per-layout deployments compile_tables probed (None: can't run)."""
    from runtime_policy.tables import kv_share

    spec = dep.host_tier
    c1 = tables.c1_s.copy()
    c2 = tables.c2_s.copy()
    pools = tables.info.kv_pool_bytes.copy()
    ref = float(spec.reference_context_tokens)
    far = max(FAR_PROBE_BUDGETS * spec.hbm_budget_tokens, 2.0 * tables.topk)
    f_far = float(host_fraction(far, spec.hbm_budget_tokens))
    for i, d in enumerate(deps):
        if d is None:
            continue
        cost = planner.step_cost(d, planner.DecodeLoad.equal(1.0, far), pricing=None)
        c1[i, HOST] = float(model.terms_s(cost)[HOST, 0]) / (min(far, tables.topk) * f_far)
        c2[i, HOST] = 0.0
        owner = bool(tables.info.is_owner[i])
        probe = decode_tier(d, planner.DecodeLoad.equal(float(d.ranks) if owner else 1.0, ref))
        hbm = float(probe.hbm_kv_resident_bytes[0])
        host = float(probe.host_kv_resident_bytes[0])
        pool = float(d.memory.kv_pool_bytes)
        # requests of `ref` tokens the busiest rank holds (one per rank for owners, 1 for spread)
        held = min(pool / hbm if hbm > 0 else np.inf, probe.host_pool_bytes / host if host > 0 else np.inf)
        share = 1.0 if owner else kv_share(d)
        pools[i] = held * ref * tables.kv_bytes_per_token * share if pool > 0 else pools[i]
    k = tables.layouts.index(dep.attn)
    budget = tables.memory_budget_bytes + (float(pools[k]) - float(tables.info.kv_pool_bytes[k]))
    for a in (c1, c2, pools):
        a.setflags(write=False)
    info = replace(tables.info, kv_pool_bytes=pools)
    pricing = planner.Pricing.datasheet(dep.hardware)
    return replace(tables, c1_s=c1, c2_s=c2, info=info, memory_budget_bytes=budget,
                   host_kv_fraction=_tiered_fraction(dep), host_link_bytes_per_s=pricing.host_link_bytes_per_s)
