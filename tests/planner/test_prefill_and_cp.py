import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.load import DecodeLoad
from planner.models.attention.base import causal_pairs
from planner.step import weights_resident_bytes
from tests.planner.factories import deployment

LAYERS = 61


def test_causal_pairs_golden():
    # a fresh chunk of 4 queries: 1 + 2 + 3 + 4 keys
    assert causal_pairs(4, 0) == 10
    # 3 queries after a 10-token prefix: 11 + 12 + 13 keys
    assert causal_pairs(3, 10) == 36
    # the same capped at 12 keys per query: 11 + 12 + 12
    assert causal_pairs(3, 10, 12) == 35
    # every query already past the cap
    assert causal_pairs(5, 100, 12) == 60
    assert causal_pairs(0, 100) == 0


def test_mla_weight_parts_replicate_the_fused_a_projection():
    parts = planner.load_model("deepseek-v3").attention.weight_parts()
    # q_a + kv_a (one fused GEMM, ReplicatedLinear): 7168·1536 + 7168·(512 + 64)
    assert parts["attention_qkv_a"].params == 7168 * 1536 + 7168 * 576 and not parts["attention_qkv_a"].head_sharded
    # q_b + kv_b + o_proj, split by heads: 1536·128·192 + 512·128·(128 + 128) + 128·128·7168
    assert parts["attention"].params == 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert parts["attention"].head_sharded


def test_cp_holds_every_attention_weight_whole():
    dep = deployment(attn="cp", gpus=8)
    w = weights_resident_bytes(dep)
    parts = dep.model.attention.weight_parts()
    for k in ("attention", "attention_qkv_a", "indexer"):  # fp8: 1 B/param
        assert w[f"{k}_weights"] == pytest.approx(parts[k].params * LAYERS)


def test_cp_decode_merge_all_gathers_partials_and_lse():
    c = planner.step_cost(deployment(attn="cp", gpus=8), DecodeLoad.equal(64, 32768))
    # every rank sends its 64 queries × 128 heads × (512 latent × 2 B bf16 + 4 B fp32 lse) to 7 peers;
    # the gathered tensor is 8 × that, and an all-gather moves 7/8 of it
    assert c.components["network_bytes"]["cp_partials_allgather"][0] == pytest.approx(
        7 / 8 * 8 * 64 * 128 * (512 * 2 + 4) * LAYERS)
    assert c.components["network_messages"]["cp_partials_allgather"][0] == LAYERS
    assert "attn_allreduce" not in c.components["network_bytes"]  # the output path runs whole on every rank


def test_owner_layouts_run_a_prefill_chunk_on_one_owner():
    load = DecodeLoad.equal(16, 4096)
    dp = planner.step_cost(deployment(attn="dp", gpus=8), load, prefill_tokens=8192, prefill_context=57344)
    tp = planner.step_cost(deployment(attn="tp", gpus=8), load, prefill_tokens=8192, prefill_context=57344)
    att = planner.load_model("deepseek-v3.2").attention
    parts = att.prefill_flops_by_component(np.array(8192.0), np.array(57344.0))
    core, indexer = parts["attention_core"] * LAYERS, parts["indexer"] * LAYERS
    # DP: the chunk's whole attention on its owner; TP splits the core by heads over 8 ranks and runs
    # the replicated indexer whole on every rank
    assert dp.components["flops"]["attention_core"][0] >= core
    assert dp.components["flops"]["indexer"][0] >= indexer
    assert tp.components["flops"]["attention_core"][0] < core / 4
    assert tp.components["flops"]["indexer"][0] >= indexer
    assert dp.floor_max_s[0] > tp.floor_max_s[0]
    assert dp.binding[0] == "compute"


def test_no_prefill_keeps_one_candidate():
    a = planner.step_cost(deployment(attn="dop", gpus=8), DecodeLoad.equal(10, 4096))
    assert "prefill_prefix_read" not in a.components["hbm_bytes"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(planner.ATTN_LAYOUTS), st.integers(1, 256), st.integers(1, 65536), st.integers(0, 16384),
       st.integers(0, 16384), st.integers(0, 131072), st.integers(0, 131072))
def test_floors_non_decreasing_in_prefill(attn, b, l, p, dp_, c, dc):
    dep = deployment(attn=attn, gpus=8)
    load = DecodeLoad.equal(b, l)
    base = planner.step_cost(dep, load, prefill_tokens=p, prefill_context=c if p else 0)
    more_p = planner.step_cost(dep, load, prefill_tokens=p + dp_, prefill_context=c if p + dp_ else 0)
    assert more_p.floor_max_s[0] >= base.floor_max_s[0] * (1 - 1e-12)
    if p:
        more_c = planner.step_cost(dep, load, prefill_tokens=p, prefill_context=c + dc)
        assert more_c.floor_max_s[0] >= base.floor_max_s[0] * (1 - 1e-12)
        assert more_c.floor_max_s[0] <= more_c.floor_sum_s[0]
