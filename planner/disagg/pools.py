"""What one prefill instance and one decode instance sustain, and a colocated deployment of the
same GPUs, at one input length (ISL) and output length (OSL), from the step model.

**Prefill instance.** Its scheduler takes, per owner group and step, up to the engine's chunk of
prompt tokens (planner.engines.scheduling: SGLang's chunked_prefill_size // dp, vLLM's
max_num_batched_tokens per engine core): whole prompts packed into one batch when ISL ≤ chunk
(SGLang python/sglang/srt/managers/schedule_policy.py `PrefillAdder`), else the prompt in chunks,
each attending to the chunks before it; all groups step together. A step's busiest rank is priced
as the step model prices a step, recomposed so that every group runs its batch:
- the linear work (projections on each owner, the MoE over every group's tokens, the collectives,
  the KV writes) is the step model's step of G·c tokens — for one group (TP, CP, DCP) its own
  prefill chunk of c tokens, for G owner groups G·c one-token decodes, which it spreads one owner's
  worth (c) per group, as a step where every group prefills does (the runtime tables' `base[n]`
  decomposition, runtime_policy/tables.py);
- the attention of the batch's prompts or chunk (the variants' prefill components — causal core,
  DSA's indexer — and the prefix read) replaces the decodes' or the packed chunk's: m prompts of ISL
  tokens each attend to themselves, not to one m·ISL-token request; one prefill samples one token
  per prompt (the step model prices no LM head for a prefill chunk), so the decodes' LM head and
  logit gather go.
Its walls: prompt throughput (the binding resource of its steps), the KV of the prompts in flight
(prefilling, or prefilled and waiting for the hand-off to finish: SGLang frees them at
`process_disagg_prefill_inflight_queue`, vLLM when the decode side's read notification arrives) against
its pool, and its activation memory (the chunk the engine's reserve covers: planner.disagg.roles).

**Decode instance.** B running requests at the mean context ISL + OSL/2 (a steady population is
uniformly spread over its output), one token each per step: the largest B whose step time meets
the TPOT target, whose KV fits the decode-role pool (planner.capacity's bisection on the step model)
and that the engine's running cap admits; it sustains B / (OSL · step) requests/s.

**Colocated.** One engine serves both: prefill steps take f = λ·t_pp of its time (t_pp = seconds of
prefill per request, from the prefill model above on the colocated deployment), so each decoding
request sees TPOT = t_d(B) + B·t_pp/OSL (SGLang runs prefill and decode batches apart, prefill
first: python/sglang/srt/managers/scheduler.py `get_next_batch_to_run`), and λ = B / (OSL·t_d + B·t_pp).
NOTE: vLLM mixes a chunk into the decodes' step; the time-share model prices the same work.

Step time: the optimistic floor (max over resources) or the pessimistic one (sum), as `compare`
ranks. Queueing delay is not priced (TTFT is a request's own prefill + hand-off at the load).

Does not: price the hand-off (planner.disagg.handoff) or choose instance counts (planner.disagg.search).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.capacity import max_concurrency
from planner.deployment import Deployment
from planner.errors import SpecError
from planner.layouts.base import SCALEOUT, SCALEUP
from planner.load import DecodeLoad
from planner.resources.vector import TIMED_RESOURCES, Pricing, ResourceTimes
from planner.step import StepCost, decode_resident_bytes, step_cost

FLOORS: tuple[str, ...] = ("max", "sum")
LM_HEAD_GATHER = "lm_head_gather"
BATCH_GRID_POINTS = 96
MAX_DECODE_BATCH = 1 << 20


def _floor(times: ResourceTimes, floor: str) -> np.ndarray:
    if floor not in FLOORS:
        raise SpecError(f"floor={floor!r} is not a floor; choose one of {', '.join(FLOORS)}")
    return times.floor_max_s if floor == "max" else times.floor_sum_s


def attention_components(dep: Deployment) -> frozenset[str]:
    """FLOP components a prefill batch's attention replaces: the variants' own (prefill and decode),
    the decode kernel's padded head rows and the LM head (all priced at bf16 by the step model)."""
    z = np.zeros(1)
    names = {"head_padding", "lm_head"}
    for v, _ in dep.model.mixers:
        names |= set(v.prefill_flops_by_component(z, z)) | set(v.decode_flops_by_component(np.ones(1)))
    return frozenset(names)


def _comp(cost: StepCost, resource: str, name: str) -> np.ndarray:
    return np.asarray(cost.components.get(resource, {}).get(name, 0.0), dtype=np.float64)


def recompose(dep: Deployment, base: StepCost, piece: StepCost, count, pricing: Pricing) -> tuple[ResourceTimes, np.ndarray]:
    """(times, scale-out bytes) of `base`'s linear work with its attention replaced by `count`
    copies of `piece`'s (module docstring)."""
    att = attention_components(dep)
    count = np.asarray(count, dtype=np.float64)
    flops_delta = sum((count * _comp(piece, "flops", k) - _comp(base, "flops", k) for k in att), np.zeros(1))
    reads = {k for c in (base, piece) for k in c.components.get("hbm_bytes", {}) if k.endswith("_read")}
    hbm = base.hbm_bytes + sum((count * _comp(piece, "hbm_bytes", k) - _comp(base, "hbm_bytes", k) for k in reads),
                               np.zeros(1))
    compute = (base.times.compute_s - base.fixed_latency_s + flops_delta / pricing.flops_per_s["bf16"]
               + count * piece.fixed_latency_s)
    up = base.network_bytes_by_tier[SCALEUP] - _comp(base, "network_bytes", LM_HEAD_GATHER)
    out = base.network_bytes_by_tier[SCALEOUT] - _comp(base, "network_bytes", f"{LM_HEAD_GATHER}@{SCALEOUT}")
    net = up / pricing.link_bytes_per_s + out / pricing.scaleout_link_bytes_per_s
    times = ResourceTimes(np.asarray(hbm / pricing.hbm_bytes_per_s, dtype=np.float64),
                          np.asarray(compute, dtype=np.float64), np.asarray(net, dtype=np.float64),
                          np.asarray(base.times.network_messages_s, dtype=np.float64))
    return times, np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class PrefillPool:
    """One prefill instance at one prompt length (module docstring); seconds and requests/s."""

    dep: Deployment
    prompt_tokens: float
    chunk_tokens_per_group: int
    prompts_per_step: int  # per group (packed prompts; 1 with chunks)
    chunk_tokens: np.ndarray  # [K] tokens each step runs per group (K chunks, or one packed step)
    step_s: np.ndarray  # [K]
    times: ResourceTimes  # [K] each step's resources
    binding: str  # resource binding the heaviest step
    request_s: float  # a request's own prefill: its step, or its chunks' steps
    compute_rate_requests_per_s: float  # the steps alone
    kv_request_bytes: float  # busiest rank, one prompt's KV
    max_in_flight_requests: float  # the instance's pool over that
    nic_busy_fraction: float  # share of the NIC its own collectives use

    def rate_requests_per_s(self, hold_s: float) -> tuple[float, str]:
        """Requests/s the instance sustains when each prompt's KV stays `hold_s` after its prefill
        (the hand-off), and what binds: its steps' resource or 'kv_in_flight'."""
        kv_rate = self.max_in_flight_requests / max(self.request_s + hold_s, 1e-30)
        if kv_rate < self.compute_rate_requests_per_s:
            return kv_rate, "kv_in_flight"
        return self.compute_rate_requests_per_s, self.binding


def prefill_pool(dep: Deployment, prompt_tokens: float, pricing: Pricing | None = None, floor: str = "max",
                 chunk_tokens: int | None = None) -> PrefillPool:
    """One prefill instance of `dep` at prompts of `prompt_tokens` (module docstring)."""
    pr = pricing or Pricing.datasheet(dep.hardware)
    isl = float(prompt_tokens)
    if not (math.isfinite(isl) and isl >= 1):
        raise SpecError(f"input length={prompt_tokens} must be ≥ 1 token")
    g = dep.placement.owner_groups
    c = int(chunk_tokens or dep.engine_model.scheduler(dep).chunk_tokens_per_group)
    if isl <= c:
        m = max(int(c // isl), 1)
        tok, piece, ctx, count = np.array([m * isl]), np.array([isl]), np.array([0.0]), np.array([float(m)])
    else:
        m = 1
        n = math.ceil(isl / c)
        piece = np.minimum(c, isl - c * np.arange(n)).astype(np.float64)
        ctx = c * np.arange(n, dtype=np.float64)
        tok, count = piece.copy(), np.ones(n)
    none = DecodeLoad.equal(np.zeros(tok.size), 1.0)
    base = (step_cost(dep, none, tok, pr) if g == 1 else step_cost(dep, DecodeLoad.equal(g * tok, 1.0), pricing=pr))
    one = step_cost(dep, none, piece, pr, prefill_context=ctx)
    times, scaleout = recompose(dep, base, one, count, pr)
    steps = _floor(times, floor)
    heavy = int(np.argmax(steps))
    binding = TIMED_RESOURCES[int(times.binding_index[heavy])]
    request_s = float(steps.sum())
    rate = g * m / request_s
    kv_req = float(decode_resident_bytes(dep, DecodeLoad.equal(1.0, isl))[0][0])
    pool = dep.memory.kv_pool_bytes
    in_flight = g * math.floor(pool / kv_req) if kv_req > 0 else math.inf
    busy = float((scaleout / pr.scaleout_link_bytes_per_s).sum() / request_s)
    return PrefillPool(dep, isl, c, m, tok, steps, times, binding, request_s, rate, kv_req, float(in_flight), busy)


@dataclass(frozen=True)
class DecodePool:
    """One decode instance at one (ISL, OSL) (module docstring)."""

    dep: Deployment
    context_tokens: float  # mean context of a running request
    batch: int  # running requests across the instance
    step_s: float
    binding: str  # 'tpot:<resource>' | 'kv_capacity' | 'running_cap' | 'none'
    kv_wall_requests: float
    running_cap_requests: float
    rate_requests_per_s: float
    nic_busy_fraction: float

    @property
    def feasible(self) -> bool:
        return self.batch >= 1


def _largest(ok, hi: int) -> int:
    """Largest B in [1, hi] with ok(B) (ok monotone: true then false); 0 if none."""
    if hi < 1:
        return 0
    grid = np.unique(np.round(np.geomspace(1, hi, min(BATCH_GRID_POINTS, hi))).astype(np.int64))
    good = ok(grid.astype(np.float64))
    if not good[0]:
        return 0
    last = int(np.nonzero(good)[0].max())
    lo = int(grid[last])
    up = int(grid[last + 1]) if last + 1 < grid.size else lo
    while up - lo > 1:
        mid = (lo + up) // 2
        if ok(np.array([float(mid)]))[0]:
            lo = mid
        else:
            up = mid
    return lo


def decode_limits(dep: Deployment, context_tokens: float) -> tuple[float, float]:
    """(KV wall, running cap) of an instance at `context_tokens` per request, requests."""
    kv = float(max_concurrency(dep, context_tokens)[0])
    cap = float(dep.engine_model.scheduler(dep).running_cap)
    return kv, cap


def decode_pool(dep: Deployment, prompt_tokens: float, output_tokens: float, tpot_s: float | None = None,
                pricing: Pricing | None = None, floor: str = "max", prefill_s_per_request: float = 0.0) -> DecodePool:
    """One decode instance of `dep` (module docstring). `prefill_s_per_request` > 0 prices a
    colocated instance instead: TPOT = t_d + B·t_pp/OSL and λ = B/(OSL·t_d + B·t_pp)."""
    pr = pricing or Pricing.datasheet(dep.hardware)
    if not (math.isfinite(output_tokens) and output_tokens >= 1):
        raise SpecError(f"output length={output_tokens} must be ≥ 1 token")
    ctx = float(prompt_tokens) + float(output_tokens) / 2.0
    kv, cap = decode_limits(dep, ctx)
    hi = int(min(kv, cap, MAX_DECODE_BATCH))
    osl, tpp = float(output_tokens), float(prefill_s_per_request)

    def step(b):
        return _floor(step_cost(dep, DecodeLoad.equal(b, ctx), pricing=pr).times, floor)

    def ok(b):
        return np.full(b.shape, True) if tpot_s is None else step(b) + b * tpp / osl <= tpot_s

    b = _largest(ok, hi)
    if b < 1:
        why = "kv_capacity" if hi < 1 else "tpot"
        return DecodePool(dep, ctx, 0, math.inf, why, kv, cap, 0.0, 0.0)
    cost = step_cost(dep, DecodeLoad.equal(float(b), ctx), pricing=pr)
    t = float(_floor(cost.times, floor)[0])
    if b >= kv:
        binding = "kv_capacity"
    elif b >= cap:
        binding = "running_cap"
    elif tpot_s is not None and b < hi:
        binding = f"tpot:{TIMED_RESOURCES[int(cost.times.binding_index[0])]}"
    else:
        binding = "none"
    rate = b / (osl * t + b * tpp)
    busy = float(cost.network_bytes_by_tier[SCALEOUT][0] / pr.scaleout_link_bytes_per_s / t)
    return DecodePool(dep, ctx, b, t, binding, kv, cap, rate, busy)
