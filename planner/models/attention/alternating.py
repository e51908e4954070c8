"""Alternating full / sliding-window GQA layers (gpt-oss: `layer_types` lists
'full_attention' and 'sliding_attention', window 128). Per-layer figures are the mean over
layers: a fraction f of layers is capped at the window. Sinks (one learned logit per head) are
ignored: no bytes, negligible FLOPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.attention.base import as_tokens, causal_pairs, register_attention
from planner.models.attention.gqa import GQA


@register_attention
@dataclass(frozen=True)
class AlternatingWindow(GQA):
    kind: ClassVar[str] = "alternating"
    priority: ClassVar[int] = 15

    window: int = 128
    sliding_fraction: float = 0.5

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> "AlternatingWindow | None":
        types = cfg.get("layer_types")
        if not types:
            return None
        known = {"full_attention", "sliding_attention"}
        unknown = sorted(set(types) - known)
        if unknown:
            raise SpecError(f"config.json: layer_types has {unknown[0]!r}, which the planner cannot model")
        n_sliding = sum(t == "sliding_attention" for t in types)
        if n_sliding and not cfg.get("sliding_window"):
            raise SpecError("config.json: layer_types has sliding layers but no 'sliding_window'")
        base = GQA.from_hf_config(cfg)
        if base is None:
            return None
        return cls(num_heads=base.num_heads, num_kv_heads=base.num_kv_heads, head_dim=base.head_dim,
                   hidden_size=base.hidden_size, window=int(cfg.get("sliding_window") or 1),
                   sliding_fraction=n_sliding / len(types))

    def _mix(self, full, capped):
        f = self.sliding_fraction
        return (1.0 - f) * full + f * capped

    def attended_tokens(self, context_tokens):
        l = as_tokens(context_tokens)
        return self._mix(l, np.minimum(l, float(self.window)))

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        per_pair = 4.0 * self.num_heads * self.head_dim
        return per_pair * self._mix(causal_pairs(chunk_tokens, prefix_tokens),
                                    causal_pairs(chunk_tokens, prefix_tokens, self.window))
