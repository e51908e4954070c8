"""Dense FFN: gated (gate, up, down: 3·hidden·width parameters, SwiGLU and friends) or Nemotron-H's
two-matrix squared ReLU (`relu2`), TP-sharded over the group in every layout and replicated under
EP (SGLang's default `--moe-dense-tp-size`, so DP-attention + EP runs dense layers locally).
FLOPs 2 × parameters per token. Ignores biases and norms.

Widths per family: `intermediate_size`, or for the dense layers of a MoE model
`dense_intermediate_size` (MiniMax-M3) or `intermediate_size_mlp` (Llama-4); a DeciLM layer
gives its own (`ffn_mult`, planner.models.patterns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.config import HFConfig, LayerType
from planner.models.mlp.base import MLPVariant, matrices_for, register_mlp


def dense_width(cfg: HFConfig, layer: LayerType, in_moe_model: bool) -> int:
    w = layer.opt("ffn_width")
    if w:
        return int(w)
    if in_moe_model:
        for key in ("dense_intermediate_size", "intermediate_size_mlp"):
            if cfg.has(key):
                return cfg.int(key)
    if not cfg.has("intermediate_size"):
        raise SpecError("a dense MLP layer needs field 'intermediate_size'")
    return cfg.int("intermediate_size")


@register_mlp
@dataclass(frozen=True)
class DenseMLP(MLPVariant):
    kind: ClassVar[str] = "dense"
    priority: ClassVar[int] = 0

    width: int = 1
    matrices: int = 3

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "DenseMLP | None":
        if layer.mlp != "dense":
            return None
        return cls(hidden_size=cfg.int("hidden_size"), width=dense_width(cfg, layer, layer.opt("moe_model", False)),
                   matrices=matrices_for(cfg.get("mlp_hidden_act")))

    @property
    def params(self) -> float:
        return float(self.matrices * self.hidden_size * self.width)

    def weight_params(self):
        return {"dense_mlp": self.params}

    def active_params_per_token(self):
        return self.params

    def _share(self, tp, moe_split) -> float:
        return 1.0 if moe_split == "ep" else 1.0 / tp

    def rank_resident_params(self, tp, moe_split):
        return {"dense_mlp": self.params * self._share(tp, moe_split)}

    def rank_read_params(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        return {"dense_mlp": np.where(g > 0, self.params * self._share(tp, moe_split), 0.0)}

    def rank_flops(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        out = 2.0 * g  # 2·g·params / tp as written, in place
        out *= self.params
        out /= tp
        return {"dense_mlp": out}

    def check_tp(self, tp, moe_split):
        if moe_split == "tp" and self.width % tp:
            raise SpecError(f"intermediate_size={self.width} is not divisible by tp={tp}")

    def profile_transient_elems_per_token(self, tp, moe_split):
        return float(self.matrices * self.width) / tp  # gate_up + act (planner.engines.vllm)

    def describe(self):
        return f"dense({self.width})"
