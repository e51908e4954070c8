import math

import numpy as np
import pytest

import planner
from planner.errors import SpecError
from planner.load import DecodeLoad, busiest_owner_counts
from planner.step import kv_pool_bytes
from tests.planner.factories import deployment

LAYERS = 61
MLA_QKV_A_PARAMS = 7168 * 1536 + 7168 * 576  # fused q_a + kv_a, replicated under TP: 15.1 M
MLA_HEAD_PARAMS = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168  # q_b, kv_b, o_proj, split by heads: 172.0 M
MLA_LAYER_PARAMS = MLA_QKV_A_PARAMS + MLA_HEAD_PARAMS  # 187.1 M


def test_golden_tp_step_components():
    dep = deployment(attn="tp", moe="ep", gpus=8)  # deepseek-v3.2, h200: fp8 weights, bf16 KV (Hopper default)
    c = planner.step_cost(dep, DecodeLoad.equal(4, 4096))
    hbm = c.components["hbm_bytes"]
    # MLA latent is replicated under TP: every rank reads every request's latents; DSA reads only the
    # top-k = min(4096, 2048) of them × 1152 B × 61 layers
    assert hbm["kv_read"][0] == 4 * 2048 * 1152 * LAYERS
    # the indexer reads all 4096 keys of 132 B each
    assert hbm["indexer_read"][0] == 4 * 4096 * 132 * LAYERS
    # attention weights (fp8, 1 B/param): the head-split 172.0 M params/layer / 8 ranks, and the fused
    # q_a/kv_a projection's 15.1 M whole on every rank, × 61 layers
    assert hbm["attention_weights"][0] == pytest.approx(MLA_HEAD_PARAMS * LAYERS / 8)
    assert hbm["attention_qkv_a_weights"][0] == pytest.approx(MLA_QKV_A_PARAMS * LAYERS)
    # one all-reduce of B × 7168 × 2 B per layer after attention and one after the MLP; ring: 2·(T−1)/T
    net = c.components["network_bytes"]
    assert net["attn_allreduce"][0] == pytest.approx(2 * 7 / 8 * 4 * 7168 * 2 * LAYERS)
    # messages: 61 attention + 61 MLP all-reduces + 1 logits gather
    assert c.network_messages[0] == 61 + 61 + 1
    assert c.times.network_messages_s[0] == pytest.approx(123 * 12e-6)
    assert c.floor_max_s[0] == max(c.times.hbm_s[0], c.times.compute_s[0], c.times.network_bytes_s[0],
                                   c.times.network_messages_s[0])
    assert c.floor_sum_s[0] == pytest.approx(c.times.hbm_s[0] + c.times.compute_s[0] + c.times.network_bytes_s[0]
                                             + c.times.network_messages_s[0])
    assert c.times.hbm_s[0] == pytest.approx(c.hbm_bytes[0] / 4.8e12)


def test_golden_dp_owner_reads_only_its_requests():
    dep = deployment(attn="dp", moe="ep", gpus=8)
    c = planner.step_cost(dep, DecodeLoad.equal(12, 4096))
    # ⌈12/8⌉ = 2 requests on the busiest owner, each reading its top-2048 latents
    assert c.components["hbm_bytes"]["kv_read"][0] == 2 * 2048 * 1152 * LAYERS
    # weights replicated: the full attention per rank
    hbm = c.components["hbm_bytes"]
    assert hbm["attention_weights"][0] + hbm["attention_qkv_a_weights"][0] == pytest.approx(MLA_LAYER_PARAMS * LAYERS)
    # resident KV is page-rounded: 4096 is 64 whole pages
    assert c.kv_resident_bytes[0] == 2 * 4096 * (1152 + 132) * LAYERS


def test_cp_splits_kv_by_pages_and_dop_shards_weights():
    cp = planner.step_cost(deployment(attn="cp", gpus=8), DecodeLoad.equal(1, 64 * 10))
    # 10 pages over 8 ranks: the busiest holds 2 pages
    assert cp.kv_resident_bytes[0] == 2 * 64 * (1152 + 132) * LAYERS
    dop = planner.step_cost(deployment(attn="dop", gpus=8), DecodeLoad.equal(8, 4096))
    assert dop.components["hbm_bytes"]["attention_weights"][0] == pytest.approx(MLA_HEAD_PARAMS * LAYERS / 8)
    assert dop.components["hbm_bytes"]["indexer_read"][0] == 4096 * 132 * LAYERS  # one request per owner
    assert {"dop_query_a2a", "dop_output_a2a", "attn_allreduce"} <= set(dop.components["network_bytes"])


def test_vectorized_equals_point_by_point():
    dep = deployment(attn="dop", gpus=8)
    b = np.array([1, 7, 64, 300])
    ctx = np.array([100, 5000, 32768, 131072])
    v = planner.step_cost(dep, DecodeLoad.equal(b, ctx))
    for i in range(b.size):
        one = planner.step_cost(dep, DecodeLoad.equal(b[i], ctx[i]))
        assert one.floor_max_s[0] == pytest.approx(v.floor_max_s[i])
        assert one.floor_sum_s[0] == pytest.approx(v.floor_sum_s[i])
        assert one.binding[0] == v.binding[i]


@pytest.mark.parametrize("attn", planner.ATTN_LAYOUTS)
def test_list_of_equal_lengths_equals_equal_load(attn):
    dep = deployment(attn=attn, gpus=8)
    a = planner.step_cost(dep, DecodeLoad.equal(16, 8192))
    b = planner.step_cost(dep, DecodeLoad.from_lengths([8192] * 16))
    assert b.floor_max_s[0] == pytest.approx(a.floor_max_s[0])
    assert b.kv_resident_bytes[0] == pytest.approx(a.kv_resident_bytes[0])


def test_histogram_equals_list():
    dep = deployment(attn="dp", gpus=8)
    h = planner.step_cost(dep, DecodeLoad.from_histogram([1000, 64000], [30, 2]))
    l = planner.step_cost(dep, DecodeLoad.from_lengths([1000] * 30 + [64000] * 2))
    assert h.floor_sum_s[0] == l.floor_sum_s[0]


def test_busiest_owner_is_balanced_by_kv_bytes_not_count():
    load = DecodeLoad.from_lengths([100_000, 1000, 1000, 1000, 1000])
    counts = busiest_owner_counts(load, load.lengths, 2)
    # the long request alone outweighs the four short ones: it sits alone on the busiest rank
    assert counts.tolist() == [[1, 0, 0, 0, 0]]
    # unequal lengths make an owner layout as heavy as its busiest owner, not the mean
    dep = deployment(model="deepseek-v3", attn="dp", gpus=2)  # plain MLA: reads every latent
    c = planner.step_cost(dep, load)
    assert c.components["hbm_bytes"]["kv_read"][0] == 100_000 * 1152 * LAYERS


def test_prefill_adds_work():
    dep = deployment(attn="tp", gpus=8)
    a = planner.step_cost(dep, DecodeLoad.equal(8, 4096))
    b = planner.step_cost(dep, DecodeLoad.equal(8, 4096), prefill_tokens=8192)
    assert b.flops[0] > a.flops[0] and b.floor_sum_s[0] > a.floor_sum_s[0]
    assert b.components["flops"]["attention_core"][0] > a.components["flops"]["attention_core"][0]


def test_replicas_split_the_batch():
    one = planner.step_cost(deployment(attn="dp", gpus=8), DecodeLoad.equal(32, 4096))
    two = planner.step_cost(deployment(attn="dp", gpus=16, replicas=2), DecodeLoad.equal(64, 4096))
    assert two.kv_resident_bytes[0] == one.kv_resident_bytes[0]
    assert two.decode_tokens_per_s_at_max[0] == pytest.approx(2 * one.decode_tokens_per_s_at_max[0])


def test_kv_pool_arithmetic():
    # NOTE: arithmetic changed with issue 12: the pool is SGLang's, mem_fraction_static of the free
    # memory before weights (usable 150,109,880,320 B − context 552,402,944 B), in whole 64-token pages
    dep = deployment(attn="tp", gpus=8, mem_fraction=0.9)
    from planner.step import weights_resident_bytes

    per_token = (1152 + 132) * LAYERS
    budget = 0.9 * (150_109_880_320 - 552_402_944) - sum(weights_resident_bytes(dep).values())
    tokens = math.floor(budget / per_token / 64) * 64
    assert kv_pool_bytes(dep) == tokens * per_token


@pytest.mark.parametrize("kwargs, needle", [
    (dict(attn="xx"), "attn"), (dict(moe="zz"), "moe"), (dict(gpus=0), "gpus"), (dict(gpus=3), "divisible by tp=3"),
    (dict(gpus=8, replicas=3), "replicas"), (dict(mem_fraction=1.5), "mem_fraction"),
    (dict(mem_fraction=float("nan")), "mem_fraction"), (dict(kv_dtype="fp9"), "kv_dtype"),
    (dict(weight_dtype="int3"), "weight_dtype"), (dict(gpus=16, nodes=1), "scale-up domain"),
    (dict(gpus=16, nodes=3), "divisible by nodes"), (dict(engine="tensorrt"), "engine"),
    (dict(mem_fraction=0.9, reserve_bytes=1e9), "give one of them"),
])
def test_bad_deployments_raise_one_clear_error(kwargs, needle):
    with pytest.raises(SpecError, match=needle):
        deployment(**kwargs)


@pytest.mark.parametrize("batch, context", [(-1, 100), (1, 0), (1, float("nan")), (1.5, 100), (1, float("inf"))])
def test_bad_loads_raise(batch, context):
    with pytest.raises(SpecError):
        DecodeLoad.equal(batch, context)
