"""CP as SPLASH runs it (and floorfirst's torch executor, executor/torch_executor/layouts.py
`attention_cp`): attention weights replicated on every rank; every request's KV pages
interleaved over the T ranks. Each rank projects every decode query with all heads, attends
over its ~1/T of each request's pages and all-gathers the partial outputs (bf16, the kernel's
output width per head) and their log-sum-exps (fp32); every rank merges them exactly and runs
the output path for every token itself, so no all-reduce closes the block. Decode query and
output projections for every token on every rank are CP's price; KV held once is its gain.

DSA under CP: each rank scores its own slice of the indexer keys, selects a local top-k, and
the ranks all-gather their T·top-k candidates (score, index) for a second top-k, the exact
decomposition vLLM ships for DCP (vllm/model_executor/layers/sparse_attn_indexer.py
`_merge_dcp_topk_global`: "ships dcp_world_size * topk_tokens candidates instead of the whole
score row"; SPLASH publishes no DSA code, so its indexer is taken to split the same way).

A prefill chunk runs ring-style: its queries split over the ranks (projections and attention of
P/T tokens each), the request's KV slices (prefix + chunk) all-gathered, and the chunk's hidden
states all-gathered after the output projection so every rank holds every token again.
"""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (ACTIVATION_BYTES, LSE_BYTES, TOPK_CANDIDATE_BYTES, AttentionLayout, AttentionShare,
                                  Collective, ShareInputs, add_parts, decode_flops, longest_row, over, prefill_requests,
                                  prefill_resident, prefill_work, product, read_bytes, refuse_unsplittable,
                                  register_attention_layout, request_sum, resident_state, state_bytes, stored_bytes,
                                  tokens_hidden_bytes, with_parts, write_bytes)


def token_split_work(inp: ShareInputs, stored_tokens: np.ndarray):
    """(stored, read, write, decode flops, top-k passes, state) of one rank holding `stored_tokens`
    [P, R] of each request (page-rounded) and ~1/T of every request's KV reads, scores and
    attended tokens, one layer (shared by cp and dcp). A per-request state (DeepSeek-V4's
    compressor ring) is not split by tokens: every rank keeps and rewrites it whole.
    NOTE: a layout split by tokens refuses recurrent mixers outright (`check_token_split`)."""
    load, t = inp.load, inp.ranks
    stored = request_sum(stored_bytes(inp, stored_tokens) * load.counts)
    requests = inp.batch
    if inp.has_prefill:  # NOTE: without a chunk its terms are zeros, and x + 0 is x
        stored = stored + prefill_resident(inp) / t
        requests = requests + prefill_requests(inp)
    # NOTE: each rank reads its ~1/T of every request's KV (for DSA: its slice of the indexer keys
    # and ~1/T of the top-k latents the global selection picks); exact up to one page or token.
    read = {k: over(request_sum(v * load.counts), t) for k, v in read_bytes(inp, load.lengths).items()}
    dec = decode_flops(inp, load.counts, core_split=t, indexer_split=t)
    s = state_bytes(inp)
    write = write_bytes(inp, inp.step_tokens, 0.0) / t + requests * s
    return stored, read, write, dec, topk_passes(inp), resident_state(requests, s)


def check_token_split(layout: str, model) -> None:
    """A recurrent state is one per request: it can't be interleaved over ranks by tokens."""
    refuse_unsplittable(layout, model, "a recurrent state is one per request and can't be split by tokens",
                        lambda v: not v.token_splittable())


def topk_passes(inp: ShareInputs) -> tuple[np.ndarray, ...]:
    """Scores per row of the two top-k passes of a token-split indexer: the local one over a
    rank's ~L/T keys, then the merge over min(L, T·top-k) gathered candidates (no selection is
    needed where L ≤ top-k: both passes then price at 0)."""
    k = inp.attention.topk_tokens()
    if k is None:
        return ()
    rows, t = inp.attention.topk_row_scores(longest_row(inp, inp.load.counts)), inp.ranks
    local = rows / t
    np.ceil(local, out=local)
    return local, np.minimum(rows, t * k)


def topk_merge_collectives(inp: ShareInputs, name: str) -> list[Collective]:
    """The all-gather of every rank's local top-k candidates: a [rows, top-k] buffer per rank,
    whatever the rows' lengths (short rows pad it), gathered over the group."""
    k = inp.attention.topk_tokens()
    if k is None:
        return []
    return [Collective(name, "all_gather", product(inp.ranks * inp.decode_tokens, k, TOPK_CANDIDATE_BYTES), 1.0)]


def partial_output_bytes(inp: ShareInputs) -> np.ndarray:
    """[P] one rank's partial outputs + log-sum-exps of every decode query, all heads."""
    att = inp.attention
    return product(inp.decode_tokens, att.num_heads, att.decode_output_width() * ACTIVATION_BYTES + LSE_BYTES)


@register_attention_layout
class ContextParallel(AttentionLayout):
    name = "cp"
    order = 1  # where listings put it
    description = "SPLASH CP: weights replicated, KV pages interleaved over ranks, partials all-gathered and LSE-merged"
    group_rule = "one"
    kv_in_group = "tokens"
    weights_sharded = False
    activations_replicated = True
    head_sharded = False

    def share(self, inp: ShareInputs) -> AttentionShare:
        load, t, pg = inp.load, inp.ranks, inp.page_tokens
        pages_on_busiest = load.lengths / pg  # ⌈⌈L / pg⌉ / T⌉ · pg, in place
        np.ceil(pages_on_busiest, out=pages_on_busiest)
        pages_on_busiest /= t
        np.ceil(pages_on_busiest, out=pages_on_busiest)
        pages_on_busiest *= pg
        stored, read, write, dec, topk, state = token_split_work(inp, pages_on_busiest)
        pre, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix / t
        if inp.has_prefill:
            flops = add_parts(dec, {k: v / t for k, v in pre.items()})
            projected = inp.decode_tokens + inp.prefill_tokens / t
        else:  # NOTE: without a chunk its terms are zeros, and x + 0 is x
            flops, projected = with_parts(dec, pre), inp.decode_tokens
        return AttentionShare(stored, read, write, flops, dec["attention_core"], inp.attention.num_heads,
                              projected, topk, state_stored_bytes=state)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        gathered = partial_output_bytes(inp)
        gathered *= inp.ranks  # T · partials (one array)
        colls = [Collective("cp_partials_allgather", "all_gather", gathered, 1.0)]
        colls += topk_merge_collectives(inp, "cp_topk_allgather")
        if inp.has_prefill:
            # NOTE: a chunk has many queries and one prefix, so it runs ring-style: gathering each
            # rank's KV slice (prefix + chunk) moves far fewer bytes than merging every query's
            # partial output (P·heads·(v·2 + 4) B·T) once P exceeds a handful of tokens.
            colls += [Collective("cp_prefill_kv_allgather", "all_gather", prefill_resident(inp), 1.0),
                      Collective("cp_prefill_output_allgather", "all_gather",
                                 tokens_hidden_bytes(inp, inp.prefill_tokens), 1.0)]
        return colls

    def check(self, model, ranks, groups=None):
        check_token_split(self.name, model)
