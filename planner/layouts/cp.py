"""CP (decode context parallelism): input-side attention weights replicated; every request's KV
pages interleaved across the T ranks, so each rank attends over ~1/T of every request. Partial
outputs (latent output + log-sum-exp, fp32) are exchanged by an all-to-all that leaves each
rank every token's partials for its T-th of the heads, merged exactly by log-sum-exp; the
per-head output path (W_UV, o-proj) then runs on that head slice (so only 1/T of it is held),
and an all-reduce of the hidden state finishes the block. Decode query projections run for
every token on every rank, which is CP's price. A prefill chunk runs ring-style instead: its
queries split over ranks and the request's KV slices all-gathered."""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (PARTIAL_BYTES, AttentionLayout, AttentionShare, Collective, ShareInputs,
                                  new_token_bytes, prefill_resident, prefill_work, read_bytes,
                                  register_attention_layout, stored_bytes, tokens_hidden_bytes)


def value_width(inp: ShareInputs) -> int:
    att = inp.model.attention
    return getattr(att, "kv_lora_rank", None) or getattr(att, "head_dim")


@register_attention_layout
class ContextParallel(AttentionLayout):
    name = "cp"
    description = "weights replicated, KV pages interleaved over ranks, LSE merge"
    kv_placement = "token_split"
    weights_sharded = False
    output_sharded = True
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
        pre_flops, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix / t
        stored = stored + prefill_resident(inp) / t
        flops = ((att.decode_flops(load.lengths) * load.counts).sum(-1) + pre_flops) / t
        write = inp.step_tokens * new_token_bytes(inp) / t
        # the prefill chunk runs ring-style: its queries split over ranks, the KV gathered
        in_tokens = load.batch + inp.prefill_tokens / t
        return AttentionShare(stored, read, write, flops, in_tokens, inp.step_tokens)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        heads = inp.model.attention.num_heads
        per_query = heads * (value_width(inp) + 1) * PARTIAL_BYTES  # partial output + lse, one query
        tokens = inp.step_tokens
        decode_partials = inp.load.batch * per_query
        colls = [Collective("attn_allreduce", "all_reduce", tokens_hidden_bytes(inp, tokens), 1.0)]
        if not np.any(inp.prefill_tokens > 0):
            return [Collective("cp_lse_merge_a2a", "all_to_all", decode_partials, 1.0)] + colls
        # NOTE: a prefill chunk has many queries and one prefix, so it runs ring-style: queries
        # split over ranks and each rank's KV slice (prefix + chunk) all-gathered, which moves
        # far fewer bytes than merging every query's partial output (P·heads·(v+1)·4 B) once P
        # exceeds a handful of tokens.
        return [Collective("cp_lse_merge_a2a", "all_to_all", decode_partials, 1.0),
                Collective("cp_prefill_kv_allgather", "all_gather", prefill_resident(inp), 1.0)] + colls
