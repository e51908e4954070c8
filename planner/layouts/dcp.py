"""DCP, vLLM's decode context parallelism (with dcp = T, the whole group): attention weights
sharded by heads as in TP, every request's KV interleaved token by token over the T ranks
(`cp_kv_cache_interleave_size` 1), so KV is held once. Per layer and decode step, as vLLM runs it:
- each rank projects every token for its T-th of the heads; the absorbed queries are
  all-gathered over the group (vllm/model_executor/layers/attention/mla_attention.py:
  `get_dcp_group().all_gather(mqa_q, dim=1)`), so each rank attends with all heads over its
  ~1/T of the tokens;
- the partial outputs are merged by `cp_lse_ag_out_rs` (vllm/attention/ops/common.py, later
  vllm/v1/attention/ops/common.py):
  an all-gather of the log-sum-exps (fp32, all heads) and, after a local correction, a
  reduce-scatter of the outputs over heads back to each rank's T-th (bf16, kernel output width);
- the output projection is row-parallel: one all-reduce, as in TP.
DSA: the indexer weights are replicated (as in TP), but the indexer keys are split like the KV,
so each rank scores its ~L/T tokens, selects a local top-k and all-gathers T·top-k candidates
for the global top-k (vllm/model_executor/layers/sparse_attn_indexer.py `_merge_dcp_topk_global`,
packed as two fp32 per candidate). SGLang's DCP PR (#31821, open) keeps the indexer replicated
instead; that variant is not modelled.

A prefill chunk runs as in TP (heads split, the indexer whole on every rank), reading the
request's prefix gathered from its shards (an all-gather of prefix + chunk KV).
"""

from __future__ import annotations

import numpy as np

from planner.layouts.base import (ACTIVATION_BYTES, LSE_BYTES, AttentionLayout, AttentionShare, Collective,
                                  ShareInputs, add_parts, pages_rounded, prefill_resident, prefill_work, product,
                                  refuse_unsplittable, register_attention_layout, with_parts)
from planner.layouts.cp import check_token_split, token_split_work, topk_merge_collectives
from planner.layouts.tp import split_core


@register_attention_layout
class DecodeContextParallel(AttentionLayout):
    name = "dcp"
    order = 2  # where listings put it
    description = "vLLM DCP: heads sharded like TP, KV interleaved by tokens, queries all-gathered, outputs reduce-scattered"
    group_rule = "one"
    kv_in_group = "tokens"
    weights_sharded = True
    activations_replicated = True
    head_sharded = True

    def share(self, inp: ShareInputs) -> AttentionShare:
        t = inp.ranks
        local_tokens = inp.load.lengths / t
        np.ceil(local_tokens, out=local_tokens)
        local_tokens = pages_rounded(local_tokens, inp.page_tokens)
        stored, read, write, dec, topk, state = token_split_work(inp, local_tokens)
        pre, prefix = prefill_work(inp)
        read["prefill_prefix"] = prefix  # the gathered prefix, whole
        flops = add_parts(dec, split_core(pre, t)) if inp.has_prefill else with_parts(dec, pre)
        return AttentionShare(stored, read, write, flops, dec["attention_core"], inp.attention.num_heads,
                              inp.step_tokens, topk, state_stored_bytes=state)

    def collectives(self, inp: ShareInputs) -> list[Collective]:
        att, t, q = inp.attention, inp.ranks, inp.decode_tokens
        colls = [
            Collective("dcp_query_allgather", "all_gather", product(q, att.num_heads, att.decode_query_width(), ACTIVATION_BYTES), 1.0),
            Collective("dcp_lse_allgather", "all_gather", product(t * q, att.num_heads, LSE_BYTES), 1.0),
            Collective("dcp_output_reduce_scatter", "reduce_scatter",
                       product(q, att.num_heads, att.decode_output_width(), ACTIVATION_BYTES), 1.0),
            *topk_merge_collectives(inp, "dcp_topk_allgather"),
            Collective("attn_allreduce", "all_reduce", inp.step_hidden_bytes, 1.0),
        ]
        if inp.has_prefill:
            colls.append(Collective("dcp_prefill_kv_allgather", "all_gather", prefill_resident(inp), 1.0))
        return colls

    def check(self, model, ranks, groups=None):
        super().check(model, ranks, groups)
        check_token_split(self.name, model)
        # NOTE: vLLM: "DCP is not supported with sliding window" (vllm/v1/kv_cache_interface.py
        # SlidingWindowSpec); chunked local attention and DeepSeek-V4's window are windows too.
        refuse_unsplittable(self.name, model, "vLLM's DCP does not support sliding-window caches",
                            lambda v: "window" in v.memory_kinds())
