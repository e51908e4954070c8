import numpy as np
import pytest

import planner
from planner.errors import SpecError
from planner.models.attention.base import discover as attention_variants
from planner.models.mlp.base import discover as mlp_variants
from planner.models.mlp.moe import expected_distinct_experts
from tests.planner.factories import GQA_CONFIG, MLA_CONFIG, write_config

# Parameter splits (billions) from reference/models.md, computed from the configs.
REFERENCE_PARAMS_B = {
    "deepseek-v3": {"attention": 11.41, "dense_mlp": 1.19, "shared_experts": 2.55, "routed_experts": 653.91, "embedding": 1.85},
    "deepseek-v3.2": {"attention": 11.41, "indexer": 0.85, "dense_mlp": 1.19, "shared_experts": 2.55,
                      "routed_experts": 653.91, "embedding": 1.85},
    "glm-5": {"attention": 12.87, "indexer": 0.73, "dense_mlp": 0.68, "shared_experts": 2.83, "routed_experts": 724.78,
              "embedding": 1.90},
    "kimi-k2": {"attention": 6.17, "dense_mlp": 0.40, "shared_experts": 2.64, "routed_experts": 1014.69, "embedding": 2.35},
    "qwen3-235b-a22b": {"attention": 6.70, "routed_experts": 227.10, "embedding": 1.24},
    "llama-3.1-70b": {"attention": 12.08, "dense_mlp": 56.37, "embedding": 2.10},
    "gpt-oss-120b": {"attention": 0.96, "routed_experts": 114.70, "embedding": 1.16},
}


@pytest.mark.parametrize("name", sorted(REFERENCE_PARAMS_B))
def test_builtin_cards_match_reference_parameter_splits(name):
    params = planner.load_model(name).weight_params()
    # gpt-oss experts carry biases (gate_up 2·2880 + down 2880 per expert → 128·36·8640 = 0.04 B)
    # that the planner ignores as negligible bytes; every other split matches to rounding.
    tol = 0.045 if name == "gpt-oss-120b" else 0.011
    for comp, billions in REFERENCE_PARAMS_B[name].items():
        assert params[comp] / 1e9 == pytest.approx(billions, abs=tol), comp


def test_mla_per_layer_parameters_golden():
    # DeepSeek dims: q_a 7168·1536 = 11.01M, q_b 1536·128·192 = 37.75M, kv_a 7168·576 = 4.13M,
    # kv_b 512·128·256 = 16.78M, o 128·128·7168 = 117.44M → 187.1M (reference/models.md)
    att = planner.load_model("deepseek-v3").attention
    assert att.weight_params()["attention"] == 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert att.weight_params()["attention"] / 1e6 == pytest.approx(187.1, abs=0.05)
    # DSA indexer: 1536·64·128 + 7168·128 + 7168·64 = 13.96M ≈ 14.0M
    assert planner.load_model("deepseek-v3.2").attention.weight_params()["indexer"] / 1e6 == pytest.approx(14.0, abs=0.05)


@pytest.mark.parametrize("model, kv_dtype, expected", [
    ("deepseek-v3", "bf16", 1152),  # (512 + 64) × 2
    ("deepseek-v3", "fp8", 576),  # (512 + 64) × 1
    ("deepseek-v3.2", "fp8_dsa", 656 + 132),  # 512 fp8 + 4×4 scales + 64×2 rope; indexer 128 + 4
    ("deepseek-v3.2", "bf16", 1152 + 132),
    ("llama-3.1-70b", "bf16", 2 * 8 * 128 * 2),  # K and V × kv_heads × head_dim × 2 B
    ("qwen3-235b-a22b", "fp8", 2 * 4 * 128 * 1),
])
def test_kv_bytes_per_token_per_layer_golden(model, kv_dtype, expected):
    assert planner.load_model(model).attention.kv_bytes_per_token(kv_dtype) == expected


def test_dsa_reads_topk_latents_but_every_indexer_key():
    att = planner.load_model("deepseek-v3.2").attention
    r = att.kv_read_bytes(np.array([1000.0, 100_000.0]), "fp8_dsa")
    assert r["kv"].tolist() == [1000 * 656, 2048 * 656]
    assert r["indexer"].tolist() == [1000 * 132, 100_000 * 132]
    s = att.kv_stored_bytes(np.array([100_000.0]), "fp8_dsa")
    assert s["kv"][0] == 100_000 * 656  # stores every token: sparse lowers bandwidth, not capacity


def test_sliding_window_caps_kv_and_alternating_layers_are_two_groups():
    oss = planner.load_model("gpt-oss-120b")
    assert oss.layer_counts()["mixer:sliding"] == 18 and oss.layer_counts()["mixer:gqa"] == 18
    per_tok = 2 * 8 * 64 * 2  # K+V, 8 kv heads, head_dim 64, bf16
    # 18 layers hold 10_000 tokens, 18 hold the 128-token window
    mem = oss.memory_bytes(np.array([10_000.0]), "bf16")
    assert mem["token"][0] == per_tok * 18 * 10_000 and mem["window"][0] == per_tok * 18 * 128


def test_expected_distinct_experts():
    # E(1 − (1 − k/E)^N): one token touches exactly k; many tokens approach E
    assert expected_distinct_experts(np.array(1.0), 256, 8) == pytest.approx(8.0)
    assert expected_distinct_experts(np.array(2.0), 256, 8) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 2))
    assert expected_distinct_experts(np.array(10_000.0), 256, 8) == pytest.approx(256.0)
    assert expected_distinct_experts(np.array(0.0), 256, 8) == 0.0


def test_hf_config_by_path_and_directory(tmp_path):
    p = write_config(tmp_path, MLA_CONFIG)
    m = planner.load_model(str(p))
    assert m.attention.kind == "mla" and m.mlp.kind == "moe"
    assert m.layer_counts()["mlp:dense"] == 1 and m.layer_counts()["mlp:moe"] == 3
    assert planner.load_model(str(tmp_path)).name == str(tmp_path)
    g = planner.load_model(str(write_config(tmp_path, GQA_CONFIG, "g.json")))
    assert g.attention.kind == "gqa" and g.attention.num_kv_heads == 4 and g.attention.head_dim == 64


@pytest.mark.parametrize("patch, needle", [
    ({"num_hidden_layers": -2}, "num_hidden_layers"),
    ({"hidden_size": None}, "hidden_size"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"kv_lora_rank": 128.5}, "kv_lora_rank"),
    ({"qk_rope_head_dim": None}, "qk_rope_head_dim"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"moe_layer_freq": 0}, "moe_layer_freq"),
])
def test_bad_config_fields_are_named(tmp_path, patch, needle):
    with pytest.raises(SpecError, match=needle):
        planner.load_model(str(write_config(tmp_path, {**MLA_CONFIG, **patch})))


def test_unmodellable_architectures_are_named(tmp_path):
    mamba = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
             "vocab_size": 50280, "state_size": 16}
    with pytest.raises(SpecError, match="MambaForCausalLM"):
        planner.load_model(str(write_config(tmp_path, mamba, "m.json")))
    linear = {**GQA_CONFIG, "architectures": ["Qwen3NextForCausalLM"],
              "layer_types": ["linear_attention", "full_attention"] * 2}
    with pytest.raises(SpecError, match="linear_attention"):
        planner.load_model(str(write_config(tmp_path, linear, "l.json")))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SpecError, match="malformed JSON"):
        planner.load_model(str(tmp_path / "broken.json"))


def test_unknown_model_lists_builtins():
    with pytest.raises(SpecError, match="deepseek-v3.2"):
        planner.load_model("gpt-7")
    with pytest.raises(SpecError, match="not found"):
        planner.load_model("/no/such/config.json")


def test_registries_find_every_variant_module():
    assert {"gqa", "mla", "dsa", "sliding", "chunked", "block_sparse", "dsv4", "gdn", "kda", "mamba2"} <= set(attention_variants())
    assert {"dense", "moe", "dense+moe"} <= set(mlp_variants())

