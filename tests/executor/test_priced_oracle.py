"""The priced oracle (executor/priced_oracle.py): its recursion is the exact best schedule (checked
against every schedule of small random traces), and on a real trajectory it lies between every
layout held fixed and the free-switch oracle."""

import itertools

import numpy as np
import pytest

from executor.oracle import RecordingExecutor, per_step_best
from executor.priced_oracle import best_schedule, priced_best, trace
from executor.sim import SimExecutor

INF = float("inf")


def _brute(times, run_of, link, cost, release=None):
    """The least busy time over every per-step layout sequence, each change at boundary i from a
    to b realised by a decision at some boundary d ≥ the previous change whose move (planned at
    run(d)) commits first at i — the model of the module docstring, enumerated. With `release`
    [N], the least end: each step starts no earlier than its release (the clock from 0)."""
    n_l, n = times.shape
    release = np.full(n, -INF) if release is None else release
    cum = np.zeros((n_l, n + 1))
    np.cumsum(np.where(np.isfinite(times), times, 0.0), axis=1, out=cum[:, 1:])
    best = INF
    for seq in itertools.product(range(n_l), repeat=n):
        if any(not np.isfinite(times[seq[j], j]) for j in range(n)):
            continue
        total, prev = 0.0, 0
        for i in range(n):
            a, b = seq[i - 1], seq[i]
            if i == 0 or a == b:
                total = max(total, release[i]) + times[b, i]
                continue
            c_min = INF
            for d in range(prev, i + 1):
                c = cost[run_of[d], a, b] if d < n else INF
                if c == INF:
                    continue
                jj = next((x for x in range(d, n + 1) if cum[a, x] - cum[a, d] >= link[run_of[d], a, b]), n + 1)
                if jj == i:
                    c_min = min(c_min, c)
            if c_min == INF:
                total = INF
                break
            total = max(total + c_min, release[i]) + times[b, i]
            prev = i
        best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_recursion_is_the_best_schedule(seed):
    rng = np.random.default_rng(seed)
    n_l, n = 3, 7
    run_of = np.repeat(np.arange(3), [3, 2, 2])
    times = rng.uniform(1.0, 3.0, (n_l, n))
    times[rng.random((n_l, n)) < 0.12] = INF
    times[0, :] = np.where(np.isfinite(times[0]), times[0], 2.0)  # one layout always runs
    link = rng.choice([0.0, 1.5, 4.0], (3, n_l, n_l))
    cost = rng.uniform(0.0, 1.5, (3, n_l, n_l))
    cost[rng.random((3, n_l, n_l)) < 0.2] = INF
    got = best_schedule(times, run_of, link, cost)
    assert got.busy_s == pytest.approx(_brute(times, run_of, link, cost), rel=1e-12)
    assert sum(got.layout_steps) == n
    # held to arrivals: each step no earlier than its release (idle waits between bursts)
    release = np.where(rng.random(n) < 0.4, np.cumsum(rng.uniform(0.0, 3.0, n)), -INF)
    held = best_schedule(times, run_of, link, cost, release_s=release)
    assert held.busy_s == pytest.approx(_brute(times, run_of, link, cost, release), rel=1e-12)
    assert held.busy_s >= got.busy_s - 1e-12


def test_costly_switches_make_no_switch_and_free_ones_follow_every_step():
    times = np.array([[1.0, 3.0, 1.0, 3.0], [3.0, 1.0, 3.0, 1.0]])
    run_of = np.arange(4)
    zero = np.zeros((4, 2, 2))
    free = best_schedule(times, run_of, zero, zero)
    assert free.busy_s == 4.0 and free.switches == 3  # the per-step best: the free oracle
    dear = best_schedule(times, run_of, zero, np.full((4, 2, 2), 5.0))
    assert dear.busy_s == 8.0 and dear.switches == 0  # no change repays 5 s
    # a move that spans 1.5 s: decided one step ahead, in the background of two 1 s steps
    times = np.array([[1.0, 1.0, 1.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 1.0, 1.0, 1.0]])
    slow = best_schedule(times, np.arange(6), np.full((6, 2, 2), 1.5), np.zeros((6, 2, 2)))
    assert slow.busy_s == 6.0 and slow.switches == 1 and slow.layout_steps == (3, 3)
    assert slow.changes == ((1, 3, 0, 1),)  # decided after step 0, committed before step 3
    late = best_schedule(times, np.arange(6), np.full((6, 2, 2), 3.5), np.zeros((6, 2, 2)))
    assert late.busy_s == 1 + 1 + 1 + 3 + 1 + 1  # the move takes 4 steps' time: it commits a step late


def test_on_a_real_trajectory_it_lies_between_fixed_layouts_and_the_free_oracle():
    from runtime_policy.loop import LoopConfig, serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy, LayoutPolicy
    from runtime_policy.workloads import make_workload
    from tests.runtime_policy.conftest import make_policy

    _, lp = make_policy()
    t = lp.tables
    w = make_workload("shrinking", 48, 0)
    cfg = LoopConfig(max_batch=1024, prefill_chunk_tokens=2048)
    fixed_tput, best_priced, best_free = {}, 0.0, 0.0
    for name in ("dop", "tp", "dynamic"):
        pol = LayoutPolicy(t, lp.knobs) if name == "dynamic" else FixedPolicy(t.layouts.index(name))
        rec = RecordingExecutor(SimExecutor(t))
        res = serve(w.arrival_s, w.input_tokens, w.output_tokens, t, pol, Ordering("fcfs"), rec, cfg)
        out_tokens = float(res.output_tokens.sum())
        mk = float(np.max(res.finish_s) - np.min(res.arrival_s))
        free = per_step_best(t, rec)
        sched = priced_best(t, rec)
        times = trace(t, rec)[0]
        stay = np.where(np.isfinite(times).all(axis=1), times.sum(axis=1), INF)
        assert free.busy_oracle_s <= sched.busy_s * (1 + 1e-12)
        assert sched.busy_s <= stay.min() * (1 + 1e-12)  # staying in any layout is a schedule
        span = float(w.arrival_s[-1] - w.arrival_s[0])
        priced_mk = mk - free.busy_actual_s - free.commit_stall_s + sched.busy_s
        best_priced = max(best_priced, out_tokens / max(priced_mk, span))
        best_free = max(best_free, out_tokens / free.makespan_s(mk, span))
        if name != "dynamic":
            fixed_tput[name] = out_tokens / mk
    assert max(fixed_tput.values()) * (1 - 1e-9) <= best_priced <= best_free * (1 + 1e-9)
