"""A step that carries a prompt chunk pays the fixed host cost of running without a full CUDA graph
(calibration.artifact: `prefill_step_overhead_s`, and `mixed_step_overhead_s` more with decode rows
beside the chunk): the simulator's every path, the policy's blend and the calibrated model carry it,
over every registered layout; zero overheads leave every price as it was."""

from dataclasses import replace

import numpy as np
import pytest

import planner
from executor.sim import SimExecutor
from runtime_policy.executor import StepBatch
from runtime_policy.tables import compile_tables, datasheet_model, layout_names

PRE, MIX = 3e-3, 5e-3


@pytest.fixture(scope="module")
def pair():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    t0 = compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), datasheet_model(), max_batch=64,
                        max_prefill_tokens=1024)
    return t0, replace(t0, prefill_overhead_s=PRE, mixed_overhead_s=MIX)


def _run(tables, layout, b, pre, vectorized=False, **kw):
    ex = SimExecutor(tables)
    if vectorized:
        ex.scalar_run_steps = 0
    rng = np.random.default_rng(b)
    batch = StepBatch(layout, rng.integers(1, 6000, b).astype(np.float64), np.arange(b) % 8, np.arange(b))
    return np.asarray(ex.run_steps(batch, pre, **kw), dtype=np.float64)


def _runnable(tables, layout: str) -> int:
    """`layout`'s index in `tables`; the test is skipped where the model can't run it."""
    lay = tables.layouts.index(layout)
    if tables.info.kv_pool_bytes[lay] <= 0:
        pytest.skip(f"{layout} can't run this model")
    return lay


@pytest.mark.parametrize("layout", layout_names())
def test_a_chunk_step_pays_the_eager_overheads_and_a_decode_step_does_not(pair, layout):
    t0, t1 = pair
    lay = _runnable(t0, layout)
    pre = np.array([0.0, 700.0, 0.0, 1024.0, 17.0])
    for b, extra in ((16, PRE + MIX), (0, PRE)):
        for k in (1, len(pre)):
            for vectorized in (False, True):
                p = pre[:k] if b else np.maximum(pre[:k], 1.0)
                d0 = _run(t0, lay, b, p, vectorized)
                d1 = _run(t1, lay, b, p, vectorized)
                np.testing.assert_allclose(d1 - d0, np.where(p > 0, extra, 0.0), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("layout", layout_names())
def test_the_short_run_path_equals_the_vectorized_one_with_eager_overheads(pair, layout):
    _, t1 = pair
    lay = _runnable(t1, layout)
    pre = np.array([0.0, 0.0, 300.0, 0.0, 1024.0, 0.0, 5.0, 0.0])
    prefix = np.array([0.0, 0.0, 4000.0, 0.0, 70000.0, 0.0, 10.0, 0.0])
    owner = (np.arange(8) % 8, np.minimum(pre, 200.0), prefix)
    for args in ({}, {"prefill_context_tokens": prefix}, {"prefill_context_tokens": prefix, "chunk_owner": owner}):
        np.testing.assert_array_equal(_run(t1, lay, 12, pre, **args), _run(t1, lay, 12, pre, True, **args))


def test_the_policy_blend_prices_its_chunk_step_with_the_overheads(pair):
    """The blend is (1 − f)·decode step + f·step with the chunk: the chunk step's overhead rises by
    PRE + MIX (it has decode rows), so the blend by f·(PRE + MIX), every layout."""
    t0, t1 = pair
    k0, k1 = t0.layout_kernels, t1.layout_kernels
    n = len(t0.layouts)
    mask = sum(1 << i for i in range(n) if t0.info.kv_pool_bytes[i] > 0)
    rows, rows_n = t0.base_s[20].tolist(), t0.base_s[20 + 512].tolist()
    out = {}
    for k, t in ((k0, t0), (k1, t1)):
        crows = [[t.chunk_rows_s[512, i].tolist()[c] for c in k.chunk_cols[i]] for i in range(n)]
        o, net = [0.0] * n, [0.0] * n
        own = [40000.0] * n
        k.blended_steps(mask, rows, rows_n, crows, 1000.0, 0.0, 60000.0, 80000.0, own, [0.0] * n, 0.25, o, net)
        dec = [0.0] * n
        k.decode_steps(mask, rows, 60000.0, 80000.0, own, [0.0] * n, dec, [0.0] * n)
        out[id(t)] = (o, dec)
    (b0, d0), (b1, d1) = out[id(t0)], out[id(t1)]
    for i in range(n):
        if mask >> i & 1:
            assert d1[i] == d0[i]  # a decode step: untouched
            assert b1[i] - b0[i] == pytest.approx(0.25 * (PRE + MIX), rel=1e-9)


def test_zero_overheads_compile_the_same_kernels(pair):
    t0, _ = pair
    z = replace(t0, prefill_overhead_s=0.0, mixed_overhead_s=0.0)
    assert z.layout_kernels.source == t0.layout_kernels.source


def test_a_calibration_s_overheads_reach_the_tables(tmp_path):
    from calibration.artifact import load_calibration, save_calibration
    from calibration.priors import prior_path
    from runtime_policy.tables import calibrated_model

    cal = load_calibration(prior_path("h200", "sglang"))
    cal = cal.model_copy(update={"params": cal.params.model_copy(update={"prefill_step_overhead_s": PRE,
                                                                        "mixed_step_overhead_s": MIX})})
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    model = calibrated_model(str(path))
    assert (model.prefill_overhead_s, model.mixed_overhead_s) == (PRE, MIX) and "prompt chunk" in model.label
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    t = compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), model, max_batch=8, max_prefill_tokens=64)
    assert t.chunk_overhead_s(True) == t.overhead_s + PRE + MIX and t.chunk_overhead_s(False) == t.overhead_s + PRE
