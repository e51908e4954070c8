"""Placement as a value (planner/layouts/placement.py): every registered layout's placement agrees
with what its own share methods price (weights per rank, KV per rank, the owner groups its requests
spread over), and DP attention with attention TP inside its groups (dptp) prices as DP-attention at
G = T groups and as TP's attention at G = 1."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner.layouts import attention_layouts
from planner.step import decode_resident_bytes, weights_resident_bytes

T = 8
H200 = planner.load_hardware("h200")


def _dep(model: str, attn: str, groups=None, gpus: int = T):
    m = planner.load_model(model)
    return planner.make_deployment(m, H200, attn=attn, moe="ep" if m.has_moe else "tp", gpus=gpus,
                                   attn_groups=groups)


@pytest.mark.parametrize("name", sorted(attention_layouts()))
@pytest.mark.parametrize("model", ["deepseek-v3.2", "llama-3.1-70b"])
def test_every_layouts_placement_is_what_its_shares_price(name, model):
    """Per rank: head-sharded attention weights over `weight_split`; one request per owner group
    puts one request's KV at `rank_share` on the busiest rank (equal lengths, page-aligned)."""
    d = _dep(model, name)
    pl = d.placement
    assert pl.owner_groups * pl.group_ranks == T and pl.layout == name
    m = d.model
    full = sum(p.params for p in m.attention.weight_parts().values() if p.head_sharded) * m.num_layers
    whole = sum(p.params for p in m.attention.weight_parts().values() if not p.head_sharded) * m.num_layers
    w = weights_resident_bytes(d)
    per_param = planner.units.WEIGHT_BYTES_PER_PARAM[d.part_dtype(m.layers[0], "mixer")]
    attn = sum(w[f"{k}_weights"] for k in m.attention.weight_parts()) / per_param
    assert attn == pytest.approx(full / pl.weight_split + whole, rel=1e-9)
    tokens = 64.0 * T * d.page_tokens
    kv = float(decode_resident_bytes(d, planner.DecodeLoad.equal(float(pl.owner_groups), tokens))[0][0])
    one = float(sum(m.memory_bytes(np.array([tokens]), d.kv_dtype)[k][0] for k in ("token", "window")))
    assert kv == pytest.approx(one * pl.rank_share(m.attention), rel=1e-9)


@pytest.mark.parametrize("model", ["deepseek-v3.2", "llama-3.1-70b"])
def test_dp_attention_in_t_groups_prices_as_dp_attention(model):
    """dptp with one rank per group is DP-attention, component for component (decode and a step
    with a prefill chunk)."""
    dp, dptp = _dep(model, "dp"), _dep(model, "dptp", groups=T)
    assert dptp.placement.describe() | {"layout": "dp"} == dp.placement.describe()
    for load, pre in ((planner.DecodeLoad.from_lengths([4096.0] * 20 + [60000.0] * 3), 0.0),
                      (planner.DecodeLoad.equal(64, 16384.0), 2048.0)):
        a, b = planner.step_cost(dp, load, pre, prefill_context=1024.0), planner.step_cost(dptp, load, pre, prefill_context=1024.0)
        np.testing.assert_allclose(a.times.stacked(), b.times.stacked(), rtol=1e-12)
        for res in ("hbm_bytes", "flops", "network_bytes"):
            assert a.components[res].keys() == b.components[res].keys() or res == "network_bytes"
            for k, v in a.components[res].items():
                np.testing.assert_allclose(v, b.components[res].get(k, 0.0), rtol=1e-12, err_msg=f"{res}.{k}")
    assert dp.memory.kv_pool_bytes == dptp.memory.kv_pool_bytes


@pytest.mark.parametrize("model", ["deepseek-v3.2", "llama-3.1-70b"])
def test_dp_attention_in_one_group_attends_as_tp(model):
    """dptp with one group of T ranks attends as TP does (weights, KV, attention FLOPs, the attention
    all-reduce): only the MLP side differs (its activations are partitioned, as under DP-attention)."""
    tp, g1 = _dep(model, "tp"), _dep(model, "dptp", groups=1)
    load = planner.DecodeLoad.from_lengths([2048.0] * 30 + [30000.0] * 2)
    a, b = planner.step_cost(tp, load), planner.step_cost(g1, load)
    np.testing.assert_allclose(a.kv_resident_bytes, b.kv_resident_bytes, rtol=1e-12)
    for k, v in a.components["hbm_bytes"].items():
        np.testing.assert_allclose(v, b.components["hbm_bytes"].get(k, 0.0), rtol=1e-12, err_msg=k)
    for k in ("attention_core", "head_padding", "lm_head"):
        np.testing.assert_allclose(a.components["flops"][k], b.components["flops"][k], rtol=1e-12, err_msg=k)
    np.testing.assert_allclose(a.components["network_bytes"]["attn_allreduce"],
                               b.components["network_bytes"]["attn_group_allreduce"], rtol=1e-12)


def test_attention_tp_inside_a_group_splits_gqa_heads_over_the_group():
    """Llama-3.1-70B (8 KV heads) on 8 × H200 in 2 groups of 4: each rank keeps a quarter of its
    group's KV (2 KV heads) and half the requests' groups: 16 requests of 8K → 8 per group, a rank
    holds 8 × 8K tokens × 327,680 B / 4 = 5.37 GB; DP-attention holds 2 requests whole per rank."""
    d = _dep("llama-3.1-70b", "dptp", groups=2)
    pl = d.placement
    assert (pl.owner_groups, pl.group_ranks, pl.weight_split, pl.head_split(d.model.attention)) == (2, 4, 4, 4.0)
    assert pl.attention_dp_size == 2 and pl.kv_copies(d.model.attention) == 1.0
    kv = float(decode_resident_bytes(d, planner.DecodeLoad.equal(16, 8192.0))[0][0])
    per_token = d.model.kv_bytes_per_token(d.kv_dtype)
    assert per_token == 80 * 2 * 8 * 128 * 2  # layers × (K, V) × KV heads × head dim × bf16
    assert kv == pytest.approx(8 * 8192 * per_token / 4)
    # MLA's one latent is kept whole by every rank of its group: copies = R
    dsa = _dep("deepseek-v3.2", "dptp", groups=2).placement
    assert dsa.kv_copies(planner.load_model("deepseek-v3.2").attention) == 4.0


def test_group_counts_are_checked_and_defaulted():
    assert _dep("deepseek-v3.2", "dptp").attn_groups == 2  # one node: 2 groups
    assert _dep("deepseek-v3.2", "dptp", gpus=16).attn_groups == 2  # one group per node
    with pytest.raises(planner.SpecError, match="attn_groups=3 does not divide the group's 8 ranks"):
        _dep("deepseek-v3.2", "dptp", groups=3)
    with pytest.raises(planner.SpecError, match="attn_groups=2 applies to a layout with a group count .*dptp.*attn=tp"):
        _dep("deepseek-v3.2", "tp", groups=2)
    # SGLang sizes its DP-attention reserve and per-rank chunk by dp_size = the groups
    d = _dep("deepseek-v3.2", "dptp", groups=4)
    assert d.memory.defaults["dp_size"] == 4 and d.engine_model.chunked_prefill_tokens(d) == 8192 // 4
    assert planner.replace_deployment(d, attn="dp").attn_groups is None
