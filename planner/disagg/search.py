"""Search xPyD splits of a GPU budget against the best colocated deployment of the same GPUs.

Candidates: every instance size that divides the budget and holds the weights (one node or whole
nodes), every registered attention layout × MoE split the model runs there — by default only those
an engine can launch (planner.disagg.launch: DOP and SPLASH's CP have no engine flag), dptp at its
default group count — each priced once as a prefill instance and once as a decode instance
(planner.disagg.pools, with the role's memory: planner.disagg.roles). A split is x prefill instances
of one candidate and y decode instances of another (x·size_p + y·size_d ≤ budget); it sustains

    λ = min(x·λ_p, y·λ_d, the hand-off's NIC walls)

where λ_p is a prefill instance's rate with each prompt's KV held until its hand-off is done, λ_d a
decode instance's at the TPOT target, and a NIC wall is a NIC's bandwidth over the hand-off bytes it
carries per request (the busiest sender's, over the prefill instance's owner groups; the busiest
receiver's, over the decode instance's). TTFT = the request's prefill + the hand-off's exposed tail
(+ one decode step where the decode side computes the last prompt token: vLLM). A split whose TTFT
misses its target, whose hand-off the engine can't make, or whose decode pool can't hold one
request is out, with the reason.

Ranking: without a rate, the most output tokens/s on the budget (then fewer GPUs); with a rate, the
fewest GPUs that sustain it (then the most headroom). Colocated deployments of the same budget
(replicas of one group, every size and layout) are ranked the same way.

Does not: simulate queues (TTFT carries no queueing delay), or mix layouts inside one pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.deployment import ATTN_LAYOUTS, MOE_SPLITS, Deployment, make_deployment
from planner.disagg.handoff import BACKENDS, HandOffPlan, backend_for, exposed_s, plan_handoff
from planner.disagg.launch import launchable
from planner.disagg.pools import DecodePool, PrefillPool, decode_pool, prefill_pool
from planner.disagg.roles import DisaggDeployment, RoleMemory, make_role_deployment
from planner.errors import SpecError
from planner.resources.vector import Pricing


@dataclass(frozen=True)
class Workload:
    """Lengths and targets one search answers for."""

    prompt_tokens: float
    output_tokens: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    rate_requests_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "output_tokens"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 1):
                raise SpecError(f"{name.split('_')[0]} length={v} must be ≥ 1 token")
        for name in ("ttft_s", "tpot_s", "rate_requests_per_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise SpecError(f"{name}={v} must be a positive number")


@dataclass(frozen=True)
class Candidate:
    """One instance (size, layout) priced for one role."""

    dep: Deployment
    memory: RoleMemory
    prefill: PrefillPool | None = None
    decode: DecodePool | None = None


@dataclass(frozen=True)
class DisaggOption:
    """One evaluated xPyD split (module docstring)."""

    deployment: DisaggDeployment
    prefill: PrefillPool
    decode: DecodePool
    handoff: HandOffPlan
    transfer_s: float
    exposed_s: float
    ttft_s: float
    prefill_instance_rate: float  # requests/s, with the hand-off's hold
    prefill_binding: str
    nic_prefill_rate: float  # requests/s a prefill instance's busiest NIC carries
    nic_decode_rate: float
    rate_requests_per_s: float
    binding: str  # 'prefill:<wall>' | 'decode:<wall>' | 'handoff:<side> nic'
    feasible: bool
    reason: str
    output_tokens: float

    @property
    def gpus(self) -> int:
        return self.deployment.gpus

    @property
    def output_tokens_per_s(self) -> float:
        return self.rate_requests_per_s * self.output_tokens

    @property
    def nic_utilization_fraction(self) -> float:
        """The busiest hand-off NIC's load at the split's rate, over its bandwidth."""
        d = self.deployment
        per_p = self.rate_requests_per_s / d.prefill_instances / self.nic_prefill_rate if self.nic_prefill_rate else 0.0
        per_d = self.rate_requests_per_s / d.decode_instances / self.nic_decode_rate if self.nic_decode_rate else 0.0
        return max(per_p, per_d)


@dataclass(frozen=True)
class ColocatedOption:
    dep: Deployment  # one replica group
    replicas: int
    prefill: PrefillPool
    decode: DecodePool  # priced colocated (prefill time shared)
    ttft_s: float
    rate_requests_per_s: float
    binding: str
    feasible: bool
    reason: str
    output_tokens: float

    @property
    def gpus(self) -> int:
        return self.dep.gpus * self.replicas

    @property
    def output_tokens_per_s(self) -> float:
        return self.rate_requests_per_s * self.output_tokens

    @property
    def tpot_s(self) -> float:
        d = self.decode
        return d.step_s + d.batch * (1.0 / self.prefill.compute_rate_requests_per_s) / self.output_tokens


@dataclass(frozen=True)
class SearchResult:
    workload: Workload
    gpus: int
    engine: str
    floor: str
    best: DisaggOption | None
    colocated: ColocatedOption | None
    options: tuple[DisaggOption, ...]  # every split evaluated, best first
    colocated_options: tuple[ColocatedOption, ...]
    skipped: tuple[dict, ...] = field(default_factory=tuple)  # candidates that can't run, with why


def instance_sizes(gpus: int, per_node: int, divide: bool = False) -> list[int]:
    """Sizes an instance can take inside `gpus` GPUs: divisors of a node, or whole nodes (`divide`:
    only sizes that divide `gpus`, for replicas of one colocated group)."""
    sizes = [s for s in range(1, per_node + 1) if per_node % s == 0 and s <= gpus]
    sizes += [k * per_node for k in range(2, gpus // per_node + 1)]
    return [s for s in sizes if not divide or gpus % s == 0]


def candidates(model, hardware, gpus: int, role: str, *, engine: str, kv_dtype=None, weight_dtype=None,
               any_layout: bool = False, sizes: list[int] | None = None) -> tuple[list[Candidate], list[dict]]:
    """Every (size, attn, moe) instance `role` can run in the budget (module docstring)."""
    per_node = hardware.peak.scaleup_domain_gpus
    out, skipped = [], []
    moes = [m for m in MOE_SPLITS if model.has_moe or m == "tp"]
    for size in sizes or instance_sizes(gpus, per_node):
        for attn in ATTN_LAYOUTS:
            for moe in moes:
                try:
                    dep, mem = make_role_deployment(model, hardware, role, attn=attn, moe=moe, gpus=size,
                                                    engine=engine, kv_dtype=kv_dtype, weight_dtype=weight_dtype)
                except SpecError as exc:
                    skipped.append({"role": role, "gpus": size, "attn": attn, "moe": moe, "reason": str(exc)})
                    continue
                if not dep.memory.feasible:
                    skipped.append({"role": role, "gpus": size, "attn": attn, "moe": moe, "reason": dep.memory.reason})
                    continue
                if not any_layout and launchable(dep, engine) is None:
                    skipped.append({"role": role, "gpus": size, "attn": attn, "moe": moe,
                                    "reason": f"{engine} has no launch flag for this layout"})
                    continue
                out.append(Candidate(dep, mem))
    return out, skipped


def _hold_s(be, transfer: float, exposed: float) -> float:
    # NOTE: SGLang frees a prompt's pages once its transfer reports success (the exposed tail past the
    # last chunk); vLLM holds them until the decode side's read is done (the whole transfer)
    return exposed if be.overlap == "per_chunk" else transfer


def evaluate_split(p: Candidate, d: Candidate, x: int, y: int, wl: Workload, pricing: Pricing,
                   plan: HandOffPlan | None = None) -> DisaggOption:
    """One xPyD split (module docstring)."""
    dd = DisaggDeployment(p.dep, d.dep, x, y, p.memory, d.memory)
    plan = plan or plan_handoff(p.dep, d.dep, wl.prompt_tokens, p.prefill.chunk_tokens_per_group)
    be = backend_for(d.dep.engine)
    free = 1.0 - max(p.prefill.nic_busy_fraction, d.decode.nic_busy_fraction)
    transfer = plan.transfer_s(pricing, free)
    exposed = exposed_s(transfer, p.prefill.step_s, p.prefill.chunk_tokens, be.overlap)
    rate_p, wall_p = p.prefill.rate_requests_per_s(_hold_s(be, transfer, exposed))
    bw = pricing.scaleout_link_bytes_per_s * max(free, 1e-12)
    nic_p = bw * p.dep.placement.owner_groups / plan.busiest_send_bytes if plan.busiest_send_bytes else math.inf
    nic_d = bw * d.dep.placement.owner_groups / plan.busiest_recv_bytes if plan.busiest_recv_bytes else math.inf
    terms = {f"prefill:{wall_p}": x * rate_p, f"decode:{d.decode.binding}": y * d.decode.rate_requests_per_s,
             "handoff:prefill nic": x * nic_p, "handoff:decode nic": y * nic_d}
    binding = min(terms, key=terms.get)
    ttft = p.prefill.request_s + exposed + (d.decode.step_s if be.decode_step_in_ttft else 0.0)
    reasons = []
    if not plan.supported:
        reasons.append(plan.reason)
    if not d.decode.feasible:
        reasons.append(f"decode: no batch meets the targets ({d.decode.binding})")
    if wl.ttft_s is not None and ttft > wl.ttft_s:
        reasons.append(f"TTFT {ttft * 1e3:.0f} ms > {wl.ttft_s * 1e3:.0f} ms")
    return DisaggOption(dd, p.prefill, d.decode, plan, transfer, exposed, ttft, rate_p, wall_p, nic_p, nic_d,
                        terms[binding], binding, not reasons, "; ".join(reasons), wl.output_tokens)


def _slack(o) -> float:
    """Requests/s both pools could carry together: ranks splits that tie on their binding pool."""
    if isinstance(o, DisaggOption):
        d = o.deployment
        return d.prefill_instances * o.prefill_instance_rate + d.decode_instances * o.decode.rate_requests_per_s
    return o.rate_requests_per_s


def _rank(options, wl: Workload):
    # NOTE: rates within 1e-9 tie (splits bound by the same pool), then fewer GPUs, then the other pool's slack
    if wl.rate_requests_per_s is None:
        return sorted(options, key=lambda o: (not o.feasible, -round(o.rate_requests_per_s, 9), o.gpus, -_slack(o)))
    return sorted(options, key=lambda o: (not o.feasible, o.rate_requests_per_s < wl.rate_requests_per_s,
                                          o.gpus, -o.rate_requests_per_s, -_slack(o)))


def colocated_options(model, hardware, gpus: int, wl: Workload, pricing: Pricing, floor: str, *, engine: str,
                      kv_dtype=None, weight_dtype=None, any_layout: bool = False) -> tuple[list[ColocatedOption], list[dict]]:
    """Replicas of one colocated group (every size dividing the budget, every layout), priced with the
    engine's colocated memory (module docstring of planner.disagg.pools)."""
    per_node = hardware.peak.scaleup_domain_gpus
    out, skipped = [], []
    moes = [m for m in MOE_SPLITS if model.has_moe or m == "tp"]
    for size in instance_sizes(gpus, per_node, divide=True):
        for attn in ATTN_LAYOUTS:
            for moe in moes:
                try:
                    dep = make_deployment(model, hardware, attn=attn, moe=moe, gpus=size, engine=engine,
                                          kv_dtype=kv_dtype, weight_dtype=weight_dtype)
                except SpecError as exc:
                    skipped.append({"role": "colocated", "gpus": size, "attn": attn, "moe": moe, "reason": str(exc)})
                    continue
                if not dep.memory.feasible or (not any_layout and launchable(dep, engine) is None):
                    continue
                pre = prefill_pool(dep, wl.prompt_tokens, pricing, floor)
                tpp = 1.0 / pre.compute_rate_requests_per_s
                dec = decode_pool(dep, wl.prompt_tokens, wl.output_tokens, wl.tpot_s, pricing, floor, tpp)
                n = gpus // size
                if wl.rate_requests_per_s is not None and dec.rate_requests_per_s > 0:
                    # NOTE: with a rate to sustain, the replicas it needs (at most the budget's)
                    n = min(n, max(math.ceil(wl.rate_requests_per_s / dec.rate_requests_per_s), 1))
                ttft = pre.request_s
                reasons = []
                if not dec.feasible:
                    reasons.append(f"no batch meets the targets ({dec.binding})")
                if wl.ttft_s is not None and ttft > wl.ttft_s:
                    reasons.append(f"TTFT {ttft * 1e3:.0f} ms > {wl.ttft_s * 1e3:.0f} ms")
                out.append(ColocatedOption(dep, n, pre, dec, ttft, n * dec.rate_requests_per_s, dec.binding,
                                           not reasons, "; ".join(reasons), wl.output_tokens))
    return _rank(out, wl), skipped


def search(model, hardware, gpus: int, wl: Workload, *, engine: str = "sglang", kv_dtype=None, weight_dtype=None,
           floor: str = "max", pricing: Pricing | None = None, any_layout: bool = False,
           sizes: list[int] | None = None) -> SearchResult:
    """Best xPyD split of `gpus` GPUs and the best colocated deployment of them (module docstring)."""
    if isinstance(gpus, bool) or int(gpus) != gpus or gpus < 2:
        raise SpecError(f"gpus={gpus} must be a whole number ≥ 2 (one prefill and one decode instance)")
    gpus = int(gpus)
    backend_for(engine)
    pr = pricing or Pricing.datasheet(hardware)
    kw = dict(engine=engine, kv_dtype=kv_dtype, weight_dtype=weight_dtype, any_layout=any_layout)
    pc, skipped_p = candidates(model, hardware, gpus - 1, "prefill", sizes=sizes, **kw)
    dc, skipped_d = candidates(model, hardware, gpus - 1, "decode", sizes=sizes, **kw)
    pc = [Candidate(c.dep, c.memory, prefill=prefill_pool(c.dep, wl.prompt_tokens, pr, floor)) for c in pc]
    dc = [Candidate(c.dep, c.memory, decode=decode_pool(c.dep, wl.prompt_tokens, wl.output_tokens, wl.tpot_s, pr, floor))
          for c in dc]
    options = []
    for p in pc:
        for d in dc:
            if p.dep.gpus + d.dep.gpus > gpus:
                continue
            try:
                plan = plan_handoff(p.dep, d.dep, wl.prompt_tokens, p.prefill.chunk_tokens_per_group)
            except SpecError as exc:
                skipped_p.append({"role": "pair", "gpus": p.dep.gpus + d.dep.gpus, "attn": f"{p.dep.attn}>{d.dep.attn}",
                                  "moe": f"{p.dep.moe}>{d.dep.moe}", "reason": str(exc)})
                continue
            for x in range(1, (gpus - d.dep.gpus) // p.dep.gpus + 1):
                for y in range(1, (gpus - x * p.dep.gpus) // d.dep.gpus + 1):
                    options.append(evaluate_split(p, d, x, y, wl, pr, plan))
    if not options:
        raise SpecError(f"no disaggregated split of {gpus} GPUs can run {model.name}: "
                        + (skipped_p + skipped_d or [{"reason": "no candidate"}])[0]["reason"])
    ranked = _rank(options, wl)
    colo, skipped_c = colocated_options(model, hardware, gpus, wl, pr, floor, **kw)
    best = ranked[0] if ranked[0].feasible else None
    return SearchResult(wl, gpus, engine, floor, best, colo[0] if colo and colo[0].feasible else None,
                        tuple(ranked), tuple(colo), tuple(skipped_p + skipped_d + skipped_c))


def split_shape(o: DisaggOption) -> tuple[int, int, int, int]:
    """(prefill instances, GPUs each, decode instances, GPUs each)."""
    d = o.deployment
    return d.prefill_instances, d.prefill.gpus, d.decode_instances, d.decode.gpus


def best_per_shape(options) -> list[DisaggOption]:
    """The first (best-ranked) option of each split shape, in rank order."""
    seen, out = set(), []
    for o in options:
        if split_shape(o) not in seen:
            seen.add(split_shape(o))
            out.append(o)
    return out


def gpus_split(option: DisaggOption) -> tuple[int, int]:
    """(prefill GPUs, decode GPUs) of a split."""
    return option.deployment.prefill_gpus, option.deployment.decode_gpus


def gain_fraction(result: SearchResult) -> float:
    """Disaggregated over colocated output tokens/s on the budget, − 1 (NaN when either has none)."""
    if result.best is None or result.colocated is None or result.colocated.rate_requests_per_s <= 0:
        return float("nan")
    return float(np.float64(result.best.rate_requests_per_s) / result.colocated.rate_requests_per_s - 1.0)
