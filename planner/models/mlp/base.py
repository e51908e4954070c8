"""The MLP-variant protocol and its registry (dense FFN, MoE). Same pattern as attention:
`@register_mlp`, claimed from a Hugging Face config by the most specific variant.

An MLP variant describes the whole model's feed-forward side (dense layers and MoE layers
together), because which layers are dense depends on the config (`first_k_dense_replace`,
`mlp_only_layers`…). Per-rank figures take the group size T and the MoE split ('ep': experts
spread over ranks, dense and shared experts replicated; 'tp': every expert sharded over ranks).
Parameters only; bytes and pricing live in planner.resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.registry import Registry

_REGISTRY: Registry = Registry(__package__, "mlp variant", key=lambda cls: cls.kind)
register_mlp = _REGISTRY.register
discover = _REGISTRY.discover


def mlp_from_hf_config(cfg: dict[str, Any], num_layers: int) -> "MLPVariant | None":
    return _REGISTRY.claim(cfg, num_layers)


@dataclass(frozen=True)
class MLPVariant:
    kind: ClassVar[str] = "base"
    priority: ClassVar[int] = 0

    hidden_size: int
    dense_layers: int
    dense_intermediate_size: int

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], num_layers: int) -> "MLPVariant | None":
        raise NotImplementedError

    @property
    def dense_params(self) -> float:
        """All dense-FFN parameters (gate, up, down) over all dense layers."""
        return 3.0 * self.hidden_size * self.dense_intermediate_size * self.dense_layers

    def weight_params(self) -> dict[str, float]:
        """Total parameters by component."""
        raise NotImplementedError

    def active_params_per_token(self) -> float:
        raise NotImplementedError

    def rank_resident_params(self, tp: int, moe_split: str) -> dict[str, float]:
        """Parameters resident on one rank, by component."""
        raise NotImplementedError

    def rank_read_params(self, group_tokens: np.ndarray, tp: int, moe_split: str) -> dict[str, np.ndarray]:
        """Parameters one rank streams from HBM in a step where the group runs `group_tokens`
        tokens through the MLP layers (expected distinct experts for MoE)."""
        raise NotImplementedError

    def rank_flops(self, group_tokens: np.ndarray, tp: int, moe_split: str) -> dict[str, np.ndarray]:
        """Matmul FLOPs on one rank, by component, with the group's tokens balanced over ranks."""
        raise NotImplementedError

    def check_tp(self, tp: int, moe_split: str) -> None:
        """Raise SpecError if the split is impossible on `tp` ranks."""
