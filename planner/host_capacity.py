"""Capacity with a host KV tier: the two walls.

With a tier, a request costs HBM for its resident components (DSA's indexer keys; DeepSeek-V4's
indexer keys, windows, compressor rings and its untiered C128/window layers) plus a fixed budget
of slots for its tiered entries in each tiered layer, and host memory for every tiered entry. So the most
requests a deployment holds at a context is the smaller of two walls:
- the HBM wall: the engine's KV pool over (resident bytes + budget bytes) per request on the
  busiest rank, states in their pool as the step model counts them — it grows with context only
  through the resident components;
- the host wall: host memory per GPU over the tiered bytes per request on the busiest rank.
Both are found by the same bisection as capacity without a tier (planner.capacity.max_concurrency),
on the same busiest-rank shares the step model prices, so they agree with `step_cost(...).kv_fits`.

Does not: price the misses (planner.host_tier, through the step model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.host_tier import HostTierCost, rank_tier, tiered_inputs
from planner.load import DecodeLoad


def decode_tier(dep, load: DecodeLoad) -> HostTierCost:
    """The host tier of a decode-only step on the busiest rank, every layer group (no pricing)."""
    from planner.step import group_load, share_inputs  # NOTE: planner.step imports planner.host_tier; import here

    g = group_load(load, dep.replicas)
    inps = share_inputs(dep, g, np.zeros(load.points))
    lay = dep.attention_layout
    views = [tiered_inputs(i) for i, _ in inps]
    return rank_tier(dep, [(i, lay.share(i), n, None if v is None else lay.share(v)) for (i, n), v in zip(inps, views)])


def _hbm_fits(dep, load: DecodeLoad, tier: HostTierCost) -> np.ndarray:
    """[P] the HBM wall: resident KV + budgets, and the per-request states (DeepSeek-V4's compressor
    rings), fit the engine's pools as `StepCost.kv_fits` counts them."""
    from planner.step import decode_resident_bytes, memory_fits

    state = decode_resident_bytes(dep, load)[1] if dep.model.has_state else np.zeros(load.points)
    plan = dep.memory
    return memory_fits(tier.hbm_kv_resident_bytes, state, plan.kv_pool_bytes, plan.state_wall_bytes)


def hbm_wall_fits(dep, load: DecodeLoad) -> np.ndarray:
    """[P] the HBM wall alone: resident components + budgets fit the engine's pool."""
    return _hbm_fits(dep, load, decode_tier(dep, load))


def host_wall_fits(dep, load: DecodeLoad) -> np.ndarray:
    """[P] the host wall alone: every tiered entry fits host memory."""
    return decode_tier(dep, load).host_fits


def decode_kv_fits(dep, load: DecodeLoad) -> np.ndarray:
    """[P] both walls (the tier's `StepCost.kv_fits` for a decode-only step)."""
    t = decode_tier(dep, load)
    return _hbm_fits(dep, load, t) & t.host_fits


@dataclass(frozen=True)
class TierWalls:
    """Requests held across the deployment at each context [P], by wall."""

    context: np.ndarray
    hbm_only: np.ndarray  # without the tier (all KV in HBM)
    hbm_wall: np.ndarray  # with the tier: the HBM budget wall alone
    host_wall: np.ndarray  # with the tier: the host-memory wall alone
    held: np.ndarray  # with the tier: both walls
    binding: np.ndarray  # 'hbm_budget' | 'host_memory' per context ('no_pool': the weights leave no KV pool)
    budget_tokens: int
    host_memory_bytes_per_gpu: float


def tier_walls(dep, context) -> TierWalls:
    from planner.capacity import max_concurrency
    from planner.deployment import replace_deployment

    ctx = np.atleast_1d(np.asarray(context, dtype=np.float64))
    hbm = max_concurrency(dep, ctx, fits=lambda d, load: hbm_wall_fits(d, load))
    host = max_concurrency(dep, ctx, fits=lambda d, load: host_wall_fits(d, load))
    held = max_concurrency(dep, ctx)
    without = max_concurrency(replace_deployment(dep, host_tier=None), ctx)
    # NOTE: a deployment whose weights leave no KV pool holds nothing; no wall binds it
    binding = np.where(host < hbm, "host_memory", "hbm_budget") if dep.memory.kv_pool_bytes > 0 else np.full(ctx.shape, "no_pool")
    return TierWalls(ctx, without, hbm, host, held, binding,
                     dep.host_tier.hbm_budget_tokens, dep.hardware.host_link.host_memory_bytes_per_gpu)
