"""The engine effects of a priced step as times, so a table can say how much of a step they are:
DSA's indexer (its key reads and its scoring FLOPs), the top-k latency, the decode kernel's padded
head rows, and the attention weights a head-sharding layout can't split (the fused q_a/kv_a
projection and the indexer's weights, which engines replicate). Each is its components' amounts
at the pricing's rates (HBM bytes at the HBM rate, FLOPs at the bf16 rate the step prices
attention at, latencies as they are); they overlap with the rest of the step as the floors say,
so they are shares of the pessimistic floor, not additive savings.
"""

from __future__ import annotations

import numpy as np

from planner.resources.vector import Pricing
from planner.step import StepCost

EFFECTS: dict[str, tuple[tuple[str, str], ...]] = {  # effect -> (resource, component) parts
    "indexer": (("hbm_bytes", "indexer_read"), ("flops", "indexer")),
    "topk": (("latency_s", "topk"),),
    "head_padding": (("flops", "head_padding"),),
    "unsharded_weights": (("hbm_bytes", "attention_qkv_a_weights"), ("hbm_bytes", "indexer_weights")),
}


def effect_times_s(cost: StepCost, pricing: Pricing) -> dict[str, np.ndarray]:
    """[P] seconds of each engine effect of `cost` at `pricing`'s rates (0 where a model has none)."""
    rate = {"hbm_bytes": pricing.hbm_bytes_per_s, "flops": pricing.flops_per_s["bf16"], "latency_s": 1.0}
    out = {}
    for name, parts in EFFECTS.items():
        t = np.zeros_like(cost.hbm_bytes)
        for res, comp in parts:
            t = t + cost.components.get(res, {}).get(comp, 0.0) / rate[res]
        out[name] = t
    return out
