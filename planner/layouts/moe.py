"""MoE splits. EP: experts spread over ranks; with owner-partitioned activations (DP-attention)
tokens go to their experts' ranks and back by all-to-all (dispatch, combine: top-k copies of
each token's hidden state); with replicated activations each rank applies its local experts to
every token and an all-reduce sums them. TP: every expert sharded over ranks; replicated
activations end with an all-reduce, owner-partitioned ones are all-gathered in and
reduce-scattered out. Dense layers follow the same rule (replicated under EP, so DP-attention +
EP runs them locally).

NOTE: the dispatch carries FP8 tokens with one fp32 scale per 128 channels and the combine BF16,
as DeepEP's kernels do (deepseek-ai/DeepEP README: "FP8 dispatch / BF16 combine"; SGLang
`--moe-a2a-backend deepep`, vLLM `deepep_low_latency`); decode's low-latency kernels send one
copy per selected expert, which is what the all-to-all prices."""

from __future__ import annotations

from planner.layouts.base import ACTIVATION_BYTES, Collective, MoESplit, ShareInputs, product, register_moe_split

DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128.0  # fp8 value + an fp32 scale per 128 channels


@register_moe_split
class ExpertParallel(MoESplit):
    name = "ep"
    order = 0  # where listings put it
    description = "experts spread over ranks, all-to-all dispatch/combine"

    def partitioned_collectives(self, inp, mlp):
        if not mlp.is_moe:
            return []
        # NOTE: a latent MoE dispatches the latent (planner.models.mlp.moe `dispatch_width`)
        copies = product(inp.step_tokens / inp.ranks, mlp.top_k, mlp.dispatch_width())
        return [Collective("ep_dispatch_a2a", "all_to_all", copies * DISPATCH_BYTES_PER_ELEMENT, 1.0),
                Collective("ep_combine_a2a", "all_to_all", copies * ACTIVATION_BYTES, 1.0)]


@register_moe_split
class TensorParallelMoE(MoESplit):
    name = "tp"
    order = 1  # where listings put it
    description = "every expert sharded over ranks"

    def partitioned_collectives(self, inp, mlp):
        full = inp.step_hidden_bytes
        return [Collective("dp_gather", "all_gather", full, 1.0),
                Collective("dp_reduce_scatter", "reduce_scatter", full, 1.0)]
