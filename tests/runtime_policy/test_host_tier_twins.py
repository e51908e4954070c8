"""The host tier as a layout choice (runtime_policy/host_tier_tables.py `twin_tables`): each layout
and its "+host" twin in one table, the switches that turn the tier on (spill) and off (fill)
priced over the host link (runtime_policy/transitions.py), and the policy weighing the twins.
Golden values show their arithmetic: DeepSeek-V3.2 on 8 x H200, 61 layers of 1,152-B latents and
132-B indexer keys (78,324 B per token), the host link's 64 GB/s datasheet rate, NVLink 450 GB/s,
HBM 4.8 TB/s, 12 µs per message."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import planner
from executor.sim import simulate
from planner.errors import SpecError
from planner.host_tier import HostTierSpec
from runtime_policy.decision import PolicyState, Reason
from runtime_policy.loop import LoopConfig
from runtime_policy.policy import LayoutPolicy, PolicyKnobs
from runtime_policy.tables import compile_tables, layout_names
from runtime_policy.transitions import COMMIT_COLLECTIVES, host_fraction, memory_fits, plan_transition
from runtime_policy.workloads import Workload

LAYERS, ROW, INDEXER = 61, 1152.0, 132.0
BPT = LAYERS * (ROW + INDEXER)  # 78,324 B per token
HF = ROW / (ROW + INDEXER)  # the tiered share of a token's bytes: 0.8972
HOST_BPS, LINK_BPS, HBM_BPS, MSG_S = 64e9, 450e9, 4.8e12, 12e-6
NAMES = layout_names()  # every registered layout, in the tables' order


@pytest.fixture(scope="module")
def deps():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="dp", gpus=8)
    return d, planner.replace_deployment(d, host_tier=HostTierSpec())


@pytest.fixture(scope="module")
def twins(deps):
    return compile_tables(deps[1], max_batch=256, max_prefill_tokens=1024, tier_choice=True)


def test_twin_tables_are_the_two_compiled_tables_side_by_side(deps, twins):
    plain = compile_tables(deps[0], max_batch=256, max_prefill_tokens=1024)
    tiered = compile_tables(deps[1], max_batch=256, max_prefill_tokens=1024)
    assert twins.layouts == NAMES + tuple(n + "+host" for n in NAMES)
    n = len(NAMES)
    for half, ref in ((slice(0, n), plain), (slice(n, 2 * n), tiered)):
        assert np.array_equal(twins.base_s[:, half], ref.base_s)
        assert np.array_equal(twins.chunk_rows_s[:, half], ref.chunk_rows_s)
        assert np.array_equal(twins.c1_s[half], ref.c1_s) and np.array_equal(twins.c2_s[half], ref.c2_s)
        assert np.array_equal(twins.info.kv_pool_bytes[half], ref.info.kv_pool_bytes)
    assert twins.base_rows_py[7][n + 1] == list(twins.base_s[7, n + 1])
    assert list(twins.info.twin) == list(range(n, 2 * n)) + list(range(n))
    assert list(twins.info.host_tier) == [False] * n + [True] * n
    cp, dp = NAMES.index("cp"), NAMES.index("dp")
    assert twins.info.host_kv_fraction[n + cp] == pytest.approx(HF) and twins.info.host_kv_fraction[cp] == 0.0
    # the move budget of a twin: the engine's budget + what the tier adds to its layout's pool
    # (DP: 115.01 GB + 103.59 − 13.55 GB = 205.05 GB, the fixed tiered table's own budget)
    b = twins.info.memory_budget_bytes
    assert b[dp] == twins.memory_budget_bytes == plain.memory_budget_bytes
    assert b[n + dp] == pytest.approx(plain.memory_budget_bytes + tiered.info.kv_pool_bytes[dp] - plain.info.kv_pool_bytes[dp])
    assert b[n + dp] == pytest.approx(tiered.memory_budget_bytes)
    assert not plain.info.has_twins and not tiered.info.has_twins and twins.info.has_twins


def test_tier_choice_needs_a_tier(deps):
    with pytest.raises(SpecError, match="tier_choice needs a deployment with a host tier"):
        compile_tables(deps[0], max_batch=16, max_prefill_tokens=256, tier_choice=True)


def test_spill_copies_the_tiered_kv_to_host(twins):
    """CP → CP+host at 2M tokens (156.6 GB, 1/8 of it per rank): 19.58 GB × 1152/1284 = 17.57 GB
    HBM → host at 64 GB/s = 0.2745 s, while 16 decodes of 25-ms steps write 16 · 10.98 tokens of
    the 2M, which follow at the commit."""
    cp, cph = twins.layouts.index("cp"), twins.layouts.index("cp+host")
    n = 2_000_000.0
    p = plan_transition(twins, cp, cph, n * BPT, n * BPT / 8, batch=16, step_s=0.025)
    spill = n * BPT / 8 * HF
    assert spill == pytest.approx(17.5683e9, rel=1e-4)
    assert p.spill_bytes_per_rank == pytest.approx(spill) and p.fill_bytes_per_rank == 0.0
    assert p.kv_recv_bytes_per_rank == 0.0
    assert p.link_s == pytest.approx(spill / HOST_BPS)
    assert p.interference_s == pytest.approx(spill / HBM_BPS)
    written = 16 * (spill / HOST_BPS / 0.025) / n
    assert p.commit_stall_s == pytest.approx(COMMIT_COLLECTIVES * MSG_S + spill * written / HOST_BPS)
    assert p.feasible and memory_fits(twins, cp, cph, n * BPT, n * BPT / 8)


def test_fill_copies_the_host_kv_back_and_needs_the_hbm_pool(twins):
    """DOP+host → DOP: the busiest owner's tiered bytes host → HBM; its HBM-only pool is 45.12 GB,
    so 500K tokens (39.16 GB) fit and 600K (46.99 GB) don't, though the twin holds them."""
    dop, doph = twins.layouts.index("dop"), twins.layouts.index("dop+host")
    own = 500_000.0
    p = plan_transition(twins, doph, dop, 8 * own * BPT, own * BPT)
    assert p.fill_bytes_per_rank == pytest.approx(own * BPT * HF) and p.spill_bytes_per_rank == 0.0
    assert p.link_s == pytest.approx(own * BPT * HF / HOST_BPS)  # 35.14 GB: 0.549 s
    assert p.feasible and memory_fits(twins, doph, dop, 8 * own * BPT, own * BPT)
    big = 600_000.0
    assert big * BPT > twins.info.kv_pool_bytes[dop] > own * BPT
    assert not memory_fits(twins, doph, dop, 8 * big * BPT, big * BPT)
    assert not plan_transition(twins, doph, dop, 8 * big * BPT, big * BPT).feasible
    assert big * BPT <= twins.info.kv_pool_bytes[doph]


def test_a_switch_of_tier_and_placement_pays_both(twins):
    """CP → DP+host at 1M tokens, balanced owners (125K each): the placement move (7/8 of each
    owner's requests, its tiered share over the host link: spill first) and the spill of CP's
    1/8 slice of every request."""
    cp, dph = twins.layouts.index("cp"), twins.layouts.index("dp+host")
    n = 1_000_000.0
    total, own = n * BPT, n * BPT / 8
    p = plan_transition(twins, cp, dph, total, own)
    recv = own * (1 - 1 / 8)  # the owner receives what the other ranks held of its requests
    assert p.kv_recv_bytes_per_rank == pytest.approx(recv)
    w_recv = 0.0  # CP and DP both replicate attention weights
    move_s = (recv + w_recv - recv * HF) / LINK_BPS + recv * HF / HOST_BPS + 2 * MSG_S * LAYERS
    spill = total / 8 * HF
    assert p.spill_bytes_per_rank == pytest.approx(spill)
    assert p.link_s == pytest.approx(move_s + spill / HOST_BPS)
    assert p.interference_s == pytest.approx((2 * recv + spill) / HBM_BPS)
    # its memory is checked against the smaller tiered budget (DP+host's 205.05 GB, not CP+host's)
    assert p.memory_budget_bytes == pytest.approx(twins.info.memory_budget_bytes[twins.layouts.index("dp+host")])
    # the way back (DP+host → CP) fills CP's slice: 1/8 of all KV, 9.79 GB × 0.897 over the host link
    q = plan_transition(twins, dph, cp, total, own)
    assert q.fill_bytes_per_rank == pytest.approx(total / 8 * HF)
    # to TP the fill is in TP's placement (fill last): every request on every rank, 78.32 GB × 0.897
    q = plan_transition(twins, dph, twins.layouts.index("tp"), total, own)
    assert q.fill_bytes_per_rank == pytest.approx(total * HF)
    assert not q.feasible  # and TP's HBM-only pool (45.12 GB) can't hold 78.32 GB: refused


def test_without_twins_the_per_layout_tier_is_the_tables_scalar(deps):
    tiered = compile_tables(deps[1], max_batch=16, max_prefill_tokens=256)
    assert tiered.info.host_tier.size == tiered.info.twin.size == tiered.info.memory_budget_bytes.size == 0
    assert host_fraction(tiered, 1) == tiered.host_kv_fraction == pytest.approx(HF)  # every move's, as before
    p = plan_transition(tiered, 1, 3, 8e9, 1e9)
    assert p.spill_bytes_per_rank == p.fill_bytes_per_rank == 0.0
    assert p.memory_budget_bytes == tiered.memory_budget_bytes


def test_knobs_may_name_twins_only_with_tier_choice(deps):
    LayoutPolicy.compile(deps[1], knobs=PolicyKnobs(max_batch=16, allowed=("cp", "cp+host")), max_prefill_tokens=256,
                         tier_choice=True)
    with pytest.raises(SpecError, match="allowed layouts"):
        LayoutPolicy.compile(deps[1], knobs=PolicyKnobs(max_batch=16, allowed=("cp", "cp+host")), max_prefill_tokens=256)


def _state(pol, layout: str, context: float, waiting=(), steps_since_switch=1 << 30, b: int = 64) -> PolicyState:
    """`b` decodes of `context` tokens each, 8 per owner."""
    t = pol.tables
    i = t.layouts.index(layout)
    own = b / 8 * context
    free = [t.info.kv_pool_bytes[i] - own * t.kv_bytes_per_token] * 8  # owner layouts: per owner
    return PolicyState(np.full(b, context), [own] * 8, free, np.array(waiting, dtype=np.float64), layout=i,
                       running=b, steps_since_switch=steps_since_switch)


@pytest.fixture(scope="module")
def dop_pair(deps):
    return LayoutPolicy.compile(deps[1], knobs=PolicyKnobs(max_batch=256, allowed=("dop", "dop+host")),
                                max_prefill_tokens=1024, tier_choice=True)


def test_capacity_turns_the_tier_on_when_the_hbm_wall_binds(dop_pair):
    """DOP's HBM pool holds 45.12 GB / 78,324 B = 576K tokens per owner; 8 requests of 70K on each
    (560K) leave no room for a 100K-token head, and DOP+host (278.6 GB: 3.56M tokens) holds it and
    the 63 behind it: the policy spills."""
    pol = dop_pair
    dop = pol.tables.layouts.index("dop")
    assert pol.tables.info.kv_pool_bytes[dop] / BPT == pytest.approx(576_065, rel=1e-5)
    d = pol.decide(_state(pol, "dop", 70_000.0, waiting=[100_000.0] * 64))
    assert d.switch and pol.tables.layouts[d.layout] == "dop+host" and d.reason == Reason.SWITCH_CAPACITY
    assert d.plan.spill_bytes_per_rank == pytest.approx(8 * 70_000.0 * BPT * HF)
    assert d.plan.kv_recv_bytes_per_rank == 0.0


def test_the_tier_goes_off_when_load_drops_with_hysteresis(dop_pair):
    """In DOP+host with 64 decodes of 40K (320K tokens per owner, 56 % of DOP's HBM pool) and none
    waiting, DOP's step is ~9 % faster (the owners' misses): the policy fills. At 68K each (544K,
    94 % of the pool, past the 10 % headroom) the tier stays on; and not within the cooldown."""
    pol = dop_pair
    steps = pol.step_times_s(_state(pol, "dop+host", 40_000.0))
    dop, dop_host = pol.tables.layouts.index("dop"), pol.tables.layouts.index("dop+host")
    assert steps[dop_host] / steps[dop] - 1.0 > pol.knobs.min_gain_fraction
    d = pol.decide(_state(pol, "dop+host", 40_000.0))
    assert d.switch and pol.tables.layouts[d.layout] == "dop" and d.reason == Reason.SWITCH_THROUGHPUT
    assert d.plan.fill_bytes_per_rank == pytest.approx(8 * 40_000.0 * BPT * HF)
    assert not pol.decide(_state(pol, "dop+host", 68_000.0)).switch
    d = pol.decide(_state(pol, "dop+host", 40_000.0, steps_since_switch=10))
    assert not d.switch and d.reason == Reason.STAY_COOLDOWN


def test_the_simulator_switches_the_tier_on_and_off():
    """On DOP and its twin only: 16 requests of 60K at t = 0 and 80 more at 2/s (DOP's HBM holds 9
    of 60K per owner), then 64 of 8K from 300 s: the queue spills, and once it drains the tier goes
    off again."""
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.replace_deployment(planner.make_deployment(m, hw, attn="dop", gpus=8), host_tier=HostTierSpec())
    arr = np.r_[np.zeros(16), 5 + np.arange(80) * 0.5, 300 + np.arange(64) * 2.0]
    w = Workload("t", arr, np.r_[np.full(96, 60_000), np.full(64, 8_000)].astype(np.int64), np.full(160, 2048, dtype=np.int64))
    doc = simulate(dep, w, "dynamic", knobs=PolicyKnobs(allowed=("dop", "dop+host")), config=LoopConfig(max_batch=256),
                   tier_choice=True)
    path = [(s["from"], s["to"], s["reason"]) for s in doc["switches"]]
    assert path[0] == ("dop", "dop+host", "switch_capacity") and ("dop+host", "dop", "switch_throughput") in path
    on = next(s["at_s"] for s in doc["switches"] if s["to"] == "dop+host")
    off = next(s["at_s"] for s in doc["switches"] if s["to"] == "dop")
    # on while the 60K queue spills, off once it drained (after the last 60K request arrived; DOP's
    # owners prefill in parallel as the engine's DP ranks do, so it drains before the 8K requests)
    assert on < off and off > arr[95]
    assert doc["completed"] == 160 and doc["layout_time_s"]["dop+host"] > 0 and doc["layout_time_s"]["dop"] > 0


def test_a_fixed_twin_runs_as_the_fixed_tiered_deployment(deps):
    n = 12
    w = Workload("t", np.arange(n) * 2.0, np.full(n, 60_000, dtype=np.int64), np.full(n, 512, dtype=np.int64))
    cfg = LoopConfig(max_batch=64)
    for name, dep in (("cp+host", deps[1]), ("cp", deps[0])):
        a = simulate(deps[1], w, name, config=cfg, tier_choice=True)
        b = simulate(dep, w, "cp", config=cfg)
        for k in ("makespan_s", "ttft_p50_s", "tpot_p99_s", "preemptions", "steps"):
            assert a[k] == b[k], (name, k)


def test_the_torch_executor_refuses_twin_tables(twins):
    pytest.importorskip("torch")
    from executor.torch_executor.serving import TorchExecutor

    with pytest.raises(SpecError, match="does not run host-tier twin layouts"):
        TorchExecutor(SimpleNamespace(layout="tp"), twins)
    assert replace(twins.info, twin=np.full(10, -1)).has_twins is False
