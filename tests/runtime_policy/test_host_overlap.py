"""A chunk step's eager host time overlaps its device time where the calibration's α_h < 1
(calibration.artifact `host_overlap_alpha`): overhead + max(E, D) + α_h·min(E, D), D the step's
device time. Every path that prices a step says the same number (the simulator's one-step, short-run
and vectorized paths, the policy's blend kernels, the calibrated model's own prediction), over every
registered layout; α_h = 1 leaves every price as the eager overheads made it."""

from dataclasses import replace

import numpy as np
import pytest

import planner
from runtime_policy import step_time
from runtime_policy.tables import compile_tables, datasheet_model, layout_names
from tests.runtime_policy.test_eager_step_overheads import _run, _runnable  # the same run of one batch

PRE, MIX, AH = 3e-3, 5e-3, 0.25


@pytest.fixture(scope="module")
def tables():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    t0 = compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), datasheet_model(), max_batch=64,
                        max_prefill_tokens=1024)
    serial = replace(t0, prefill_overhead_s=PRE, mixed_overhead_s=MIX)
    return t0, serial, replace(serial, host_overlap_alpha=AH)


def _expected(device_s, eager_s, overhead_s):
    hi, lo = np.maximum(device_s, eager_s), np.minimum(device_s, eager_s)
    return overhead_s + hi + AH * lo


@pytest.mark.parametrize("layout", layout_names())
def test_a_chunk_step_takes_the_longer_of_host_and_device_plus_alpha_h_of_the_shorter(tables, layout):
    t0 = tables[0]
    lay = _runnable(t0, layout)
    pre = np.array([0.0, 1.0, 64.0, 0.0, 1024.0])
    dev = _run(t0, lay, 16, pre) - t0.overhead_s  # each step's device time (no eager overhead)
    # E between the smallest and the largest chunk step's device time: both regimes, host-bound
    # (E > D) and device-bound, in every layout
    eager = float(np.sqrt(dev[pre > 0].min() * dev[pre > 0].max()))
    assert dev[pre > 0].min() < eager < dev[pre > 0].max()
    t2 = replace(t0, prefill_overhead_s=0.4 * eager, mixed_overhead_s=0.6 * eager, host_overlap_alpha=AH)
    for b, e in ((16, eager), (0, 0.4 * eager)):
        for vectorized in (False, True):
            p = pre if b else np.maximum(pre, 1.0)
            d0 = _run(t0, lay, b, p, vectorized)  # overhead + D
            d2 = _run(t2, lay, b, p, vectorized)
            want = np.where(p > 0, _expected(d0 - t0.overhead_s, e, t0.overhead_s), d0)
            np.testing.assert_allclose(d2, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("layout", layout_names())
def test_every_simulator_path_says_the_same_with_host_overlap(tables, layout):
    _, _, t2 = tables
    lay = _runnable(t2, layout)
    pre = np.array([0.0, 0.0, 300.0, 0.0, 1024.0, 0.0, 5.0, 0.0])
    prefix = np.array([0.0, 0.0, 4000.0, 0.0, 70000.0, 0.0, 10.0, 0.0])
    owner = (np.arange(8) % 8, np.minimum(pre, 200.0), prefix)
    for args in ({}, {"prefill_context_tokens": prefix}, {"prefill_context_tokens": prefix, "chunk_owner": owner}):
        np.testing.assert_array_equal(_run(t2, lay, 12, pre, **args), _run(t2, lay, 12, pre, True, **args))
        for j in np.flatnonzero(pre):  # the one-step path
            one = {k: (v[j:j + 1] if k != "chunk_owner" else tuple(x[j:j + 1] for x in v)) for k, v in args.items()}
            assert _run(t2, lay, 12, pre[j:j + 1], **one)[0] == _run(t2, lay, 12, pre[j:j + 1], True, **one)[0]


def test_the_policy_blend_prices_its_chunk_step_overlapped(tables):
    """The blend's chunk step (with decode rows) is host_overlap_s of its device time; the decode
    step is untouched."""
    t0, _, t2 = tables
    n = len(t0.layouts)
    mask = sum(1 << i for i in range(n) if t0.info.kv_pool_bytes[i] > 0)
    rows, rows_n = t0.base_s[20].tolist(), t0.base_s[20 + 512].tolist()
    f = 0.25
    out = {}
    for t in (t0, t2):
        k = t.layout_kernels
        crows = [[t.chunk_rows_s[512, i].tolist()[c] for c in k.chunk_cols[i]] for i in range(n)]
        o, dec, own = [0.0] * n, [0.0] * n, [40000.0] * n
        k.blended_steps(mask, rows, rows_n, crows, 1000.0, 0.0, 60000.0, 80000.0, own, [0.0] * n, f, o, [0.0] * n)
        k.decode_steps(mask, rows, 60000.0, 80000.0, own, [0.0] * n, dec, [0.0] * n)
        out[id(t)] = (o, dec)
    (b0, d0), (b2, d2) = out[id(t0)], out[id(t2)]
    for i in range(n):
        if mask >> i & 1:
            assert d2[i] == d0[i]
            chunk0 = (b0[i] - (1 - f) * d0[i]) / f  # overhead + D of the chunk step
            want = step_time.host_overlap_s(chunk0 - t0.overhead_s, PRE + MIX, AH, t0.overhead_s)
            assert b2[i] == pytest.approx((1 - f) * d2[i] + f * want, rel=1e-9)


def test_alpha_h_of_one_compiles_the_serial_kernels(tables):
    _, t1, t2 = tables
    assert replace(t2, host_overlap_alpha=1.0).layout_kernels.source == t1.layout_kernels.source
    assert not replace(t2, prefill_overhead_s=0.0, mixed_overhead_s=0.0).host_overlap


def test_the_calibrated_model_predicts_the_overlap_and_reaches_the_tables(tmp_path):
    from calibration.artifact import StepFeatures, load_calibration, predict_from_features, save_calibration
    from calibration.priors import prior_path
    from runtime_policy.tables import calibrated_model

    cal = load_calibration(prior_path("h200", "sglang"))
    x = cal.params.vector()
    x[8], x[9] = PRE, MIX
    z = np.zeros(4)
    f = StepFeatures(weight_hbm_s=np.array([1e-3, 1e-3, 20e-3, 20e-3]), other_hbm_s=z, linear_compute_s=z,
                     attention_compute_s=z, network_bytes_s=z, network_messages=z, latency_s=z, host_link_s=z,
                     engine_code=z, prefill_step=np.array([0.0, 1.0, 1.0, 1.0]), mixed_step=np.array([0.0, 1.0, 0.0, 1.0]))
    serial = predict_from_features(f, x)
    d = f.weight_hbm_s / x[0]
    e = PRE * f.prefill_step + MIX * f.mixed_step
    np.testing.assert_array_equal(serial, x[7] + e + d)  # α_h = 1: they add
    x[10] = AH
    np.testing.assert_allclose(predict_from_features(f, x), x[7] + np.maximum(e, d) + AH * np.minimum(e, d), rtol=1e-12)
    cal = cal.model_copy(update={"params": cal.params.model_copy(update={
        "prefill_step_overhead_s": PRE, "mixed_step_overhead_s": MIX, "host_overlap_alpha": AH})})
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    model = calibrated_model(str(path))
    assert model.host_overlap_alpha == AH and "overlapping" in model.label
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    t = compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), model, max_batch=8, max_prefill_tokens=64)
    assert t.host_overlap and t.chunk_step_s(0.0, True) == t.overhead_s + PRE + MIX
