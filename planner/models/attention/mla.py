"""MLA (multi-head latent attention, DeepSeek-V2/V3, Kimi-K2, Kimi-K3's full layers): one
compressed latent of `kv_lora_rank` plus a shared RoPE key of `qk_rope_head_dim` per token and
layer, the same for every head, so tensor parallelism cannot split it: every TP rank stores every
token.

Decode uses the absorbed form (W_UK folded into the query, W_UV applied after): per head and
context token, a dot over kv_lora+rope for the score and an axpy over kv_lora for the value,
2·(576) + 2·(512) = 2176 FLOPs at DeepSeek dims. Prefill uses the plain form, 2·(nope+rope) +
2·v FLOPs per (head, pair). Projection FLOPs are 2 × parameters either way (the absorbed
products use kv_b's parameters once each). Under TP the fused q_a/kv_a projection stays whole on
every rank (`weight_parts`). Kimi-K3's `mla_use_output_gate` adds a full-rank sigmoid gate on the
attention output, g_proj: hidden → heads·v_head_dim, ColumnParallelLinear (vLLM's Kimi-Linear
MLA, `self.g_proj = ColumnParallelLinear(hidden_size, num_heads * v_head_dim)`). Ignores: RoPE,
softmax, norms.
KV bytes/token/layer (reference/models.md): bf16 (512+64)·2 = 1152, fp8 576.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from planner.models.attention.base import (KV_DTYPE_BYTES, AttentionVariant, WeightPart, as_tokens, causal_pairs,
                                           need, register_attention)
from planner.models.attention.kernels import HOPPER
from planner.models.config import HFConfig, LayerType


@register_attention
@dataclass(frozen=True)
class MLA(AttentionVariant):
    kind: ClassVar[str] = "mla"
    priority: ClassVar[int] = 20

    hidden_size: int = 7168
    q_lora_rank: int | None = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    output_gate: bool = False

    @classmethod
    def _fields(cls, cfg: HFConfig) -> dict[str, Any]:
        return dict(
            num_heads=need(cfg, "num_attention_heads", cls.kind),
            hidden_size=need(cfg, "hidden_size", cls.kind),
            q_lora_rank=cfg.int("q_lora_rank", None),
            kv_lora_rank=need(cfg, "kv_lora_rank", cls.kind),
            qk_nope_head_dim=need(cfg, "qk_nope_head_dim", cls.kind),
            qk_rope_head_dim=need(cfg, "qk_rope_head_dim", cls.kind),
            v_head_dim=need(cfg, "v_head_dim", cls.kind),
            output_gate=cfg.flag("mla_use_output_gate"),
        )

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "MLA | None":
        if layer.mixer != "full_attention" or not cfg.has("kv_lora_rank"):
            return None
        return cls(**cls._fields(cfg))

    @property
    def latent_width(self) -> int:
        """Width of one cached token: latent + rope key (576 at DeepSeek dims)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def kv_splittable_heads(self) -> int:
        return 1

    def main_bytes_per_token(self, kv_dtype: str) -> float:
        return self.latent_width * KV_DTYPE_BYTES[kv_dtype]

    def attended_tokens(self, context_tokens):
        return as_tokens(context_tokens)

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        return {"kv": as_tokens(context_tokens) * self.main_bytes_per_token(kv_dtype)}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        return {"kv": self.attended_tokens(context_tokens) * self.main_bytes_per_token(kv_dtype)}

    def _decode_flops_per_token_head(self) -> float:
        return 2.0 * self.latent_width + 2.0 * self.kv_lora_rank

    def decode_flops(self, context_tokens):
        return self.num_heads * self._decode_flops_per_token_head() * self.attended_tokens(context_tokens)

    def _prefill_per_pair(self) -> float:
        return 2.0 * (self.qk_nope_head_dim + self.qk_rope_head_dim) + 2.0 * self.v_head_dim

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return self.num_heads * self._prefill_per_pair() * causal_pairs(chunk_tokens, prefix_tokens)

    def weight_parts(self):
        # NOTE: the low-rank input projections (q_a and kv_a, fused into one GEMM) are replicated on
        # every TP rank in SGLang (python/sglang/srt/models/deepseek_v2.py:
        # fused_qkv_a_proj_with_mqa = ReplicatedLinear) and vLLM (vllm/model_executor/models/
        # deepseek_v2.py: DeepSeekV2FusedQkvAProjLinear(..., disable_tp=True); without q_lora, q_proj
        # is ColumnParallelLinear and kv_a_proj_with_mqa ReplicatedLinear); q_b / q_proj and kv_b
        # are ColumnParallelLinear and o_proj RowParallelLinear (DeepseekV2MLAAttention.__init__).
        h, n = self.hidden_size, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q_a = h * self.q_lora_rank if self.q_lora_rank else 0
        q_b = (self.q_lora_rank or h) * n * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
        o = n * self.v_head_dim * h
        gate = h * n * self.v_head_dim if self.output_gate else 0
        return {"attention": WeightPart(float(q_b + kv_b + o + gate), True),
                "attention_qkv_a": WeightPart(float(q_a + kv_a), False)}

    def weight_params(self):
        return {"attention": sum(p.params for p in self.weight_parts().values())}

    def decode_query_width(self):
        return self.latent_width

    def decode_output_width(self):
        return self.kv_lora_rank

    def decode_kernel(self, arch, kv_dtype):
        # NOTE: SGLang decodes MLA on Hopper with FA3 (or FlashInfer), both 64-row tiles (see
        # planner.models.attention.kernels); on Blackwell it runs TRT-LLM's MLA kernels, whose tile
        # is not declared here, so no padding is priced there.
        return "fa3_mla" if arch == HOPPER else "unpadded"
