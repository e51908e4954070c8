"""group_prefill.group_queues reads each owner group's queue only up to what a run can use (its
head's steps × its chunk, `_run_cap`): every run it can be in plans the same prefill as with the
whole queue summed (the old reading), one group or several, SGLang's separate prefill or a mixed
budget."""

from types import SimpleNamespace

import numpy as np
import pytest

from runtime_policy.group_prefill import GroupQueue, group_queues, pieces, plan_run, steps_to_first_completion


def _whole_queues(loop):
    """The queues with every request of each group and its whole Σ prompt tokens left."""
    g_count, chunk = loop.groups[0], loop.group_chunk[0]
    r = loop.T // g_count
    by = {}
    for i in loop.prefill_q:
        g = loop.owner[i] // r
        if g not in by:
            c = chunk if loop.separate else max(chunk - (loop.dec.b if g_count == 1 else loop.dec.gcount[g]), 1)
            by[g] = GroupQueue(g, [], c, 0)
        by[g].ids.append(i)
        by[g].tokens_left += loop.pre_left[i]
    return [by[g] for g in sorted(by)]


@pytest.mark.parametrize("groups", [1, 2, 8])
@pytest.mark.parametrize("separate", [True, False])
def test_every_run_plans_as_with_the_whole_queue(groups, separate):
    rng = np.random.default_rng(groups * 2 + separate)
    for _ in range(200):
        n, t = int(rng.integers(1, 60)), 8
        chunk = int(rng.choice([256, 1024, 8192]))
        lengths = [1, chunk - 1, chunk, 2 * chunk, 3 * chunk + 7, 4 * chunk - 1, 500, 20000]  # around the caps
        pre_left = [int(x) for x in rng.choice(lengths, n)]
        ctx = [float(p + rng.integers(0, 5000)) for p in pre_left]
        owner = [int(x) for x in rng.integers(0, t if rng.random() < 0.7 else t // 2, n)]
        dec = SimpleNamespace(b=int(rng.integers(0, 300)), gcount=[int(x) for x in rng.integers(0, 40, groups)])
        loop = SimpleNamespace(layout=0, groups=[groups], group_chunk=[chunk], pre_left=pre_left, owner=owner,
                               prefill_q=list(range(n)), separate=separate, dec=dec, T=t, ctx=ctx)
        got, want = group_queues(loop), _whole_queues(loop)
        assert [(q.group, q.chunk, q.ids[0]) for q in got] == [(q.group, q.chunk, q.ids[0]) for q in want]
        assert all(q.tokens_left <= w.tokens_left for q, w in zip(got, want))
        most = steps_to_first_completion(loop, want)
        assert steps_to_first_completion(loop, got) == most
        for k in sorted({1, most, max(1, most // 2)}):
            assert plan_run(loop, got, k) == plan_run(loop, want, k)
            assert pieces(loop, got, k) == pieces(loop, want, k)
