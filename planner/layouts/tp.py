"""TP attention: query heads and the head-sharded attention weights split over T ranks; one
all-reduce after the output projection. KV splits by heads down to one KV head per rank, then
replicates; MLA's single latent replicates on every rank (reference/models.md).

What TP does *not* split, as engines run it (each declared by the attention variant, cited
there): the fused q_a/kv_a projection and DSA's indexer weights stay whole on every rank
(`WeightPart.head_sharded = False`), and the indexer scores every cached token of every request
with all index heads on every rank, followed by a top-k over every row (SGLang, vLLM and TRT-LLM
alike). The per-head attention core is split by heads, and the step model pads each rank's
T-th of the heads to the decode kernel's head tile.
"""

from __future__ import annotations

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, add_parts, decode_flops,
                                  longest_row, over, pages_rounded, prefill_requests, prefill_resident, prefill_work,
                                  read_bytes, register_attention_layout, request_sum, resident_state, state_bytes,
                                  stored_bytes, with_parts, write_bytes)
from planner.layouts.placement import kv_split_ways  # noqa: F401 (re-exported: engines and capacity import it here)


def kv_split(inp: ShareInputs) -> float:
    """How many ways TP splits KV: min(T, KV heads) when heads divide evenly, else 1."""
    return kv_split_ways(inp.attention, inp.ranks)




def split_core(parts: dict, ways: float) -> dict:
    """Divide the per-head core `ways` ways; the token-scoring parts stay whole."""
    return {k: v / ways if k == "attention_core" else v for k, v in parts.items()}


@register_attention_layout
class TensorParallel(AttentionLayout):
    name = "tp"
    order = 0  # where listings put it
    description = "heads sharded, KV split by heads (replicated for MLA), all-reduce"
    group_rule = "one"
    kv_in_group = "heads"
    weights_sharded = True
    activations_replicated = True
    head_sharded = True

    def share(self, inp: ShareInputs) -> AttentionShare:
        load, s, t = inp.load, kv_split(inp), inp.ranks
        stored = over(request_sum(stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens)) * load.counts), s)
        read = {k: over(request_sum(v * load.counts), s) for k, v in read_bytes(inp, load.lengths).items()}
        pre, prefix = prefill_work(inp)
        read["prefill_prefix"] = over(prefix, s)
        dec = decode_flops(inp, load.counts, core_split=t)
        requests = inp.batch
        if inp.has_prefill:  # NOTE: without a chunk its terms are zeros, and x + 0 is x
            stored = stored + prefill_resident(inp) / s
            requests = requests + prefill_requests(inp)
        flops = add_parts(dec, split_core(pre, t)) if inp.has_prefill else with_parts(dec, pre)
        write = over(write_bytes(inp, inp.step_tokens, requests), s)
        return AttentionShare(stored, read, write, flops, dec["attention_core"], inp.attention.num_heads / t,
                              inp.step_tokens, (inp.attention.topk_row_scores(longest_row(inp, load.counts)),),
                              state_stored_bytes=resident_state(requests, state_bytes(inp)) / s)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        return [Collective("attn_allreduce", "all_reduce", inp.step_hidden_bytes, 1.0)]

