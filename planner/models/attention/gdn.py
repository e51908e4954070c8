"""Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6 'linear_attention' layers): a recurrent state per
value head of d_v × d_k and a short convolution over q, k and v.

Shapes (vLLM `MambaStateShapeCalculator.gated_delta_net_state_shape`; SGLang builds the same):
conv state (conv_dim / TP, kernel − 1) with conv_dim = 2·H_k·d_k + H_v·d_v, recurrent state
(H_v / TP, d_v, d_k). Qwen3.5-397B: conv 12,288 × 3 × 2 B = 73,728 B, state 64 × 128 × 128 × 4 B
= 4,194,304 B per layer (shared/reference/frontier-models-and-engines.md §1.1).
Weights (HF Qwen3-Next GatedDeltaNet): in_proj_qkvz hidden × (2·H_k·d_k + 2·H_v·d_v), in_proj_ba
hidden × 2·H_v, conv1d conv_dim × kernel, out_proj H_v·d_v × hidden, A_log and dt_bias (H_v
each), all split by heads under TP (vLLM asserts num_k_heads % tp == 0).
FLOPs per decode token: 7·d_k·d_v per value head — the fused recurrent step
(fla-org/flash-linear-attention fla/ops/gated_delta_rule/fused_recurrent.py): decay the state
(1), Sᵀk (2), the rank-1 delta update (2), Sᵀq (2) per state element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from planner.models.attention.base import WeightPart, register_attention
from planner.models.attention.recurrent import RecurrentState, ssm_state_bytes
from planner.models.config import HFConfig, LayerType


@register_attention
@dataclass(frozen=True)
class GatedDeltaNet(RecurrentState):
    kind: ClassVar[str] = "gdn"
    priority: ClassVar[int] = 40
    flops_per_state_element: ClassVar[float] = 7.0

    key_heads: int = 16
    key_dim: int = 128
    value_dim: int = 128
    kernel: int = 4

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "GatedDeltaNet | None":
        if layer.mixer != "linear_attention" or not cfg.has("linear_num_key_heads"):
            return None
        hk, hv = cfg.int("linear_num_key_heads"), cfg.int("linear_num_value_heads")
        dk, dv = cfg.int("linear_key_head_dim"), cfg.int("linear_value_head_dim")
        kernel = cfg.int("linear_conv_kernel_dim", 4, lo=1)
        return cls(num_heads=hv, hidden_size=cfg.int("hidden_size"), conv_channels=2 * hk * dk + hv * dv,
                   conv_width=kernel - 1, state_heads=hv, state_rows=dv, state_cols=dk, split_heads=hk,
                   ssm_bytes=ssm_state_bytes(cfg), key_heads=hk, key_dim=dk, value_dim=dv, kernel=kernel)

    def weight_parts(self):
        h, hk, hv, dk, dv = self.hidden_size, self.key_heads, self.num_heads, self.key_dim, self.value_dim
        qkvz = h * (2 * hk * dk + 2 * hv * dv)
        ba = h * 2 * hv
        conv = self.conv_channels * self.kernel
        out = hv * dv * h
        return {"linear_attention": WeightPart(float(qkvz + ba + conv + out + 2 * hv), True)}

    def decode_query_width(self):
        return (2 * self.key_heads * self.key_dim + 2 * self.num_heads * self.value_dim + 2 * self.num_heads) // self.num_heads
