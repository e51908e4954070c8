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
                                  longest_row, new_token_bytes, pages_rounded, prefill_resident, prefill_work,
                                  read_bytes, register_attention_layout, stored_bytes, tokens_hidden_bytes)


def kv_split(inp: ShareInputs) -> float:
    """How many ways TP splits KV: min(T, KV heads) when heads divide evenly, else 1."""
    h = inp.model.attention.kv_splittable_heads()
    t = inp.ranks
    if h >= t:
        return float(t) if h % t == 0 else 1.0
    return float(h) if t % h == 0 else 1.0


def split_core(parts: dict, ways: float) -> dict:
    """Divide the per-head core `ways` ways; the token-scoring parts stay whole."""
    return {k: v / ways if k == "attention_core" else v for k, v in parts.items()}


@register_attention_layout
class TensorParallel(AttentionLayout):
    name = "tp"
    description = "heads sharded, KV split by heads (replicated for MLA), all-reduce"
    kv_placement = "every_rank"
    weights_sharded = True
    activations_replicated = True
    head_sharded = True

    def share(self, inp: ShareInputs) -> AttentionShare:
        load, s, t = inp.load, kv_split(inp), inp.ranks
        stored = (stored_bytes(inp, pages_rounded(load.lengths, inp.page_tokens)) * load.counts).sum(-1) / s
        read = {k: (v * load.counts).sum(-1) / s for k, v in read_bytes(inp, load.lengths).items()}
        pre, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix / s
        stored = stored + prefill_resident(inp) / s
        dec = decode_flops(inp, load.counts, core_split=t)
        flops = add_parts(dec, split_core(pre, t))
        write = inp.step_tokens * new_token_bytes(inp) / s
        return AttentionShare(stored, read, write, flops, dec["attention_core"], inp.model.attention.num_heads / t,
                              inp.step_tokens, (longest_row(inp, load.counts),))

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        tokens = inp.step_tokens
        return [Collective("attn_allreduce", "all_reduce", tokens_hidden_bytes(inp, tokens), 1.0)]

    def check(self, model, ranks):
        model.attention.check_tp(ranks)
