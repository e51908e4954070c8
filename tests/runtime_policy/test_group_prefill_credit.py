"""group_prefill.credit from each owner group's own queue (`group_lists`: the loop's kept lists, or
the queue split) credits what the whole-queue pass credited — the same prompt tokens left per
request, the same requests finished, in admission order — one group or several."""

from types import SimpleNamespace

import numpy as np
import pytest

from runtime_policy.group_prefill import credit
from runtime_policy.loop import ServingLoop


def _whole_queue_credit(loop, done_by):
    """The pass over the whole queue in admission order (credit as it was before the per-group lists)."""
    r = loop.T // loop.groups[loop.layout]
    finished = []
    for i in loop.prefill_q:
        g = loop.owner[i] // r
        d = done_by.get(g, 0)
        if d <= 0:
            continue
        left = loop.pre_left[i]
        take = left if left < d else d
        loop.pre_left[i] = left - take
        done_by[g] = d - take
        if take == left:
            finished.append(i)
    return finished


class _Kept(SimpleNamespace):
    """A loop that keeps its per-group queues and admission order, as ServingLoop does."""

    prefill_groups = ServingLoop.prefill_groups


@pytest.mark.parametrize("groups", [1, 2, 8])
@pytest.mark.parametrize("kept", [False, True])
def test_credit_matches_the_whole_queue_pass(groups, kept):
    rng = np.random.default_rng(groups * 2 + kept)
    t = 8
    for _ in range(300):
        n = int(rng.integers(1, 40))
        order = [int(x) for x in rng.permutation(n)]  # admission order, not request order
        pre_left = [int(x) for x in rng.choice([1, 7, 100, 256, 1000, 4096], n)]
        owner = [int(x) for x in rng.integers(0, t, n)]
        r = t // groups
        done_by = {}
        for g in range(groups):
            if rng.random() < 0.7:
                done_by[g] = int(rng.choice([0, 1, 64, 256, 2048, 10**6]))
        fields = dict(layout=0, groups=[groups], T=t, owner=owner, prefill_q=list(order))
        want_left, want_done = list(pre_left), dict(done_by)
        want = _whole_queue_credit(SimpleNamespace(pre_left=want_left, **fields), want_done)
        if kept:
            seq = [0] * n
            for k, i in enumerate(order):
                seq[i] = k
            loop = _Kept(pre_left=list(pre_left), pq_seq=seq, pq_for=0, pq_groups=[], **fields)
        else:
            loop = SimpleNamespace(pre_left=list(pre_left), **fields)
        got_done = dict(done_by)
        assert credit(loop, got_done) == want
        assert loop.pre_left == want_left
        assert {g: d for g, d in got_done.items() if d > 0} == {g: d for g, d in want_done.items() if d > 0}
        assert r * groups == t
