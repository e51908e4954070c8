"""Mixture of experts, one layer: routed top-k experts, optional shared experts, optionally a
latent MoE (Nemotron-3 `moe_latent_size`, Kimi-K3 `routed_expert_hidden_size`: the routed
experts work in a narrower latent space, fc1_latent_proj hidden → latent before dispatch and
fc2_latent_proj latent → hidden after combine; the router and the shared experts read the hidden
state — NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_nemotron_h.py NemotronHMOE.forward,
NVIDIA/Megatron-LM moe_layer.py `router_and_preprocess`: fc1_latent_proj before
`dispatch_preprocess`), and hash-routed layers (DeepSeek-V4's first `num_hash_layers` MoE layers
route by a fixed token-id → expert table, `tid2eid`; priced as learned routing: the same experts
read and run, no router GEMM, which the step ignores anyway).

The experts a rank reads in a step are the expected number of *distinct* experts its tokens
touch: with N tokens each picking k of E experts uniformly, an expert is missed by every token
with probability (1 − k/E)^N, so E·(1 − (1 − k/E)^N) are read — not all E, not just k. Under
EP a rank holds E/T experts and reads its share of those; under TP it reads a 1/T slice of each.
The uniform-routing assumption ignores routing skew (hot experts make the busiest EP rank read
more; calibration absorbs it). Shared experts and the latent projections are replicated under EP
(SGLang's default), sharded under TP. FLOPs: 2 × active parameters per token, balanced. The EP
dispatch carries `dispatch_width` elements per token copy (the latent for a latent MoE).

Field names per family (read in `from_hf_config`): experts `n_routed_experts` | `num_local_experts`
| `num_experts`; top-k `num_experts_per_tok` | `experts_per_token` | `moe_topk` | `top_k_experts`
(Gemma-4) | `num_experts_per_token` (Kimi-K3); width `moe_intermediate_size` | `intermediate_size`
(Mixtral, Llama-4); shared experts `n_shared_experts` or `num_shared_experts` × width,
`shared_expert_intermediate_size` (Qwen), `moe_shared_expert_intermediate_size` (Nemotron),
`shared_intermediate_size` (MiniMax), `share_expert_dim` (Step), and Llama-4's one shared expert
of `intermediate_size` in every MoE layer (HF modeling_llama4 Llama4TextMoe.shared_expert).
A MoE is refused unless 1 ≤ top-k ≤ experts: outside that the expected-distinct-experts formula
has no meaning (NaN, negative bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.config import HFConfig, LayerType
from planner.models.mlp.base import MLPVariant, matrices_for, register_mlp

EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts", "num_experts_per_token")


def expected_distinct_experts(tokens: np.ndarray, num_experts: int, top_k: int) -> np.ndarray:
    """E·(1 − (1 − k/E)^N): expected distinct experts touched by N tokens routing top-k of E."""
    n = np.asarray(tokens, dtype=np.float64)
    if n.ndim == 0:
        return num_experts * -np.expm1(n * np.log1p(-top_k / num_experts))
    out = n * np.log1p(-top_k / num_experts)  # the same operations, in one array
    np.expm1(out, out=out)
    np.negative(out, out=out)
    out *= num_experts
    return out


def _first(cfg: HFConfig, keys: tuple[str, ...]):
    for k in keys:
        if cfg.has(k):
            return k, cfg.int(k)
    return None, None


def shared_width(cfg: HFConfig, width: int) -> tuple[int, int]:
    """(shared experts, their total width) as the family's fields say (module docstring): Qwen's
    `shared_expert_intermediate_size` is the one shared expert's width (0: none, Qwen3-Coder); the
    others are per shared expert, times `n_shared_experts` (1 when absent)."""
    n = cfg.int("n_shared_experts", None, lo=0)
    if n is None:
        n = cfg.int("num_shared_experts", None, lo=0)
    if cfg.has("shared_expert_intermediate_size"):
        w = cfg.int("shared_expert_intermediate_size", lo=0)
        return (1, w) if w else (0, 0)
    for key in ("moe_shared_expert_intermediate_size", "shared_intermediate_size", "share_expert_dim"):
        if cfg.has(key):
            count = 1 if n is None else n
            return count, count * cfg.int(key, lo=0)
    if str(cfg.get("model_type", "")).startswith("llama4"):
        return 1, cfg.int("intermediate_size")
    return (n or 0), (n or 0) * width


def has_experts(cfg: HFConfig) -> bool:
    return any(cfg.has(k) and cfg.get(k) != 0 for k in EXPERT_KEYS)


@register_mlp
@dataclass(frozen=True)
class MoE(MLPVariant):
    kind: ClassVar[str] = "moe"
    priority: ClassVar[int] = 10
    is_moe: ClassVar[bool] = True

    num_experts: int = 1
    top_k: int = 1
    expert_intermediate_size: int = 1
    shared_experts: int = 0
    shared_intermediate_size: int = 0  # all shared experts together
    latent_size: int = 0  # 0: the experts work on the hidden state
    matrices: int = 3
    routing: str = "learned"  # or 'hash' (DeepSeek-V4's first layers)

    def __post_init__(self):
        if not 1 <= self.top_k <= self.num_experts:
            raise SpecError(f"num_experts_per_tok={self.top_k} must be between 1 and the {self.num_experts} routed experts")
        if min(self.expert_intermediate_size, self.hidden_size) < 1 or min(self.shared_experts, self.shared_intermediate_size,
                                                                           self.latent_size) < 0:
            raise SpecError("MoE sizes must be positive (moe_intermediate_size, hidden_size) or ≥ 0 (shared experts)")

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "MoE | None":
        if layer.mlp not in ("moe",):
            return None
        return cls.from_fields(cfg, layer)

    @classmethod
    def from_fields(cls, cfg: HFConfig, layer: LayerType) -> "MoE":
        ekey, experts = _first(cfg, EXPERT_KEYS)
        if not experts:
            raise SpecError("a MoE layer needs a routed-expert count ('n_routed_experts', 'num_local_experts' or 'num_experts')")
        tkey, top_k = _first(cfg, TOPK_KEYS)
        if not top_k:
            raise SpecError("MoE config has experts but no 'num_experts_per_tok'")
        if top_k > experts:
            raise SpecError(f"{tkey}={top_k} exceeds the {experts} routed experts")
        width = cfg.int("moe_intermediate_size", None) or cfg.int("intermediate_size", None)
        if not width:
            raise SpecError("MoE config needs 'moe_intermediate_size' or 'intermediate_size'")
        n_shared, s_width = shared_width(cfg, width)
        latent = cfg.int("moe_latent_size", None) or cfg.int("routed_expert_hidden_size", None) or 0
        return cls(hidden_size=cfg.int("hidden_size"), num_experts=experts, top_k=top_k, expert_intermediate_size=width,
                   shared_experts=n_shared, shared_intermediate_size=s_width, latent_size=latent,
                   matrices=matrices_for(cfg.get("mlp_hidden_act")), routing=layer.opt("routing", "learned"))

    @property
    def expert_input_width(self) -> int:
        return self.latent_size or self.hidden_size

    @property
    def expert_params(self) -> float:
        return float(self.matrices * self.expert_input_width * self.expert_intermediate_size)

    @property
    def shared_params(self) -> float:
        return float(self.matrices * self.hidden_size * self.shared_intermediate_size)

    @property
    def latent_params(self) -> float:
        return float(2 * self.hidden_size * self.latent_size)

    @property
    def routed_params(self) -> float:
        return self.expert_params * self.num_experts

    def dispatch_width(self) -> int:
        """Elements of one token copy the EP dispatch carries."""
        return self.expert_input_width

    def weight_params(self):
        out = {"shared_experts": self.shared_params, "routed_experts": self.routed_params}
        if self.latent_size:
            out["latent_proj"] = self.latent_params
        return out

    def active_params_per_token(self):
        return self.shared_params + self.latent_params + self.expert_params * self.top_k

    def rank_resident_params(self, tp, moe_split):
        rep = 1.0 if moe_split == "ep" else 1.0 / tp
        out = {"shared_experts": self.shared_params * rep, "routed_experts": self.routed_params / tp}
        if self.latent_size:
            out["latent_proj"] = self.latent_params * rep
        return out

    def rank_read_params(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        distinct = expected_distinct_experts(g, self.num_experts, self.top_k)
        on = np.where(g > 0, 1.0, 0.0)
        rep = 1.0 if moe_split == "ep" else 1.0 / tp
        # NOTE: each product as written (left to right), in place in the new array its first term made
        shared = on * self.shared_params
        shared *= rep
        distinct /= tp
        distinct *= self.expert_params
        out = {"shared_experts": shared, "experts": distinct}
        if self.latent_size:
            latent = on * self.latent_params
            latent *= rep
            out["latent_proj"] = latent
        return out

    def rank_flops(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        # NOTE: 2·g·params / tp as written (left to right), in place in the new array 2·g made
        shared, experts = 2.0 * g, 2.0 * g
        shared *= self.shared_params
        shared /= tp
        experts *= self.top_k
        experts *= self.expert_params
        experts /= tp
        out = {"shared_experts": shared, "experts": experts}
        if self.latent_size:
            latent = 2.0 * g
            latent *= self.latent_params
            latent /= tp
            out["latent_proj"] = latent
        return out

    def check_tp(self, tp, moe_split):
        if moe_split == "ep" and self.num_experts % tp:
            raise SpecError(f"num_experts={self.num_experts} is not divisible by ep={tp}")
        if moe_split == "tp" and self.expert_intermediate_size % tp:
            raise SpecError(f"moe_intermediate_size={self.expert_intermediate_size} is not divisible by tp={tp}")

    def profile_transient_elems_per_token(self, tp, moe_split):
        # fused_experts_impl's intermediate_cache1/2/3: top_k × (2·I + I + hidden), I the rank's width
        width = self.expert_intermediate_size / (tp if moe_split == "tp" else 1)
        return float(self.top_k * (3.0 * width + self.hidden_size))

    def describe(self):
        lat = f", latent {self.latent_size}" if self.latent_size else ""
        hashed = ", hash-routed" if self.routing == "hash" else ""
        return f"moe({self.num_experts}×{self.expert_intermediate_size}, top-{self.top_k}{lat}{hashed})"
