"""DP attention with attention TP inside each group (SGLang `--tp T --dp G --enable-dp-attention`
with G < T; vLLM `--data-parallel-size G --tensor-parallel-size T/G` on a MoE model): the T ranks
form G owner groups of R = T/G ranks. Each request's KV lives in one group (requests balanced over
the groups by KV bytes, as DP-attention balances them over ranks); inside its group the request's
attention runs as TP does over R ranks: query heads and the head-sharded attention weights split R
ways, KV split by heads down to one KV head per rank, then replicated (MLA's single latent: every
rank of the group keeps every token of the group's requests), the indexer whole on every rank of the
group, one all-reduce of the group's hidden states over its R ranks after the output projection.
The MLP side sees each group's own tokens (activations partitioned across groups), as under
DP-attention: EP dispatch/combine over all T ranks, or all-gather/reduce-scatter into TP experts.

Engines' own words for it: SGLang's `attn_tp_size = tp_size // dp_size` inside each DP rank
(python/sglang/srt/layers/dp_attention.py `compute_dp_attention_world_info`), the common
multi-node setup (one DP group per node); vLLM runs one engine core per DP rank, each a TP group of
`--tensor-parallel-size` ranks (vllm/v1/engine/core.py `DPEngineCoreProc`).

The LM head is vocab-parallel over the group's R ranks (SGLang's `--enable-dp-lm-head`; NOTE:
without it SGLang splits the LM head over all T ranks after gathering every group's tokens, the same
FLOPs per rank and T/R times the gathered bytes; not modelled).

The group count is the deployment's (`Deployment.attn_groups`, SGLang's --dp); by default one
group per node the group spans, and 2 on one node (NOTE: a stated default, not an engine's: SGLang
and vLLM take the count from the launch line). G = 1 prices as TP and G = T as DP-attention
(tests/planner/test_placement.py holds it to both).

A prefill chunk belongs to one request and runs on its group, split over the group's ranks by heads
as TP splits it; the busiest rank is the decode-busiest group's or the lightest group's with the
chunk, whichever is slower (as for DP-attention, planner/layouts/dp.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.layouts.base import (AttentionLayout, AttentionShare, Collective, ShareInputs, over,
                                  register_attention_layout, tokens_hidden_bytes)
from planner.layouts.dp import owner_attention
from planner.layouts.placement import kv_split_ways
from planner.layouts.tp import split_core


@register_attention_layout
class DataParallelTensorParallelAttention(AttentionLayout):
    name = "dptp"
    order = 5  # where listings put it
    description = "DP attention over groups, attention TP inside each (SGLang --dp < --tp): KV on one group"
    group_rule = "given"
    kv_in_group = "heads"
    weights_sharded = True  # over the group's R ranks (weight_scope "group")
    activations_replicated = False
    head_sharded = True

    def default_groups(self, ranks: int, group_nodes: int = 1) -> int | None:
        return group_nodes if group_nodes > 1 else min(2, ranks)

    def _groups(self, inp: ShareInputs) -> int:
        # NOTE: the step model passes T in ShareInputs.ranks and the group count in `owner_groups`
        return inp.owner_groups if inp.owner_groups else self.default_groups(inp.ranks)

    def group_share(self, inp: ShareInputs, with_prefill: bool) -> AttentionShare:
        g = self._groups(inp)
        r = inp.ranks // g
        w = owner_attention(replace(inp, ranks=g), with_prefill)  # the group's whole attention
        s = kv_split_ways(inp.attention, r)
        own_queries = w.owned * inp.query_tokens
        projected = own_queries + (inp.prefill_tokens if with_prefill else 0.0)
        return AttentionShare(over(w.stored, s), {k: over(v, s) for k, v in w.read.items()}, over(w.write, s),
                              split_core(w.flops, r), w.decode_core / r, inp.attention.num_heads / r,
                              projected, (w.longest,), own_queries, state_stored_bytes=w.state / s)

    def share(self, inp: ShareInputs) -> AttentionShare:
        return self.group_share(inp, with_prefill=False)

    def candidate_shares(self, inp: ShareInputs) -> list[AttentionShare]:
        shares = [self.group_share(inp, with_prefill=False)]
        if inp.has_prefill:
            shares.append(self.group_share(inp, with_prefill=True))
        return shares

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        g = self._groups(inp)
        r = inp.ranks // g
        if r <= 1:
            return []
        # the busiest group's tokens: its share of the decodes and the step's chunk
        tokens = np.ceil(inp.batch / g) * inp.query_tokens + inp.prefill_tokens
        return [Collective("attn_group_allreduce", "all_reduce", tokens_hidden_bytes(inp, tokens), 1.0, ranks=r)]
