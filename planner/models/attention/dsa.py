"""DSA, DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA whose decode query attends to
only the top-k tokens an indexer picks. The indexer keeps one 128-wide fp8 key + fp32 scale
(132 B) per token and layer and scores every token each step; the main latent is stored for
every token but read only for min(L, top-k). Sparse attention lowers KV bandwidth, not the
capacity wall (reference/models.md).

KV record per token per layer: bf16 main 1152 + 132 indexer; the fp8 record (`fp8_dsa`) is 512
fp8 latent + 4 fp32 scales + 64 bf16 rope = 656, + 132. Indexer FLOPs: 2·heads·dim per scored
token (fp8 in practice, priced at the bf16 rate here to stay a lower bound). Ignores the top-k
selection itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.models.attention.base import as_tokens, causal_pairs, need, register_attention
from planner.models.attention.mla import MLA

INDEXER_KEY_BYTES = 128 + 4  # fp8 key + one fp32 scale
DSA_FP8_RECORD_BYTES = 512 + 16 + 128  # fp8 latent + 4 fp32 scales + bf16 rope (DeepSeek dims)


@register_attention
@dataclass(frozen=True)
class DSA(MLA):
    kind: ClassVar[str] = "dsa"
    priority: ClassVar[int] = 30

    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> "DSA | None":
        if cfg.get("index_topk") is None:
            return None
        return cls(
            **cls._fields(cfg),
            index_n_heads=int(need(cfg, "index_n_heads", cls.kind)),
            index_head_dim=int(need(cfg, "index_head_dim", cls.kind)),
            index_topk=int(cfg["index_topk"]),
        )

    def supported_kv_dtypes(self):
        return ("bf16", "fp8_dsa")

    def main_bytes_per_token(self, kv_dtype: str) -> float:
        if kv_dtype == "fp8_dsa":
            # 1 byte per latent element, one fp32 scale per 128 latent elements, bf16 rope.
            return self.kv_lora_rank + 4.0 * self.kv_lora_rank / 128.0 + 2.0 * self.qk_rope_head_dim
        return super().main_bytes_per_token(kv_dtype)

    def indexer_bytes_per_token(self) -> float:
        return self.index_head_dim + 4.0

    def attended_tokens(self, context_tokens):
        return np.minimum(as_tokens(context_tokens), float(self.index_topk))

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        return {"kv": l * self.main_bytes_per_token(kv_dtype), "indexer": l * self.indexer_bytes_per_token()}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        return {
            "kv": self.attended_tokens(l) * self.main_bytes_per_token(kv_dtype),
            "indexer": l * self.indexer_bytes_per_token(),
        }

    def decode_flops(self, context_tokens):
        l = as_tokens(context_tokens)
        indexer = 2.0 * self.index_n_heads * self.index_head_dim * l
        return super().decode_flops(l) + indexer

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        # the indexer scores every causal pair; latent attention covers at most top-k keys per query
        sparse = causal_pairs(chunk_tokens, prefix_tokens, self.index_topk)
        full = causal_pairs(chunk_tokens, prefix_tokens)
        return self.num_heads * self._prefill_per_pair() * sparse + 2.0 * self.index_n_heads * self.index_head_dim * full

    def weight_params(self):
        params = super().weight_params()
        q_in = self.q_lora_rank or self.hidden_size
        params["indexer"] = float(q_in * self.index_n_heads * self.index_head_dim
                                  + self.hidden_size * self.index_head_dim
                                  + self.hidden_size * self.index_n_heads)
        return params
