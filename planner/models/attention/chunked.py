"""Chunked local attention (Llama-4's iRoPE layers): the RoPE layers attend only within their
`attention_chunk_size`-token chunk, so a query at position p sees ((p − 1) mod C) + 1 keys and
the layer keeps only the current chunk's KV (vLLM `ChunkedLocalAttentionSpec`: blocks of past
chunks are freed; HF modeling_llama4: `use_chunked_attention = not no_rope` layers). Every
fourth layer (the NoPE ones, `no_rope_layers`) is full attention. Costs are exact sawtooths in
L; `knees` reports the chunk, which the runtime's tables treat as a window (an upper bound)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.models.attention.base import WINDOW, as_tokens, register_attention
from planner.models.attention.gqa import GQA, geometry
from planner.models.config import HFConfig, LayerType


def _prefix_sum(n: np.ndarray, c: float) -> np.ndarray:
    """Σ_{p=1..n} ((p − 1) mod c) + 1 = q·c(c + 1)/2 + r(r + 1)/2 for n = q·c + r."""
    q = np.floor(n / c)
    r = n - q * c
    return q * c * (c + 1.0) / 2.0 + r * (r + 1.0) / 2.0


@register_attention
@dataclass(frozen=True)
class ChunkedLocal(GQA):
    kind: ClassVar[str] = "chunked"
    priority: ClassVar[int] = 10

    chunk: int = 8192

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "ChunkedLocal | None":
        if layer.mixer != "chunked_attention":
            return None
        return cls(**geometry(cfg, layer, sliding=False), chunk=cfg.int("attention_chunk_size"))

    def memory_kind(self, component):
        return WINDOW

    def window_tokens(self):
        return self.chunk

    def knees(self):
        return (float(self.chunk),)

    def attended_tokens(self, context_tokens):
        l = as_tokens(context_tokens)
        c = float(self.chunk)
        return np.where(l > 0, l - c * np.floor((l - 1.0) / c), 0.0)

    def prefill_pairs(self, chunk_tokens, prefix_tokens):
        p = as_tokens(chunk_tokens)
        c0 = as_tokens(prefix_tokens)
        return np.where(p > 0, _prefix_sum(c0 + p, float(self.chunk)) - _prefix_sum(c0, float(self.chunk)), 0.0)
