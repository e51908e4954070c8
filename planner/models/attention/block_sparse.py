"""Block-sparse GQA with a lightning indexer (MiniMax-M3's "MSA" layers, `sparse_attention_config`
with `sparse_attention_freq[i]` = 1): per token, K and V of the KV heads as in GQA, plus one
index key (`sparse_index_dim`, K only where `sparse_disable_index_value[i]` = 1); each decode
query scores every token with `sparse_num_index_heads` index heads, keeps the best
`sparse_topk_blocks` blocks of `sparse_block_size` tokens plus the fixed `sparse_init_block` and
`sparse_local_block` blocks, and attends only those (vLLM vllm/models/minimax_m3/common/
sparse_attention.py, indexer.py: "top-k KV blocks plus fixed init/local blocks").

Storage (SGLang pool_configurator.py `is_minimax_sparse`: indexer = (2·kv_layers +
k_only_layers)·index_dim·model_dtype): the index key in the model dtype (bf16, 256 B at 128).
TP: KV heads split as GQA; index query heads split, the single index-key head replicated (TRT-LLM's
MiniMax port), so the 'indexer' cache component is not split by heads (`kv_head_split`).
Reference §1.7 [derived, bf16, TP1]: 2,048 B/token/layer main + 256 B index key; a decode read at
32K of 32,768 · 256 + 17 · 128 · 2,048 B per sparse layer.
Not modelled: the block top-k's own latency (no measured line for it; its rows are L/128 scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.models.attention.base import AccessPattern, WeightPart, as_tokens, causal_pairs, register_attention
from planner.models.attention.gqa import GQA, geometry
from planner.models.config import HFConfig, LayerType

INDEX_KEY_ELEMENT_BYTES = 2.0  # the model dtype (bf16), SGLang's pool


@register_attention
@dataclass(frozen=True)
class BlockSparse(GQA):
    kind: ClassVar[str] = "block_sparse"
    priority: ClassVar[int] = 30

    block_tokens: int = 128
    topk_blocks: int = 16
    fixed_blocks: int = 1  # init + local blocks always attended
    index_heads: int = 4
    index_dim: int = 128

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "BlockSparse | None":
        sparse = cfg.sub("sparse_attention_config")
        if layer.mixer != "sparse_attention" or sparse is None:
            return None
        return cls(**geometry(cfg, layer, sliding=False), block_tokens=sparse.int("sparse_block_size"),
                   topk_blocks=sparse.int("sparse_topk_blocks"),
                   fixed_blocks=sparse.int("sparse_init_block", 0, lo=0) + sparse.int("sparse_local_block", 0, lo=0),
                   index_heads=sparse.int("sparse_num_index_heads"), index_dim=sparse.int("sparse_index_dim"))

    @property
    def span_tokens(self) -> float:
        """Tokens a decode query attends at most: (top-k + fixed) blocks."""
        return float((self.topk_blocks + self.fixed_blocks) * self.block_tokens)

    def kv_head_split(self, component):
        return component != "indexer"

    def attended_tokens(self, context_tokens):
        return np.minimum(as_tokens(context_tokens), self.span_tokens)

    def _index_key_bytes(self) -> float:
        return self.index_dim * INDEX_KEY_ELEMENT_BYTES

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        return {"kv": l * self._per_token(kv_dtype), "indexer": l * self._index_key_bytes()}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        return {"kv": self.attended_tokens(l) * self._per_token(kv_dtype), "indexer": l * self._index_key_bytes()}

    def _index_flops_per_token(self) -> float:
        return 2.0 * self.index_heads * self.index_dim

    def decode_flops_by_component(self, context_tokens):
        l = as_tokens(context_tokens)
        return {"attention_core": self._flops_per_pair() * self.attended_tokens(l),
                "indexer": self._index_flops_per_token() * l}

    def decode_flops(self, context_tokens):
        return sum(self.decode_flops_by_component(context_tokens).values())

    def prefill_flops_by_component(self, chunk_tokens, prefix_tokens):
        return {"attention_core": self._flops_per_pair() * causal_pairs(chunk_tokens, prefix_tokens, self.span_tokens),
                "indexer": self._index_flops_per_token() * causal_pairs(chunk_tokens, prefix_tokens)}

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return sum(self.prefill_flops_by_component(chunk_tokens, prefix_tokens).values())

    def weight_parts(self):
        parts = super().weight_parts()
        h = self.hidden_size
        parts["indexer"] = WeightPart(float(h * self.index_heads * self.index_dim), True)
        parts["indexer_key"] = WeightPart(float(h * self.index_dim), False)
        return parts

    def weight_params(self):
        parts = self.weight_parts()
        return {"attention": parts["attention"].params, "indexer": parts["indexer"].params + parts["indexer_key"].params}

    def topk_tokens(self):
        return float(self.topk_blocks)

    def topk_row_scores(self, context_tokens):
        return np.ceil(as_tokens(context_tokens) / self.block_tokens)

    def knees(self):
        return (self.span_tokens,)

    def host_access(self):
        # NOTE: no engine tiers MiniMax-M3 yet; the pattern follows its selection (vLLM
        # vllm/models/minimax_m3/common/sparse_attention.py): each query reads the top-k blocks plus
        # the fixed init/local blocks, whole blocks of `block_tokens` token rows, and its index keys
        # are scanned every step (resident, as DSA's)
        return AccessPattern(tiered=("kv",), resident=("indexer",), tokens_per_entry=1.0,
                             selected_entries=self.span_tokens, block_entries=self.block_tokens,
                             source="MiniMax-M3 MSA: the indexer selects top-k KV blocks plus fixed init/local blocks "
                                    "(vLLM vllm/models/minimax_m3/common/sparse_attention.py); index keys scanned each step")
