"""Layout protocol and registries: attention layouts (tp, cp, dcp, dp, dop) and MoE splits (ep, tp).

An attention layout answers, for the busiest rank of a group of T ranks: which of the attention
weights it holds (head-sharded or replicated), whose KV it stores and reads, whose queries it
projects, which attention work it runs (by component: the per-head core, DSA's indexer, with the
query heads each decode query runs with so the step model can pad them to the kernel's head
tile), which top-k selections it runs, and which collectives each layer launches. A MoE split
answers which collectives each MLP layer launches given whether activations are replicated
across the group after attention. A new layout is one module in this package with
`@register_attention_layout` / `@register_moe_split`; everything it needs from the model comes
through the variant protocols (planner.models.attention.base, planner.models.mlp.base).

A model is a stack of layer groups (planner.models.spec): the step model asks a layout for one
mixer variant at a time (`ShareInputs.attention`), so a layout never reads a variant's own
fields. Memory comes in two kinds: per-token pages ('token' and 'window' components,
`AttentionShare.kv_stored_bytes`) and per-request state slots ('state' components,
`AttentionShare.state_stored_bytes`); each layout says how it splits or replicates each.

Collectives are declared with their payload S in bytes; the link bytes a rank sends follow from
the kind (ring algorithms): all-reduce 2(T−1)/T·S, all-gather and reduce-scatter (T−1)/T·S with
S the full gathered tensor, all-to-all (T−1)/T·S with S what one rank holds for all peers.

A group spanning n nodes with g ranks on each (T = n·g) runs them hierarchically, and each tier
carries its own share (`link_bytes_by_tier`):
- all-reduce: intra-node reduce-scatter, inter-node all-reduce of the 1/g shard, intra-node
  all-gather → scale-up 2(g−1)/g·S, scale-out 2(n−1)/(n·g)·S (NCCL's tree/ring over rails);
- all-gather, reduce-scatter: inter-node exchange of same-index chunks, then intra-node →
  scale-up (g−1)/g·S, scale-out (n−1)/T·S;
- all-to-all: every peer gets S/T; the (T−g) peers off the node are reached over the NIC →
  scale-up (g−1)/T·S, scale-out (T−g)/T·S. NOTE: this is what decode's DeepEP low-latency
  kernels send (one copy per selected expert, deepseek-ai/DeepEP); its normal-mode kernels send
  one copy per remote node and forward over NVLink, fewer NIC bytes, used for prefill.
With n = 1 every formula is the single-tier one above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np

from planner.errors import SpecError
from planner.layouts.placement import Placement
from planner.load import DecodeLoad
from planner.models.attention.base import STATE, AttentionVariant
from planner.models.mlp.base import MLPVariant
from planner.models.spec import ModelSpec
from planner.registry import Registry

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
# How many owner groups a layout makes of T ranks (AttentionLayout.group_rule; planner.layouts.placement):
# - "one": one group of T ranks holds every request (TP, CP, DCP);
# - "per_rank": T groups of one rank, each request on one owner (DP-attention, DOP);
# - "given": the deployment's group count (`Deployment.attn_groups`: SGLang's --dp with DP attention).
GroupRule = Literal["one", "per_rank", "given"]
GROUP_RULES: tuple[str, ...] = ("one", "per_rank", "given")
# How a group's ranks hold one of its requests (AttentionLayout.kv_in_group): split by heads where the
# variant has the KV heads, else every rank keeps it whole (TP; one rank: the owner holds it), or
# split by tokens (CP, DCP).
KvInGroup = Literal["heads", "tokens"]
KV_IN_GROUP: tuple[str, ...] = ("heads", "tokens")

ACTIVATION_BYTES = 2.0  # bf16 hidden states, queries and partial outputs on the wire
LSE_BYTES = 4.0  # fp32 log-sum-exp per (query, head) of a partial output (vLLM casts MLA's to fp32)
TOPK_CANDIDATE_BYTES = 8.0  # one (score, index) pair as two fp32 (vLLM sparse_attn_indexer.py _merge_dcp_topk_global)


SCALEUP = "scaleup"  # NVLink / xGMI inside one scale-up domain
SCALEOUT = "scaleout"  # each GPU's NIC between domains
TIERS: tuple[str, ...] = (SCALEUP, SCALEOUT)


def link_bytes_factor(kind: CollectiveKind, ranks: int) -> float:
    """Link bytes per payload byte a rank sends in a group on one node (single tier)."""
    if ranks <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


def link_bytes_by_tier(kind: CollectiveKind, ranks: int, nodes: int = 1) -> dict[str, float]:
    """Link bytes per payload byte a rank sends on each tier, for T = `ranks` over `nodes`
    scale-up domains with T/nodes ranks on each (hierarchical algorithms, module docstring)."""
    if nodes <= 1 or ranks <= 1:
        return {SCALEUP: link_bytes_factor(kind, ranks), SCALEOUT: 0.0}
    t, n = float(ranks), float(nodes)
    g = t / n
    if kind == "all_reduce":
        return {SCALEUP: 2.0 * (g - 1.0) / g, SCALEOUT: 2.0 * (n - 1.0) / (n * g)}
    if kind in ("all_gather", "reduce_scatter"):
        return {SCALEUP: (g - 1.0) / g, SCALEOUT: (n - 1.0) / t}
    return {SCALEUP: (g - 1.0) / t, SCALEOUT: (t - g) / t}


@dataclass(frozen=True)
class Collective:
    """One collective launched `per_step` times per step with payload `payload_bytes` [P], over
    `ranks` consecutive ranks (None: the whole group of T; an owner group's own collective, e.g. the
    attention all-reduce of attention TP inside a DP group, names its R)."""

    name: str
    kind: CollectiveKind
    payload_bytes: np.ndarray
    per_step: float
    ranks: int | None = None


@dataclass(frozen=True)
class AttentionShare:
    """The busiest rank's attention work, per layer, arrays [P]."""

    kv_stored_bytes: np.ndarray  # resident KV bytes (page-rounded), one layer
    kv_read_bytes: dict[str, np.ndarray]  # by component ('kv', 'indexer', 'prefill_prefix'), one layer
    kv_write_bytes: np.ndarray  # new tokens' KV written this step, one layer
    attention_flops: dict[str, np.ndarray]  # by component ('attention_core', 'indexer'), decode + prefill, one layer
    decode_core_flops: np.ndarray  # the decode part of attention_core: what a decode kernel's head tile pads
    query_heads: float  # query heads each decode query runs with on this rank
    projected_tokens: np.ndarray  # tokens whose projections this rank computes
    topk_row_tokens: tuple[np.ndarray, ...] = ()  # per top-k pass: scores in the longest row on this rank
    sampled_tokens: np.ndarray | None = None  # decode queries whose logits this rank computes (None: all of them)
    state_stored_bytes: np.ndarray | float = 0.0  # resident per-request state bytes ('state' kind), one layer


@dataclass(frozen=True)
class ShareInputs:
    """What a layout needs to place the step's attention work (all per layer)."""

    model: ModelSpec
    ranks: int
    load: DecodeLoad
    prefill_tokens: np.ndarray  # [P] prefill chunk run in the step (one request's)
    kv_dtype: str
    page_tokens: int
    prefill_context: np.ndarray | None = None  # [P] tokens that request already has cached (None: 0)
    query_tokens: np.ndarray | None = None  # [P] query tokens per decode request (1; k+1 when verifying k drafts)
    attention: AttentionVariant | None = None  # the mixer variant of the layer group priced (None: the model's primary)
    owner_bytes: np.ndarray | None = None  # [P, R] bytes per request over all layers, what owners are balanced by (None: this group's)
    owner_groups: int = 0  # the placement's owner groups (a layout that takes a count reads it; 0: not given)
    # [P] owner groups that each run a chunk of `prefill_tokens` in the step (one scheduler per
    # group, planner.engines.scheduling): the MLP side sees all of them, the busiest rank one (None: 1)
    prefill_groups: np.ndarray | None = None
    decode_tokens: np.ndarray = field(init=False)  # [P] decode query tokens of the group
    step_tokens: np.ndarray = field(init=False)  # [P] decode + every group's prefill tokens the group runs this step
    batch: np.ndarray = field(init=False)  # [P] decode requests of the group (`load.batch`, summed once)

    def __post_init__(self) -> None:
        if self.prefill_context is None:
            object.__setattr__(self, "prefill_context", np.zeros_like(self.prefill_tokens))
        if self.query_tokens is None:
            object.__setattr__(self, "query_tokens", np.ones_like(self.prefill_tokens))
        if self.attention is None:
            object.__setattr__(self, "attention", self.model.attention)
        object.__setattr__(self, "batch", self.load.batch)
        object.__setattr__(self, "decode_tokens", self.batch * self.query_tokens)
        if self.prefill_groups is None and not self.has_prefill:
            object.__setattr__(self, "step_tokens", self.decode_tokens)  # + 0 is exact
        else:
            pre_all = self.prefill_tokens if self.prefill_groups is None else self.prefill_tokens * self.prefill_groups
            object.__setattr__(self, "step_tokens", self.decode_tokens + pre_all)

    @cached_property
    def has_prefill(self) -> bool:
        """Some point runs a prefill chunk (a decode-only sweep skips the chunk's terms: all zero)."""
        return bool(np.any(self.prefill_tokens > 0))

    @cached_property
    def step_hidden_bytes(self) -> np.ndarray:
        """[P] the step's tokens' hidden states in bytes (what the attention and MLP all-reduces move)."""
        return tokens_hidden_bytes(self, self.step_tokens)


def product(x, *factors):
    """x · f1 · f2 · …, left to right (the rounding of the written product), in one new array:
    the first product makes it, scalar factors after it multiply in place."""
    out, fresh = x, False
    for f in factors:
        if fresh and np.ndim(f) == 0:
            if f != 1.0:  # × 1 is exact
                np.multiply(out, f, out=out)
        else:
            out = out * f
            fresh = isinstance(out, np.ndarray) and out.dtype == np.float64
    return out


def over(x, d):
    """x / d; x itself where d is 1 (a division by 1 is exact)."""
    return x if np.ndim(d) == 0 and d == 1 else x / d


def request_sum(x: np.ndarray) -> np.ndarray:
    """[P] x.sum(-1) of a fresh [P, R] array: its one column when R = 1 (a sum of one term is it)."""
    return x[..., 0] if x.shape[-1] == 1 else x.sum(-1)


def pages_rounded(tokens: np.ndarray, page_tokens: int) -> np.ndarray:
    out = tokens / page_tokens
    if not isinstance(out, np.ndarray):
        return np.ceil(out) * page_tokens
    np.ceil(out, out=out)
    out *= page_tokens
    return out


def stored_bytes(inp: ShareInputs, tokens: np.ndarray) -> np.ndarray:
    """Per-token-page bytes ('token' and 'window' components) one request keeps, one layer."""
    att = inp.attention
    parts = [v for k, v in att.kv_stored_bytes(tokens, inp.kv_dtype).items() if att.memory_kind(k) != STATE]
    if not parts:
        return np.zeros_like(np.asarray(tokens, dtype=np.float64))
    if len(parts) == 1:
        return parts[0]
    out = parts[0] + parts[1]  # the rest added in place: sum(parts[1:], parts[0])'s rounding
    for v in parts[2:]:
        out += v
    return out


def resident_state(requests, per_request: float):
    """Resident state bytes of `requests` requests (the scalar 0.0 for a mixer without state: the
    step model then skips the term)."""
    return requests * per_request if per_request else 0.0


def state_bytes(inp: ShareInputs) -> float:
    """Per-request state bytes ('state' components), one layer."""
    return inp.attention.state_bytes(inp.kv_dtype)


def read_bytes(inp: ShareInputs, tokens: np.ndarray) -> dict[str, np.ndarray]:
    return inp.attention.kv_read_bytes(tokens, inp.kv_dtype)


def write_bytes(inp: ShareInputs, tokens, requests) -> np.ndarray:
    """Bytes written for `tokens` new tokens of `requests` requests (each request's state once), one layer."""
    return inp.attention.kv_write_bytes(tokens, requests, inp.kv_dtype)


def decode_flops(inp: ShareInputs, counts: np.ndarray, core_split: float = 1.0,
                 indexer_split: float = 1.0) -> dict[str, np.ndarray]:
    """Attention FLOPs by component of the decode queries of `counts` [P, R] requests, one layer,
    the per-head core divided `core_split` ways and the token-scoring parts `indexer_split` ways."""
    parts = inp.attention.decode_flops_by_component(inp.load.lengths)
    q = inp.query_tokens
    out = {}
    for k, v in parts.items():
        x = request_sum(v * counts)  # (Σ v·counts) · q / split, in place
        x *= q
        out[k] = over(x, core_split if k == "attention_core" else indexer_split)
    return out


def add_parts(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in dict.fromkeys([*a, *b])}


def with_parts(a: dict[str, np.ndarray], zeros: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """add_parts(a, zeros) where `zeros` are all zero (a step without a chunk): a's own arrays, and
    zeros' for the parts only they name."""
    return {k: a[k] if k in a else zeros[k] for k in dict.fromkeys([*a, *zeros])}


def longest_row(inp: ShareInputs, counts: np.ndarray) -> np.ndarray:
    """[P] context of the longest decode request among `counts` (0 where there is none)."""
    rows = np.where(counts > 0, inp.load.lengths, 0.0)
    return rows[..., 0] if rows.shape[-1] == 1 else rows.max(-1)


def prefill_work(inp: ShareInputs) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(attention FLOPs by component, prefix KV bytes read) of the step's prefill chunk, one layer,
    whole. The chunk's queries read the request's cached prefix once (tiled, flash-style)."""
    att = inp.attention
    if not inp.has_prefill:  # NOTE: decode-only sweeps skip the causal-pair sums
        zeros = np.zeros_like(inp.prefill_tokens)
        return {k: zeros for k in att.prefill_flops_by_component(np.zeros(1), np.zeros(1))}, zeros
    flops = att.prefill_flops_by_component(inp.prefill_tokens, inp.prefill_context)
    prefix = np.where(inp.prefill_tokens > 0, stored_bytes(inp, inp.prefill_context), 0.0)
    return flops, prefix


def prefill_resident(inp: ShareInputs) -> np.ndarray:
    """KV bytes (page-rounded) of the prefilling request once the chunk is written, one layer."""
    if not inp.has_prefill:
        return np.zeros_like(inp.prefill_tokens)
    total = pages_rounded(inp.prefill_context + inp.prefill_tokens, inp.page_tokens)
    return np.where(inp.prefill_tokens > 0, stored_bytes(inp, total), 0.0)


def prefill_requests(inp: ShareInputs) -> np.ndarray:
    """[P] 1 where the step runs a prefill chunk (one request), else 0."""
    if not inp.has_prefill:
        return np.zeros_like(inp.prefill_tokens)
    return np.where(inp.prefill_tokens > 0, 1.0, 0.0)


def refuse_unsplittable(layout: str, model: ModelSpec, why: str, bad) -> None:
    """One line naming the layout and the first variant `bad(variant)` says it can't run."""
    for v, _ in model.mixers:
        if bad(v):
            raise SpecError(f"layout {layout} cannot run {model.name}'s {v.describe()} layers: {why}")


class AttentionLayout:
    """What a layout declares in its class header is what the rest of the house reads: the share
    methods below price a step; everything else (capacity, the engines' memory, the runtime's
    tables, KV ledger, transitions and executor) reads the `Placement` those declarations compile
    to (`placement`), so a new layout gets pools, a ledger and transition plans with no other edit."""

    name: ClassVar[str]
    description: ClassVar[str]
    group_rule: ClassVar[GroupRule]  # how many owner groups of T ranks (see GroupRule above)
    kv_in_group: ClassVar[KvInGroup]  # how a group's ranks hold its requests (see KvInGroup above)
    weights_sharded: ClassVar[bool]  # head-sharded attention weights split over ranks (True) or replicated
    # the ranks a sharded weight (and a sharded LM head) splits over: its owner group's, or all T
    # (DOP: weights sharded over every rank while each request's KV sits on one)
    weight_scope: ClassVar[Literal["group", "all"]] = "group"
    activations_replicated: ClassVar[bool]  # after attention every rank holds every token's hidden state
    head_sharded: ClassVar[bool]  # LM head vocab-parallel over ranks
    order: ClassVar[int] = 100  # where listings put it (planner.deployment.RegistryNames)

    def default_groups(self, ranks: int, group_nodes: int = 1) -> int | None:
        """The group count a layout that takes one ("given") uses when the deployment names none."""
        return None

    def owner_groups(self, ranks: int, groups: int | None = None) -> int:
        """G: owner groups of `ranks` ranks (`group_rule`; `groups` the deployment's count)."""
        if self.group_rule == "one":
            return 1
        if self.group_rule == "per_rank":
            return ranks
        if groups is None:
            raise SpecError(f"layout {self.name} needs a group count (attn_groups)")
        return int(groups)

    def placement(self, ranks: int, groups: int | None = None) -> Placement:
        """Who holds what on a group of `ranks` ranks (planner.layouts.placement)."""
        g = self.owner_groups(ranks, groups)
        r = ranks // g if g >= 1 and ranks % g == 0 else 0
        if r < 1:
            raise SpecError(f"layout {self.name}: {g} owner groups do not divide {ranks} ranks")
        scope = ranks if self.weight_scope == "all" else r
        return Placement(self.name, ranks, g, r if self.kv_in_group == "tokens" else 1,
                         r if self.kv_in_group == "heads" else 1, scope if self.weights_sharded else 1,
                         scope if self.head_sharded else 1)

    def share(self, inp: ShareInputs) -> AttentionShare:
        raise NotImplementedError

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        """Ranks that may be the busiest. One for layouts that spread every request over all
        ranks; owner layouts add the rank that runs the step's prefill chunk."""
        return [self.share(inp)]

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        """Per-layer collectives of the attention block."""
        raise NotImplementedError

    def check(self, model: ModelSpec, ranks: int, groups: int | None = None) -> None:
        """Raise SpecError if the model can't run this layout on `ranks` ranks (in `groups` owner
        groups, for a layout that takes a count): its head-sharded weights must split the
        placement's `weight_split` ways."""
        w = self.placement(ranks, groups).weight_split
        if w > 1:
            for v, _ in model.mixers:
                v.check_tp(w)


class MoESplit:
    name: ClassVar[str]
    description: ClassVar[str]

    def collectives(self, inp: ShareInputs, activations_replicated: bool, mlp: MLPVariant) -> list[Collective]:
        """Per-layer collectives of one MLP layer (dense or MoE). With every token's hidden state
        on every rank, each rank applies its share of the layer and an all-reduce sums them,
        whatever the split; otherwise the split decides."""
        if activations_replicated:
            return [Collective("mlp_allreduce", "all_reduce", inp.step_hidden_bytes, 1.0)]
        return self.partitioned_collectives(inp, mlp)

    def partitioned_collectives(self, inp: ShareInputs, mlp: MLPVariant) -> list[Collective]:
        """Collectives of one MLP layer when each rank holds only its own tokens (DP-attention)."""
        raise NotImplementedError


_ATTN: Registry = Registry(__package__, "attention layout", key=lambda obj: obj.name)
_MOE: Registry = Registry(__package__, "MoE split", key=lambda obj: obj.name)


def register_attention_layout(cls):
    _ATTN.register(cls())
    return cls


def register_moe_split(cls):
    _MOE.register(cls())
    return cls


def attention_layouts() -> dict[str, AttentionLayout]:
    return _ATTN.discover()


def moe_splits() -> dict[str, MoESplit]:
    return _MOE.discover()


def tokens_hidden_bytes(inp: ShareInputs, tokens: np.ndarray) -> np.ndarray:
    return product(tokens, inp.model.hidden_size, ACTIVATION_BYTES)
