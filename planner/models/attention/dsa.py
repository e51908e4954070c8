"""DSA, DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA whose decode query attends to
only the top-k tokens an indexer picks. The indexer keeps one 128-wide fp8 key + fp32 scale
(132 B) per token and layer and scores every token each step; the main latent is stored for
every token but read only for min(L, top-k). Sparse attention lowers KV bandwidth, not the
capacity wall (reference/models.md).

KV record per token per layer: bf16 main 1152 + 132 indexer; the fp8 record (`fp8_dsa`) is 512
fp8 latent + 4 fp32 scales + 64 bf16 rope = 656, + 132. Indexer FLOPs: 2·heads·dim per scored
token (fp8 in practice, priced at the bf16 rate here to stay a lower bound), its own component
('indexer') because no engine splits it by heads: SGLang, vLLM and TRT-LLM replicate the indexer
under TP (sglang python/sglang/srt/layers/attention/nsa/nsa_indexer.py Indexer.__init__: wq_b, wk,
weights_proj are ReplicatedLinear, n_heads = index_n_heads unsharded; vllm
vllm/model_executor/models/deepseek_v2.py Indexer: "no tensor parallel, just replicated"; TRT-LLM
blog15 "TP is not applied to the indexer layers"), so every TP rank scores every request.

GLM-5.2's `indexer_types` marks most layers 'shared': such a layer has no indexer of its own and
attends to the top-k its nearest 'full' layer selected (`index_topk_freq` 4, offset 3: one
indexer per four layers), so it stores no index keys, scores nothing, holds no indexer weights
and runs no top-k (`own_indexer=False`). NOTE: that reading of 'shared' is the configs' (the
field names and their 21 full / 57 shared split), not an engine's code checked here.

Top-k: a radix select with one 1024-thread CTA per row (sglang .../nsa/cuda/csrc/topk.cu,
TopK = 2048), so a selection over up to ~100 rows takes the time of one row and does not shrink
with T or with B/T. `topk_latency_s` is a line through SGLang's committed H200 medians
(python/sglang/srt/layers/attention/nsa/hisa/benchmarks/_results/
2026-04-21_h200_stage_profile_full.txt, "baseline fast_topk", B = 1, 8, 32, 64): 15, 16, 16, 17 µs
at 16K and 37, 38, 38, 39 µs at 64K, means 16.0 and 38.0 µs; rows of ≤ top-k scores take the
trivial path and are priced at 0. Used on every GPU (TRT-LLM's TopKPerRow is 14.3 µs at 9.3K on
B200, blog15 Table 1; this line gives 12.8 µs there). Not modelled: more rows than SMs (a
second wave).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.models.attention.base import AccessPattern, WeightPart, as_tokens, causal_pairs, need, register_attention
from planner.models.attention.kernels import HOPPER
from planner.models.attention.mla import MLA
from planner.models.config import HFConfig, LayerType

INDEXER_KEY_BYTES = 128 + 4  # fp8 key + one fp32 scale
DSA_FP8_RECORD_BYTES = 512 + 16 + 128  # fp8 latent + 4 fp32 scales + bf16 rope (DeepSeek dims)
TOPK_AT_16K_S, TOPK_AT_64K_S = 16.0e-6, 38.0e-6  # SGLang fast_topk on H200, mean over B = 1…64
TOPK_PER_TOKEN_S = (TOPK_AT_64K_S - TOPK_AT_16K_S) / (65536 - 16384)
TOPK_BASE_S = TOPK_AT_16K_S - 16384 * TOPK_PER_TOKEN_S


def topk_select_s(row_scores: np.ndarray, topk: float) -> np.ndarray:
    """[P] seconds of one top-k selection over rows of `row_scores` scores: TOPK_BASE_S +
    TOPK_PER_TOKEN_S · L where L > k, else 0 (no selection needed)."""
    l = as_tokens(row_scores)
    if l.ndim == 0:
        return np.where(l > topk, TOPK_BASE_S + TOPK_PER_TOKEN_S * l, 0.0)
    out = TOPK_PER_TOKEN_S * l
    out += TOPK_BASE_S
    np.copyto(out, 0.0, where=~(l > topk))
    return out


@register_attention
@dataclass(frozen=True)
class DSA(MLA):
    kind: ClassVar[str] = "dsa"
    priority: ClassVar[int] = 30

    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048
    own_indexer: bool = True  # False: a GLM-5.2 'shared' layer reusing another layer's top-k

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "DSA | None":
        if layer.mixer != "full_attention" or not cfg.has("index_topk") or not cfg.has("kv_lora_rank"):
            return None
        return cls(
            **cls._fields(cfg),
            index_n_heads=need(cfg, "index_n_heads", cls.kind),
            index_head_dim=need(cfg, "index_head_dim", cls.kind),
            index_topk=cfg.int("index_topk"),
            own_indexer=layer.opt("indexer", "full") == "full",
        )

    def supported_kv_dtypes(self):
        return ("bf16", "fp8_dsa")

    def main_bytes_per_token(self, kv_dtype: str) -> float:
        if kv_dtype == "fp8_dsa":
            # 1 byte per latent element, one fp32 scale per 128 latent elements, bf16 rope.
            return self.kv_lora_rank + 4.0 * self.kv_lora_rank / 128.0 + 2.0 * self.qk_rope_head_dim
        return super().main_bytes_per_token(kv_dtype)

    def indexer_bytes_per_token(self) -> float:
        return self.index_head_dim + 4.0 if self.own_indexer else 0.0

    def attended_tokens(self, context_tokens):
        return np.minimum(as_tokens(context_tokens), float(self.index_topk))

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        out = {"kv": l * self.main_bytes_per_token(kv_dtype)}
        if self.own_indexer:
            out["indexer"] = l * self.indexer_bytes_per_token()
        return out

    def kv_read_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        out = {"kv": self.attended_tokens(l) * self.main_bytes_per_token(kv_dtype)}
        if self.own_indexer:
            out["indexer"] = l * self.indexer_bytes_per_token()
        return out

    def indexer_flops_per_token(self) -> float:
        """FLOPs of scoring one cached token for one query, all index heads (0 on a shared layer)."""
        return 2.0 * self.index_n_heads * self.index_head_dim if self.own_indexer else 0.0

    def decode_flops_by_component(self, context_tokens):
        l = as_tokens(context_tokens)
        return {"attention_core": super().decode_flops(l), "indexer": self.indexer_flops_per_token() * l}

    def decode_flops(self, context_tokens):
        return sum(self.decode_flops_by_component(context_tokens).values())

    def prefill_flops_by_component(self, chunk_tokens, prefix_tokens):
        # the indexer scores every causal pair; latent attention covers at most top-k keys per query
        sparse = causal_pairs(chunk_tokens, prefix_tokens, self.index_topk)
        full = causal_pairs(chunk_tokens, prefix_tokens)
        return {"attention_core": self.num_heads * self._prefill_per_pair() * sparse,
                "indexer": self.indexer_flops_per_token() * full}

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return sum(self.prefill_flops_by_component(chunk_tokens, prefix_tokens).values())

    def weight_parts(self):
        parts = super().weight_parts()
        if not self.own_indexer:
            return parts
        q_in = self.q_lora_rank or self.hidden_size
        # NOTE: replicated under TP in every engine (module docstring): wq_b, wk, weights_proj
        parts["indexer"] = WeightPart(float(q_in * self.index_n_heads * self.index_head_dim
                                            + self.hidden_size * self.index_head_dim
                                            + self.hidden_size * self.index_n_heads), False)
        return parts

    def weight_params(self):
        parts = self.weight_parts()
        out = {"attention": parts["attention"].params + parts["attention_qkv_a"].params}
        if "indexer" in parts:
            out["indexer"] = parts["indexer"].params
        return out

    def decode_kernel(self, arch, kv_dtype):
        # NOTE: SGLang's DSA defaults (docs/basic_usage/deepseek_v32.md; server_args
        # _set_default_nsa_backends): the fp8 record decodes with flashmla_kv; bf16 KV on Hopper with
        # fa3; bf16 on Blackwell with 'trtllm', whose tile is not declared (no padding priced).
        if kv_dtype == "fp8_dsa":
            return "flashmla_kv"
        return "fa3_mla" if arch == HOPPER else "unpadded"

    def topk_tokens(self):
        return float(self.index_topk) if self.own_indexer else None

    def topk_latency_s(self, row_tokens):
        l = as_tokens(row_tokens)
        if not self.own_indexer:
            return np.zeros_like(l)
        return topk_select_s(l, self.index_topk)

    def knees(self):
        return (float(self.index_topk),)

    def host_access(self):
        # NOTE: SGLang HiSparse (docs/advanced_features/hisparse_guide.md): the latents live in host
        # memory and the top-k are swapped into a per-request device buffer; the indexer scores every
        # token each step, so its keys stay on device. A GLM-5.2 'shared' layer (no indexer of its
        # own) is left resident: no engine code read here tiers it.
        if not self.own_indexer:
            return None
        return AccessPattern(tiered=("kv",), resident=("indexer",), tokens_per_entry=1.0,
                             selected_entries=float(self.index_topk), block_entries=1,
                             source="SGLang HiSparse (docs/advanced_features/hisparse_guide.md): DSA latents in host "
                                    "memory, top-k entries swapped in; indexer keys stay on device")
