"""The MLP-variant protocol and its registry (dense FFN, MoE, both in parallel). Same pattern as
the mixers: `@register_mlp`, and the loader asks each registered variant, most specific first,
whether it claims a layer (`from_hf_config(cfg, layer)`, planner.models.config.LayerType).

An MLP variant is one layer's feed-forward block; the model is a stack of layer groups
(planner.models.spec), each with its count. Per-rank figures take the group size T and the MoE
split ('ep': experts spread over ranks, dense parts and shared experts replicated; 'tp': every
expert sharded over ranks). Parameters only; bytes and pricing live in planner.resources and the
step model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.models.config import HFConfig, LayerType
from planner.registry import Registry

_REGISTRY: Registry = Registry(__package__, "mlp variant", key=lambda cls: cls.kind)
register_mlp = _REGISTRY.register
discover = _REGISTRY.discover


def mlp_for_layer(cfg: HFConfig, layer: LayerType) -> "MLPVariant | None":
    return _REGISTRY.claim(cfg, layer)


# NOTE: which quantized part (planner.models.quant.PARTS) an MLP component's weights belong to
_PART = {"experts": "routed_experts", "routed_experts": "routed_experts", "latent_proj": "shared_experts",
         "shared_experts": "shared_experts", "dense_mlp": "dense_mlp"}


def component_part(component: str) -> str:
    return _PART.get(component, "dense_mlp")


def matrices_for(act: str | None) -> int:
    """Weight matrices per FFN: 3 for gated activations (SwiGLU, GELU-tanh gated, SiTU), 2 for
    Nemotron-H's squared ReLU (`mlp_hidden_act: relu2`: up and down only, HF NemotronHMLP)."""
    return 2 if act == "relu2" else 3


@dataclass(frozen=True)
class MLPVariant:
    kind: ClassVar[str] = "base"
    priority: ClassVar[int] = 0
    is_moe: ClassVar[bool] = False

    hidden_size: int

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "MLPVariant | None":
        raise NotImplementedError

    def weight_params(self) -> dict[str, float]:
        """Parameters by component, one layer."""
        raise NotImplementedError

    def active_params_per_token(self) -> float:
        """Parameters one token runs through, one layer."""
        raise NotImplementedError

    def rank_resident_params(self, tp: int, moe_split: str) -> dict[str, float]:
        """Parameters resident on one rank, by component, one layer."""
        raise NotImplementedError

    def rank_read_params(self, group_tokens: np.ndarray, tp: int, moe_split: str) -> dict[str, np.ndarray]:
        """Parameters one rank streams from HBM in a step where the group runs `group_tokens`
        tokens through this layer (expected distinct experts for MoE), one layer."""
        raise NotImplementedError

    def rank_flops(self, group_tokens: np.ndarray, tp: int, moe_split: str) -> dict[str, np.ndarray]:
        """Matmul FLOPs on one rank, by component, with the group's tokens balanced over ranks."""
        raise NotImplementedError

    def check_tp(self, tp: int, moe_split: str) -> None:
        """Raise SpecError if the split is impossible on `tp` ranks."""

    def profile_transient_elems_per_token(self, tp: int, moe_split: str) -> float:
        """Elements per token of this layer's widest transient buffer (vLLM's profile run)."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.kind
