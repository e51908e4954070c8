"""A dense MLP and a MoE side by side in one layer, outputs summed (Gemma-4's `enable_moe_block`:
every layer runs its dense MLP of `intermediate_size` and its experts on the same input, HF
modeling_gemma4 / vLLM vllm/model_executor/models/gemma4.py). Parameters, reads and FLOPs are
the two parts' sums; under EP the dense part is replicated like any dense layer of a MoE model,
and the layer's EP collectives are the MoE's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from planner.models.config import HFConfig, LayerType
from planner.models.mlp.base import MLPVariant, register_mlp
from planner.models.mlp.dense import DenseMLP
from planner.models.mlp.moe import MoE


def _sum(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in dict.fromkeys([*a, *b])}


@register_mlp
@dataclass(frozen=True)
class DenseAndMoE(MLPVariant):
    kind: ClassVar[str] = "dense+moe"
    priority: ClassVar[int] = 20
    is_moe: ClassVar[bool] = True

    dense: DenseMLP | None = None
    moe: MoE | None = None

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "DenseAndMoE | None":
        if layer.mlp != "dense+moe":
            return None
        dense = DenseMLP.from_hf_config(cfg, LayerType(layer.mixer, "dense", layer.opts))
        return cls(hidden_size=cfg.int("hidden_size"), dense=dense, moe=MoE.from_fields(cfg, layer))

    @property
    def top_k(self) -> int:
        return self.moe.top_k

    @property
    def num_experts(self) -> int:
        return self.moe.num_experts

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe.expert_intermediate_size

    def dispatch_width(self) -> int:
        return self.moe.dispatch_width()

    def weight_params(self):
        return _sum(self.dense.weight_params(), self.moe.weight_params())

    def active_params_per_token(self):
        return self.dense.active_params_per_token() + self.moe.active_params_per_token()

    def rank_resident_params(self, tp, moe_split):
        return _sum(self.dense.rank_resident_params(tp, moe_split), self.moe.rank_resident_params(tp, moe_split))

    def rank_read_params(self, group_tokens, tp, moe_split):
        return _sum(self.dense.rank_read_params(group_tokens, tp, moe_split),
                    self.moe.rank_read_params(group_tokens, tp, moe_split))

    def rank_flops(self, group_tokens, tp, moe_split):
        return _sum(self.dense.rank_flops(group_tokens, tp, moe_split), self.moe.rank_flops(group_tokens, tp, moe_split))

    def check_tp(self, tp, moe_split):
        self.dense.check_tp(tp, moe_split)
        self.moe.check_tp(tp, moe_split)

    def profile_transient_elems_per_token(self, tp, moe_split):
        return max(self.dense.profile_transient_elems_per_token(tp, moe_split),
                   self.moe.profile_transient_elems_per_token(tp, moe_split))

    def describe(self):
        return f"{self.dense.describe()} + {self.moe.describe()}"
