"""DecodeSet.capped_sum (Σ min(context, top-k) of the decoders) from its running totals equals the
sum over the decoders' contexts, through joins, leaves, runs in which owner groups sit out (their
clocks lag), regroupings and contexts crossing top-k inside and between runs; and the loop's
per-group prefill queues (ServingLoop.prefill_groups) stay the prefill queue split by owner group."""

import numpy as np
import pytest

from runtime_policy.decode_set import DecodeSet


def _brute(ds: DecodeSet, at: int, topk: float) -> float:
    """Σ min(context at decode step `at`, top-k) from each decoder's own context (no group held)."""
    total = 0.0
    for i in ds.slot_id[: ds.b]:
        c = ds.c0_of[i] + (at - ds.lag[ds.group_of[i]])
        total += min(c, topk)
    return total


@pytest.mark.parametrize("groups", [1, 2, 8])
@pytest.mark.parametrize("topk", [64.0, 2048.0, 100.5])
def test_capped_sum_matches_the_decoders_contexts(groups, topk):
    rng = np.random.default_rng(groups * 7 + int(topk))
    t, n = 8, 400
    ds = DecodeSet(n, n, t, topk, groups)
    nxt = 0
    for _ in range(600):
        op = rng.random()
        if op < 0.35 and nxt < n:  # a request joins, below or above top-k
            c = float(rng.integers(1, int(3 * topk)))
            ds.join(nxt, c, int(rng.integers(0, t)), c + float(rng.integers(1, 200)))
            nxt += 1
        elif op < 0.5 and ds.b:  # one leaves
            i = ds.slot_id[int(rng.integers(0, ds.b))]
            ds.leave(i, ds.owner_of[i])
        elif op < 0.9:  # a run of k steps, some groups sitting out
            k = int(rng.integers(1, 40))
            sat = tuple(g for g in range(ds.groups) if rng.random() < 0.3)
            if sat and rng.random() < 0.5:
                ds.capped_sum(ds.dsteps, sat)  # the sitting-out groups read at their clocks
            elif not sat:  # the run's last step, as the loop reads it before the run
                assert ds.capped_sum(ds.dsteps + k - 1) == _brute(ds, ds.dsteps + k - 1, topk)
            ds.advance(k, sat)
        elif op < 0.95:  # a switch's commit regroups (the lags folded into the contexts)
            ds.regroup(int(rng.choice([1, 2, 4, 8])))
        assert ds.capped_sum(ds.dsteps) == _brute(ds, ds.dsteps, topk)


class _Loop:
    """The few ServingLoop fields the prefill queue methods read."""

    from runtime_policy.loop import ServingLoop

    prefill_groups = ServingLoop.prefill_groups
    pq_add = ServingLoop.pq_add
    pq_remove = ServingLoop.pq_remove

    def __init__(self, n: int, t: int):
        self.T, self.prefill_q, self.owner = t, [], [0] * n
        self.pq_groups, self.pq_for, self.pq_seq, self.pq_next = [], 0, [0] * n, 0


def test_prefill_groups_stay_the_queue_split_by_group():
    rng = np.random.default_rng(3)
    t, n = 8, 300
    loop = _Loop(n, t)
    nxt = 0
    for _ in range(2000):
        if rng.random() < 0.5 and nxt < n:
            loop.owner[nxt] = int(rng.integers(0, t))
            loop.pq_add(nxt)
            nxt += 1
        elif loop.prefill_q:
            loop.pq_remove(loop.prefill_q[int(rng.integers(0, len(loop.prefill_q)))])
        g = int(rng.choice([1, 2, 4, 8]))
        got = loop.prefill_groups(g)
        want = [[i for i in loop.prefill_q if loop.owner[i] // (t // g) == x] for x in range(g)]
        assert got == want
        seq = [loop.pq_seq[i] for i in loop.prefill_q]
        assert seq == sorted(seq)


def test_the_loop_and_decode_set_keep_every_field_in_a_slot():
    """ServingLoop and DecodeSet declare their fields as slots (read in every phase of every run; an
    instance dict past 30 keys reads slower): a run leaves nothing in their instance dicts (a field
    added without its slot would land there, correct but slower)."""
    from executor.sim import SimExecutor
    from runtime_policy.loop import LoopConfig, make_loop
    from runtime_policy.ordering import Ordering
    from runtime_policy.workloads import bursty
    from tests.runtime_policy.conftest import make_policy

    w = bursty(120, seed=5, rate_per_s=40.0)
    _, lp = make_policy()
    loop = make_loop(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, lp, Ordering("fcfs"),
                     SimExecutor(lp.tables), LoopConfig(max_batch=1024, prefill_chunk_tokens=2048, max_run_steps=32))
    loop.run()
    assert loop.ended == w.requests
    assert vars(loop) == {} and vars(loop.dec) == {}

