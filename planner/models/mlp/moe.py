"""Mixture of experts: routed top-k experts, optional shared experts, optional leading dense
layers (DeepSeek `first_k_dense_replace`, Qwen `mlp_only_layers`).

The experts a rank reads in a step are the expected number of *distinct* experts its tokens
touch: with N tokens each picking k of E experts uniformly, an expert is missed by every token
with probability (1 − k/E)^N, so E·(1 − (1 − k/E)^N) are read — not all E, not just k. Under
EP a rank holds E/T experts and reads its share of those; under TP it reads a 1/T slice of each.
The uniform-routing assumption ignores routing skew (hot experts make the busiest EP rank read
more; calibration absorbs it). Shared experts and dense layers are replicated under EP
(SGLang's default), sharded under TP. FLOPs: 2 × active parameters per token, balanced.

Which layers are dense: the leading `first_k_dense_replace` plus Qwen's `mlp_only_layers`, or, when
`moe_layer_freq` is a per-layer list (MiniMax-M3, MiMo-V2-Flash), the layers whose entry is 0
(NOTE: SGLang python/sglang/srt/models/minimax_m3.py, the decoder layer's
`is_layer_sparse = moe_layer_freq[layer_id] != 0`; the list then decides alone).
A MoE is refused unless 1 ≤ top-k ≤ experts and 0 ≤ dense layers ≤ layers: outside that the
expected-distinct-experts formula and the layer counts have no meaning (NaN, negative bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.mlp.base import MLPVariant, register_mlp


def expected_distinct_experts(tokens: np.ndarray, num_experts: int, top_k: int) -> np.ndarray:
    """E·(1 − (1 − k/E)^N): expected distinct experts touched by N tokens routing top-k of E."""
    n = np.asarray(tokens, dtype=np.float64)
    return num_experts * -np.expm1(n * np.log1p(-top_k / num_experts))


@register_mlp
@dataclass(frozen=True)
class MoE(MLPVariant):
    kind: ClassVar[str] = "moe"
    priority: ClassVar[int] = 10

    moe_layers: int = 0
    num_experts: int = 1
    top_k: int = 1
    expert_intermediate_size: int = 1
    shared_experts: int = 0
    shared_intermediate_size: int = 0

    def __post_init__(self):
        if not 1 <= self.top_k <= self.num_experts:
            raise SpecError(f"num_experts_per_tok={self.top_k} must be between 1 and the {self.num_experts} routed experts")
        if self.moe_layers < 0 or self.dense_layers < 0:
            raise SpecError(f"{self.dense_layers} dense layers exceed the model's "
                            f"{self.dense_layers + self.moe_layers} layers")
        if min(self.expert_intermediate_size, self.hidden_size) < 1 or min(self.shared_experts, self.shared_intermediate_size) < 0:
            raise SpecError("MoE sizes must be positive (moe_intermediate_size, hidden_size) or ≥ 0 (shared experts)")

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], num_layers: int) -> "MoE | None":
        experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts")
        if not experts:
            return None
        top_k = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or cfg.get("moe_topk")
        if not top_k:
            raise SpecError("config.json: MoE config has experts but no 'num_experts_per_tok'")
        hidden = int(cfg["hidden_size"])
        width = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
        if not width:
            raise SpecError("config.json: MoE config needs 'moe_intermediate_size' or 'intermediate_size'")
        freq = cfg.get("moe_layer_freq")
        if isinstance(freq, list):  # a per-layer mask: 1 = MoE, 0 = dense (see the module docstring)
            dense_layers, step = sum(1 for f in freq if not f), int(cfg.get("decoder_sparse_step") or 1)
        else:
            dense_layers = int(cfg.get("first_k_dense_replace") or 0)
            dense_layers += len(cfg.get("mlp_only_layers") or [])
            step = int(cfg.get("decoder_sparse_step") or freq or 1)
        if dense_layers > num_layers:
            raise SpecError(f"config.json: {dense_layers} dense layers (first_k_dense_replace + mlp_only_layers) "
                            f"exceed num_hidden_layers={num_layers}")
        if int(top_k) > int(experts):
            raise SpecError(f"config.json: num_experts_per_tok={top_k} exceeds the {experts} routed experts")
        if step != 1:
            raise SpecError(f"config.json: MoE every {step} layers (decoder_sparse_step/moe_layer_freq) is not modelled")
        n_shared = int(cfg.get("n_shared_experts") or 0)
        shared_width = int(width) * n_shared
        if cfg.get("shared_expert_intermediate_size"):
            n_shared, shared_width = 1, int(cfg["shared_expert_intermediate_size"])
        dense_width = int(cfg.get("intermediate_size") or 0) if dense_layers else 0
        return cls(hidden_size=hidden, dense_layers=dense_layers, dense_intermediate_size=dense_width,
                   moe_layers=num_layers - dense_layers, num_experts=int(experts), top_k=int(top_k),
                   expert_intermediate_size=int(width), shared_experts=n_shared,
                   shared_intermediate_size=shared_width)

    @property
    def expert_params(self) -> float:
        return 3.0 * self.hidden_size * self.expert_intermediate_size

    @property
    def shared_params(self) -> float:
        return 3.0 * self.hidden_size * self.shared_intermediate_size * self.moe_layers

    @property
    def routed_params(self) -> float:
        return self.expert_params * self.num_experts * self.moe_layers

    def weight_params(self):
        return {"dense_mlp": self.dense_params, "shared_experts": self.shared_params,
                "routed_experts": self.routed_params}

    def active_params_per_token(self):
        per_layer_routed = self.expert_params * self.top_k
        dense_frac = self.dense_params  # dense layers run for every token
        return dense_frac + self.shared_params + per_layer_routed * self.moe_layers

    def rank_resident_params(self, tp, moe_split):
        if moe_split == "ep":
            return {"dense_mlp": self.dense_params, "shared_experts": self.shared_params,
                    "routed_experts": self.routed_params / tp}
        return {"dense_mlp": self.dense_params / tp, "shared_experts": self.shared_params / tp,
                "routed_experts": self.routed_params / tp}

    def rank_read_params(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        distinct = expected_distinct_experts(g, self.num_experts, self.top_k)
        experts = distinct / tp * self.expert_params * self.moe_layers
        on = np.where(g > 0, 1.0, 0.0)
        rep = 1.0 if moe_split == "ep" else 1.0 / tp
        return {"dense_mlp": on * self.dense_params * rep, "shared_experts": on * self.shared_params * rep,
                "experts": experts}

    def rank_flops(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        return {"dense_mlp": 2.0 * g * self.dense_params / tp,
                "shared_experts": 2.0 * g * self.shared_params / tp,
                "experts": 2.0 * g * self.top_k * self.expert_params * self.moe_layers / tp}

    def check_tp(self, tp, moe_split):
        if moe_split == "ep" and self.num_experts % tp:
            raise SpecError(f"num_experts={self.num_experts} is not divisible by ep={tp}")
        if moe_split == "tp" and self.expert_intermediate_size % tp:
            raise SpecError(f"moe_intermediate_size={self.expert_intermediate_size} is not divisible by tp={tp}")
