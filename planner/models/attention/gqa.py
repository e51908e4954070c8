"""MHA / GQA / MQA: K and V per KV head; TP splits KV by heads down to one KV head per rank,
then replicates (Megatron-style; vLLM and SGLang keep max(1, kv_heads // tp) heads per rank).
Cost per decode query: read K and V of every context token, 2·d_k FLOPs per (query head, token)
for QK and 2·d_v for PV. Ignores: RoPE, softmax FLOPs, q/k norms, attention sinks (a per-head
scalar).

Per-layer geometry, as each family's config spells it (read in `geometry`):
- Gemma-4 full layers: `global_head_dim`, `num_global_key_value_heads`, and `attention_k_eq_v`:
  the checkpoint has no v_proj (K's weights serve as V), but vLLM still caches V
  (vllm/model_executor/models/gemma4.py loads the K weights into both slots), so the KV record
  keeps both halves and only the weights shrink;
- MiMo-V2-Flash: `v_head_dim` ≠ `head_dim` (192 / 128), and sliding layers' `swa_*` fields;
- Nemotron-H: `attention_head_dim`; DeciLM: per-layer KV heads from `n_heads_in_group`;
- an output gate (Qwen3.5 `attn_output_gate`, MiniMax-M3 `attention_output_gate`) doubles the
  q projection: q_proj emits the query and a per-channel sigmoid gate (HF Qwen3-Next/Qwen3.5
  attention: q_proj out = heads · head_dim · 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.attention.base import (KV_DTYPE_BYTES, AttentionVariant, WeightPart, as_tokens, causal_pairs,
                                           register_attention)
from planner.models.config import HFConfig, LayerType


def geometry(cfg: HFConfig, layer: LayerType, sliding: bool) -> dict[str, Any]:
    """Heads, KV heads, K and V head widths, output gate and K = V of one layer."""
    hidden = cfg.int("hidden_size")
    heads = layer.opt("num_heads") or (cfg.int("swa_num_attention_heads", None) if sliding else None) \
        or cfg.int("num_attention_heads")
    kv = layer.opt("num_kv_heads")
    if kv is None and sliding:
        kv = cfg.int("swa_num_key_value_heads", None)
    if kv is None and not sliding:
        kv = cfg.int("num_global_key_value_heads", None)
    kv = kv or cfg.int("num_key_value_heads", None) or heads
    dk = (cfg.int("swa_head_dim", None) if sliding else cfg.int("global_head_dim", None)) \
        or cfg.int("attention_head_dim", None) or cfg.int("head_dim", None) or hidden // heads
    dv = (cfg.int("swa_v_head_dim", None) if sliding else None) or cfg.int("v_head_dim", None) or dk
    if dk < 1:
        raise SpecError(f"hidden_size={hidden} over num_attention_heads={heads} leaves no head width")
    if kv > heads or heads % kv:
        raise SpecError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv}")
    gate = cfg.flag("attn_output_gate") or cfg.flag("attention_output_gate")
    k_eq_v = (not sliding) and cfg.flag("attention_k_eq_v")
    return dict(num_heads=heads, num_kv_heads=kv, head_dim=dk, v_head_dim=dv, hidden_size=hidden,
                output_gate=gate, k_eq_v=k_eq_v)


@register_attention
@dataclass(frozen=True)
class GQA(AttentionVariant):
    kind: ClassVar[str] = "gqa"
    priority: ClassVar[int] = 0

    num_kv_heads: int = 1
    head_dim: int = 128  # K (and Q) width per head
    hidden_size: int = 0
    v_head_dim: int = 0  # 0: same as head_dim
    output_gate: bool = False
    k_eq_v: bool = False  # no v_proj weights (V cached anyway, see the module docstring)

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "GQA | None":
        if layer.mixer != "full_attention" or not cfg.has("num_attention_heads"):
            return None
        return cls(**geometry(cfg, layer, sliding=False))

    @property
    def v_width(self) -> int:
        return self.v_head_dim or self.head_dim

    def kv_splittable_heads(self) -> int:
        return self.num_kv_heads

    def _per_token(self, kv_dtype: str) -> float:
        return self.num_kv_heads * (self.head_dim + self.v_width) * KV_DTYPE_BYTES[kv_dtype]

    def attended_tokens(self, context_tokens: np.ndarray) -> np.ndarray:
        return as_tokens(context_tokens)

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        return {"kv": self.attended_tokens(context_tokens) * self._per_token(kv_dtype)}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        return {"kv": self.attended_tokens(context_tokens) * self._per_token(kv_dtype)}

    def _flops_per_pair(self) -> float:
        return 2.0 * self.num_heads * (self.head_dim + self.v_width)

    def decode_flops(self, context_tokens):
        return self._flops_per_pair() * self.attended_tokens(context_tokens)

    def prefill_pairs(self, chunk_tokens, prefix_tokens):
        return causal_pairs(chunk_tokens, prefix_tokens)

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return self._flops_per_pair() * self.prefill_pairs(chunk_tokens, prefix_tokens)

    def decode_query_width(self):
        return self.head_dim

    def decode_output_width(self):
        return self.v_width

    def weight_parts(self):
        h, n, kv, dk, dv = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim, self.v_width
        q = h * n * dk * (2 if self.output_gate else 1)
        k = h * kv * dk
        v = 0 if self.k_eq_v else h * kv * dv
        o = n * dv * h
        return {"attention": WeightPart(float(q + k + v + o), True)}
