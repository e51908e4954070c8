"""Dense SwiGLU FFN in every layer (Llama): gate, up and down, 3·hidden·width parameters per
layer, TP-sharded over the group in every layout. FLOPs 2 × parameters per token. Ignores
biases and norms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.mlp.base import MLPVariant, register_mlp


@register_mlp
@dataclass(frozen=True)
class DenseMLP(MLPVariant):
    kind: ClassVar[str] = "dense"
    priority: ClassVar[int] = 0

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], num_layers: int) -> "DenseMLP | None":
        if cfg.get("intermediate_size") is None or cfg.get("hidden_size") is None:
            return None
        return cls(hidden_size=int(cfg["hidden_size"]), dense_layers=num_layers,
                   dense_intermediate_size=int(cfg["intermediate_size"]))

    def weight_params(self):
        return {"dense_mlp": self.dense_params}

    def active_params_per_token(self):
        return self.dense_params

    def rank_resident_params(self, tp, moe_split):
        return {"dense_mlp": self.dense_params / tp}

    def rank_read_params(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        return {"dense_mlp": np.where(g > 0, self.dense_params / tp, 0.0)}

    def rank_flops(self, group_tokens, tp, moe_split):
        g = np.asarray(group_tokens, dtype=np.float64)
        return {"dense_mlp": 2.0 * g * self.dense_params / tp}

    def check_tp(self, tp, moe_split):
        if self.dense_intermediate_size % tp:
            raise SpecError(f"intermediate_size={self.dense_intermediate_size} is not divisible by tp={tp}")
