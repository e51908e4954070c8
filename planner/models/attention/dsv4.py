"""DeepSeek-V4 attention ("CSA + HCA", DeepseekV4ForCausalLM): one latent of `head_dim` (448
NoPE + 64 RoPE) per entry, K = V, attended by every query head (MQA), in three stores per layer:
- a raw sliding window of the last `sliding_window` (128) tokens, in every layer ('window');
- compressed entries, 1 per `compress_ratios[i]` tokens: ratio 4 ("C4A"/CSA) or 128 ("C128A"/
  HCA); ratio 0 layers keep the window only ('token': they grow with L, at 1/ratio the rate);
- on C4 layers a Lightning Indexer's key per compressed entry ('token'), scored by
  `index_n_heads` × `index_head_dim` for every query, which then attends the `index_topk` best
  compressed entries (C128 entries are attended densely: "Only C4A uses sparse attention");
- a compressor's fp32 ring per request ('state'): `coff`·ratio rows of 2·coff·dim floats
  (coff 2 for C4's overlapping 8-token windows, 1 for C128), for the main entries and, on C4
  layers, the indexer's (vLLM `CompressorStateCache`; SGLang `get_compress_state_ring_size`,
  `SGLANG_DSV4_COMPRESS_STATE_DTYPE` float32).
Entry records as both engines store them: 584 B = 448 fp8 NoPE + 64 × 2 B bf16 RoPE + 7 UE8M0
scales (one per 64) + 1 B pad (vLLM deepseek_v4_attention.py head_bytes and kv_cache_interface.py
"448B NoPE + 128B RoPE + 8B fp8 scale = 584B per token"; SGLang `DeepSeekV4SingleKVPool`); the
indexer key 128 fp8 + a 4-B fp32 scale = 132 B (vLLM `DeepseekV4Indexer` k_cache_head_dim, SGLang
`get_dsv4_indexer_bytes_per_token`). Both engines force this fp8 record (vLLM: "DeepseekV4 only
supports fp8 kv-cache format"; SGLang `apply_deepseek_v4_defaults`: kv_cache_dtype fp8_e4m3,
page_size 256), so it is the only KV dtype offered.
Worked numbers (reference §1.2, tests pin them): Flash 21·(584 + 132)/4 + 20·584/128 = 3,850.25 B
per context token, window 43·128·584 = 3,214,336 B and compressor state 12,206,080 B per request.

Decode: FLOPs 4·H·head_dim per attended entry (QK and PV over the same latent), the indexer
2·index_heads·index_dim per scored entry (its own component, replicated under TP as DSA's is);
the top-k runs over L/4 scores. Under TP the single latent replicates on every rank and the heads
split, padded to FlashMLA's 64/128 (vLLM "n_local_heads padded to 64/128 for FlashMLA").
Weights (reference §1.2 [derived]): wq_a (hidden × q_lora), wq_b (q_lora × H·head_dim), wkv
(hidden × head_dim), grouped wo_a (o_groups × (H/o_groups)·head_dim × o_lora) and wo_b
(o_groups·o_lora × hidden); C4 adds the compressor (2 × hidden × coff·head_dim) and the indexer
(wq_b q_lora × index_heads·index_dim, weights_proj hidden × index_heads, its compressor
2 × hidden × coff·index_dim); C128 adds its compressor. NOTE: as MLA's q_a/kv_a and DSA's
indexer, the projections of the one latent (wq_a, wkv), the compressors and the indexer are taken
as replicated under TP; the per-head ones (wq_b, wo_a, wo_b) split. Ignores: the attention sink,
the hyper-connections' mixing weights (`hc_mult`, ~0.4 M per layer) and their 4× residual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.attention.base import (STATE, TOKEN, WINDOW, AccessPattern, AttentionVariant, WeightPart, as_tokens,
                                           causal_pairs, need, register_attention)
from planner.models.attention.dsa import topk_select_s
from planner.models.config import HFConfig, LayerType

COFF = {4: 2, 128: 1}  # compressor overlap per ratio (overlapping 8-token windows on C4)
STATE_BYTES_PER_FLOAT = 4.0


def entry_bytes(head_dim: int, rope_dim: int) -> float:
    """fp8 NoPE + bf16 RoPE + one UE8M0 scale per 64 NoPE values, padded to 8 bytes (584 at 512/64)."""
    nope = head_dim - rope_dim
    raw = nope + 2 * rope_dim + -(-nope // 64)
    return float(-(-raw // 8) * 8)


@register_attention
@dataclass(frozen=True)
class DeepSeekV4Attention(AttentionVariant):
    kind: ClassVar[str] = "dsv4"
    priority: ClassVar[int] = 50

    hidden_size: int = 4096
    head_dim: int = 512
    rope_dim: int = 64
    q_lora_rank: int = 1024
    o_groups: int = 8
    o_lora_rank: int = 1024
    window: int = 128
    ratio: int = 4  # 0 (window only), 4 (CSA) or 128 (HCA)
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "DeepSeekV4Attention | None":
        if layer.mixer != "compressed_attention":
            return None
        ratio = int(layer.opt("ratio", 0))
        if ratio not in (0, *COFF):
            raise SpecError(f"compress_ratios holds {ratio}; the planner models DeepSeek-V4's 0, 4 and 128")
        heads = need(cfg, "num_attention_heads", cls.kind)
        groups = cfg.int("o_groups")
        if heads % groups:
            raise SpecError(f"num_attention_heads={heads} is not a multiple of o_groups={groups}")
        return cls(num_heads=heads, hidden_size=cfg.int("hidden_size"), head_dim=cfg.int("head_dim"),
                   rope_dim=cfg.int("qk_rope_head_dim"), q_lora_rank=cfg.int("q_lora_rank"), o_groups=groups,
                   o_lora_rank=cfg.int("o_lora_rank"), window=cfg.int("sliding_window"), ratio=ratio,
                   index_n_heads=cfg.int("index_n_heads"), index_head_dim=cfg.int("index_head_dim"),
                   index_topk=cfg.int("index_topk"))

    # ---- memory -----------------------------------------------------------------------------
    def supported_kv_dtypes(self):
        return ("fp8",)

    def kv_splittable_heads(self):
        return 1

    @property
    def entry(self) -> float:
        return entry_bytes(self.head_dim, self.rope_dim)

    @property
    def index_key_bytes(self) -> float:
        return self.index_head_dim + self.index_head_dim // 128 * 4.0

    @property
    def csa(self) -> bool:
        return self.ratio == 4

    def compressor_state_bytes(self) -> float:
        if not self.ratio:
            return 0.0
        coff = COFF[self.ratio]
        rows = coff * self.ratio
        main = rows * 2 * coff * self.head_dim * STATE_BYTES_PER_FLOAT
        idx = rows * 2 * coff * self.index_head_dim * STATE_BYTES_PER_FLOAT if self.csa else 0.0
        return main + idx

    def memory_kind(self, component):
        return {"window": WINDOW, "compressor_state": STATE}.get(component, TOKEN)

    def window_tokens(self):
        return self.window

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        out = {"window": np.minimum(l, float(self.window)) * self.entry}
        if self.ratio:
            out["compressed"] = l / self.ratio * self.entry
            out["compressor_state"] = np.ones_like(l) * self.compressor_state_bytes()
        if self.csa:
            out["indexer"] = l / 4.0 * self.index_key_bytes
        return out

    # ---- work -------------------------------------------------------------------------------
    def attended_compressed(self, context_tokens) -> np.ndarray:
        l = as_tokens(context_tokens)
        if self.csa:
            return np.minimum(l / 4.0, float(self.index_topk))
        return l / self.ratio if self.ratio else np.zeros_like(l)

    def kv_read_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        out = {"window": np.minimum(l, float(self.window)) * self.entry}
        if self.ratio:
            out["compressed"] = self.attended_compressed(l) * self.entry
            out["compressor_state"] = np.ones_like(l) * self.compressor_state_bytes()
        if self.csa:
            out["indexer"] = l / 4.0 * self.index_key_bytes
        return out

    def _per_entry(self) -> float:
        return 4.0 * self.num_heads * self.head_dim

    def indexer_flops_per_entry(self) -> float:
        return 2.0 * self.index_n_heads * self.index_head_dim if self.csa else 0.0

    def decode_flops_by_component(self, context_tokens):
        l = as_tokens(context_tokens)
        attended = np.minimum(l, float(self.window)) + self.attended_compressed(l)
        out = {"attention_core": self._per_entry() * attended}
        if self.csa:
            out["indexer"] = self.indexer_flops_per_entry() * l / 4.0
        return out

    def decode_flops(self, context_tokens):
        return sum(self.decode_flops_by_component(context_tokens).values())

    def prefill_flops_by_component(self, chunk_tokens, prefix_tokens):
        window = causal_pairs(chunk_tokens, prefix_tokens, self.window)
        if self.csa:  # Σ min((C + i)/4, k) = Σ min(C + i, 4k) / 4
            comp = causal_pairs(chunk_tokens, prefix_tokens, 4.0 * self.index_topk) / 4.0
        elif self.ratio:
            comp = causal_pairs(chunk_tokens, prefix_tokens) / self.ratio
        else:
            comp = 0.0
        out = {"attention_core": self._per_entry() * (window + comp)}
        if self.csa:
            out["indexer"] = self.indexer_flops_per_entry() * causal_pairs(chunk_tokens, prefix_tokens) / 4.0
        return out

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return sum(self.prefill_flops_by_component(chunk_tokens, prefix_tokens).values())

    # ---- weights ----------------------------------------------------------------------------
    def weight_parts(self):
        h, n, d = self.hidden_size, self.num_heads, self.head_dim
        q_a, kv = h * self.q_lora_rank, h * d
        q_b = self.q_lora_rank * n * d
        wo_a = self.o_groups * (n // self.o_groups) * d * self.o_lora_rank
        wo_b = self.o_groups * self.o_lora_rank * h
        parts = {"attention": WeightPart(float(q_b + wo_a + wo_b), True),
                 "attention_qkv_a": WeightPart(float(q_a + kv), False)}
        if self.ratio:
            coff = COFF[self.ratio]
            parts["compressor"] = WeightPart(float(2 * h * coff * d), False)
        if self.csa:
            coff = COFF[4]
            idx = (self.q_lora_rank * self.index_n_heads * self.index_head_dim + h * self.index_n_heads
                   + 2 * h * coff * self.index_head_dim)
            parts["indexer"] = WeightPart(float(idx), False)
        return parts

    def weight_params(self):
        parts = self.weight_parts()
        out = {"attention": parts["attention"].params + parts["attention_qkv_a"].params}
        out.update({k: p.params for k, p in parts.items() if k not in ("attention", "attention_qkv_a")})
        return out

    # ---- shape ------------------------------------------------------------------------------
    def decode_query_width(self):
        return self.head_dim

    def decode_output_width(self):
        return self.head_dim

    def decode_kernel(self, arch, kv_dtype):
        return "flashmla_sparse"

    def topk_tokens(self):
        return float(self.index_topk) if self.csa else None

    def topk_row_scores(self, context_tokens):
        return as_tokens(context_tokens) / 4.0

    def topk_latency_s(self, row_tokens):
        s = as_tokens(row_tokens)
        if not self.csa:
            return np.zeros_like(s)
        return topk_select_s(s, self.index_topk)

    def knees(self):
        return (float(self.window), 4.0 * self.index_topk) if self.csa else (float(self.window),)

    def host_access(self):
        # NOTE: SGLang HiSparse for DeepSeek-V4 (docs/advanced_features/hisparse_guide.md: "the
        # direct-to-host path writes only C4 KV into the decode host pool. The c4_indexer and C128 KV
        # remain device-to-device"): only a CSA layer's compressed entries tier; its indexer keys,
        # window and compressor ring stay in HBM, and C128 / window-only layers keep everything.
        # Entries are compressed entries: the host pool holds kv_allocated_len // compress_ratio of
        # them per request and the device buffer's slots index them (python/sglang/srt/managers/
        # hisparse_coordinator.py HiSparseCoordinator.host_token_len, alloc_device_buffer).
        if not self.csa:
            return None
        return AccessPattern(tiered=("compressed",), resident=("indexer", "window", "compressor_state"),
                             tokens_per_entry=float(self.ratio), selected_entries=float(self.index_topk),
                             block_entries=1,
                             source="SGLang HiSparse for DeepSeek-V4: only C4 KV goes to host; C4-indexer and C128 stay "
                                    "on device (hisparse_guide.md; hisparse_coordinator.py host_token_len)")

    def describe(self):
        return f"dsv4(c{self.ratio})" if self.ratio else f"dsv4(swa {self.window})"
