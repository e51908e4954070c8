"""The fit recovers known parameters from synthetic profiles, survives noise and outliers, and
refuses too little or mixed data."""

import numpy as np
import pytest

import planner
from calibration.artifact import PARAM_NAMES
from calibration.costs import price_profile
from calibration.fit import fit_calibration
from calibration.loaders import load_profile
from calibration.validate import validate
from tests.calibration.conftest import TRUE, synthetic_rows, write_jsonl


def _fit(tmp_path, rows, **kw):
    prof = load_profile(write_jsonl(tmp_path / "p.jsonl", rows))
    costs = price_profile(prof)
    return fit_calibration(costs, prof.sources, **kw), costs


def test_recovers_known_parameters(tmp_path):
    cal, costs = _fit(tmp_path, synthetic_rows())
    got = cal.params.model_dump()
    for name in PARAM_NAMES:
        assert got[name] == pytest.approx(TRUE[name], rel=0.03), name
    assert cal.fit.median_abs_pct_error < 0.1
    # every synthetic row with a prompt chunk also decodes: the mixed step's own overhead can't be told
    # apart; no chunk step is host-bound: α_h can't either (held at 1, the truth here)
    assert set(cal.fitted) == set(PARAM_NAMES) - {"mixed_step_overhead_s", "host_overlap_alpha"}
    assert cal.fixed["mixed_step_overhead_s"].startswith("not separable")
    assert cal.fixed["host_overlap_alpha"].startswith("not separable")


def test_eager_step_overheads_are_recovered_where_prefill_only_and_mixed_rows_tell_them_apart(tmp_path):
    """The torch executor's rows (benchmarks/results/executor_gpu/twin_1gpu): graph-replayed decode
    steps, prefill-only steps and mixed steps; each kind's fixed cost is recovered."""
    truth = {**TRUE, "prefill_step_overhead_s": 6e-3, "mixed_step_overhead_s": 8e-3}
    rows = synthetic_rows(truth, batches=(1, 8, 32, 128), prefills=(0, 512, 4096))
    rows += [{**r, "batch": 0, "context": 1.0} for r in synthetic_rows(truth, batches=(0,), contexts=(1.0,),
                                                                         prefills=(256, 1024, 4096, 8192))]
    cal, _ = _fit(tmp_path, rows)
    got = cal.params.model_dump()
    assert got["prefill_step_overhead_s"] == pytest.approx(6e-3, rel=0.03)
    assert got["mixed_step_overhead_s"] == pytest.approx(8e-3, rel=0.03)
    assert got["overhead_s"] == pytest.approx(TRUE["overhead_s"], rel=0.03)
    no_eager = synthetic_rows({**truth, "prefill_step_overhead_s": 0.0, "mixed_step_overhead_s": 0.0},
                              batches=(1, 8, 32, 128), prefills=(0, 512, 4096))
    cal0, _ = _fit(tmp_path, no_eager)
    assert cal0.params.prefill_step_overhead_s < 1e-5  # no such cost in the data: none fitted


def test_host_overlap_is_recovered_where_chunk_steps_span_host_bound_and_device_bound(tmp_path):
    """The torch executor's shape (twin_1gpu/gpu_h100_eager): prefill steps flat while their launches
    outlast the device work, then growing with the chunk; α_h and both eager overheads are recovered,
    and the serial model (α_h held at 1) can't fit the same rows."""
    truth = {**TRUE, "prefill_step_overhead_s": 40e-3, "mixed_step_overhead_s": 10e-3, "host_overlap_alpha": 0.2}
    rows = synthetic_rows(truth, batches=(1, 8, 32, 128), prefills=(0, 512, 4096, 16384))
    rows += [{**r, "batch": 0, "context": 1.0} for r in synthetic_rows(truth, batches=(0,), contexts=(1.0,),
                                                                         prefills=(256, 1024, 4096, 8192, 16384, 32768))]
    cal, costs = _fit(tmp_path, rows)
    got = cal.params.model_dump()
    d = costs.features.predict(cal.params.vector())
    assert got["host_overlap_alpha"] == pytest.approx(0.2, abs=0.03)
    assert got["prefill_step_overhead_s"] == pytest.approx(40e-3, rel=0.05)
    assert got["mixed_step_overhead_s"] == pytest.approx(10e-3, rel=0.1)
    assert cal.fit.p90_abs_pct_error < 1.0
    # both regimes are in the rows: the eager time is the longer on some chunk steps, not on others
    x = cal.params.vector()
    serial = x.copy()
    serial[10] = 1.0
    assert np.any(d < costs.features.predict(serial) * 0.8)
    # the serial model (α_h held at 1) on the same rows: its best fit misses them
    from calibration.fit import fit_params, priors_from
    priors, _ = priors_from("h200", None)
    xs, _, _, _ = fit_params(costs.features, costs.measured_s, priors, fixed={"host_overlap_alpha"})
    serial_err = np.abs(costs.features.predict(xs) / costs.measured_s - 1)
    assert xs[10] == 1.0 and np.percentile(serial_err, 90) > 0.05 > cal.fit.p90_abs_pct_error / 100


def test_noise_and_outliers_dont_break_it(tmp_path):
    rows = synthetic_rows(noise=0.02, outliers=0.08, seed=1)
    cal, costs = _fit(tmp_path, rows)
    clean = synthetic_rows()
    truth = np.array([r["step_ms"] for r in clean]) / 1e3
    pred = costs.features.predict(cal.params.vector())
    err = np.abs(pred - truth) / truth
    assert np.median(err) < 0.02 and np.percentile(err, 90) < 0.05
    for name in ("hbm_weight_efficiency", "hbm_kv_efficiency", "overlap_alpha"):
        assert cal.params.model_dump()[name] == pytest.approx(TRUE[name], rel=0.15), name


def test_linear_loss_is_pulled_by_outliers_more_than_robust(tmp_path):
    rows = synthetic_rows(outliers=0.1, seed=2)
    robust, costs = _fit(tmp_path, rows)
    plain, _ = _fit(tmp_path, rows, loss="linear")
    truth = np.array([r["step_ms"] for r in synthetic_rows()]) / 1e3
    e = lambda c: np.median(np.abs(costs.features.predict(c.params.vector()) - truth) / truth)  # noqa: E731
    assert e(robust) < e(plain)


def test_too_little_data_is_refused(tmp_path):
    rows = synthetic_rows(batches=(8, 64), contexts=(4096,), prefills=(0,))
    with pytest.raises(planner.SpecError, match="needs at least .* measured steps"):
        _fit(tmp_path, rows)


def test_mixed_hardware_is_refused(tmp_path):
    rows = synthetic_rows() + synthetic_rows(layouts=[("deepseek-v3", "b200", 8, "tp", "ep")])
    with pytest.raises(planner.SpecError, match="mixes hardware"):
        _fit(tmp_path, rows)


def test_one_gpu_holds_network_parameters_fixed(tmp_path):
    rows = synthetic_rows(layouts=[("llama-3.1-70b", "h200", 1, "tp", "tp")], batches=(1, 4, 16, 64, 256),
                          contexts=(512, 2048, 8192, 32768), prefills=(0, 2048, 8192))
    cal, _ = _fit(tmp_path, rows)
    assert "network_efficiency" in cal.fixed and "message_latency_s" in cal.fixed
    assert "no signal" in cal.fixed["network_efficiency"]
    assert cal.params.hbm_weight_efficiency == pytest.approx(TRUE["hbm_weight_efficiency"], rel=0.05)


def test_validate_cross_validates_and_lists_floor_violations(tmp_path):
    rows = synthetic_rows(noise=0.01)
    cal, _ = _fit(tmp_path, rows)
    rows[3]["step_ms"] = 1e-4  # impossible: below any floor
    costs = price_profile(load_profile(write_jsonl(tmp_path / "v.jsonl", rows)))
    rep = validate(cal, costs, folds=4)
    assert rep.rows == len(rows) and rep.folds == 4
    assert rep.cv_median_abs_pct_error < 3.0
    assert [v.line for v in rep.rows_below_floor] == [4]
    assert rep.rows_below_floor[0].resources  # names the resource(s) the row beats
    assert len(rep.residuals) == len(rows)
