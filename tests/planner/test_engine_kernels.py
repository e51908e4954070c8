"""The engine as a dimension of the step model (issue 26, planner/engines/kernels.py): each engine's
kernel choices, pinned to the engine code they are read from, and the arithmetic of MoE token
movement under EP and of the thin TP-sharded expert GEMM.

Sources (cited in the engine modules next to the facts):
- SGLang: python/sglang/srt/server_args.py (moe_a2a_backend "none", deepep_mode "auto",
  `_generate_cuda_graph_batch_sizes`), layers/dp_attention.py (`_dp_gather`: MAX_LEN all-gather in
  CUDA graphs, SUM_LEN all-reduce for extend batches; `dp_reduce_scatter_tensor`);
- vLLM: vllm/config/parallel.py (all2all_backend "allgather_reducescatter"),
  vllm/distributed/device_communicators/all2all.py AgRsAll2AllManager, vllm/config/vllm.py
  `_set_cudagraph_sizes`, vllm/platforms/cuda.py `_get_backend_priorities`;
- TensorRT-LLM: tensorrt_llm/_torch/modules/fused_moe/communication/communication_factory.py
  (AllGatherReduceScatter unless MNNVL or DeepEP is enabled), tensorrt_llm/llmapi/llm_args.py
  CudaGraphConfig (enable_padding False);
- DeepEP (deepseek-ai/DeepEP): low-latency kernels send one FP8 copy per selected expert and get
  BF16 back; normal kernels one copy per destination rank after a layout notification.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner.engines.kernels import (DEFAULT_STEP_OVERHEAD_S, FP8_WITH_SCALES_BYTES, AllGatherReduceScatter,
                                     AllReduceGather, DeepEPLowLatency, DeepEPNormal, expected_ranks_per_token)
from planner.layouts.base import ShareInputs, link_bytes_factor
from planner.models.mlp.moe import MoE

H = 7168  # DeepSeek-V3 hidden size


def dep(engine="sglang", attn="dp", moe="ep", hw="h200", model="deepseek-v3", **kw):
    return planner.make_deployment(planner.load_model(model), planner.load_hardware(hw), attn=attn, moe=moe, gpus=8,
                                   engine=engine, **kw)


def inputs(d, batch, prefill=0.0):
    load = planner.DecodeLoad.equal(np.array([float(batch)]), np.array([4096.0]))
    return ShareInputs(d.model, d.ranks, load, np.array([float(prefill)]), d.kv_dtype, d.page_tokens,
                       owner_groups=d.placement.owner_groups)


# --- each engine's kernel choices ------------------------------------------------------------

def test_sglang_default_ep_gathers_and_scatters_and_deepep_is_opt_in():
    k = dep("sglang").kernels
    assert isinstance(k.moe_decode, AllGatherReduceScatter) and k.moe_decode.pad_to_max  # MAX_LEN in CUDA graphs
    assert isinstance(k.moe_prefill, AllReduceGather)  # SUM_LEN for extend batches
    from planner.engines import engines

    a2a = engines()["sglang"].kernels(dep("sglang"), moe_a2a_backend="deepep")
    assert isinstance(a2a.moe_decode, DeepEPLowLatency) and isinstance(a2a.moe_prefill, DeepEPNormal)
    assert k.moe_gemm.kernel == "fused_moe_triton" and k.step_overhead_s == DEFAULT_STEP_OVERHEAD_S


def test_sglang_capture_sizes_are_its_list_up_to_cuda_graph_max_bs():
    g = dep("sglang").kernels.graphs  # H200 at TP 8: cuda_graph_max_bs 512
    want = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + [512]
    assert list(g.sizes) == want and g.pads
    assert g.padded(np.array([3.0, 13.0, 257.0, 600.0, 0.0])).tolist() == [4.0, 16.0, 272.0, 600.0, 0.0]


def test_vllm_allgather_reducescatter_graphs_and_attention_backends():
    k = dep("vllm").kernels
    assert isinstance(k.moe_decode, AllGatherReduceScatter) and k.moe_decode.routes_in_dispatch
    assert not k.moe_decode.pad_to_max and k.moe_prefill is k.moe_decode
    # max_num_seqs 1024 on a ≥ 70 GiB GPU → max capture size min(2 · 1024, 512)
    assert list(k.graphs.sizes) == [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16)) and k.graphs.pads
    mla = planner.load_model("deepseek-v3").attention
    assert k.backend_for(mla).name == "FLASH_ATTN_MLA" and k.backend_for(mla).decode_kernel == "fa3_mla"
    assert dep("vllm", hw="b200").kernels.backend_for(mla).name == "FLASHINFER_MLA"


def test_trtllm_allgather_reducescatter_and_unpadded_graphs():
    k = dep("trtllm").kernels
    assert isinstance(k.moe_decode, AllGatherReduceScatter) and not k.moe_decode.pad_to_max
    assert list(k.graphs.sizes) == list(range(1, 32)) + [32, 64, 128] and not k.graphs.pads
    assert k.graphs.padded(np.array([33.0])).tolist() == [33.0]  # no padding: an uncaptured batch runs eagerly


def test_narrow_width_constants_are_declared_per_engine_and_generation():
    assert {e: dep(e).kernels.moe_gemm.half_width("sm90") for e in ("sglang", "vllm", "trtllm")} == \
        {"sglang": 240.0, "vllm": 160.0, "trtllm": 330.0}
    assert dep("sglang", hw="b200").kernels.moe_gemm.half_width(dep("sglang", hw="b200").arch) == 420.0


# --- MoE token movement: bytes and messages ----------------------------------------------------

def test_allgather_reducescatter_bytes_and_messages():
    d = dep("vllm")
    mlp = d.model.mlps[-1][0]
    inp = inputs(d, 64)
    c = AllGatherReduceScatter("x", "", routes_in_dispatch=True).collectives(inp, mlp, np.array([8.0]), np.array([1.0]))
    assert [x.kind for x in c] == ["all_gather", "reduce_scatter"]
    # the whole group's 64 tokens × 7168 × 2 B, and each token's 8 (fp32 weight, int32 id) routes in the dispatch
    assert c[0].payload_bytes[0] == 64 * H * 2 + 64 * 8 * 8 and c[1].payload_bytes[0] == 64 * H * 2
    assert all(x.per_step[0] == 1.0 for x in c)  # one launch each per layer


def test_sglang_max_len_pads_every_rank_to_its_cuda_graph_batch():
    d = dep("sglang")
    mlp = d.model.mlps[-1][0]
    inp = inputs(d, 65)
    # 65 requests over 8 DP ranks: the busiest runs 9, padded to the captured 12; all 8 ranks send 12
    padded = d.kernels.graphs.padded(np.ceil(np.array([65.0]) / 8))
    c = d.kernels.moe_decode.collectives(inp, mlp, padded, np.array([1.0]))
    assert padded[0] == 12.0 and c[0].payload_bytes[0] == 12 * 8 * H * 2


def test_sglang_extend_batches_all_reduce_twice():
    d = dep("sglang")
    c = AllReduceGather("x", "").collectives(inputs(d, 0, prefill=4096), d.model.mlps[-1][0], np.array([0.0]),
                                             np.array([1.0]))
    assert [x.kind for x in c] == ["all_reduce", "all_reduce"] and c[0].payload_bytes[0] == 4096 * H * 2


def test_deepep_low_latency_sends_one_fp8_copy_per_selected_expert():
    d = dep("sglang")
    mlp = d.model.mlps[-1][0]
    c = DeepEPLowLatency("x", "").collectives(inputs(d, 64), mlp, np.array([8.0]), np.array([1.0]))
    copies = 64 / 8 * mlp.top_k * H
    assert c[0].payload_bytes[0] == pytest.approx(copies * (1 + 4 / 128)) and c[1].payload_bytes[0] == copies * 2
    assert len(c) == 2 and FP8_WITH_SCALES_BYTES == 1 + 4 / 128


def test_deepep_normal_sends_one_copy_per_destination_rank_after_a_notification():
    # 256 experts, top-8, 8 ranks of 32: a rank holds none of a token's 8 with odds Π (224 − i)/(256 − i)
    miss = np.prod([(224 - i) / (256 - i) for i in range(8)])
    assert expected_ranks_per_token(256, 8, 8) == pytest.approx(8 * (1 - miss))
    d = dep("sglang")
    mlp = d.model.mlps[-1][0]
    c = DeepEPNormal("x", "").collectives(inputs(d, 64), mlp, np.array([8.0]), np.array([1.0]))
    assert [x.name for x in c] == ["ep_normal_notify", "ep_normal_dispatch_a2a", "ep_normal_combine_a2a"]
    assert c[1].payload_bytes[0] == pytest.approx(64 / 8 * 8 * (1 - miss) * H * (1 + 4 / 128))


def test_the_step_prices_the_engine_s_collectives_in_place_of_the_layout_s():
    load = planner.DecodeLoad.equal(64.0, 4096.0)
    ideal = planner.step_cost(dep("vllm", engine_kernels=False), load)
    eng = planner.step_cost(dep("vllm"), load).engine
    moe_layers = sum(n for v, n in planner.load_model("deepseek-v3").mlps if v.is_moe)
    f = link_bytes_factor("all_gather", 8)
    assert eng.network_bytes["moe_allgather_dispatch"][0] == pytest.approx((64 * H * 2 + 64 * 8 * 8) * f * moe_layers)
    assert eng.network_messages["moe_reducescatter_combine"][0] == moe_layers
    assert "ep_dispatch_a2a" in ideal.components["network_bytes"]  # the floors keep the ideal dispatch
    assert ideal.engine.engine == "bare" and not ideal.engine.hbm_bytes


# --- thin expert GEMMs -------------------------------------------------------------------------

def test_a_thin_tp_expert_gemm_streams_at_the_rate_its_width_gets():
    # MiniMax-M2.5's 1,536-wide experts are 192 columns per rank at TP 8: SGLang's Triton fused MoE on
    # Hopper (w½ 240) streams them at 192 / (192 + 240) = 44 % of its rate, 1,536 at 86 %
    g = dep("sglang").kernels.moe_gemm
    assert g.penalty_fraction(1536 / 8, "sm90") == pytest.approx(240 / 192)
    assert 1 / (1 + g.penalty_fraction(192, "sm90")) == pytest.approx(192 / 432)
    assert 1 / (1 + g.penalty_fraction(1536, "sm90")) == pytest.approx(1536 / 1776)


@pytest.mark.parametrize("moe, width", [("tp", 2048 / 8), ("ep", 2048)])
def test_the_narrow_gemm_component_is_the_expert_bytes_times_w_half_over_width(moe, width):
    d = dep("sglang", attn="tp", moe=moe)
    c = planner.step_cost(d, planner.DecodeLoad.equal(16.0, 4096.0))
    mlp, layers = next((v, n) for v, n in d.model.mlps if v.is_moe)
    assert isinstance(mlp, MoE)
    read = mlp.rank_read_params(np.array([16.0]), 8, moe)["experts"][0] * layers * 1.0  # fp8 experts: 1 B
    assert c.engine.hbm_bytes["experts_narrow_gemm"][0] == pytest.approx(read * 240 / width)


def test_cuda_graph_padding_is_the_padded_rows_linear_flops_on_decode_steps_only():
    d = dep("sglang", attn="tp")
    c = planner.step_cost(d, planner.DecodeLoad.equal(np.array([65.0, 64.0]), np.array([4096.0, 4096.0])),
                          prefill_tokens=np.array([0.0, 0.0]))
    lin = sum(c.components["flops"][k] for k in c.components["flops"]
              if k.endswith("_proj") or k == "lm_head" or k in ("experts", "shared_experts", "dense_mlp"))
    assert c.engine.padded_batch.tolist() == [72.0, 64.0]
    assert c.engine.flops["cuda_graph_padding"][0] == pytest.approx(lin[0] * 7 / 65)
    assert c.engine.flops["cuda_graph_padding"][1] == 0.0
    pre = planner.step_cost(d, planner.DecodeLoad.equal(65.0, 4096.0), prefill_tokens=2048.0)
    assert pre.engine.flops["cuda_graph_padding"][0] == 0.0  # a step with a chunk is not a captured decode batch


def test_engine_terms_stay_out_of_the_floors():
    load = planner.DecodeLoad.equal(65.0, 4096.0)
    a = planner.step_cost(dep("sglang"), load)
    b = planner.step_cost(dep("sglang", engine_kernels=False), load)
    np.testing.assert_array_equal(a.floor_max_s, b.floor_max_s)
    np.testing.assert_array_equal(a.floor_sum_s, b.floor_sum_s)


def test_a_deployment_names_its_moe_all_to_all_backend():
    from planner.errors import SpecError

    assert isinstance(dep("sglang", moe_a2a="deepep").kernels.moe_decode, DeepEPLowLatency)
    assert isinstance(dep("vllm", moe_a2a="deepep_high_throughput").kernels.moe_decode, DeepEPNormal)
    assert isinstance(dep("vllm", moe_a2a="deepep_low_latency").kernels.moe_prefill, DeepEPLowLatency)
    with pytest.raises(SpecError, match="not one of engine trtllm's"):
        dep("trtllm", moe_a2a="deepep")
    # DeepEP can't serve TP-sharded experts: the step falls back to all-gather / reduce-scatter
    e = planner.step_cost(dep("sglang", moe="tp", moe_a2a="deepep"), planner.DecodeLoad.equal(64.0, 4096.0)).engine
    assert "moe_allgather_dispatch" in e.network_bytes and not any(k.startswith("ep_") for k in e.network_bytes)
