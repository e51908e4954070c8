"""DP-attention: attention weights replicated; each request's KV on one owner rank (balanced by
KV bytes); the owner runs the whole attention for its requests (all heads, its requests' indexer
scores and top-k). No attention collective: the gather happens on the MLP side (EP
dispatch/combine, or all-gather/reduce-scatter into a TP-sharded MLP).

The step's prefill chunk belongs to one request and so runs on that request's owner: its whole
attention and its prefix read land on one rank. A scheduler puts it on the lightest owner, so
the busiest rank is either the decode-busiest owner or the lightest owner plus the chunk; both
are offered as candidates and the step model keeps the slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, add_parts, decode_flops,
                                  longest_row, pages_rounded, prefill_resident, prefill_work, read_bytes,
                                  register_attention_layout, request_sum, resident_state, state_bytes, stored_bytes,
                                  write_bytes)
from planner.load import busiest_owner_counts, lightest_owner_counts


@dataclass(frozen=True)
class OwnerWork:
    """One owner rank's attention, one layer, arrays [P]."""

    stored: np.ndarray
    read: dict
    write: np.ndarray
    flops: dict
    decode_core: np.ndarray
    owned: np.ndarray  # decode requests it owns
    longest: np.ndarray  # top-k scores in its longest request's row
    state: np.ndarray  # per-request state bytes it keeps


def owner_attention(inp: ShareInputs, with_prefill: bool) -> OwnerWork:
    """The decode-busiest owner, or (with_prefill) the lightest owner running the prefill chunk."""
    load = inp.load
    per_req = stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens))
    pick = lightest_owner_counts if with_prefill else busiest_owner_counts
    # NOTE: owners are balanced by a request's bytes over the whole stack, so every layer group
    # names the same busiest owner (a recurrent group alone has no per-token bytes to balance by)
    counts = pick(load, per_req if inp.owner_bytes is None else inp.owner_bytes, inp.ranks)
    stored = request_sum(per_req * counts)
    read = {k: request_sum(v * counts) for k, v in read_bytes(inp, load.lengths).items()}
    dec = decode_flops(inp, counts)
    flops = dec
    owned = counts[..., 0] if counts.shape[-1] == 1 else counts.sum(-1)  # a sum of one term is it
    new_tokens = owned * inp.query_tokens
    requests = owned
    if with_prefill:
        pre, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix
        flops = add_parts(dec, pre)
        new_tokens = new_tokens + inp.prefill_tokens
        stored = stored + prefill_resident(inp)
        requests = owned + np.where(inp.prefill_tokens > 0, 1.0, 0.0)
    write = write_bytes(inp, new_tokens, requests)
    return OwnerWork(stored, read, write, flops, dec["attention_core"], owned,
                     inp.attention.topk_row_scores(longest_row(inp, counts)),
                     resident_state(requests, state_bytes(inp)))


def owner_candidates(layout: AttentionLayout, inp: ShareInputs) -> list[AttentionShare]:
    shares = [layout.owner_share(inp, with_prefill=False)]
    if inp.has_prefill:
        shares.append(layout.owner_share(inp, with_prefill=True))
    return shares


@register_attention_layout
class DataParallelAttention(AttentionLayout):
    name = "dp"
    order = 3  # where listings put it
    description = "weights replicated, each request's KV on one owner"
    group_rule = "per_rank"
    kv_in_group = "heads"
    weights_sharded = False
    activations_replicated = False
    head_sharded = False

    def owner_share(self, inp: ShareInputs, with_prefill: bool) -> AttentionShare:
        w = owner_attention(inp, with_prefill)
        own_queries = w.owned * inp.query_tokens
        projected = own_queries + (inp.prefill_tokens if with_prefill else 0.0)
        return AttentionShare(w.stored, w.read, w.write, w.flops, w.decode_core, inp.attention.num_heads,
                              projected, (w.longest,), own_queries, state_stored_bytes=w.state)

    def share(self, inp: ShareInputs) -> AttentionShare:
        return self.owner_share(inp, with_prefill=False)

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        return owner_candidates(self, inp)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        return []
