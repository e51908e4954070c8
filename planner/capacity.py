"""KV capacity: the pool per GPU, distinct tokens the group can hold, and the most requests
that fit at a context length.

The pool is the deployment's engine's (planner.engines): SGLang's mem_fraction_static of the
free memory before weights, minus the weights, in whole pages; or vLLM's gpu_memory_utilization
of total memory minus weights, profiled activations and non-torch memory. Both start from the
bytes torch reports (`HardwareSpec.usable_hbm_bytes`), not the datasheet's "GB". A deployment
whose weights or reserve don't fit has no pool: capacity 0 and the plan's reason. Requests take
whole pages (the engine's page size). Replication is
respected: TP keeps T/s copies of every token, where s is how many ways it can split KV by heads
(s = 1 for MLA's single latent), so its distinct tokens are s × pool/bytes-per-token instead of
T × pool/bytes-per-token. Max concurrency is found on the step model itself (bisection on the
busiest rank's resident KV), so it agrees with `step_cost(...).kv_fits` by construction.

Two kinds of memory: per-token pages and per-request state slots (recurrent states,
DeepSeek-V4's compressor rings). With a separate state pool (SGLang's mamba pool, its
`mamba_full_memory_ratio` and the running-request cap of slots // 3) each must fit its own pool;
with one shared pool (vLLM) both fit it together. The wall is whichever runs out first
(`Capacity.binding_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.deployment import Deployment
from planner.engines.base import MemoryPlan
from planner.engines.base import kv_bytes_on_rank
from planner.host_capacity import TierWalls, decode_kv_fits, tier_walls
from planner.layouts.base import ShareInputs
from planner.layouts.tp import kv_split
from planner.load import DecodeLoad
from planner.step import decode_resident_bytes, kv_pool_bytes, memory_fits, weights_resident_bytes

MAX_REQUESTS = float(1 << 26)


def kv_split_ways(dep: Deployment) -> float:
    """How many ways TP splits each token's KV by heads (s = min(T, KV heads); 1 for MLA)."""
    inp = ShareInputs(dep.model, dep.ranks, DecodeLoad.equal(1, 1), np.zeros(1), dep.kv_dtype, dep.page_tokens)
    return kv_split(inp)


def kv_replication(dep: Deployment) -> float:
    """Copies of each token's KV across the group: the ranks that split it by heads over the ways
    they split it (the placement's: T/s under TP, R/s under attention TP inside a DP group; 1 for
    layouts that keep a request on one rank or split it by tokens), weighted over the layers'
    variants by their bytes."""
    r = dep.placement.head_split_ranks
    if r <= 1:
        return 1.0
    full = kv_bytes_per_token(dep)
    return r * kv_bytes_on_rank(dep) / full if full > 0 else 1.0


def kv_bytes_per_token(dep: Deployment) -> float:
    """KV bytes one context token costs across all layers below every window (one full copy)."""
    return dep.model.kv_bytes_per_token(dep.kv_dtype)


@dataclass(frozen=True)
class Capacity:
    memory: MemoryPlan  # how the engine sized the pool (and whether it could)
    kv_pool_bytes_per_gpu: float
    weights_resident_bytes_per_gpu: float
    kv_bytes_per_token: float  # all layers, one full copy
    kv_replication: float
    distinct_tokens: float  # across the deployment (all replicas)
    context: np.ndarray  # [P]
    max_concurrency: np.ndarray  # [P] requests across the deployment
    host_tier: TierWalls | None = None  # with a host KV tier: its two walls and the HBM-only count
    state_bytes_per_request: float = 0.0  # all layers, one full copy
    state_pool_bytes_per_gpu: float | None = None  # the engine's separate state pool (None: shared with KV)
    binding_memory: tuple[str, ...] = ()  # [P] 'kv_pages' | 'state_slots' | 'shared_pool' at max concurrency


def max_concurrency(dep: Deployment, context, fits=None) -> np.ndarray:
    """Largest B (across the deployment) whose busiest rank's KV fits the pool, per context.
    `fits(dep, load)` [P] bool replaces the test (planner.host_capacity's walls; None: the
    deployment's own, both walls when it has a host tier)."""
    ctx = np.atleast_1d(np.asarray(context, dtype=np.float64))
    lo = np.zeros_like(ctx)  # fits (B = 0 always fits when the pool is positive)
    hi = np.full_like(ctx, MAX_REQUESTS)
    pool = kv_pool_bytes(dep)
    if pool <= 0:
        return lo
    test = fits if fits is not None else (decode_kv_fits if dep.host_tier is not None else None)  # NOTE: issue 17's hook
    state_pool, window_pool = dep.memory.state_wall_bytes, dep.memory.window_pool_bytes

    def fits(batch):
        load = DecodeLoad.equal(batch, ctx)
        if test is not None:
            return test(dep, load)
        kv, state, window = decode_resident_bytes(dep, load)
        return memory_fits(kv, state, pool, state_pool, window, window_pool)

    fits_hi = fits(hi)
    lo = np.where(fits_hi, hi, lo)
    while True:
        open_ = (hi - lo > 1) & ~fits_hi
        if not open_.any():
            break
        mid = np.floor((lo + hi) / 2)
        ok = fits(mid)
        lo = np.where(open_ & ok, mid, lo)
        hi = np.where(open_ & ~ok, mid, hi)
    return lo


def capacity(dep: Deployment, context) -> Capacity:
    pool = kv_pool_bytes(dep)
    per_tok = kv_bytes_per_token(dep)
    rep = kv_replication(dep)
    # NOTE: with SGLang's hybrid SWA pools the full layers' tokens bind: count them at every layer's bytes
    plan = dep.memory
    token_pool = plan.kv_pool_tokens * plan.kv_bytes_per_token if plan.window_pool_bytes is not None else max(pool, 0.0)
    distinct = token_pool * dep.ranks / rep / per_tok * dep.replicas
    ctx = np.atleast_1d(np.asarray(context, dtype=np.float64))
    most = max_concurrency(dep, ctx)
    return Capacity(
        memory=dep.memory,
        kv_pool_bytes_per_gpu=max(pool, 0.0),  # NOTE: never negative; weights that don't fit leave 0
        weights_resident_bytes_per_gpu=float(sum(weights_resident_bytes(dep).values())),
        kv_bytes_per_token=per_tok,
        kv_replication=rep,
        distinct_tokens=float(np.floor(distinct)),
        context=ctx,
        max_concurrency=most,
        host_tier=tier_walls(dep, ctx) if dep.host_tier is not None else None,
        state_bytes_per_request=dep.model.state_bytes_per_request(dep.kv_dtype),
        state_pool_bytes_per_gpu=dep.memory.state_wall_bytes,
        binding_memory=binding_memory(dep, ctx, most),
    )


def binding_memory(dep: Deployment, ctx: np.ndarray, most: np.ndarray) -> tuple[str, ...]:
    """Which memory one more request would overflow at each context: 'kv_pages', 'state_slots'
    (a separate state pool or its running-request cap), 'shared_pool' (one pool for both), or with
    SGLang's hybrid SWA pools 'full_attention_pool' / 'sliding_window_pool'."""
    pool, state_pool = kv_pool_bytes(dep), dep.memory.state_wall_bytes
    if pool <= 0:
        return tuple("none" for _ in ctx)
    kv, state, window = decode_resident_bytes(dep, DecodeLoad.equal(most + 1.0, ctx))
    window_pool = dep.memory.window_pool_bytes
    if window_pool is not None:
        return tuple("sliding_window_pool" if w > window_pool else "full_attention_pool"
                     for w in np.broadcast_to(window, ctx.shape))
    if state_pool is None:
        return tuple("shared_pool" if s > 0 else "kv_pages" for s in np.broadcast_to(state, ctx.shape))
    return tuple("kv_pages" if k > pool else "state_slots" for k in kv)
