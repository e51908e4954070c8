"""The simulated executor prices steps like the planner, seeds its noise, and charges switches."""

import numpy as np
import pytest

import planner
from executor.sim import SimExecutor
from runtime_policy.executor import StepBatch
from runtime_policy.tables import LAYOUTS, compile_tables, datasheet_model
from runtime_policy.transitions import plan_transition


@pytest.fixture(scope="module")
def tables():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    # the datasheet midpoint, named: these tests check the simulator against the planner's floors
    # (the tables' default is now the deployment's prior, issue 26)
    return compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), datasheet_model(), max_batch=256,
                          max_prefill_tokens=1024)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_steps_match_planner_floors(tables, layout):
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn=layout, gpus=8)
    ctx = np.full(16, 3000.0)
    k = 5
    dur = SimExecutor(tables).run_steps(StepBatch(LAYOUTS.index(layout), ctx, np.arange(16) % 8, np.arange(16)),
                                        np.zeros(k))
    ref = planner.step_cost(dep, planner.DecodeLoad.equal(16.0, 3000.0 + np.arange(k)))
    np.testing.assert_allclose(dur, _midpoint_without_fixed_latency(ref), rtol=1e-3)


def _midpoint_without_fixed_latency(cost):
    """The datasheet midpoint the tables price: without DSA's top-k latency, which the tables leave
    out (runtime_policy.tables._terms)."""
    t = cost.times.stacked()
    t[1] -= cost.fixed_latency_s
    return t.max(axis=0) + 0.5 * (t.sum(axis=0) - t.max(axis=0))


def test_noise_is_seeded(tables):
    b = StepBatch(0, np.full(4, 1000.0), np.arange(4), np.arange(4))
    a1 = SimExecutor(tables, 0.1, 5).run_steps(b, np.zeros(50))
    a2 = SimExecutor(tables, 0.1, 5).run_steps(b, np.zeros(50))
    a0 = SimExecutor(tables).run_steps(b, np.zeros(50))
    np.testing.assert_array_equal(a1, a2)
    assert not np.allclose(a1, a0)


def test_switch_charges_interference_and_stall(tables):
    ex = SimExecutor(tables)
    plan = plan_transition(tables, LAYOUTS.index("dop"), LAYOUTS.index("tp"), 4e9, 0.5e9, 8, 0.01, 0.1)
    b = StepBatch(3, np.full(8, 1000.0), np.arange(8), np.arange(8))
    base = ex.run_steps(b, np.zeros(3))
    assert ex.start_switch(plan) == pytest.approx(plan.link_s) and plan.link_s > 0
    again = ex.run_steps(b, np.zeros(3))
    assert again[0] - base[0] == pytest.approx(plan.interference_s)
    assert ex.commit_switch(plan) == pytest.approx(plan.commit_stall_s)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 2, 3, 8, 16, 30, 48])
def test_short_runs_priced_in_python_equal_the_vectorized_path(tables, layout, k):
    """Runs of ≤ SCALAR_RUN_STEPS steps, and of ≤ SCALAR_RUN_UNITS units (steps + 2 per chunk),
    are priced in plain floats: bit-identical to step_s."""
    from executor.sim import SCALAR_RUN_UNITS

    assert k <= SCALAR_RUN_UNITS
    rng = np.random.default_rng(k)
    lay = LAYOUTS.index(layout)
    for b in (0, 1, 37):
        ctx = rng.integers(1, 6000, b).astype(np.float64)
        own = rng.integers(0, 8, b)
        # longer runs mostly (k = 48: entirely) without chunks, to stay within SCALAR_RUN_UNITS
        kinds = [0, 0, 17, 1024] if k <= 8 else [0] * 12 + [17, 1024] if k < 48 else [0]
        pre = np.array([float(x) for x in rng.choice(kinds, k)])
        prefix = rng.integers(0, 70000, k).astype(np.float64)
        chunk_owner = (rng.integers(0, 8, k), np.minimum(pre, rng.integers(1, 1025, k)).astype(np.float64),
                       rng.integers(0, 70000, k).astype(np.float64))
        for args in ((), (prefix,), (prefix, chunk_owner)):
            fast = SimExecutor(tables).run_steps(StepBatch(lay, ctx, own, np.arange(b)), pre, *args)
            vec = SimExecutor(tables)
            vec.scalar_run_steps = 0  # every run through the vectorized path
            ref = vec.run_steps(StepBatch(lay, ctx, own, np.arange(b)), pre, *args)
            np.testing.assert_array_equal(fast, ref)


def test_chunk_prefix_and_owner_follow_the_planner(tables):
    """A 1K chunk after a 56K prefix next to 16 decodes: CP splits all of it, TP its attention core
    (its indexer scores the chunk whole on every rank), DP/DOP run it on one owner (the planner's
    regime: owner layouts slower than TP, several times slower than CP), within 2 % of
    planner.step_cost."""
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    ctx = np.full(16, 8192.0)
    got = {}
    for layout in LAYOUTS:
        dep = planner.make_deployment(m, hw, attn=layout, gpus=8)
        ref = planner.step_cost(dep, planner.DecodeLoad.equal(16.0, 8192.0), 1024.0, prefill_context=57344.0)
        want = float(_midpoint_without_fixed_latency(ref)[0])
        b = StepBatch(LAYOUTS.index(layout), ctx, np.arange(16) % 8, np.arange(16))
        got[layout] = float(SimExecutor(tables).run_steps(b, np.array([1024.0]), np.array([57344.0]),
                                                          (np.array([5]), np.array([1024.0]), np.array([57344.0])))[0])
        assert got[layout] == pytest.approx(want, rel=0.02), layout
    assert got["dp"] > got["tp"] and got["dop"] > got["tp"] and got["dop"] > 2 * got["cp"]
