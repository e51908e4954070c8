"""Mamba2 (Nemotron-H and Nemotron-3 'mamba' blocks, `M` in `hybrid_override_pattern`): per
head a P × N state (head dim × state size), a short convolution over x, B and C.

Shapes (vLLM `MambaStateShapeCalculator.mamba2_state_shape`; SGLang `Mamba2StateShape`): conv
state (conv_dim / TP, kernel − 1) with conv_dim = H·P + 2·G·N, recurrent state (H / TP, P, N).
Nemotron-3 Ultra: conv 18,432 × 3 × 2 B = 110,592 B, state 256 × 64 × 128 × 4 B = 8,388,608 B
per layer (reference §1.5). NOTE: vLLM replicates the G groups of B and C when TP does not divide
G; the planner splits the whole conv state by heads (exact when TP | G, as for every config here).
Weights (HF NemotronHMamba2Mixer): in_proj hidden × (2·H·P + 2·G·N + H), conv1d conv_dim ×
kernel, out_proj H·P × hidden, A_log, D and dt_bias (H each), split by heads.
FLOPs per decode token: 5·P·N per head (the selective-state update, state-spaces/mamba
mamba_ssm/ops/triton/selective_state_update.py: decay (1), B·x outer product (2), C·state (2)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from planner.models.attention.base import WeightPart, register_attention
from planner.models.attention.recurrent import RecurrentState, ssm_state_bytes
from planner.models.config import HFConfig, LayerType


@register_attention
@dataclass(frozen=True)
class Mamba2(RecurrentState):
    kind: ClassVar[str] = "mamba2"
    priority: ClassVar[int] = 40
    flops_per_state_element: ClassVar[float] = 5.0

    head_dim: int = 64
    state_size: int = 128
    groups: int = 1
    kernel: int = 4

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "Mamba2 | None":
        if layer.mixer != "mamba" or not cfg.has("mamba_num_heads"):
            return None
        heads, p = cfg.int("mamba_num_heads"), cfg.int("mamba_head_dim")
        n, g = cfg.int("ssm_state_size"), cfg.int("n_groups", 1)
        kernel = cfg.int("conv_kernel", 4)
        return cls(num_heads=heads, hidden_size=cfg.int("hidden_size"), conv_channels=heads * p + 2 * g * n,
                   conv_width=kernel - 1, state_heads=heads, state_rows=p, state_cols=n, split_heads=heads,
                   ssm_bytes=ssm_state_bytes(cfg), head_dim=p, state_size=n, groups=g, kernel=kernel)

    def weight_parts(self):
        h, heads, p = self.hidden_size, self.num_heads, self.head_dim
        inner = heads * p
        in_proj = h * (2 * inner + 2 * self.groups * self.state_size + heads)
        conv = self.conv_channels * self.kernel
        out = inner * h
        return {"mamba": WeightPart(float(in_proj + conv + out + 3 * heads), True)}

    def decode_query_width(self):
        return 2 * self.head_dim + 1 + (2 * self.groups * self.state_size) // self.num_heads  # z, x, dt, B/C share
