"""Sliding-window GQA: a layer attends to the last `window` tokens, so the KV it keeps and reads
stop growing at the window ('window' memory: engines free the pages that slide out — vLLM
`SlidingWindowSpec`, SGLang's SWA pool). Claims layers the config marks sliding: `layer_types`
'sliding_attention' (gpt-oss, Gemma-4, Step-3.7), MiMo's `hybrid_layer_pattern` 1, DeciLM's
`window_length`, and models whose every layer slides (`sliding_window` set, `use_sliding_window`
not false, no per-layer pattern: Mistral-7B). The window and the head geometry are the layer's
own (MiMo's `swa_*` fields; planner.models.attention.gqa.geometry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.attention.base import WINDOW, as_tokens, causal_pairs, register_attention
from planner.models.attention.gqa import GQA, geometry
from planner.models.config import HFConfig, LayerType


@register_attention
@dataclass(frozen=True)
class SlidingWindow(GQA):
    kind: ClassVar[str] = "sliding"
    priority: ClassVar[int] = 10

    window: int = 4096

    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "SlidingWindow | None":
        if layer.mixer != "sliding_attention" or not cfg.has("num_attention_heads"):
            return None
        window = layer.opt("window") or cfg.int("sliding_window", None) or cfg.int("sliding_window_size", None)
        if window is None:
            raise SpecError("the config has sliding-window layers but no 'sliding_window'")
        return cls(**geometry(cfg, layer, sliding=True), window=int(window))

    def memory_kind(self, component):
        return WINDOW

    def window_tokens(self):
        return self.window

    def knees(self):
        return (float(self.window),)

    def attended_tokens(self, context_tokens: np.ndarray) -> np.ndarray:
        return np.minimum(as_tokens(context_tokens), float(self.window))

    def prefill_pairs(self, chunk_tokens, prefix_tokens):
        # query i of the chunk attends to min(C + i, W) keys
        return causal_pairs(chunk_tokens, prefix_tokens, self.window)
