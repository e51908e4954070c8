"""Sliding-window GQA (every layer attends to the last `window` tokens): KV stored and read are
capped at the window. Claims configs with `sliding_window` set unless `use_sliding_window` is
false (Qwen keeps the field but disables it) and without per-layer `layer_types`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.models.attention.base import as_tokens, causal_pairs, register_attention
from planner.models.attention.gqa import GQA


@register_attention
@dataclass(frozen=True)
class SlidingWindow(GQA):
    kind: ClassVar[str] = "sliding"
    priority: ClassVar[int] = 10

    window: int = 4096

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> "SlidingWindow | None":
        w = cfg.get("sliding_window")
        if not w or cfg.get("use_sliding_window") is False or cfg.get("layer_types"):
            return None
        base = GQA.from_hf_config(cfg)
        if base is None:
            return None
        return cls(num_heads=base.num_heads, num_kv_heads=base.num_kv_heads, head_dim=base.head_dim,
                   hidden_size=base.hidden_size, window=int(w))

    def attended_tokens(self, context_tokens: np.ndarray) -> np.ndarray:
        return np.minimum(as_tokens(context_tokens), float(self.window))

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        # query i of the chunk attends to min(C + i, W) keys
        return 4.0 * self.num_heads * self.head_dim * causal_pairs(chunk_tokens, prefix_tokens, self.window)
