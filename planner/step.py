"""The step model: one serving step of B decode requests (+ optional prefill tokens) on the
busiest rank of a deployment, as a five-resource vector, priced into per-resource times and the
two floors, with a per-component breakdown.

Vectorized: a `DecodeLoad` of P operating points in, arrays of P out; no Python loop over
points for equal-length sweeps. Bytes and FLOPs follow the cost declarations in
planner.models and the busiest-rank shares in planner.layouts. A model is a stack of layer
groups (planner.models.spec): the layout prices each distinct mixer variant once and the MLP
split each distinct MLP variant once, each times its layers (a loop over a handful of variants,
vectorized over points inside).

Engine effects are components of their own: the attention weights a layout holds come from the
variant's `weight_parts` (what head-sharding splits, what engines replicate), the decode kernel's
idle head rows are `flops.head_padding` (planner.models.attention.kernels, by engine and GPU
generation), and fixed per-layer latencies (DSA's top-k) are `latency_s.topk`, added to the
compute resource's time.
Network: each collective's link bytes split by the tier they cross (planner.layouts.base
`link_bytes_by_tier`): inside a node on the scale-up links, between nodes on each GPU's NIC;
both enter the network-bytes resource with their own rates (time = Σ over tiers), and a
collective that spans nodes is one message at the scale-out latency. Components name the
collective, with '@scaleout' on the share that crosses the NIC.

The engine's own kernels (planner.engines.kernels, read through `Deployment.kernels`) are priced
apart, as `StepCost.engine` (`engine_layer`): its MoE token movement in place of the layout's ideal
collectives, its thin expert GEMMs' extra streaming (`experts_narrow_gemm`), CUDA-graph padding and
its per-step overhead. The floors leave them out (they stay lower bounds); the calibrated step model
prices them (calibration.artifact `step_features`).

Ignores (NOTE, calibration absorbs them): activation reads/writes, norms, RoPE, softmax, the
router GEMM, MTP draft layers, kernel launch gaps, routing skew across EP ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from planner.host_tier import HostTierCost, rank_tier, tiered_inputs
from planner.layouts.base import (SCALEOUT, SCALEUP, AttentionShare, Collective, ShareInputs, link_bytes_by_tier,
                                  product)
from planner.load import DecodeLoad, busiest_owner_counts
from planner.models.attention.base import WINDOW
from planner.resources.vector import TIMED_RESOURCES, Pricing, ResourceTimes, price
from planner.step_weights import (HEAD_BYTES_PER_PARAM, acc, total, weight_work,  # noqa: F401 (re-exported)
                                  weights_resident_bytes, writable)

LOGIT_BYTES = 2.0
BINDING_NAMES = np.asarray((*TIMED_RESOURCES, "kv_capacity"), dtype=object)  # StepCost.binding's names by index


@dataclass(frozen=True)
class EngineStepCost:
    """The engine's terms of a priced step (planner.engines.kernels), arrays [P]: what its kernels add
    to the layout's ideal step, each a named component. The datasheet floors leave them out (they
    stay lower bounds); the calibrated step model prices them (calibration.artifact `step_features`)."""

    engine: str  # whose kernels ('bare': none)
    hbm_bytes: dict[str, np.ndarray]  # extra HBM-time as bytes at the datasheet rate ('experts_narrow_gemm')
    flops: dict[str, np.ndarray]  # extra FLOPs ('cuda_graph_padding')
    flops_by_dtype: dict[str, np.ndarray]  # the same by compute dtype
    network_bytes: dict[str, np.ndarray]  # the engine's collectives, by name (replacing the layout's ideal ones)
    network_messages: dict[str, np.ndarray]
    network_bytes_by_tier: dict[str, np.ndarray]
    network_messages_by_tier: dict[str, np.ndarray]
    overhead_s: float  # per-step overhead outside the kernels (the engine's stated default)
    padded_batch: np.ndarray  # [P] the decode batch one scheduler's CUDA graph runs at

    @property
    def extra_hbm_bytes(self) -> np.ndarray:
        return sum(self.hbm_bytes.values(), np.zeros_like(self.padded_batch))

    def components(self) -> dict[str, dict[str, np.ndarray]]:
        """The breakdown, keyed like StepCost.components (resource -> name -> [P])."""
        return {"hbm_bytes": dict(self.hbm_bytes), "flops": dict(self.flops), "network_bytes": dict(self.network_bytes),
                "network_messages": dict(self.network_messages),
                "overhead_s": {"step_overhead": np.full_like(self.padded_batch, self.overhead_s)}}


@dataclass(frozen=True)
class StepCost:
    """A priced step, arrays [P] (one entry per operating point)."""

    batch: np.ndarray  # decode requests across the deployment
    mean_context: np.ndarray
    prefill_tokens: np.ndarray  # per group
    hbm_bytes: np.ndarray
    flops: np.ndarray
    flops_by_dtype: dict[str, np.ndarray]
    network_bytes: np.ndarray  # all tiers
    network_messages: np.ndarray  # all tiers
    kv_resident_bytes: np.ndarray  # busiest rank
    kv_pool_bytes: float  # per GPU
    weights_resident_bytes: float  # busiest rank
    times: ResourceTimes
    pricing: str
    replicas: int
    # resource -> name -> [P]: 'hbm_bytes', 'flops', 'network_bytes', 'network_messages', and
    # 'latency_s' (fixed latencies, seconds, inside times.compute_s)
    components: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    network_bytes_by_tier: dict[str, np.ndarray] = field(default_factory=dict)  # 'scaleup' | 'scaleout' -> [P]
    network_messages_by_tier: dict[str, np.ndarray] = field(default_factory=dict)
    scaleout_bytes_ratio: float = 1.0  # datasheet scale-up ÷ scale-out bandwidth
    scaleout_latency_ratio: float = 1.0  # datasheet scale-out ÷ scale-up message latency
    memory_feasible: bool = True  # the engine's pool holds at least one page
    infeasible_reason: str = ""
    host_tier: HostTierCost | None = None  # the deployment's host KV tier on the busiest rank (planner.host_tier)
    state_resident_bytes: np.ndarray | None = None  # [P] per-request state bytes on the busiest rank
    state_pool_bytes: float | None = None  # the engine's state pool per GPU; None: states share the KV pool
    # [P] the sliding layers' part of kv_resident_bytes, and their own pool (SGLang's hybrid SWA
    # pools, planner.engines.sglang.swa_pools); None: windows share the KV pool
    window_resident_bytes: np.ndarray | None = None
    window_pool_bytes: float | None = None
    # the engine's terms, priced when first read (`engine`); None: not priced
    engine_terms: Callable[[], EngineStepCost] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def engine(self) -> EngineStepCost | None:
        """The engine's terms (planner.engines.kernels); None where not priced. NOTE: priced on first
        read, from the arrays this step holds (a sweep that reads only the floors never pays for them):
        the step's arrays are its answer, not scratch space, and are never written to in place."""
        return None if self.engine_terms is None else self.engine_terms()

    def __getstate__(self) -> dict:
        """Pickled with its engine terms priced (a closure doesn't pickle)."""
        state = dict(self.__dict__)
        state["engine"], state["engine_terms"] = self.engine, None
        return state

    @property
    def network_bytes_scaleup_equivalent(self) -> np.ndarray:
        """Scale-up bytes that take as long as this step's bytes on both tiers (datasheet): what a
        fit that scales one link efficiency multiplies."""
        return self.network_bytes_by_tier[SCALEUP] + self.network_bytes_by_tier[SCALEOUT] * self.scaleout_bytes_ratio

    @property
    def network_messages_scaleup_equivalent(self) -> np.ndarray:
        """Scale-up messages that take as long as this step's messages on both tiers (datasheet)."""
        return (self.network_messages_by_tier[SCALEUP]
                + self.network_messages_by_tier[SCALEOUT] * self.scaleout_latency_ratio)

    def engine_network_scaleup_equivalent(self) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, messages) of the engine's collectives as scale-up equivalents (the layout's ideal
        ones where the step carries no engine terms)."""
        e = self.engine
        if e is None:
            return self.network_bytes_scaleup_equivalent, self.network_messages_scaleup_equivalent
        return (e.network_bytes_by_tier[SCALEUP] + e.network_bytes_by_tier[SCALEOUT] * self.scaleout_bytes_ratio,
                e.network_messages_by_tier[SCALEUP] + e.network_messages_by_tier[SCALEOUT] * self.scaleout_latency_ratio)

    @property
    def floor_max_s(self) -> np.ndarray:
        return self.times.floor_max_s

    @property
    def floor_sum_s(self) -> np.ndarray:
        return self.times.floor_sum_s

    @property
    def fixed_latency_s(self) -> np.ndarray:
        """[P] seconds of fixed per-layer latencies (top-k) inside times.compute_s."""
        lat = self.components.get("latency_s", {})
        return sum(lat.values(), np.zeros_like(self.hbm_bytes))

    @property
    def kv_fits(self) -> np.ndarray:
        """[P] both kinds of memory fit (planner.engines: a separate state pool, or one shared pool)
        and, with a host tier, host memory (its second wall; the HBM part is its resident part)."""
        fits = memory_fits(self.kv_resident_bytes, self.state_resident_bytes, self.kv_pool_bytes, self.state_pool_bytes,
                           self.window_resident_bytes, self.window_pool_bytes)
        return fits if self.host_tier is None else fits & self.host_tier.host_fits

    @property
    def feasible(self) -> np.ndarray:
        """[P] the step can run: the engine's pool exists and the step's KV fits in it."""
        return self.kv_fits & self.memory_feasible

    @property
    def binding(self) -> np.ndarray:
        """[P] name of the binding resource: the largest time, or 'kv_capacity' where KV doesn't fit."""
        idx = self.times.binding_index
        fits = self.kv_fits
        if not fits.all():
            idx = np.where(fits, idx, len(TIMED_RESOURCES))
        return BINDING_NAMES[idx]

    @property
    def decode_tokens_per_s_at_max(self) -> np.ndarray:
        """[P] decode tokens/s at the optimistic floor; NaN where the step can't run (no speed
        for a deployment that doesn't fit)."""
        return np.where(self.feasible, self.batch / self.floor_max_s, np.nan)

    @property
    def decode_tokens_per_s_at_sum(self) -> np.ndarray:
        return np.where(self.feasible, self.batch / self.floor_sum_s, np.nan)


def memory_fits(kv, state, kv_pool: float, state_pool: float | None, window=None,
                window_pool: float | None = None) -> np.ndarray:
    """Per-token pages fit the KV pool and per-request states fit theirs (SGLang's separate mamba
    pool), or, with one shared pool (`state_pool` None: vLLM's hybrid pages), both fit it together.
    With SGLang's hybrid SWA pools (`window_pool` not None) `kv_pool` holds both pools: the sliding
    layers' `window` bytes must fit theirs and the rest of `kv` the full layers' pool."""
    if window_pool is not None and window is not None:
        split = (kv - window <= kv_pool - window_pool) & (window <= window_pool)
        return split & memory_fits(kv, state, kv_pool, state_pool)
    if state_pool is not None:
        return (kv <= kv_pool) & (kv_pool > 0) & (state <= state_pool)
    if state is not None and np.any(state):
        kv = kv + state
    return (kv <= kv_pool) & (kv_pool > 0)


def group_load(load: DecodeLoad, replicas: int) -> DecodeLoad:
    """The busiest replica group's share of the deployment's requests."""
    if replicas == 1:
        return load
    counts = busiest_owner_counts(load, load.lengths, replicas)
    return DecodeLoad(lengths=load.lengths, counts=counts)


def kv_pool_bytes(dep: Deployment) -> float:
    """KV pool per GPU as the deployment's engine sizes it (planner.engines): whole pages, 0 when
    the weights or the reserve leave no room (never negative)."""
    return dep.memory.kv_pool_bytes


def share_inputs(dep: Deployment, g: DecodeLoad, pre, pre_ctx=None, q=None, pre_groups=None) -> list[tuple[ShareInputs, int]]:
    """One ShareInputs per distinct mixer variant of the model, with its layer count; with several
    variants and unequal lengths, owners are balanced by each request's bytes over all layers."""
    mixers = dep.model.mixers
    owner = None
    if len(mixers) > 1 and g.counts.shape[-1] > 1 and dep.placement.owner_groups > 1:
        tokens = np.ceil(g.lengths / dep.page_tokens) * dep.page_tokens
        owner = sum(sum(v.kv_stored_bytes(tokens, dep.kv_dtype).values()) * n for v, n in mixers)
    groups = dep.placement.owner_groups
    return [(ShareInputs(dep.model, dep.ranks, g, pre, dep.kv_dtype, dep.page_tokens, pre_ctx, q, v, owner, groups,
                         pre_groups), n)
            for v, n in mixers]


def decode_resident_bytes(dep: Deployment, load: DecodeLoad) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """[P] (per-token-page bytes, per-request state bytes, the sliding layers' part of the first
    where they have a pool of their own, else None) resident on the busiest rank for decode alone
    (no prefill chunk): what `step_cost(dep, load)` holds, without pricing the step."""
    g = group_load(load, dep.replicas)
    zeros = np.zeros(load.points)
    kv, state = np.zeros(load.points), np.zeros(load.points)
    split = dep.memory.window_pool_bytes is not None
    window = np.zeros(load.points) if split else None
    for inp, n in share_inputs(dep, g, zeros):
        sh = dep.attention_layout.share(inp)
        kv = kv + sh.kv_stored_bytes * n
        state = state + sh.state_stored_bytes * n
        if split and inp.attention.memory_kinds() == {WINDOW}:
            window = window + sh.kv_stored_bytes * n
    return kv, state, window


def decode_kv_resident_bytes(dep: Deployment, load: DecodeLoad) -> np.ndarray:
    """[P] per-token KV bytes resident on the busiest rank for decode alone (`decode_resident_bytes`)."""
    return decode_resident_bytes(dep, load)[0]


def kernel_for(dep: Deployment, variant):
    """The decode kernel a mixer runs: the deployment's override for attention, else the variant's default."""
    from planner.models.attention.kernels import decode_kernel

    if dep.attention_kernel is not None and not variant.recurrent:
        return decode_kernel(dep.attention_kernel)
    backend = None if variant.recurrent else dep.kernels.backend_for(variant)
    if backend is not None and backend.decode_kernel is not None:
        return decode_kernel(backend.decode_kernel)
    return decode_kernel(variant.decode_kernel(dep.arch, dep.kv_dtype))


def _rank_work(dep: Deployment, inp: ShareInputs, shares: list, points: int, mlp_reads: dict | None = None):
    """HBM bytes, FLOPs (by component), fixed latencies and resident (KV, state) bytes of one
    candidate rank; `shares` holds (share, variant, layers) per distinct mixer. `mlp_reads` keeps the
    MLPs' weight reads for the next candidate and the engine (`weight_work`)."""
    m = dep.model
    first = shares[0][0]
    owned: tuple[set, set, set] = (set(), set(), set())  # keys whose arrays these sums made (`acc`)
    o_hbm, o_flops, _ = owned
    hbm, flops, by_dtype = weight_work(dep, inp, first.projected_tokens, points, owned, mlp_reads)
    head_frac = 1.0 / dep.placement.lm_head_split
    hbm["lm_head_weights"] = np.broadcast_to(np.float64(m.head_params * head_frac * HEAD_BYTES_PER_PARAM), (points,))
    sampled = inp.decode_tokens if first.sampled_tokens is None else first.sampled_tokens
    flops["lm_head"] = product(2.0 * sampled, m.head_params, head_frac)
    lat: dict[str, np.ndarray] = {}
    res: dict[str, np.ndarray] = {}
    o_lat, o_res = set(), set()
    split = dep.memory.window_pool_bytes is not None  # SGLang's hybrid SWA pools
    att_names: dict[str, None] = {}
    q = inp.query_tokens
    for share, variant, n in shares:
        L = float(n)
        for k, v in share.kv_read_bytes.items():
            acc(hbm, f"{k}_read", v, L, o_hbm)
        acc(hbm, "kv_write", share.kv_write_bytes, L, o_hbm)
        for k, v in share.attention_flops.items():
            acc(flops, k, v, L, o_flops)
        att_names.update(dict.fromkeys(share.attention_flops))
        # NOTE: the decode kernel computes whole head tiles (planner.models.attention.kernels): the
        # padded rows do the real rows' per-(head, token) work on zeros.
        kern = kernel_for(dep, variant)
        if kern.pads(dep.arch):
            heads = share.query_heads
            rows = kern.padded_rows(heads, q, dep.arch)
            hq = heads * q
            waste = np.divide(rows, hq, out=np.ones_like(q), where=hq > 0)
            waste -= 1.0
            waste *= share.decode_core_flops
            waste *= L  # this array is ours: acc(..., waste, L) without a new one
            acc(flops, "head_padding", waste, 1.0, o_flops)
        if variant.topk_tokens() is not None:
            for x in share.topk_row_tokens:
                acc(lat, "topk", variant.topk_latency_s(x), L, o_lat)
        acc(res, "kv", share.kv_stored_bytes, L, o_res)
        if split and variant.memory_kinds() == {WINDOW}:
            acc(res, "window", share.kv_stored_bytes, L, o_res)
        if not (np.isscalar(share.state_stored_bytes) and share.state_stored_bytes == 0.0):
            acc(res, "state", share.state_stored_bytes, L, o_res)
    zeros = np.zeros(points)
    for d, key in ((flops, "head_padding"), (hbm, "kv_write"), (lat, "topk")):
        d.setdefault(key, zeros)
    kv_res = res["kv"]
    state_res = np.broadcast_to(np.asarray(res.get("state", 0.0), dtype=np.float64), (points,))
    window_res = np.broadcast_to(np.asarray(res.get("window", 0.0), dtype=np.float64), (points,)) if split else None
    # NOTE: the attention work (and the LM head, padded rows) is bf16; added in one fixed order (a
    # set's order, which hashing changes from run to run, moved the sum by an ulp)
    bf16 = total(flops[k] for k in dict.fromkeys(("lm_head", "head_padding", *att_names)))
    acc(by_dtype, "bf16", bf16, 1.0, owned[2])
    return hbm, flops, by_dtype, lat, kv_res, state_res, window_res


def _collective_groups(dep: Deployment, inps: list[tuple[ShareInputs, int]], mlp_collectives=None) -> list:
    """(collectives, layers) of a step: each mixer group's attention block, each MLP variant's
    (the MoE split's own, or `mlp_collectives(inp, mlp)`: the engine's) and the LM head's gather."""
    m, t, lay, split = dep.model, dep.ranks, dep.attention_layout, dep.moe_split
    pl = dep.placement
    inp = inps[0][0]
    groups = [(lay.collectives(i), float(n)) for i, n in inps]
    mlp_of = mlp_collectives or (lambda i, v: split.collectives(i, lay.activations_replicated, v))
    groups += [(mlp_of(inp, v), float(n)) for v, n in m.mlps]
    if pl.lm_head_split > 1:
        # NOTE: the vocab-parallel LM head gathers the logits of the tokens its ranks sample: every
        # token over T ranks (TP, DOP, DCP); a DP group's own tokens over its R ranks (dptp)
        sampled = inp.decode_tokens if pl.lm_head_split == t else np.ceil(inp.load.batch / pl.owner_groups) * inp.query_tokens
        groups.append(([Collective("lm_head_gather", "all_gather", product(sampled, m.vocab_size, LOGIT_BYTES), 1.0,
                                   ranks=pl.lm_head_split)], 1.0))
    return groups


def _network(dep: Deployment, groups: list, points: int):
    """Link bytes and collective launches (by collective, and by tier) of a step's collective
    `groups` (`_collective_groups`); the same on every rank. A collective's bytes split over the
    tiers it crosses; it is one message, on the scale-out tier when the group spans nodes (NOTE: the
    measured cross-node latency is of the whole hierarchical collective, so its intra-node steps are
    not charged again). Launch counts the same at every point stay one number over the points (a
    read-only broadcast), as the tiers' sums do."""
    t = dep.ranks
    nodes = dep.group_nodes
    per_node = dep.ranks_per_node
    net_b: dict[str, np.ndarray] = {}
    net_m: dict[str, np.ndarray] = {}
    # NOTE: scalar zeros until a tier carries traffic: a single-node sweep pays no extra array ops
    tier_b = {SCALEUP: 0.0, SCALEOUT: 0.0}
    tier_m = {SCALEUP: 0.0, SCALEOUT: 0.0}
    o_net, o_tier = set(), set()  # sums made here, added to in place (`acc`)
    for colls, layers in groups:
        for c in colls:
            # NOTE: a collective over a subgroup of r consecutive ranks (an owner group's own) spans
            # the nodes those ranks sit on: one node while r fits in one
            r = t if c.ranks is None else c.ranks
            c_nodes = nodes if r == t else max(1, -(-r // per_node))
            for tier, factor in link_bytes_by_tier(c.kind, r, c_nodes).items():
                if factor == 0.0 and (tier == SCALEOUT or c_nodes > 1):
                    continue
                name = c.name if tier == SCALEUP else f"{c.name}@{SCALEOUT}"
                # (payload · factor) · per_step · layers, left to right; × 1.0 changes nothing
                b = product(c.payload_bytes, factor, *(() if _is_one(c.per_step) else (c.per_step,)), layers)
                _add(net_b, name, b, o_net)
                _add(tier_b, tier, b, o_tier)
            msgs = c.per_step * layers if r > 1 else 0.0
            msg_tier = SCALEOUT if c_nodes > 1 else SCALEUP
            name = c.name if msg_tier == SCALEUP else f"{c.name}@{SCALEOUT}"
            # NOTE: 0.0 + msgs as the first add, as a broadcast over the points gave (an exact add)
            net_m[name] = net_m.get(name, 0.0) + msgs
            tier_m[msg_tier] = tier_m[msg_tier] + msgs

    def as_points(v):
        return np.broadcast_to(np.asarray(v, dtype=np.float64), (points,))

    return (net_b, {k: as_points(v) for k, v in net_m.items()}, {k: as_points(v) for k, v in tier_b.items()},
            {k: as_points(v) for k, v in tier_m.items()})


def _is_one(x) -> bool:
    return np.ndim(x) == 0 and x == 1.0


def _add(out: dict, key: str, b, owned: set) -> None:
    """out[key] += b (out[key] starts at 0.0: the first b is kept as it is, 0.0 + b being b)."""
    cur = out.get(key, 0.0)
    if np.ndim(cur) == 0 and cur == 0.0 and key not in owned:
        out[key] = b if np.ndim(b) else cur + b
    else:
        acc(out, key, b, 1.0, owned)


def _linear_flop_names(dep: Deployment, flops: dict) -> list[str]:
    """The step's projection, MLP and LM-head FLOP components (what a padded CUDA-graph row also runs)."""
    mlp_keys = {k for v, _ in dep.model.mlps for k in v.rank_flops(np.zeros(1), dep.ranks, dep.moe)}
    return [k for k in flops if k.endswith("_proj") or k == "lm_head" or k in mlp_keys]


def engine_layer(dep: Deployment, inps: list[tuple[ShareInputs, int]], g: DecodeLoad, flops: dict,
                 by_dtype: dict, points: int, net, mlp_reads: dict | None = None, flops_total=None) -> EngineStepCost:
    """The engine's terms of a step (planner.engines.kernels, module docstring there): the engine's
    MoE token movement where activations are partitioned, the narrow expert GEMM's extra streaming
    time, CUDA-graph padding FLOPs on decode-only steps, and its per-step overhead. `net` is the
    layout's own (bytes, messages, by-tier bytes, by-tier messages, collective groups), reused where
    the engine moves tokens the layout's way; `mlp_reads` the MLPs' weight reads the step priced
    (`weight_work`) and `flops_total` its FLOPs summed, where the caller has them."""
    from planner.engines.kernels import AllGatherReduceScatter
    from planner.units import WEIGHT_BYTES_PER_PARAM

    k = dep.kernels
    inp = inps[0][0]
    m, t, lay, split = dep.model, dep.ranks, dep.attention_layout, dep.moe_split
    zeros = np.zeros(points)
    decode_only = inp.prefill_tokens <= 0
    all_decode = bool(decode_only.all())
    # NOTE: one scheduler per owner group; the busiest owner's requests are ⌈B/G⌉ (balanced ownership)
    per_sched = np.ceil(g.batch / dep.placement.owner_groups)
    padded = k.graphs.padded(per_sched) if k.graphs is not None else per_sched
    if not all_decode:
        padded = np.where(decode_only, padded, per_sched)
    hbm: dict[str, np.ndarray] = {}
    if k.moe_gemm is not None:
        groups: dict[tuple, float] = {}
        for grp in m.layers:
            if grp.mlp is not None and grp.mlp.is_moe:
                key = (grp.mlp, dep.part_dtype(grp, "routed_experts"))
                groups[key] = groups.get(key, 0.0) + grp.count
        extra = zeros
        reads = {} if mlp_reads is None else mlp_reads
        for (mlp, dt), n in groups.items():
            # NOTE: a rank runs each touched expert at its per-rank width: the whole expert under EP, a
            # 1/T slice under TP (MiniMax-M2.5's 1,536 columns are 192 per rank at TP 8)
            width = mlp.expert_intermediate_size / (t if dep.moe == "tp" else 1)
            frac = k.moe_gemm.penalty_fraction(width, dep.arch)
            if frac > 0:
                if mlp not in reads:
                    reads[mlp] = mlp.rank_read_params(inp.step_tokens, t, dep.moe)
                extra = extra + product(reads[mlp]["experts"], n, WEIGHT_BYTES_PER_PARAM[dt], frac)
        hbm["experts_narrow_gemm"] = extra
    lin = _linear_flop_names(dep, flops)
    if padded is per_sched:  # no graph pads here: nothing to add
        frac = zeros
    else:
        frac = (padded - per_sched) / np.maximum(per_sched, 1.0)
        frac = np.where((decode_only & (per_sched > 0)) if not all_decode else per_sched > 0, frac, 0.0)
    lin_total = total((flops[n] for n in lin), zeros)
    att = (total(flops.values(), zeros) if flops_total is None else flops_total) - lin_total
    # NOTE: v − 0.0 is v: only the bf16 sum loses the attention work
    lin_by_dtype = {d: np.asarray(v, dtype=np.float64) - att if d == "bf16" else np.asarray(v, dtype=np.float64)
                    for d, v in by_dtype.items()}
    pad_by_dtype = {d: np.maximum(v, 0.0) * frac for d, v in lin_by_dtype.items()}
    pad_flops = {"cuda_graph_padding": lin_total * frac}
    net_b, net_m, tier_b, tier_m, colls = net
    if k.moe_decode is not None and not lay.activations_replicated:
        fallback = AllGatherReduceScatter("allgather_reducescatter", "no all-to-all for TP-sharded experts")
        q = inp.query_tokens
        group_tokens = padded * q
        # NOTE: where every point is decode-only, the schemes' step counts are the numbers 1 and 0 (the
        # same products as over the points: launch counts stay one number, × 1 is skipped)
        dec, pre = (1.0, 0.0) if all_decode else (np.where(decode_only, 1.0, 0.0), np.where(decode_only, 0.0, 1.0))

        def mlp_of(i, v):
            own = split.collectives(i, False, v)
            if not own:
                return own
            out = []
            for scheme, steps in ((k.moe_decode, dec), (k.moe_prefill or k.moe_decode, pre)):
                if scheme.expert_parallel_only and not (dep.moe == "ep" and v.is_moe):
                    scheme = fallback
                out += scheme.collectives(i, v, group_tokens, steps)
            return out

        # NOTE: the attention blocks' and the LM head's collectives are the layout's own: only the MLPs' change
        n_att, n_mlp = len(inps), len(m.mlps)
        mlps = [(mlp_of(inp, v), float(n)) for v, n in m.mlps]
        net_b, net_m, tier_b, tier_m = _network(dep, colls[:n_att] + mlps + colls[n_att + n_mlp:], points)
    return EngineStepCost(k.engine, hbm, pad_flops, pad_by_dtype, net_b, net_m, tier_b, tier_m, k.step_overhead_s, padded)


def _select(keep_a: np.ndarray, a: dict, b: dict) -> dict:
    zero = np.zeros_like(keep_a, dtype=np.float64)
    return {k: np.where(keep_a, a.get(k, zero), b.get(k, zero)) for k in dict.fromkeys([*a, *b])}


def step_cost(dep: Deployment, load: DecodeLoad, prefill_tokens=0.0, pricing: Pricing | None = None,
              prefill_context=0.0, query_tokens=1.0, prefill_groups=1.0) -> StepCost:
    """Price one step. `load` is the deployment's decode requests; `prefill_tokens` [P] or scalar
    is the prefill chunk (one request's) each group runs in the same step, and `prefill_context`
    the tokens that request already has cached; `prefill_groups` [P] or scalar how many owner
    groups of the layout each run such a chunk in the step (one scheduler per group: the MLP side
    sees every chunk, the busiest rank its own; 1 by default); `query_tokens` [P] or scalar the query tokens each
    decode request runs (1; k + 1 when a step verifies k draft tokens: projections, MoE and the
    attention core see B·(k+1) tokens, the KV is read once per request). For owner layouts the
    busiest rank is either the decode-busiest owner or the owner running the chunk, whichever has
    the larger floor_max."""
    pricing = pricing or Pricing.datasheet(dep.hardware)
    m = dep.model
    g = group_load(load, dep.replicas)
    pts = load.points
    # NOTE: checked as given (a scalar once, not over the points), then spread over the points
    pre, pre_ctx, q, groups = (np.asarray(x, dtype=np.float64)
                               for x in (prefill_tokens, prefill_context, query_tokens, prefill_groups))
    if not (np.all(np.isfinite(pre)) and np.all(pre >= 0) and np.all(np.isfinite(pre_ctx)) and np.all(pre_ctx >= 0)):
        raise SpecError("prefill tokens and prefill context must be finite and ≥ 0")
    if not (np.all(np.isfinite(q)) and np.all(q >= 1)):
        raise SpecError("query tokens per decode request must be finite and ≥ 1")
    g_max = float(dep.placement.owner_groups)
    if not (np.all(np.isfinite(groups)) and np.all(groups >= 1) and np.all(groups <= g_max)):
        raise SpecError(f"prefill groups must be in [1, {g_max:g}] (the layout's owner groups)")
    pre, pre_ctx, q = (_per_point(x, pts) for x in (pre, pre_ctx, q))
    groups = None if np.all(groups == 1.0) else _per_point(groups, pts)
    inps = share_inputs(dep, g, pre, pre_ctx, q, groups)
    inp = inps[0][0]
    colls = _collective_groups(dep, inps)
    net_b, net_m, tier_b, tier_m = _network(dep, colls, pts)
    net_total = tier_b[SCALEUP] + tier_b[SCALEOUT] if dep.group_nodes > 1 else tier_b[SCALEUP]
    msg_total = tier_m[SCALEUP] + tier_m[SCALEOUT] if dep.group_nodes > 1 else tier_m[SCALEUP]
    mlp_reads: dict = {}  # the MLPs' weight reads: the same on every candidate rank, and the engine's

    best = None
    per_variant = [(dep.attention_layout.candidate_shares(i), i.attention, n) for i, n in inps]
    if dep.host_tier is not None:  # the layout's own candidate shares of each group's tiered components
        views = [tiered_inputs(i) for i, _ in inps]
        per_view = [None if v is None else dep.attention_layout.candidate_shares(v) for v in views]
    for c in range(len(per_variant[0][0])):
        # NOTE: candidate c is the same rank in every group (the decode-busiest owner, or the one
        # running the prefill chunk), so its work is the sum over the groups' c-th shares.
        shares = [(cands[c], v, n) for cands, v, n in per_variant]
        hbm, flops, by_dtype, latency, kv_res, state_res, window_res = _rank_work(dep, inp, shares, pts, mlp_reads)
        # NOTE: issue 17's hook: the host tier's misses and walls, per layer group on this same
        # candidate rank, summed (untiered groups keep their KV in HBM and fetch nothing)
        host = (rank_tier(dep, [(i, cands[c], n, None if vc is None else vc[c])
                                for (i, n), (cands, _, _), vc in zip(inps, per_variant, per_view)])
                if dep.host_tier is not None else None)
        hbm_total = total(hbm.values())
        t = price(hbm_total, by_dtype, tier_b[SCALEUP], tier_m[SCALEUP], pricing,
                  *((tier_b[SCALEOUT], tier_m[SCALEOUT]) if dep.group_nodes > 1 else ()),
                  host_link_bytes=None if host is None else host.host_link_equivalent_bytes)
        if host is not None:
            kv_res = host.hbm_kv_resident_bytes
        # NOTE: a fixed latency (top-k: one CTA per row, so neither bytes nor FLOPs set its time) is
        # time the SMs spend: it adds to the compute resource's time, so floor_sum counts it whole
        # and floor_max hides it only behind a larger resource, as perfect overlap would.
        lat_total = total(latency.values())
        if writable(t.compute_s) and t.compute_s.shape == np.broadcast_shapes(t.compute_s.shape, np.shape(lat_total)):
            np.add(t.compute_s, lat_total, out=t.compute_s)  # price() made it: no one else holds it
            times = t
        else:
            times = replace(t, compute_s=t.compute_s + lat_total)
        cand = (times, hbm, flops, by_dtype, latency, kv_res, state_res, host, window_res)
        if best is None:
            best = cand
            continue
        keep = best[0].floor_max_s >= times.floor_max_s
        picked = ResourceTimes(*(np.where(keep, x, y) for x, y in zip(best[0].stacked(), times.stacked())))
        best = (picked, *(_select(keep, best[i], cand[i]) for i in range(1, 5)),
                *(np.where(keep, best[i], cand[i]) for i in (5, 6)),
                None if host is None else best[7].where(keep, host),
                None if window_res is None else np.where(keep, best[8], window_res))
    merged = best is not cand
    times, hbm, flops, by_dtype, latency, kv_res, state_res, host, window_res = best
    if merged:  # candidates merged: the chosen components' sum
        hbm_total = total(hbm.values())
    flops_total = total(flops.values())
    net = (net_b, net_m, tier_b, tier_m, colls)
    components = {"hbm_bytes": hbm, "flops": flops, "network_bytes": net_b, "network_messages": net_m, "latency_s": latency}
    if host is not None:
        components["host_link_bytes"] = {"kv_misses": host.host_link_bytes}
    plan, sheet = dep.memory, Pricing.datasheet(dep.hardware)
    return StepCost(
        batch=inp.batch if g is load else load.batch,
        mean_context=load.mean_context,
        prefill_tokens=pre,
        hbm_bytes=hbm_total,
        flops=flops_total,
        flops_by_dtype=by_dtype,
        network_bytes=net_total,
        network_messages=msg_total,
        kv_resident_bytes=kv_res,
        kv_pool_bytes=plan.kv_pool_bytes,
        state_resident_bytes=state_res,
        window_resident_bytes=window_res,
        window_pool_bytes=plan.window_pool_bytes,
        state_pool_bytes=plan.state_wall_bytes,
        weights_resident_bytes=plan.weights_bytes,
        times=times,
        pricing=pricing.label,
        replicas=dep.replicas,
        components=components,
        network_bytes_by_tier=tier_b,
        network_messages_by_tier=tier_m,
        scaleout_bytes_ratio=sheet.link_bytes_per_s / sheet.scaleout_link_bytes_per_s,
        scaleout_latency_ratio=(sheet.scaleout_message_latency_s / sheet.message_latency_s
                                if sheet.message_latency_s > 0 else 1.0),
        memory_feasible=plan.feasible,
        infeasible_reason=plan.reason,
        host_tier=host,
        engine_terms=partial(engine_layer, dep, inps, g, flops, by_dtype, pts, net, mlp_reads, flops_total),
    )


def _per_point(x, points: int) -> np.ndarray:
    """[P] float64 copy of a scalar or [P] input (a scalar 0 as fresh zeros, which cost no writes)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        return np.zeros(points) if a == 0.0 and not np.signbit(a) else np.full(points, a)
    return np.broadcast_to(a, (points,)).copy()
