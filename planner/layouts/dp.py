"""DP-attention: attention weights replicated; each request's KV on one owner rank (balanced by
KV bytes); the owner runs the whole attention for its requests. No attention collective: the
gather happens on the MLP side (EP dispatch/combine, or all-gather/reduce-scatter into a
TP-sharded MLP).

The step's prefill chunk belongs to one request and so runs on that request's owner: its whole
attention and its prefix read land on one rank. A scheduler puts it on the lightest owner, so
the busiest rank is either the decode-busiest owner or the lightest owner plus the chunk; both
are offered as candidates and the step model keeps the slower.
"""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, new_token_bytes,
                                  pages_rounded, prefill_resident, prefill_work, read_bytes, register_attention_layout, stored_bytes)
from planner.load import busiest_owner_counts, lightest_owner_counts


def owner_attention(inp: ShareInputs, with_prefill: bool) -> tuple[np.ndarray, dict, np.ndarray, np.ndarray, np.ndarray]:
    """(stored, read, write, flops, owned decode requests) of one owner rank, one layer: the
    decode-busiest owner, or (with_prefill) the lightest owner running the prefill chunk."""
    load, att = inp.load, inp.model.attention
    per_req = stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens))
    pick = lightest_owner_counts if with_prefill else busiest_owner_counts
    counts = pick(load, per_req, inp.ranks)
    stored = (per_req * counts).sum(-1)
    read = {k: (v * counts).sum(-1) for k, v in read_bytes(inp, load.lengths).items()}
    flops = (att.decode_flops(load.lengths) * counts).sum(-1)
    owned = counts.sum(-1)
    new_tokens = owned
    if with_prefill:
        pre_flops, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix
        flops = flops + pre_flops
        new_tokens = owned + inp.prefill_tokens
        stored = stored + prefill_resident(inp)
    write = new_tokens * new_token_bytes(inp)
    return stored, read, write, flops, owned


def owner_candidates(layout: AttentionLayout, inp: ShareInputs) -> list[AttentionShare]:
    shares = [layout.owner_share(inp, with_prefill=False)]
    if np.any(inp.prefill_tokens > 0):
        shares.append(layout.owner_share(inp, with_prefill=True))
    return shares


@register_attention_layout
class DataParallelAttention(AttentionLayout):
    name = "dp"
    description = "weights replicated, each request's KV on one owner"
    kv_placement = "owner"
    weights_sharded = False
    output_sharded = False
    activations_replicated = False
    head_sharded = False

    def owner_share(self, inp: ShareInputs, with_prefill: bool) -> AttentionShare:
        stored, read, write, flops, owned = owner_attention(inp, with_prefill)
        projected = owned + (inp.prefill_tokens if with_prefill else 0.0)
        return AttentionShare(stored, read, write, flops, projected)

    def share(self, inp: ShareInputs) -> AttentionShare:
        return self.owner_share(inp, with_prefill=False)

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        return owner_candidates(self, inp)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        return []
