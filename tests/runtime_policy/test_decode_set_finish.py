"""Issue 27 item 5: DecodeSet's completions (`done_by`, `first_to_finish`, `fin_min`), kept per owner
group with each group's first decoder cached (`fin_top`, `fin_at`), equal the decoders' own done
steps through joins, leaves, completions, runs in which groups sit out (their clocks lag) and
regroupings."""

import numpy as np
import pytest

from runtime_policy.decode_set import DecodeSet


def _done_step(ds: DecodeSet, i: int) -> int:
    """The decode step (dsteps) at which decoder i's context reaches its end."""
    return int(ds.done_at[i] - ds.c0_of[i]) + ds.lag[ds.group_of[i]]


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_completions_match_the_decoders_done_steps(groups):
    rng = np.random.default_rng(groups)
    t, n = 8, 3000
    ds = DecodeSet(n, n, t, 2048.0, groups)
    nxt = 0
    for _ in range(2500):
        op = rng.random()
        if op < 0.35 and nxt < n:  # a request joins
            c = float(rng.integers(1, 5000))
            ds.join(nxt, c, int(rng.integers(0, t)), c + float(rng.integers(1, 120)))
            nxt += 1
        elif op < 0.45 and ds.b:  # one leaves (a preemption)
            i = ds.slot_id[int(rng.integers(0, ds.b))]
            ds.leave(i, ds.owner_of[i])
            ds.first_to_finish()
        elif op < 0.9:  # a run to the first completion (or less), some groups sitting out
            k = max(1, min(int(rng.integers(1, 40)), ds.fin_min - ds.dsteps)) if ds.b else 1
            sat = tuple(g for g in range(ds.groups) if rng.random() < 0.2)
            ds.advance(k, sat)
            if sat:
                ds.first_to_finish()
            live = ds.slot_id[: ds.b]
            want = sorted((i for i in live if _done_step(ds, i) <= ds.dsteps), key=ds.jseq_of.__getitem__)
            got = ds.done_by(ds.dsteps)
            assert got == want
            for i in got:
                ds.leave(i, ds.owner_of[i])
        else:  # a switch's commit regroups
            ds.regroup(int(rng.choice([1, 2, 4, 8])))
        live = ds.slot_id[: ds.b]
        first = min((_done_step(ds, i) for i in live), default=0)
        assert ds.first_to_finish() == first and ds.fin_min == first
