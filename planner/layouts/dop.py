"""DOP (decoupled ownership): attention weights sharded by heads like TP, each request's KV on
one owner like DP-attention, so neither weights nor KV are replicated. Each rank projects
queries for its T-th of the heads for every token; an all-to-all routes them to the owners
(the decode kernel's query width per head: 576 for absorbed MLA), the owner attends over its
cache with all heads (and, for DSA, scores its requests' tokens and selects their top-k), a
second all-to-all returns the outputs (the kernel's output width, 512 for MLA) to the head
owners, and the output projection's all-reduce finishes the block. A prefill chunk's attention
runs on its request's owner, as in DP-attention (see planner.layouts.dp)."""

from __future__ import annotations

from planner.layouts.base import (ACTIVATION_BYTES, AttentionLayout, AttentionShare, Collective, ShareInputs, product,
                                  register_attention_layout)
from planner.layouts.dp import owner_attention, owner_candidates


@register_attention_layout
class DecoupledOwnership(AttentionLayout):
    name = "dop"
    order = 4  # where listings put it
    description = "heads sharded like TP, each request's KV on one owner, queries routed by all-to-all"
    group_rule = "per_rank"
    kv_in_group = "heads"
    weight_scope = "all"  # weights sharded over every rank, each request on one owner
    weights_sharded = True
    activations_replicated = True
    head_sharded = True

    def owner_share(self, inp: ShareInputs, with_prefill: bool) -> AttentionShare:
        w = owner_attention(inp, with_prefill)
        return AttentionShare(w.stored, w.read, w.write, w.flops, w.decode_core, inp.attention.num_heads,
                              inp.step_tokens, (w.longest,), state_stored_bytes=w.state)

    def share(self, inp: ShareInputs) -> AttentionShare:
        return self.owner_share(inp, with_prefill=False)

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        return owner_candidates(self, inp)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        att = inp.attention
        tokens = inp.step_tokens
        heads_per_rank = att.num_heads / inp.ranks
        q = product(tokens, heads_per_rank, att.decode_query_width(), ACTIVATION_BYTES)
        o = product(tokens, heads_per_rank, att.decode_output_width(), ACTIVATION_BYTES)
        return [
            Collective("dop_query_a2a", "all_to_all", q, 1.0),
            Collective("dop_output_a2a", "all_to_all", o, 1.0),
            Collective("attn_allreduce", "all_reduce", inp.step_hidden_bytes, 1.0),
        ]

