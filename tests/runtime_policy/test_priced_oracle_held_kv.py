"""The priced oracle charges a switch decided at a prefill-only run for the KV held then
(executor/priced_oracle.py `held_kv`): SGLang's separate prefill batch pauses every decoder, and
the recorded run lists none, but their KV is there and a move must carry it (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

from executor.oracle import RecordedRun, RecordingExecutor
from executor.priced_oracle import held_kv, prefilling_kv, trace
from executor.sim import SimExecutor
from runtime_policy.transitions import plan_transition


def _run(layout, ctx, owners, ids, prefill):
    k = len(prefill)
    return RecordedRun(layout, np.asarray(ctx, dtype=np.float64), np.asarray(owners, dtype=np.int64),
                       np.asarray(prefill, dtype=np.float64), np.zeros(k), None, np.full(k, 0.02),
                       np.asarray(ids, dtype=np.int64))


@pytest.fixture(scope="module")
def tables():
    from tests.runtime_policy.conftest import make_policy

    return make_policy()[1].tables


def test_a_prefill_only_run_holds_the_waiting_decoders_kv(tables):
    names = tables.layouts
    dop, cp = names.index("dop"), names.index("cp")
    rec = RecordingExecutor(SimExecutor(tables))
    ctx = [3000.0 + 500 * i for i in range(40)]
    owners = [i % tables.ranks for i in range(40)]
    rec.runs = [_run(dop, ctx, owners, range(40), [0.0] * 4),  # 4 decode steps
                _run(dop, [], [], [], [2048.0]),  # every group prefills: no decoder runs
                _run(dop, [c + 4 for c in ctx[1:]] + [2049.0], owners[1:] + [0], list(range(1, 40)) + [40], [0.0])]
    held = held_kv(rec)
    # the waiting decoders: the last decoding run's that decode again after (request 0 finished), grown 4
    assert np.array_equal(held[1][0], np.asarray(ctx[1:]) + 4) and np.array_equal(held[1][1], owners[1:])
    assert held[0][0] is rec.runs[0].context_tokens
    _, run_of, links, costs = trace(tables, rec)
    # the DOP -> CP move decided at the prefill-only run is the plan at that KV, as the policy prices it
    led = np.asarray(ctx[1:]) + 4 + tables.request_slack_tokens
    total = float(led.sum()) * tables.kv_bytes_per_token
    busy = []
    for g in tables.info.owner_groups:
        per = np.bincount(np.asarray(owners[1:]), weights=led, minlength=tables.ranks).reshape(int(g), -1).sum(axis=1)
        busy.append(float(per.max()) * tables.kv_bytes_per_token)
    want = plan_transition(tables, dop, cp, total, busy, 39)
    assert want.kv_recv_bytes_per_rank > 0
    assert links[1, dop, cp] == pytest.approx(want.link_s, rel=1e-9)
    assert costs[1, dop, cp] == pytest.approx(want.cost_s, rel=0.05)  # (the network share: the run's step)
    # the way back (CP's token slices gathered to each request's owner: KV alone, no weights), and
    # the same move of the KV the prefill-only run records (none): the under-charge this fixes
    back = plan_transition(tables, cp, dop, total, busy, 39)
    bare = plan_transition(tables, cp, dop, 0.0, [0.0] * len(names), 0)
    assert links[1, cp, dop] == pytest.approx(back.link_s, rel=1e-9)
    assert links[1, cp, dop] > 10 * bare.link_s and bare.kv_recv_bytes_per_rank == 0


def test_a_move_decided_mid_prefill_carries_the_prompt_prefilled_so_far(tables):
    """A run that prefills is priced step by step (`prefilling_kv`): a move decided after two of a
    prompt's chunks carries their KV to the prompt's owner; before, every move of the run was priced
    at its start, the prompt's KV left out."""
    names = tables.layouts
    dop, cp = names.index("dop"), names.index("cp")
    rec = RecordingExecutor(SimExecutor(tables))
    ctx = [3000.0 + 500 * i for i in range(40)]
    owners = [i % tables.ranks for i in range(40)]
    none = np.zeros(0, dtype=np.int64)
    first = _run(dop, ctx, owners, range(40), [0.0] * 2)
    first.prefill_request_ids, first.prefill_request_tokens = [none] * 2, [np.zeros(0)] * 2
    pre = _run(cp, [], [], [], [8192.0] * 3)  # request 40's 24K prompt, a chunk a step
    pre.prefill_request_ids = [np.array([40])] * 3
    pre.prefill_request_tokens = [np.array([8192.0])] * 3
    last = _run(dop, [c + 2 for c in ctx] + [24576.0], owners + [7], list(range(41)), [0.0])  # rank 7: the fullest
    last.prefill_request_ids, last.prefill_request_tokens = [none], [np.zeros(0)]
    rec.runs = [first, pre, last]
    points = prefilling_kv(rec)
    assert [len(p) for p in points] == [1, 3, 1]
    assert [float(p[0].sum()) for p in points[1]] == [0.0, 8192.0, 16384.0]
    assert all(int(o) == 7 for p in points[1] for o in p[1])  # the owner it decodes on
    _, price_of, links, _ = trace(tables, rec)
    at = price_of[2:5]  # the prefill run's three steps, each its own pricing point
    assert len(set(at.tolist())) == 3
    # CP -> DOP gathers each prompt's token slices to its owner: more to move after each chunk
    assert links[at[0], cp, dop] < links[at[1], cp, dop] < links[at[2], cp, dop]
