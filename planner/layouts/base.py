"""Layout protocol and registries: attention layouts (tp, cp, dp, dop) and MoE splits (ep, tp).

An attention layout answers, for the busiest rank of a group of T ranks: what share of the
attention weights it holds, whose KV it stores and reads, whose queries it projects, and which
collectives each layer launches. A MoE split answers which collectives each MLP layer launches
given whether activations are replicated across the group after attention. A new layout is one
module in this package with `@register_attention_layout` / `@register_moe_split`.

Collectives are declared with their payload S in bytes; the link bytes a rank sends follow from
the kind (ring algorithms): all-reduce 2(T−1)/T·S, all-gather and reduce-scatter (T−1)/T·S with
S the full gathered tensor, all-to-all (T−1)/T·S with S what one rank holds for all peers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from planner.load import DecodeLoad
from planner.models.spec import ModelSpec
from planner.registry import Registry

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
# Where a layout keeps a request's KV (AttentionLayout.kv_placement):
# - "every_rank": every rank holds every token of every request (all of each token's KV, or its
#   head slice where the attention variant splits KV by heads: TP);
# - "token_split": each rank holds 1/T of every request's tokens (CP, DCP);
# - "owner": one rank (the request's owner) holds the whole request (DP-attention, DOP).
KvPlacement = Literal["every_rank", "token_split", "owner"]
KV_PLACEMENTS: tuple[str, ...] = ("every_rank", "token_split", "owner")

ACTIVATION_BYTES = 2.0  # bf16 hidden states on the wire
PARTIAL_BYTES = 4.0  # fp32 partial attention outputs and log-sum-exp for CP merges


def link_bytes_factor(kind: CollectiveKind, ranks: int) -> float:
    if ranks <= 1:
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


@dataclass(frozen=True)
class Collective:
    """One collective launched `per_step` times per step with payload `payload_bytes` [P]."""

    name: str
    kind: CollectiveKind
    payload_bytes: np.ndarray
    per_step: float


@dataclass(frozen=True)
class AttentionShare:
    """The busiest rank's attention work, per layer, arrays [P]."""

    kv_stored_bytes: np.ndarray  # resident KV bytes (page-rounded), one layer
    kv_read_bytes: dict[str, np.ndarray]  # by component ('kv', 'indexer', 'prefill_prefix'), one layer
    kv_write_bytes: np.ndarray  # new tokens' KV written this step, one layer
    attention_flops: np.ndarray  # attention-core FLOPs incl. prefill, one layer
    projected_tokens: np.ndarray  # tokens whose projections this rank computes
    output_projected_tokens: np.ndarray | None = None  # tokens through the output path (None: projected_tokens)


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
    step_tokens: np.ndarray = field(init=False)  # [P] decode + prefill tokens the group runs this step

    def __post_init__(self) -> None:
        if self.prefill_context is None:
            object.__setattr__(self, "prefill_context", np.zeros_like(self.prefill_tokens))
        object.__setattr__(self, "step_tokens", self.load.batch + self.prefill_tokens)


def pages_rounded(tokens: np.ndarray, page_tokens: int) -> np.ndarray:
    return np.ceil(tokens / page_tokens) * page_tokens


def stored_bytes(inp: ShareInputs, tokens: np.ndarray) -> np.ndarray:
    parts = inp.model.attention.kv_stored_bytes(tokens, inp.kv_dtype)
    return sum(parts.values())


def read_bytes(inp: ShareInputs, tokens: np.ndarray) -> dict[str, np.ndarray]:
    return inp.model.attention.kv_read_bytes(tokens, inp.kv_dtype)


def prefill_work(inp: ShareInputs) -> tuple[np.ndarray, np.ndarray]:
    """(attention-core FLOPs, prefix KV bytes read) of the step's prefill chunk, one layer, whole.
    The chunk's queries read the request's cached prefix once (tiled, flash-style)."""
    att = inp.model.attention
    flops = att.prefill_flops(inp.prefill_tokens, inp.prefill_context)
    prefix = np.where(inp.prefill_tokens > 0, stored_bytes(inp, inp.prefill_context), 0.0)
    return flops, prefix


def prefill_resident(inp: ShareInputs) -> np.ndarray:
    """KV bytes (page-rounded) of the prefilling request once the chunk is written, one layer."""
    total = pages_rounded(inp.prefill_context + inp.prefill_tokens, inp.page_tokens)
    return np.where(inp.prefill_tokens > 0, stored_bytes(inp, total), 0.0)


def new_token_bytes(inp: ShareInputs) -> float:
    """KV bytes written for one new token, one layer."""
    return inp.model.attention.kv_bytes_per_token(inp.kv_dtype)


class AttentionLayout:
    """What a layout declares in its class header is what the rest of the house reads: the share
    methods below price a step; the runtime (runtime_policy.tables, .transitions) derives a layout's
    KV share, owner semantics and every switch's moves from `kv_placement` and the weights flags,
    so a new layout gets transition plans with no runtime edit."""

    name: ClassVar[str]
    description: ClassVar[str]
    kv_placement: ClassVar[KvPlacement]  # where a request's KV lives (see KvPlacement above)
    weights_sharded: ClassVar[bool]  # input-side attention weights split over ranks (True) or replicated
    output_sharded: ClassVar[bool]  # per-head output path (W_UV, o-proj) split over ranks
    activations_replicated: ClassVar[bool]  # after attention every rank holds every token's hidden state
    head_sharded: ClassVar[bool]  # LM head vocab-parallel over ranks

    def share(self, inp: ShareInputs) -> AttentionShare:
        raise NotImplementedError

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        """Ranks that may be the busiest. One for layouts that spread every request over all
        ranks; owner layouts add the rank that runs the step's prefill chunk."""
        return [self.share(inp)]

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        """Per-layer collectives of the attention block."""
        raise NotImplementedError

    def check(self, model: ModelSpec, ranks: int) -> None:
        """Raise SpecError if the model can't run this layout on `ranks` ranks."""


class MoESplit:
    name: ClassVar[str]
    description: ClassVar[str]

    def collectives(self, inp: ShareInputs, activations_replicated: bool, layer_is_moe: bool) -> list[Collective]:
        """Per-layer collectives of one MLP layer (dense or MoE). With every token's hidden state
        on every rank, each rank applies its share of the layer and an all-reduce sums them,
        whatever the split; otherwise the split decides."""
        if activations_replicated:
            return [Collective("mlp_allreduce", "all_reduce", tokens_hidden_bytes(inp, inp.step_tokens), 1.0)]
        return self.partitioned_collectives(inp, layer_is_moe)

    def partitioned_collectives(self, inp: ShareInputs, layer_is_moe: bool) -> list[Collective]:
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
    return tokens * inp.model.hidden_size * ACTIVATION_BYTES
