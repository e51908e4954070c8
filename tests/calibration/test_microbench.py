"""Microbenchmark pieces on a CPU (tiny sizes), the summary of the committed H200 result, and the
calibrated hardware YAML it produces."""

import json

import numpy as np
import pytest

import planner
from calibration.microbench import kernels
from calibration.microbench.results import calibrated_hardware_yaml, summarize

torch = pytest.importorskip("torch")
CPU = torch.device("cpu")


def test_kernels_run_tiny_on_cpu():
    assert kernels.hbm_copy(CPU, 1 << 16, reps=2)["bytes_per_s"] > 0
    g = kernels.gemm(CPU, "bf16", 4, 32, 16, reps=2)
    assert g["flops_per_s"] > 0 and g["weight_bytes"] == 32 * 16 * 2
    assert "error" in kernels.gemm(CPU, "fp8", 16, 32, 16, reps=2)  # fp8 needs CUDA: a result, not a crash
    a = kernels.mla_attention(CPU, 2, 4, 16, reps=2)
    assert a["kv_bytes"] == 2 * 16 * 576 * 2
    assert all("error" in r for r in kernels.host_link(CPU, 1024))


def test_summary_of_committed_h200_result():
    doc = json.load(open("calibration/data/h200_microbench.json"))
    s = summarize(doc["rows"])
    assert s == pytest.approx(doc["summary"])
    assert 3.5e12 < s["hbm_copy_bytes_per_s"] < 4.8e12  # below the 4.8 TB/s datasheet
    assert s["bf16_flops_per_s"] < 989e12 and s["fp8_flops_per_s"] < 1979e12
    assert s["all_reduce_small_cuda_graph_latency_s"] < s["all_reduce_small_eager_latency_s"]


def test_calibrated_yaml_keeps_datasheet_peaks(tmp_path):
    doc = json.load(open("calibration/data/h200_microbench.json"))
    base = planner.load_hardware("h200")
    p = tmp_path / "h200-cal.yaml"
    p.write_text(calibrated_hardware_yaml(doc["summary"], base, "x.json"))
    cal = planner.load_hardware(str(p))
    assert cal.peak == base.peak  # floors unchanged
    assert cal.efficiency.hbm == pytest.approx(doc["summary"]["hbm_copy_bytes_per_s"] / 4.8e12, abs=1e-4)


def test_committed_calibrated_yaml_matches_microbench():
    doc = json.load(open("calibration/data/h200_microbench.json"))
    committed = planner.load_hardware("h200-calibrated")  # shipped as a built-in
    assert committed.peak == planner.load_hardware("h200").peak
    assert committed.efficiency.flops == pytest.approx(doc["summary"]["bf16_flops_per_s"] / 989e12, abs=1e-4)


def test_measurement_above_peak_is_an_error():
    with pytest.raises(ValueError, match="above the datasheet peak"):
        calibrated_hardware_yaml({"hbm_copy_bytes_per_s": 9e12}, planner.load_hardware("h200"), "x")


def test_step_probe_tiny_step_on_cpu():
    from calibration.step_probe import ProbeDims, make_step, time_step

    dims = ProbeDims.tiny()
    pool = torch.randn(4 * 32 * (dims.kv_lora + dims.rope) * dims.layers)
    step = make_step(dims, "tp", 1, 4, 32, CPU, torch.float32, pool)
    logits = step()
    assert logits.shape == (4, dims.vocab) and torch.isfinite(logits).all()
    times, graphed = time_step(step, CPU, warmup=1, reps=2)
    assert len(times) == 2 and not graphed


def test_microbench_quick_on_cpu_single_process():
    from calibration.microbench.runner import run_microbench

    with pytest.raises(RuntimeError, match="CUDA"):
        run_microbench(quick=True)
    doc = run_microbench(quick=True, gpus=1, allow_cpu=True)
    assert doc["kind"] == "floorfirst.microbench" and doc["summary"]["hbm_copy_bytes_per_s"] > 0
    assert not any(r["bench"] == "collective" for r in doc["rows"])
