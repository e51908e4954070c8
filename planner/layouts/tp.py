"""TP attention: heads (and attention weights) split over T ranks; one all-reduce after the
output projection. KV splits by heads down to one KV head per rank, then replicates; MLA's
single latent replicates on every rank (reference/models.md)."""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, new_token_bytes,
                                  pages_rounded, prefill_resident, prefill_work, read_bytes, register_attention_layout, stored_bytes,
                                  tokens_hidden_bytes)


def kv_split(inp: ShareInputs) -> float:
    """How many ways TP splits KV: min(T, KV heads) when heads divide evenly, else 1."""
    h = inp.model.attention.kv_splittable_heads()
    t = inp.ranks
    if h >= t:
        return float(t) if h % t == 0 else 1.0
    return float(h) if t % h == 0 else 1.0


@register_attention_layout
class TensorParallel(AttentionLayout):
    name = "tp"
    description = "heads sharded, KV split by heads (replicated for MLA), all-reduce"
    kv_placement = "every_rank"
    weights_sharded = True
    output_sharded = True
    activations_replicated = True
    head_sharded = True

    def share(self, inp: ShareInputs) -> AttentionShare:
        load, s, t = inp.load, kv_split(inp), inp.ranks
        stored = (stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens)) * load.counts).sum(-1) / s
        read = {k: (v * load.counts).sum(-1) / s for k, v in read_bytes(inp, load.lengths).items()}
        att = inp.model.attention
        pre_flops, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix / s
        stored = stored + prefill_resident(inp) / s
        flops = ((att.decode_flops(load.lengths) * load.counts).sum(-1) + pre_flops) / t
        write = inp.step_tokens * new_token_bytes(inp) / s
        return AttentionShare(stored, read, write, flops, inp.step_tokens)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        tokens = inp.step_tokens
        return [Collective("attn_allreduce", "all_reduce", tokens_hidden_bytes(inp, tokens), 1.0)]

    def check(self, model, ranks):
        model.attention.check_tp(ranks)
