"""Weight dtypes per layer part from the quantization files (planner.models.quant): exclusions,
MIXED_PRECISION module lists, expert-only dtypes, hf_quant_config.json beside config.json, and a
--weight-dtype that overrides them all."""

from __future__ import annotations

from pathlib import Path

import pytest

import planner
from planner.step import weights_resident_bytes
from planner.units import WEIGHT_BYTES_PER_PARAM

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
FP4 = WEIGHT_BYTES_PER_PARAM["fp4"]  # 0.5 + 1/16: one 8-bit scale per 16 values


def _parts(model):
    """{part: {dtypes}} over the model's layer groups."""
    out = {}
    for g in model.layers:
        for part, dt in g.weight_dtypes:
            out.setdefault(part, set()).add(dt)
    return out


@pytest.mark.parametrize("model, expect", [
    # compressed-tensors MXFP4 with `re:` ignores: attention, shared experts and dense MLPs stay bf16
    ("kimi-k3", {"mixer": {"bf16"}, "routed_experts": {"fp4"}, "shared_experts": {"bf16"}, "dense_mlp": {"bf16"}}),
    # block-FP8 checkpoint with expert_dtype fp4 (MXFP4 experts)
    ("deepseek-v4-flash", {"mixer": {"fp8"}, "routed_experts": {"fp4"}, "shared_experts": {"fp8"}}),
    # gpt-oss: MXFP4 experts, modules_to_not_convert model.layers.*.self_attn
    ("gpt-oss-120b", {"mixer": {"bf16"}, "routed_experts": {"fp4"}}),
    ("deepseek-v3.2", {"mixer": {"fp8"}, "routed_experts": {"fp8"}, "dense_mlp": {"fp8"}}),
    (str(FIXTURES / "nvidia--Qwen3.5-397B-A17B-NVFP4"),  # ModelOpt NVFP4: layers.N.linear_attn*, self_attn* excluded
     {"mixer": {"bf16"}, "routed_experts": {"fp4"}, "shared_experts": {"bf16"}}),
    (str(FIXTURES / "nvidia--Qwen3.6-27B-NVFP4"),  # MIXED_PRECISION: attention and GDN FP8, MLP W4A16_NVFP4
     {"mixer": {"fp8"}, "dense_mlp": {"fp4"}}),
    (str(FIXTURES / "nvidia--DeepSeek-V4-Flash-NVFP4"),  # NVFP4 experts over the FP8 model
     {"mixer": {"fp8"}, "routed_experts": {"fp4"}, "shared_experts": {"fp8"}}),
])
def test_each_part_gets_the_dtype_its_files_say(model, expect):
    got = _parts(planner.load_model(model))
    for part, dts in expect.items():
        assert got[part] == dts, part


def test_mixed_precision_reads_each_module_and_a_module_it_does_not_list_keeps_the_base():
    from planner.models.quant import weight_quant

    import json
    folder = FIXTURES / "nvidia--Qwen3.6-27B-NVFP4"
    q = weight_quant(json.loads((folder / "config.json").read_text()),
                     json.loads((folder / "hf_quant_config.json").read_text()))
    assert q.prefix == "model.language_model.layers"  # from the module names, not from 'mtp.layers.0*'
    assert (q.dtype(3, "mixer"), q.dtype(0, "mixer"), q.dtype(0, "dense_mlp")) == ("fp8", "fp8", "fp4")
    assert q.dtype(500, "mixer") == "bf16"  # not listed: the checkpoint's base (modelopt: bf16)


def test_weights_on_a_rank_sum_the_parts_at_their_dtypes():
    m = planner.load_model(str(FIXTURES / "nvidia--Qwen3.5-397B-A17B-NVFP4"))
    dep = planner.make_deployment(m, planner.load_hardware("b200"), attn="tp", moe="ep", gpus=8)
    w = weights_resident_bytes(dep)
    h = 4096
    experts = 60 * 512 * 3 * h * 1024 / 8 * FP4  # EP: 1/8 of the routed experts, NVFP4
    shared = 60 * 3 * h * 1024 * 2.0  # replicated under EP, bf16 (excluded)
    gdn = 45 * (h * (2 * 16 * 128 + 2 * 64 * 128) + h * 128 + 12_288 * 4 + 64 * 128 * h + 128) / 8 * 2.0
    att = 15 * (h * 32 * 256 * 2 + 2 * h * 2 * 256 + 32 * 256 * h) / 8 * 2.0
    assert w["routed_experts_weights"] == pytest.approx(experts)
    assert w["shared_experts_weights"] == pytest.approx(shared)
    assert w["linear_attention_weights"] == pytest.approx(gdn) and w["attention_weights"] == pytest.approx(att)
    # --weight-dtype fp8 overrides every part
    fp8 = planner.make_deployment(m, planner.load_hardware("b200"), attn="tp", moe="ep", gpus=8, weight_dtype="fp8")
    assert weights_resident_bytes(fp8)["shared_experts_weights"] == pytest.approx(shared / 2)
    again = planner.replace_deployment(dep, attn="dp")
    assert not again.weight_dtype_given and weights_resident_bytes(again)["routed_experts_weights"] == pytest.approx(experts)


def test_a_quant_file_that_is_not_an_object_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text((FIXTURES / "Qwen--Qwen3-8B" / "config.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text("[1, 2]")
    with pytest.raises(planner.SpecError, match="hf_quant_config.json: expected a JSON object"):
        planner.load_model(str(tmp_path))
