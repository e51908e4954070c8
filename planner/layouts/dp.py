"""DP-attention: attention weights replicated; each request's KV on one owner rank (balanced by
KV bytes); the owner runs the whole attention for its requests. No attention collective: the
gather happens on the MLP side (EP dispatch/combine, or all-gather/reduce-scatter into a
TP-sharded MLP)."""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, new_token_bytes,
                                  pages_rounded, read_bytes, register_attention_layout, stored_bytes)
from planner.load import busiest_owner_counts


def owner_share(inp: ShareInputs) -> tuple[np.ndarray, np.ndarray]:
    """(owner counts [P, R], stored bytes per request [P, R]) on the busiest owner."""
    load = inp.load
    per_req = stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens))
    return busiest_owner_counts(load, per_req, inp.ranks), per_req


def owner_attention(inp: ShareInputs) -> tuple[np.ndarray, dict, np.ndarray, np.ndarray, np.ndarray]:
    counts, per_req = owner_share(inp)
    load, t, att = inp.load, inp.ranks, inp.model.attention
    stored = (per_req * counts).sum(-1)
    read = {k: (v * counts).sum(-1) for k, v in read_bytes(inp, load.lengths).items()}
    # NOTE: the step's prefill tokens are spread evenly over owners (each DP rank runs its own
    # chunked prefill); their causal attention is priced as one chunk split T ways.
    flops = (att.decode_flops(load.lengths) * counts).sum(-1) + att.prefill_flops(inp.prefill_tokens) / t
    owned = counts.sum(-1)
    write = (owned + inp.prefill_tokens / t) * new_token_bytes(inp)
    return stored, read, write, flops, owned


@register_attention_layout
class DataParallelAttention(AttentionLayout):
    name = "dp"
    description = "weights replicated, each request's KV on one owner"
    weights_sharded = False
    activations_replicated = False
    head_sharded = False

    def share(self, inp: ShareInputs) -> AttentionShare:
        stored, read, write, flops, owned = owner_attention(inp)
        return AttentionShare(stored, read, write, flops, owned + inp.prefill_tokens / inp.ranks, 1.0)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        return []
