import math

import pytest

import planner
from planner.errors import SpecError
from tests.planner.factories import HW_YAML

BUILTIN = ["h20", "h100", "h200", "b200", "gb200", "b300", "mi300x", "mi355x"]
CALIBRATED = ["h200-calibrated"]  # datasheet peaks + efficiencies measured by floorfirst microbench


def test_every_builtin_gpu_loads_with_sources():
    # NOTE: the registry's files, not a list typed here: a new YAML is checked without an edit
    names = planner.builtin_hardware_names()
    assert set(BUILTIN + CALIBRATED) <= set(names)
    for name in names:
        hw = planner.load_hardware(name)
        assert hw.peak.hbm_bytes > 0 and hw.peak.hbm_bandwidth_bytes_per_s > 0
        assert "peak" in hw.sources and hw.sources["peak"]
        assert 0 < hw.efficiency.hbm <= 1


def test_ridge_point_is_flops_over_bandwidth():
    hw = planner.load_hardware("h200")
    # 989e12 FLOP/s ÷ 4.8e12 B/s = 206.04 FLOP/B (bf16); 1979e12 ÷ 4.8e12 = 412.29 (fp8)
    assert hw.ridge_flops_per_byte("bf16") == pytest.approx(206.0417, rel=1e-4)
    assert hw.ridge_flops_per_byte("fp8") == pytest.approx(412.2917, rel=1e-4)


def test_fp4_falls_back_to_fp8_on_hopper_and_is_native_on_blackwell():
    assert planner.load_hardware("h200").flops_per_s("fp4") == 1979e12
    assert planner.load_hardware("b200").flops_per_s("fp4") == 9000e12


def test_calibrated_h200_keeps_the_datasheet_peaks():
    cal, sheet = planner.load_hardware("h200-calibrated"), planner.load_hardware("h200")
    assert cal.peak == sheet.peak  # floors are never modified by calibration
    assert cal.efficiency != sheet.efficiency


def test_h200_efficiency_defaults_are_the_measured_fractions():
    e = planner.load_hardware("h200").efficiency
    assert e.hbm == pytest.approx(4.22 / 4.8, abs=1e-3)  # HBM copy 4.22 TB/s of 4.8
    assert e.flops == pytest.approx(797 / 989, abs=1e-3)  # bf16 GEMM 797 of 989 TFLOP/s


def test_user_yaml_by_path(tmp_path):
    p = tmp_path / "toy.yaml"
    p.write_text(HW_YAML)
    hw = planner.load_hardware(str(p))
    assert hw.name == "toy" and hw.peak.fp8_flops_per_s is None
    assert hw.flops_per_s("fp8") == 500e12  # no fp8 path: bf16 rate


def test_an_edited_yaml_is_read_again(tmp_path):
    # the loader's cache is keyed by (mtime, size) (planner.inputs.file_stamp): an edit is seen
    p = tmp_path / "toy.yaml"
    p.write_text(HW_YAML)
    assert planner.load_hardware(str(p)).name == "toy"
    p.write_text(HW_YAML.replace("name: toy", "name: toy-edited"))
    assert planner.load_hardware(str(p)).name == "toy-edited"


@pytest.mark.parametrize("mutate, needle", [
    (lambda s: s.replace("  hbm_bytes: 80.0e9\n", ""), "hbm_bytes"),
    (lambda s: s.replace("2.0e12", "-2.0e12"), "hbm_bandwidth_bytes_per_s"),
    (lambda s: s + "  bogus_field: 1\n", "bogus_field"),
    (lambda s: s.replace("scaleup_domain_gpus: 8", "scaleup_domain_gpus: many"), "scaleup_domain_gpus"),
    (lambda s: "[: not yaml", "YAML"),
    (lambda s: s.replace("500.0e12", ".nan"), "bf16_flops_per_s"),
])
def test_bad_yaml_names_the_field(tmp_path, mutate, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(mutate(HW_YAML))
    with pytest.raises(SpecError, match=needle):
        planner.load_hardware(str(p))


def test_unknown_hardware_lists_builtins():
    with pytest.raises(SpecError, match="h200"):
        planner.load_hardware("tpu-v9")
    with pytest.raises(SpecError, match="not found"):
        planner.load_hardware("/nonexistent/gpu.yaml")
    assert not math.isnan(planner.load_hardware("H200").peak.hbm_bytes)  # case-insensitive


def test_a_new_gpu_yaml_gets_its_defaults_from_declared_fields(tmp_path, monkeypatch):
    """Adding a GPU file breaks nothing, and a renamed H200 is an H200 to every engine default
    (arch, compute capability, vendor and memory are declared fields; no default keys on a name)."""
    import shutil

    from planner.hardware import spec as hw_spec

    for f in hw_spec.DATA_DIR.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    text = (hw_spec.DATA_DIR / "h200.yaml").read_text().replace("name: h200", "name: x900", 1)
    (tmp_path / "x900.yaml").write_text(text)
    monkeypatch.setattr(hw_spec, "DATA_DIR", tmp_path)
    assert "x900" in planner.builtin_hardware_names()
    test_every_builtin_gpu_loads_with_sources()
    for model in ("deepseek-v3.2", "qwen3.5-397b-a17b", "deepseek-v4-flash"):
        m = planner.load_model(model)
        for engine in ("sglang", "vllm"):
            a, b = (planner.make_deployment(m, planner.load_hardware(h), attn="tp", moe="ep", gpus=8, engine=engine)
                    for h in ("h200", "x900"))
            assert (a.kv_dtype, a.page_tokens, a.arch, a.decode_kernel.name) == (b.kv_dtype, b.page_tokens, b.arch,
                                                                                  b.decode_kernel.name)
            assert a.memory.kv_pool_bytes == b.memory.kv_pool_bytes
            load = planner.DecodeLoad.equal(32, 8192)
            assert planner.step_cost(a, load).floor_max_s == pytest.approx(planner.step_cost(b, load).floor_max_s)
