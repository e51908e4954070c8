"""Cross-field sanity of Hugging Face configs (planner.models.loader.check_config_fields and the
MoE's own rules): a wrong type or range is one SpecError line before any formula sees it; a
per-layer `moe_layer_freq` mask is read as SGLang reads it; no public config crashes the loader."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.models.loader import CARDS_DIR, load_model, model_from_hf_config
from planner.models.mlp.moe import MoE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
BASE = json.loads((CARDS_DIR / "deepseek-v3.json").read_text())


def cfg(**kw):
    d = copy.deepcopy(BASE)
    d.update(kw)
    return d


@pytest.mark.parametrize("change, message", [
    (dict(first_k_dense_replace=1000), "1000 dense layers (first_k_dense_replace + mlp_only_layers) exceed num_hidden_layers=61"),
    (dict(num_experts_per_tok=512), "num_experts_per_tok=512 exceeds the 256 routed experts"),
    (dict(num_hidden_layers="61"), "field 'num_hidden_layers'='61' must be an integer, not str"),
    (dict(first_k_dense_replace="x"), "field 'first_k_dense_replace'='x' must be an integer, not str"),
    (dict(n_shared_experts=[1]), "field 'n_shared_experts'=[1] must be an integer, not list"),
    (dict(num_attention_heads=True), "field 'num_attention_heads'=True must be an integer, not bool"),
    (dict(kv_lora_rank=512.5), "field 'kv_lora_rank'=512.5 must be a whole number"),
    (dict(hidden_size=2**31), "field 'hidden_size'=2147483648 must be ≤ 2.14748e+09"),
    (dict(first_k_dense_replace=-1), "field 'first_k_dense_replace'=-1 must be ≥ 0"),
    (dict(num_key_value_heads=256), "num_key_value_heads=256 exceeds num_attention_heads=128"),
    (dict(moe_layer_freq=[0, 1]), "field 'moe_layer_freq' has 2 entries for num_hidden_layers=61"),
    (dict(moe_layer_freq=[2] * 61), "field 'moe_layer_freq' as a list must hold 0 (dense) or 1 (MoE) per layer"),
    (dict(mlp_only_layers=[61]), "field 'mlp_only_layers' names a layer outside 0..60"),
    (dict(layer_types=[1]), "field 'layer_types' must be a list of strings"),
    (dict(quantization_config=["fp8"]), "field 'quantization_config' must be an object"),
    (dict(hidden_size=float("inf")), "field 'hidden_size'=inf must be a finite number"),
])
def test_a_bad_field_is_one_line_naming_it(change, message):
    with pytest.raises(SpecError) as exc:
        model_from_hf_config(cfg(**change), "c.json")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_the_limits_themselves_load():
    assert "mlp:moe" not in model_from_hf_config(cfg(first_k_dense_replace=61), "c.json").layer_counts()  # all dense: allowed
    assert model_from_hf_config(cfg(num_experts_per_tok=256), "c.json").mlp.top_k == 256  # every expert
    assert model_from_hf_config(cfg(shared_expert_intermediate_size=0), "c.json")  # Qwen3-Coder: no shared expert


def test_the_moe_refuses_out_of_domain_sizes_however_it_is_built():
    with pytest.raises(SpecError, match="num_experts_per_tok=9 must be between 1 and the 8 routed experts"):
        MoE(hidden_size=8, num_experts=8, top_k=9)
    with pytest.raises(SpecError, match="MoE sizes must be positive"):
        MoE(hidden_size=8, num_experts=8, top_k=2, expert_intermediate_size=0)


def test_a_per_layer_moe_layer_freq_mask_counts_its_zeros_as_dense_layers():
    # NOTE: SGLang python/sglang/srt/models/minimax_m3.py: is_layer_sparse = moe_layer_freq[layer_id] != 0
    mimo = load_model(str(FIXTURES / "XiaomiMiMo--MiMo-V2-Flash" / "config.json"))
    assert (mimo.layer_counts()["mlp:dense"], mimo.layer_counts()["mlp:moe"]) == (1, 47)  # mask [0, 1 × 47]
    # 309B total / 15B active, as Xiaomi and the SGLang team publish for MiMo-V2-Flash; with each
    # layer's own geometry (9 full layers 89.1 M, 39 sliding layers 94.4 M: 4 / 8 KV heads, K 192,
    # V 128) the sum is 308.7 B (the MTP layers are not counted)
    s = mimo.summary()
    assert s["total_params_b"] == pytest.approx(308.7, abs=0.1) and s["active_params_per_token_b"] == pytest.approx(14.8, abs=0.1)
    m3 = load_model(str(FIXTURES / "MiniMaxAI--MiniMax-M3" / "config.json"))
    assert (m3.layer_counts()["mlp:dense"], m3.layer_counts()["mlp:moe"]) == (3, 57)  # mask [0, 0, 0, 1 × 57]; not 3 + 3 with first_k_dense_replace
    # the routed experts: 57 MoE layers × 128 experts × 3 × 6144 × 3072 = 413.1e9
    assert m3.summary()["params_b"]["routed_experts"] == pytest.approx(57 * 128 * 3 * 6144 * 3072 / 1e9, abs=0.01)


def test_no_public_config_crashes_the_loader():
    """The 88 configs in tests/fixtures: each loads or is refused in one SpecError line."""
    loaded = refused = 0
    for path in sorted(FIXTURES.glob("*/config.json")):
        try:
            load_model(str(path))
            loaded += 1
        except SpecError as exc:
            assert "\n" not in str(exc)
            refused += 1
    assert (loaded, refused) == (88, 0)
