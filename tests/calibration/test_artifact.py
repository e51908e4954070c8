"""The artifact contract the CLI relies on: load_calibration → Calibration.predict_s(StepCost)."""

import json

import numpy as np
import pytest

import planner
from calibration.artifact import (Calibration, DatasheetRates, FitSummary, FittedParams, load_calibration,
                                  save_calibration, step_features)


def make_calibration(hw_name="h200", **params) -> Calibration:
    hw = planner.load_hardware(hw_name)
    p = planner.Pricing.datasheet(hw)
    base = dict(hbm_weight_efficiency=0.7, hbm_kv_efficiency=0.5, compute_linear_efficiency=0.8,
                compute_attention_efficiency=0.4, network_efficiency=0.8, message_latency_s=20e-6,
                overlap_alpha=0.3, overhead_s=1e-3)
    base.update(params)
    return Calibration(
        created_utc="2026-01-01T00:00:00Z",
        rates=DatasheetRates(hardware=hw.name, hbm_bytes_per_s=p.hbm_bytes_per_s, flops_per_s=p.flops_per_s,
                             link_bytes_per_s=p.link_bytes_per_s),
        params=FittedParams(**base), fitted=tuple(base), sources=(),
        fit=FitSummary(rows=0, loss="soft_l1", f_scale=0.05, median_abs_pct_error=0, p90_abs_pct_error=0,
                       rows_below_floor=0))


def cost(batch=(1, 64, 256), context=(1024, 8192, 32768), attn="tp", gpus=8, hw="h200"):
    # NOTE: the layout's ideal kernels (no engine terms): the floors' own step, which an identity
    # calibration must reproduce (an engine's kernels add terms the floors leave out, issue 26)
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware(hw), attn=attn, gpus=gpus,
                                  engine_kernels=False)
    return planner.step_cost(dep, planner.DecodeLoad.equal(np.array(batch), np.array(context)))


def test_predict_is_above_floor_and_vectorized():
    c = cost()
    cal = make_calibration()
    t = cal.predict_s(c)
    assert t.shape == (3,)
    assert np.all(t >= c.floor_max_s)


def test_identity_calibration_reproduces_floor_max_plus_alpha():
    c = cost(gpus=1, attn="tp")  # one GPU: no network terms, so messages don't matter
    cal = make_calibration(hbm_weight_efficiency=1, hbm_kv_efficiency=1, compute_linear_efficiency=1,
                           compute_attention_efficiency=1, overlap_alpha=0.0, overhead_s=0.0)
    np.testing.assert_allclose(cal.predict_s(c), c.floor_max_s, rtol=1e-9)
    cal1 = make_calibration(hbm_weight_efficiency=1, hbm_kv_efficiency=1, compute_linear_efficiency=1,
                            compute_attention_efficiency=1, overlap_alpha=1.0, overhead_s=0.0)
    np.testing.assert_allclose(cal1.predict_s(c), c.floor_sum_s, rtol=1e-9)


def test_features_split_weights_from_kv():
    c = cost()
    f = step_features(c, make_calibration().rates)
    np.testing.assert_allclose(f.weight_hbm_s + f.other_hbm_s, c.times.hbm_s, rtol=1e-9)
    np.testing.assert_allclose(f.linear_compute_s + f.attention_compute_s, c.times.compute_s, rtol=1e-9)
    assert np.all(np.diff(f.other_hbm_s) > 0)  # KV grows with batch·context


def test_roundtrip_and_bad_files(tmp_path):
    cal = make_calibration()
    p = tmp_path / "cal.json"
    save_calibration(cal, p)
    assert load_calibration(p) == cal
    with pytest.raises(planner.SpecError, match="not found"):
        load_calibration(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(planner.SpecError, match="malformed JSON"):
        load_calibration(tmp_path / "bad.json")
    raw = json.loads(p.read_text())
    raw["params"]["overlap_alpha"] = 2.0
    (tmp_path / "range.json").write_text(json.dumps(raw))
    with pytest.raises(planner.SpecError, match="overlap_alpha"):
        load_calibration(tmp_path / "range.json")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "x"}))
    with pytest.raises(planner.SpecError, match="not a floorfirst calibration"):
        load_calibration(tmp_path / "other.json")


def test_other_hardware_is_refused():
    with pytest.raises(planner.SpecError, match="other hardware"):
        make_calibration("h200").predict_s(cost(hw="b200"))


def test_import_is_light():
    import subprocess, sys
    code = "import sys, calibration.artifact; print(any(m in sys.modules for m in ('scipy','pandas','torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
