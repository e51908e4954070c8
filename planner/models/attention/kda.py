"""Kimi Delta Attention (Kimi-Linear, Kimi-K3 'kda_layers'): a gated delta rule with a
per-channel decay, one d × d recurrent state per head and short convolutions over q, k and v.

Shapes (vLLM `MambaStateShapeCalculator.kda_state_shape`, `kda_state_dtype`; SGLang
`KimiLinearStateShape`): conv state (kernel − 1, 3·H·d / TP) in the model dtype, recurrent state
(H / TP, d, d), always float32 (`kda_state_dtype` returns float32 for it). Kimi-K3: conv
3 × 36,864 × 2 B = 221,184 B, state 96 × 128 × 128 × 4 B = 6,291,456 B per layer.
Weights (Kimi-Linear KimiDeltaAttention as vLLM and SGLang load it): q, k, v and o projections
(hidden × H·d each), the decay gate low-rank f_a (hidden × d) · f_b (d × H·d), beta b_proj
(hidden × H), the output gate full-rank g_proj (hidden × H·d) when `use_full_rank_gate`, else
low-rank g_a · g_b like f, three conv1d of H·d × kernel, A_log and dt_bias; split by heads.
FLOPs per decode token: 7·d·d per head, as Gated DeltaNet (planner.models.attention.gdn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from planner.models.attention.base import WeightPart, register_attention
from planner.models.attention.recurrent import RecurrentState
from planner.models.config import HFConfig, LayerType


@register_attention
@dataclass(frozen=True)
class KimiDeltaAttention(RecurrentState):
    kind: ClassVar[str] = "kda"
    priority: ClassVar[int] = 40
    flops_per_state_element: ClassVar[float] = 7.0

    head_dim: int = 128
    kernel: int = 4
    full_rank_gate: bool = False

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "KimiDeltaAttention | None":
        lin = cfg.sub("linear_attn_config")
        if layer.mixer != "kda" or lin is None:
            return None
        heads, d = lin.int("num_heads"), lin.int("head_dim")
        kernel = lin.int("short_conv_kernel_size", 4)
        return cls(num_heads=heads, hidden_size=cfg.int("hidden_size"), conv_channels=3 * heads * d,
                   conv_width=kernel - 1, state_heads=heads, state_rows=d, state_cols=d, split_heads=heads,
                   ssm_bytes=4.0, head_dim=d, kernel=kernel, full_rank_gate=lin.flag("use_full_rank_gate"))

    def weight_parts(self):
        h, p, d = self.hidden_size, self.num_heads * self.head_dim, self.head_dim
        qkvo = 4 * h * p
        decay = h * d + d * p
        gate = h * p if self.full_rank_gate else h * d + d * p
        beta = h * self.num_heads
        conv = 3 * p * self.kernel
        return {"linear_attention": WeightPart(float(qkvo + decay + gate + beta + conv + 2 * self.num_heads), True)}

    def decode_query_width(self):
        return 5 * self.head_dim  # q, k, v, decay gate and output gate per head
