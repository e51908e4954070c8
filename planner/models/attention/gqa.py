"""MHA / GQA / MQA: K and V per KV head; TP splits KV by heads down to one KV head per rank,
then replicates (Megatron-style). Cost per decode query: read K and V of every context token,
2·head_dim FLOPs per (query head, token) for QK and as many for PV. Ignores: RoPE, softmax
FLOPs, attention sinks (a per-head scalar)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.models.attention.base import (KV_DTYPE_BYTES, AttentionVariant, as_tokens, causal_pairs, need,
                                           register_attention)


@register_attention
@dataclass(frozen=True)
class GQA(AttentionVariant):
    kind: ClassVar[str] = "gqa"
    priority: ClassVar[int] = 0

    num_kv_heads: int = 1
    head_dim: int = 128
    hidden_size: int = 0

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> "GQA | None":
        if cfg.get("num_attention_heads") is None or cfg.get("hidden_size") is None:
            return None
        heads = int(need(cfg, "num_attention_heads", "gqa"))
        hidden = int(cfg["hidden_size"])
        return cls(
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            hidden_size=hidden,
        )

    def kv_splittable_heads(self) -> int:
        return self.num_kv_heads

    def _per_token(self, kv_dtype: str) -> float:
        return 2.0 * self.num_kv_heads * self.head_dim * KV_DTYPE_BYTES[kv_dtype]

    def attended_tokens(self, context_tokens: np.ndarray) -> np.ndarray:
        return as_tokens(context_tokens)

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        return {"kv": self.attended_tokens(context_tokens) * self._per_token(kv_dtype)}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        return {"kv": self.attended_tokens(context_tokens) * self._per_token(kv_dtype)}

    def decode_flops(self, context_tokens):
        return 4.0 * self.num_heads * self.head_dim * self.attended_tokens(context_tokens)

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return 4.0 * self.num_heads * self.head_dim * causal_pairs(chunk_tokens, prefix_tokens)

    def decode_query_width(self):
        return self.head_dim

    def decode_output_width(self):
        return self.head_dim

    def weight_params(self):
        h, d = self.hidden_size, self.head_dim
        return {"attention": float(h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2)}
