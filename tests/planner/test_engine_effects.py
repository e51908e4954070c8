"""Engine effects the step model declares, each pinned with its arithmetic written out: what TP
replicates (DSA's indexer weights and work, the fused q_a/kv_a projection), the decode kernels'
head tiles (padding at TP8 for 128- and 64-head models), top-k as a per-layer latency, and the
collectives and KV of SPLASH's CP and vLLM's DCP."""

import numpy as np
import pytest

import planner
from planner.load import DecodeLoad
from planner.models.attention.dsa import TOPK_AT_16K_S, TOPK_AT_64K_S
from planner.models.attention.kernels import decode_kernel, gpu_arch
from tests.planner.factories import deployment

V32_LAYERS, GLM5_LAYERS = 61, 78
US = 1e-6


def topk_s(tokens: float) -> float:
    """The SGLang fast_topk line: 16 µs at 16K, 38 µs at 64K, linear between (and beyond)."""
    return 16.0 * US + (tokens - 16384) * 22.0 * US / 49152


def test_topk_line_goes_through_sglangs_h200_medians():
    att = planner.load_model("deepseek-v3.2").attention
    got = att.topk_latency_s(np.array([2048.0, 4096.0, 16384.0, 65536.0]))
    # rows of ≤ top-k scores take the trivial path
    assert got[0] == 0.0
    assert got[1] == pytest.approx(topk_s(4096))  # 10.5 µs
    assert got[2] == pytest.approx(16.0 * US) and TOPK_AT_16K_S == pytest.approx(16.0 * US)
    assert got[3] == pytest.approx(38.0 * US) and TOPK_AT_64K_S == pytest.approx(38.0 * US)


@pytest.mark.parametrize("attn", ["tp", "dp", "dop"])
def test_topk_is_a_per_layer_latency_that_no_layout_divides(attn):
    # 16 requests at 64K on 8 ranks: 16 rows on a TP rank, 2 on a DP owner — the same 38 µs per layer
    c = planner.step_cost(deployment(attn=attn, gpus=8), DecodeLoad.equal(16, 65536))
    assert c.components["latency_s"]["topk"][0] == pytest.approx(V32_LAYERS * 38.0 * US)  # 2.318 ms
    one = planner.step_cost(deployment(attn=attn, gpus=8), DecodeLoad.equal(1, 65536))
    assert one.fixed_latency_s[0] == pytest.approx(c.fixed_latency_s[0])  # flat in batch
    # it is time on the compute resource, on top of the FLOPs
    flops_s = sum(v / planner.Pricing.datasheet(planner.load_hardware("h200")).flops_per_s[d]
                  for d, v in c.flops_by_dtype.items())
    assert c.times.compute_s[0] == pytest.approx(flops_s[0] + c.fixed_latency_s[0])


@pytest.mark.parametrize("attn", ["cp", "dcp"])
def test_token_split_indexer_runs_a_local_and_a_merge_topk(attn):
    c = planner.step_cost(deployment(attn=attn, gpus=8), DecodeLoad.equal(16, 65536))
    # local top-k over 65536/8 = 8192 keys (12.33 µs), merge over min(65536, 8·2048) = 16384 candidates (16 µs)
    assert c.components["latency_s"]["topk"][0] == pytest.approx(V32_LAYERS * (topk_s(8192) + topk_s(16384)))
    # below top-k nothing is selected: no latency at all
    short = planner.step_cost(deployment(attn=attn, gpus=8), DecodeLoad.equal(16, 2048))
    assert short.fixed_latency_s[0] == 0.0


def test_indexer_bytes_and_flops_per_rank_tp_vs_dp_vs_dcp():
    b, l, t = 16, 65536, 8
    key_bytes, flops_per_key = 128 + 4, 2 * 64 * 128  # fp8 key + fp32 scale; 2 · index heads · index dim
    tp = planner.step_cost(deployment(attn="tp", gpus=t), DecodeLoad.equal(b, l))
    dp = planner.step_cost(deployment(attn="dp", gpus=t), DecodeLoad.equal(b, l))
    dcp = planner.step_cost(deployment(attn="dcp", gpus=t), DecodeLoad.equal(b, l))
    # TP: every rank scores every cached token of every request (the indexer is replicated)
    assert tp.components["hbm_bytes"]["indexer_read"][0] == b * l * key_bytes * V32_LAYERS  # 8.44 GB
    assert tp.components["flops"]["indexer"][0] == b * l * flops_per_key * V32_LAYERS  # 1.05 TFLOP
    # DP: the owner of ⌈16/8⌉ = 2 requests scores those
    assert dp.components["hbm_bytes"]["indexer_read"][0] == 2 * l * key_bytes * V32_LAYERS
    assert dp.components["flops"]["indexer"][0] == 2 * l * flops_per_key * V32_LAYERS
    # DCP: every rank scores its 1/8 of every request's keys
    assert dcp.components["hbm_bytes"]["indexer_read"][0] == pytest.approx(b * l * key_bytes * V32_LAYERS / t)
    assert dcp.components["flops"]["indexer"][0] == pytest.approx(b * l * flops_per_key * V32_LAYERS / t)
    # ... and TP's indexer weights are whole on every rank: wq_b 1536·64·128 + wk 7168·128 + weights_proj 7168·64
    indexer_params = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64
    assert tp.components["hbm_bytes"]["indexer_weights"][0] == indexer_params * V32_LAYERS  # fp8: 1 B/param
    assert dcp.components["hbm_bytes"]["indexer_weights"][0] == indexer_params * V32_LAYERS


def test_tp_keeps_the_fused_a_projection_whole_and_projects_every_token_with_it():
    c = planner.step_cost(deployment(attn="tp", gpus=8), DecodeLoad.equal(4, 4096))
    qkv_a = 7168 * (1536 + 512 + 64)  # q_a + kv_a (latent + rope key)
    assert c.components["hbm_bytes"]["attention_qkv_a_weights"][0] == qkv_a * V32_LAYERS
    assert c.components["flops"]["attention_qkv_a_proj"][0] == 2 * 4 * qkv_a * V32_LAYERS


def _padding_ratio(model, hardware, attn, **kw):
    c = planner.step_cost(deployment(model=model, hardware=hardware, attn=attn, gpus=8, **kw), DecodeLoad.equal(16, 4096))
    fl = c.components["flops"]
    return fl["head_padding"][0] / fl["attention_core"][0]


def test_head_padding_at_tp8_for_128_and_64_head_models():
    # DeepSeek-V3.2 (128 heads) at TP8: 16 heads per rank in FA3's 64-row tile: 48 idle rows, 3× the real work
    assert _padding_ratio("deepseek-v3.2", "h200", "tp") == pytest.approx((64 - 16) / 16)
    # GLM-5 (64 heads) at TP8: 8 heads in 64 rows: 7×
    assert _padding_ratio("glm-5", "h200", "tp") == pytest.approx((64 - 8) / 8)
    # on B200 with the fp8 record, flashmla_kv pads to 64 as well
    assert _padding_ratio("deepseek-v3.2", "b200", "tp") == pytest.approx(3.0)
    assert _padding_ratio("glm-5", "b200", "tp") == pytest.approx(7.0)
    # SGLang's flashmla_sparse pads to 128 on Blackwell: 16 → 128 (7×), 8 → 128 (15×)
    assert _padding_ratio("deepseek-v3.2", "b200", "tp", attention_kernel="flashmla_sparse") == pytest.approx(7.0)
    assert _padding_ratio("glm-5", "b200", "tp", attention_kernel="flashmla_sparse") == pytest.approx(15.0)
    # whole heads fill whole tiles: DP-attention (128 or 64 heads per query) wastes nothing
    assert _padding_ratio("deepseek-v3.2", "h200", "dp") == 0.0
    assert _padding_ratio("glm-5", "b200", "dp") == 0.0


def test_head_padding_is_declared_per_kernel():
    trit = decode_kernel("triton_executor")
    # the executor's Triton kernel: blocks of the next power of two ≥ heads, 16 to 64
    assert trit.padded_heads(16, "sm90") == 16 and trit.padded_heads(20, "sm90") == 32
    assert trit.padded_heads(128, "sm90") == 128 and trit.padded_heads(1, "sm90") == 16
    kv = decode_kernel("flashmla_kv")
    assert kv.padded_heads(16, "sm100") == 64 and kv.padded_heads(100, "sm100") == 128
    fa3 = decode_kernel("fa3_mla")
    # FA3 folds a request's query tokens into the tile: 2 tokens × 16 heads = 32 rows of 64
    assert fa3.padded_rows(16, 2.0, "sm90") == 64 and fa3.padded_rows(16, 4.0, "sm90") == 64
    assert decode_kernel("flashmla_sparse").padded_rows(16, 2.0, "sm100") == 2 * 128
    with pytest.raises(planner.SpecError, match="attention_kernel"):
        decode_kernel("nope")


def test_gpu_arch_reads_declared_fields_never_the_name():
    assert gpu_arch(planner.load_hardware("h200")) == "sm90" and gpu_arch(planner.load_hardware("b200")) == "sm100"
    assert gpu_arch(planner.load_hardware("h200-calibrated")) == "sm90"
    assert gpu_arch(planner.load_hardware("mi300x")) is None
    h200 = planner.load_hardware("h200")
    # the compute capability decides (SGLang: `device_sm_major >= 10` pads to 128), then `arch`
    assert gpu_arch(h200.model_copy(update={"compute_capability": (10, 0)})) == "sm100"
    assert gpu_arch(h200.model_copy(update={"compute_capability": None, "arch": "blackwell"})) == "sm100"
    # a renamed GPU keeps its generation; a GPU named like a Hopper part without fields has none
    assert gpu_arch(h200.model_copy(update={"name": "my-gpu"})) == "sm90"
    assert gpu_arch(h200.model_copy(update={"compute_capability": None, "arch": "unknown"})) is None


def test_a_dense_mla_step_profile_shape_has_no_padding_at_two_ranks():
    # the H200 profiles ran 128 heads on T ≤ 2: 64 heads per TP rank fill FA3's tile exactly
    assert _padding_ratio("deepseek-v3", "h200", "tp") == pytest.approx(3.0)  # T = 8: 16 heads
    c = planner.step_cost(deployment(model="deepseek-v3", attn="tp", gpus=2), DecodeLoad.equal(8, 4096))
    assert c.components["flops"]["head_padding"][0] == 0.0


def test_dcp_collectives_as_vllm_runs_them():
    b, t, h, L = 16, 8, 128, V32_LAYERS
    c = planner.step_cost(deployment(attn="dcp", gpus=t), DecodeLoad.equal(b, 65536))
    net = c.components["network_bytes"]
    ag = (t - 1) / t  # all-gather / reduce-scatter link share of the full tensor
    # absorbed queries [B, H/T, 576] bf16 from every rank: the full tensor is B · 128 · 576 · 2
    assert net["dcp_query_allgather"][0] == pytest.approx(ag * b * h * 576 * 2 * L)
    # every rank's fp32 LSE for all 128 heads, gathered: 8 · B · 128 · 4
    assert net["dcp_lse_allgather"][0] == pytest.approx(ag * t * b * h * 4 * L)
    # the corrected outputs [B, 128, 512] bf16 reduce-scattered back to each rank's 16 heads
    assert net["dcp_output_reduce_scatter"][0] == pytest.approx(ag * b * h * 512 * 2 * L)
    # local top-k candidates, (score, index) as two fp32, [B, 2048] per rank, gathered
    assert net["dcp_topk_allgather"][0] == pytest.approx(ag * t * b * 2048 * 8 * L)
    # row-parallel o_proj: one all-reduce of B × 7168 bf16, 2·(T−1)/T
    assert net["attn_allreduce"][0] == pytest.approx(2 * ag * b * 7168 * 2 * L)
    # 5 attention collectives + 1 MLP all-reduce per layer + the logits gather
    assert c.network_messages[0] == 5 * L + L + 1


def test_dcp_holds_kv_once_interleaved_by_token_and_attends_with_all_heads():
    c = planner.step_cost(deployment(attn="dcp", gpus=8), DecodeLoad.equal(2, 65536 + 8))
    # ⌈65544/8⌉ = 8193 tokens per rank, rounded up to 129 pages of 64 (bf16 record 1152 + indexer 132 B)
    assert c.kv_resident_bytes[0] == 2 * 129 * 64 * (1152 + 132) * V32_LAYERS
    # all 128 heads over 1/8 of each request's top-2048: 2 · 128 · 2176 · 2048 / 8 FLOPs per layer, no padding
    assert c.components["flops"]["attention_core"][0] == pytest.approx(2 * 128 * 2176 * 2048 / 8 * V32_LAYERS)
    assert c.components["flops"]["head_padding"][0] == 0.0
    # weights sharded like TP
    tp = planner.step_cost(deployment(attn="tp", gpus=8), DecodeLoad.equal(2, 65536))
    assert c.components["hbm_bytes"]["attention_weights"][0] == tp.components["hbm_bytes"]["attention_weights"][0]


def test_verify_steps_run_k_plus_1_queries_per_request_over_one_kv_read():
    dep = deployment(attn="dp", gpus=8)
    one = planner.step_cost(dep, DecodeLoad.equal(8, 4096))
    three = planner.step_cost(dep, DecodeLoad.equal(8, 4096), query_tokens=3.0)
    hb1, hb3 = one.components["hbm_bytes"], three.components["hbm_bytes"]
    assert hb3["kv_read"][0] == hb1["kv_read"][0] and hb3["indexer_read"][0] == hb1["indexer_read"][0]
    fl1, fl3 = one.components["flops"], three.components["flops"]
    assert fl3["attention_core"][0] == pytest.approx(3 * fl1["attention_core"][0])
    assert fl3["attention_proj"][0] == pytest.approx(3 * fl1["attention_proj"][0])
    assert hb3["kv_write"][0] == pytest.approx(3 * hb1["kv_write"][0])
    with pytest.raises(planner.SpecError, match="query tokens"):
        planner.step_cost(dep, DecodeLoad.equal(8, 4096), query_tokens=0.5)


def test_attention_layouts_are_the_registry():
    from planner.layouts.base import attention_layouts

    assert set(planner.ATTN_LAYOUTS) == set(attention_layouts())


def test_effect_times_at_the_datasheet_rates():
    from planner.effects import effect_times_s

    dep = deployment(attn="tp", gpus=8)
    c = planner.step_cost(dep, DecodeLoad.equal(16, 65536))
    e = effect_times_s(c, planner.Pricing.datasheet(dep.hardware))
    hbm, bf16 = 4.8e12, 989e12
    assert e["indexer"][0] == pytest.approx(16 * 65536 * 132 * V32_LAYERS / hbm + 16 * 65536 * 2 * 64 * 128 * V32_LAYERS / bf16)
    assert e["topk"][0] == pytest.approx(V32_LAYERS * 38.0 * US)
    unsharded = 7168 * (1536 + 576) + 1536 * 64 * 128 + 7168 * 128 + 7168 * 64  # q_a/kv_a + indexer, fp8
    assert e["unsharded_weights"][0] == pytest.approx(unsharded * V32_LAYERS / hbm)
    assert e["head_padding"][0] == pytest.approx(c.components["flops"]["head_padding"][0] / bf16)
    dense = planner.step_cost(deployment(model="llama-3.1-70b", attn="tp", gpus=8), DecodeLoad.equal(4, 4096))
    assert all(v[0] == 0.0 for v in effect_times_s(dense, planner.Pricing.datasheet(dep.hardware)).values())


def test_compare_components_table(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as ok:
        main(["compare", "--model", "glm-5", "--hardware", "b200", "--gpus", "8", "--batch", "16", "--context", "16k",
              "--components"])
    assert ok.value.code == 0
    out = capsys.readouterr().out
    assert "engine effects per layout" in out and "head_padding" in out and "flashmla_kv" in out
