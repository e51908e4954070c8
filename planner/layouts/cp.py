"""CP (decode context parallelism): attention weights replicated; every request's KV pages
interleaved across the T ranks, so each rank attends over ~1/T of every request and the partial
outputs are merged exactly by log-sum-exp after an all-gather of (output, lse) in fp32.
Projections run for every token on every rank (replicated weights), which is CP's price."""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (PARTIAL_BYTES, AttentionLayout, AttentionShare, Collective, ShareInputs,
                                  new_token_bytes, read_bytes, register_attention_layout, stored_bytes)


def value_width(inp: ShareInputs) -> int:
    att = inp.model.attention
    return getattr(att, "kv_lora_rank", None) or getattr(att, "head_dim")


@register_attention_layout
class ContextParallel(AttentionLayout):
    name = "cp"
    description = "weights replicated, KV pages interleaved over ranks, LSE merge"
    weights_sharded = False
    activations_replicated = True
    head_sharded = False

    def share(self, inp: ShareInputs) -> AttentionShare:
        load, t, pg = inp.load, inp.ranks, inp.page_tokens
        pages_on_busiest = np.ceil(np.ceil(load.lengths / pg) / t)
        stored = (stored_bytes(inp, pages_on_busiest * pg) * load.counts).sum(-1)
        # NOTE: each rank reads its ~1/T of every request's KV (for DSA: its slice of the
        # indexer keys and of the top-k); the split is exact up to one page.
        read = {k: (v * load.counts).sum(-1) / t for k, v in read_bytes(inp, load.lengths).items()}
        att = inp.model.attention
        flops = (att.decode_flops(load.lengths) * load.counts).sum(-1) / t + att.prefill_flops(inp.prefill_tokens) / t
        write = (load.batch + inp.prefill_tokens) * new_token_bytes(inp) / t
        return AttentionShare(stored, read, write, flops, load.batch + inp.prefill_tokens, 1.0)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        heads = inp.model.attention.num_heads
        partial = (inp.load.batch + inp.prefill_tokens) * heads * (value_width(inp) + 1) * PARTIAL_BYTES
        return [Collective("cp_lse_merge", "all_gather", partial * inp.ranks, 1.0)]
