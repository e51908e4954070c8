"""Engine memory models: SGLang's default mem_fraction_static and KV pool, vLLM's pool, the usable
bytes per GPU, KV dtype names, and the defaults other code reads. Golden values show their
arithmetic; the engine code each rule comes from is named in planner/engines/*.py."""

import math

import pytest

import planner
from planner.capacity import capacity
from planner.engines import KV_DTYPE_NAMES, engines, resolve_kv_dtype
from planner.engines.sglang import default_mem_fraction_static, graph_and_chunk_defaults, reserved_mem_terms_mib
from planner.errors import SpecError
from planner.step import weights_resident_bytes
from planner.units import GiB, MiB
from tests.planner.factories import HW_YAML, deployment

DSV32_LAYERS = 61
BF16_DSA_RECORD = 1152 + 132  # bf16 latent + rope (576 × 2) + the fp8 indexer key and its scale
FP8_DSA_RECORD = 656 + 132  # 512 fp8 latent + 4 fp32 scales + 64 bf16 rope, + the indexer key
H200_USABLE = 150_109_880_320  # torch total_memory on the lent H200
H200_CONTEXT = 150_109_880_320 - 149_557_477_376  # mem_get_info free right after context creation
H200_SMI_MIB = 143_771


def weights(dep) -> float:
    return sum(weights_resident_bytes(dep).values())


# ---- usable bytes per GPU, with sources -------------------------------------------------------

@pytest.mark.parametrize("name, usable, smi_mib", [
    ("h200", 150_109_880_320, 143_771),  # measured on the lent H200 (torch total_memory, nvidia-smi)
    ("h20", 97_285 * MiB, 97_871),  # torch 97,285 MiB in public kernel sources; nvidia-smi traces (leads)
    ("b200", 182_631 * MiB, 183_359),  # torch 182,631 MiB in public logs; TRT-LLM #10278 nvidia-smi (leads)
    ("h100", 81_089 * MiB, 81_559),  # torch 81,089 MiB (torch 2.7 log); nvidia-smi traces (leads)
    ("mi300x", 196_592 * MiB, 196_592),  # torch 196,592 MiB; SGLang on ROCm reads torch total // MiB
])
def test_usable_bytes_per_gpu_with_sources(name, usable, smi_mib):
    hw = planner.load_hardware(name)
    assert hw.usable_hbm_bytes == usable and hw.smi_total_mib == smi_mib
    assert hw.usable_hbm_bytes != hw.peak.hbm_bytes  # the datasheet figure is kept beside it
    for field in ("memory.usable_hbm_bytes", "memory.smi_total_mib", "memory.context_bytes", "arch"):
        assert hw.sources.get(field), f"{name}: no source for {field}"


def test_undeclared_usable_bytes_fall_back_to_the_datasheet(tmp_path):
    p = tmp_path / "toy.yaml"
    p.write_text(HW_YAML)
    hw = planner.load_hardware(str(p))
    assert hw.usable_hbm_bytes == 80e9 and hw.smi_total_mib == math.floor(80e9 / MiB)
    assert hw.compute_capability is None and hw.arch == "unknown"
    for name in ("gb200", "b300", "mi355x"):  # no torch figure found: the datasheet stands in, said so
        hw = planner.load_hardware(name)
        assert hw.memory.usable_hbm_bytes is None and "datasheet" in hw.sources["memory.usable_hbm_bytes"]


def test_usable_bytes_in_the_wrong_unit_are_refused(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(HW_YAML + "memory:\n  usable_hbm_bytes: 80.0e12\n")
    with pytest.raises(SpecError, match="usable_hbm_bytes"):
        planner.load_hardware(str(p))


# ---- SGLang -----------------------------------------------------------------------------------

def test_sglang_default_fraction_dsv32_8xh200_tp8():
    # server_args.py _handle_gpu_memory_settings, gpu_mem = 143,771 MiB (92,160 ≤ it < 163,840):
    # chunked_prefill_size 8192, cuda_graph_max_bs 512 (tp ≥ 4)
    assert graph_and_chunk_defaults(H200_SMI_MIB, 8) == (8192, 512)
    terms = reserved_mem_terms_mib(H200_SMI_MIB, tp_size=8, dp_size=1, dp_attention=False)
    reserved = 512 + 8192 * 1.5 + 512 * 2 + 8 * 1 / 8 * 1024  # = 512 + 12288 + 1024 + 1024
    assert reserved == 14_848 and sum(terms.values()) == reserved
    # round((143,771 − 14,848) / 143,771, 3) = round(0.896725…, 3)
    assert default_mem_fraction_static(H200_SMI_MIB, reserved) == 0.897
    assert deployment(attn="tp", gpus=8).memory.fraction == 0.897


def test_sglang_pool_dsv32_8xh200_tp8():
    dep = deployment(attn="tp", gpus=8)  # deepseek-v3.2 on h200, bf16 KV (SGLang's DSA default on Hopper)
    p = dep.memory
    total = H200_USABLE - H200_CONTEXT  # total_gpu_memory: free before weights = 149,557,477,376 B
    assert p.total_bytes == total == 149_557_477_376
    rest = 0.897 * total - weights(dep)  # available − total·(1 − mfs), available = total − weights
    cell = BF16_DSA_RECORD * DSV32_LAYERS  # get_cell_size_per_token: 576·2 + 132 per layer
    tokens = math.floor(rest / cell / 64) * 64  # rest // cell, aligned down to 64-token pages
    assert p.kv_pool_tokens == tokens and p.kv_pool_bytes == tokens * cell
    # with today's weights (89,031,573,504 B: 82.92 GiB, the fused q_a/kv_a projection and DSA's
    # indexer whole on every TP rank) that is 576,064 tokens, 42.02 GiB per GPU
    assert p.kv_pool_tokens == 576_064
    assert p.kv_pool_bytes / GiB == pytest.approx(42.02, abs=0.01)
    assert p.feasible and p.reason == ""


def test_sglang_dp_attention_reserve_and_other_gpus():
    # + 3·cuda_graph_max_bs·dp_size and, cuda_graph_max_bs 512 > 300, + 1.5·cuda_graph_max_bs·dp_size
    dp = reserved_mem_terms_mib(H200_SMI_MIB, tp_size=8, dp_size=8, dp_attention=True)
    assert sum(dp.values()) == 14_848 + 512 * 8 * 3 + 512 * 8 * 1.5 == 33_280
    assert deployment(attn="dp", gpus=8).memory.fraction == round((143_771 - 33_280) / 143_771, 3) == 0.769
    assert deployment(attn="tp", gpus=8, hardware="h20").memory.fraction == round((97_871 - 14_848) / 97_871, 3) == 0.848
    # B200 (183,359 MiB ≥ 160 GiB): chunked_prefill 16384, graphs 512 → 512 + 24,576 + 1,024 + 1,024
    assert deployment(attn="tp", gpus=8, hardware="b200").memory.fraction == round((183_359 - 27_136) / 183_359, 3)
    assert deployment(attn="tp", gpus=1, model="deepseek-v3", hardware="b200").memory.fraction == \
        round((183_359 - (512 + 24_576 + 1_024 + 128)) / 183_359, 3)
    # TP16 over two nodes: the parallel-size term doubles (1024·16/8)
    assert reserved_mem_terms_mib(97_871, 16, 1, False)["parallel_size_mib"] == 2048


def test_sglang_fp8_dsa_tokens_come_from_its_profiled_cell():
    # DSATokenToKVPool stores 656 B/layer in fp8 + the 132-B indexer key, and SGLang's current pool
    # configurator (pool_configurator.py _compute_cell_size) divides by that same 788 B (older
    # releases divided by 576 + 132 = 708)
    dep = deployment(attn="tp", gpus=8, hardware="b200")  # Blackwell: SGLang's DSA default is fp8_e4m3
    assert dep.kv_dtype == "fp8_dsa"
    p = dep.memory
    cell, record = (512 + 512 // 128 * 4 + 64 * 2 + 132) * DSV32_LAYERS, FP8_DSA_RECORD * DSV32_LAYERS
    assert cell == record == 788 * DSV32_LAYERS
    rest = p.fraction * p.total_bytes - weights(dep)
    assert p.kv_cell_bytes_per_token == cell and p.kv_bytes_per_token == record
    assert p.kv_pool_tokens == math.floor(rest / cell / 64) * 64 and p.kv_pool_bytes == p.kv_pool_tokens * record


def test_sglang_defaults_come_from_fields_not_names(tmp_path):
    hopper, blackwell = planner.load_hardware("h200"), planner.load_hardware("b200")
    m = planner.load_model("deepseek-v3.2")
    sg = engines()["sglang"]
    assert (sg.default_kv_dtype(m, hopper), sg.default_kv_dtype(m, blackwell)) == ("bf16", "fp8_dsa")
    assert sg.default_page_tokens(m, hopper) == 64 and sg.default_page_tokens(m, planner.load_hardware("mi300x")) == 1
    assert sg.default_page_tokens(planner.load_model("llama-3.1-70b"), hopper) == 1
    # a user GPU named like nothing we know, declared Blackwell by its compute capability
    p = tmp_path / "mystery.yaml"
    p.write_text(HW_YAML.replace("name: toy", "name: mystery\ncompute_capability: [10, 0]\narch: blackwell"))
    assert sg.default_kv_dtype(m, planner.load_hardware(str(p))) == "fp8_dsa"
    assert sg.default_kv_dtype(planner.load_model("glm-5"), planner.load_hardware(str(p))) == "fp8_dsa"


def test_sglang_chunked_prefill_tokens_split_under_dp_attention():
    assert engines()["sglang"].chunked_prefill_tokens(deployment(attn="tp", gpus=8)) == 8192
    # _handle_data_parallelism: chunked_prefill_size //= dp_size
    assert engines()["sglang"].chunked_prefill_tokens(deployment(attn="dp", gpus=8)) == 8192 // 8


def test_explicit_overrides():
    given = deployment(attn="tp", gpus=8, mem_fraction=0.8)
    assert given.memory.fraction == 0.8 and given.memory.fraction_source == "--mem-fraction"
    res = deployment(attn="tp", gpus=8, reserve_bytes=20 * GiB)  # replaces SGLang's reserved_mem estimate
    assert res.memory.fraction == round((143_771 - 20 * 1024) / 143_771, 3)
    with pytest.raises(SpecError, match="give one of them"):
        deployment(attn="tp", gpus=8, mem_fraction=0.8, reserve_bytes=GiB)


# ---- vLLM -------------------------------------------------------------------------------------

def test_vllm_pool_dsv32_8xh200_tp8():
    dep = deployment(attn="tp", gpus=8, engine="vllm")
    p = dep.memory
    assert dep.page_tokens == 64  # FlashMLASparse forces block_size 64
    assert p.fraction == 0.9 and p.total_bytes == H200_USABLE  # requested = total_memory × 0.9
    # profile run: max_num_batched_tokens 8192 (≥ 70 GiB, not A100) through the model, the
    # fused-MoE workspace top_k·(3·I + hidden) = 8·(3·2048 + 7168) per token beside 4 hidden
    # tensors, bf16; the sampler over min(1024, 8192) rows of fp32 logits and probabilities
    forward = 8192 * 2 * (4 * 7168 + 8 * (3 * 2048 + 7168))
    sampler = 1024 * 129_280 * 4 * 2
    assert (forward, sampler) == (2_214_592_512, 1_059_061_760)
    non_torch = 3.58 * GiB  # vLLM PR #10511 log at TP2 (NCCL and custom all-reduce buffers)
    available = 0.9 * H200_USABLE - weights(dep) - (forward + sampler) - non_torch
    cell = BF16_DSA_RECORD * DSV32_LAYERS
    blocks = math.floor(available / cell / 64) - 1  # get_num_blocks, minus BlockPool's null block
    assert p.kv_pool_tokens == blocks * 64 and p.kv_pool_bytes == blocks * 64 * cell
    # with today's weights: 497,216 tokens, 36.27 GiB per GPU (SGLang: 42.02)
    assert p.kv_pool_tokens == 497_216
    assert p.kv_pool_bytes / GiB == pytest.approx(36.27, abs=0.01)
    assert p.kv_pool_bytes < deployment(attn="tp", gpus=8).memory.kv_pool_bytes


def test_vllm_defaults():
    v = engines()["vllm"]
    m, h200 = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    assert v.default_kv_dtype(m, planner.load_hardware("b200")) == "bf16"  # auto = model dtype (current code)
    assert v.default_page_tokens(planner.load_model("llama-3.1-70b"), h200) == 16
    assert v.chunked_prefill_tokens(deployment(attn="tp", gpus=8, engine="vllm")) == 8192
    assert v.chunked_prefill_tokens(deployment(attn="tp", gpus=8, engine="vllm", hardware="h20")) == 8192
    # every fp8 spelling becomes fp8_ds_mla on V3.2 (DeepseekV32ForCausalLM.verify_and_update_config)
    assert deployment(attn="tp", gpus=8, engine="vllm", kv_dtype="fp8").kv_dtype == "fp8_dsa"


# ---- KV dtype names ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, model, want", [
    ("fp8", "deepseek-v3.2", "fp8_dsa"), ("fp8_e4m3", "deepseek-v3.2", "fp8_dsa"), ("fp8_ds_mla", "glm-5", "fp8_dsa"),
    ("fp8_dsa", "deepseek-v3.2", "fp8_dsa"), ("bfloat16", "deepseek-v3.2", "bf16"), ("fp8", "deepseek-v3", "fp8"),
    ("fp8_e5m2", "llama-3.1-70b", "fp8"), ("auto", "deepseek-v3", "bf16"), (None, "deepseek-v3.2", "bf16"),
])
def test_kv_dtype_names_as_engines_spell_them(name, model, want):
    m = planner.load_model(model)
    assert resolve_kv_dtype(m, name, engines()["sglang"], planner.load_hardware("h200")) == want


def test_kv_dtype_names_refused_with_the_field():
    m = planner.load_model("deepseek-v3")
    with pytest.raises(SpecError, match="fp8_ds_mla"):
        resolve_kv_dtype(m, "fp8_ds_mla", engines()["sglang"], planner.load_hardware("h200"))
    with pytest.raises(SpecError, match="kv_dtype='int4'"):
        resolve_kv_dtype(m, "int4", engines()["sglang"], planner.load_hardware("h200"))
    assert {"auto", "fp8", "fp8_e4m3", "fp8_ds_mla", "bf16"} <= set(KV_DTYPE_NAMES)


def test_fp8_on_dsa_stores_the_656_plus_132_record():
    c = capacity(deployment(attn="dp", gpus=8, kv_dtype="fp8"), [32768])
    assert c.kv_bytes_per_token == FP8_DSA_RECORD * DSV32_LAYERS


# ---- infeasible is an answer ------------------------------------------------------------------

def test_weights_that_dont_fit_are_an_answer_not_a_negative_pool():
    dep = deployment(attn="tp", gpus=4)  # DeepSeek-V3.2 on 4 × H200: ~171 GB of weights per GPU
    p = dep.memory
    assert not p.feasible and p.kv_pool_bytes == 0 and p.kv_budget_bytes < 0
    assert "weights" in p.reason and "GiB" in p.reason
    c = planner.step_cost(dep, planner.DecodeLoad.equal(32, 32768))
    assert c.kv_pool_bytes == 0 and not c.feasible[0] and math.isnan(c.decode_tokens_per_s_at_max[0])
    assert capacity(dep, [32768]).max_concurrency[0] == 0


def test_a_reserve_that_leaves_no_room_is_an_answer_and_one_past_the_memory_a_refusal():
    p = deployment(attn="tp", gpus=8, reserve_bytes=130 * GiB).memory  # the weights no longer fit: an answer
    assert not p.feasible and 0 < p.fraction < 0.1 and p.reason
    # issue 31: a reserve of the whole memory or more is no deployment at all (it ended as exit 70)
    with pytest.raises(SpecError, match=r"reserve=200 GiB per GPU is not below the 139.29 GiB a h200 has"):
        deployment(attn="tp", gpus=8, reserve_bytes=200 * GiB)


def test_whole_pages_never_go_negative():
    from planner.engines.base import whole_page_tokens

    assert whole_page_tokens(64 * 10 * 3.5, 10, 64) == 192  # ⌊3.5 pages⌋ = 3 pages of 64 tokens
    assert whole_page_tokens(64 * 10 * 3.5, 10, 64, spare_pages=1) == 128  # vLLM's null block
    assert whole_page_tokens(10 * 10, 10, 64, spare_pages=1) == 0  # less than a page, minus one: none, not −64
    assert whole_page_tokens(-1e9, 10, 64) == 0


def test_sglang_pool_agrees_with_sglangs_own_log():
    """sgl-project/sglang PR #11309 logs DeepSeek-V3.2-Exp on 8 × B200, `--tp 8 --dp 8
    --enable-dp-attention`, default fraction: "KV Cache is allocated. #tokens: 975424, KV size:
    43.67 GB" (GiB: 975,424 × 61 × (656 + 132) B). This model, from the B200's nvidia-smi and torch
    totals (leads), SGLang's DP-attention reserve (mem_fraction_static 0.751) and its fp8 cell,
    lands within 0.5 % of it."""
    p = deployment(attn="dp", gpus=8, hardware="b200").memory
    assert p.fraction == round((183_359 - (27_136 + 512 * 8 * 3 + 512 * 8 * 1.5)) / 183_359, 3) == 0.751
    # that release divided the same budget by 708 B per layer (get_cell_size_per_token); today's pool
    # configurator divides by the 788 B it stores: the budget agrees, the tokens are 708/788 of the log's
    assert p.kv_pool_tokens * 788 / 708 == pytest.approx(975_424, rel=0.005)
    assert p.kv_pool_bytes / GiB == pytest.approx(975_424 * 61 * 708 / GiB, rel=0.005)
