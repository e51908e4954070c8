"""The destination's KV pool fills while an incremental move runs, in the simulator (Issue 27 item
1): once a group has landed the move is not aborted (the landed groups' source pages are gone) but
finished — committed with what has landed, the requests of the groups not landed preempted by the
engine's victim rule — exactly as the torch executor does it (tests/executor/test_move_fill.py);
while nothing has landed it is aborted, the old layout whole. DeepSeek-V3.2 on 8 × H200 (its move
spans several steps), 128 requests of 17K context in DOP, moving to CP in 8 groups."""

import numpy as np
import pytest

from executor.sim import SimExecutor
from runtime_policy.loop import ServingLoop
from runtime_policy.ordering import Ordering
from runtime_policy.serving_types import LoopConfig
from runtime_policy.waiting import DONE
from tests.runtime_policy.move_fill_policy import FillMove

GROUPS = 8


def _serve(t, room: int, fill: float = 0.62, src: str = "dop", dst: str = "cp"):
    """128 requests filling `src`'s owners to `fill` of the pool (CP's pool, with replicated
    weights, then holds them for a few hundred steps), 400 output tokens each; the move starts with
    `room` steps left in the destination."""
    a = t.layouts.index(src)
    per = 16 * t.ranks
    cap = float(t.info.kv_pool_bytes[a]) / (t.kv_bytes_per_token * float(t.info.group_share[a]))
    ctx = int(fill * cap * t.info.owner_groups[a] / per - t.request_slack_tokens - t.info.extra_slack_tokens[a])
    arr, inp, out = np.zeros(per), np.full(per, ctx, dtype=np.int64), np.full(per, 400, dtype=np.int64)
    policy = FillMove(t, src, dst, GROUPS, per, room)
    loop = ServingLoop(arr, inp, out, t, policy, Ordering("fcfs"), SimExecutor(t),
                       LoopConfig(max_batch=per, max_run_steps=1), None)
    policy.loop = loop
    seen = {}
    orig = loop._turn

    def turn():
        """At the boundary after the move ended: the ledger holds exactly the decoders' KV."""
        orig()
        if loop.moves and loop.inflight is None and "ledger" not in seen:
            ids, c0, _ = loop.dec.arrays()
            want = np.bincount(np.asarray(loop.owner)[ids], weights=c0 + loop.dec.dsteps + loop.slack,
                               minlength=t.ranks)
            seen["ledger"] = (list(loop.kv.tokens), want.tolist(), len(loop.prefill_q))
            seen["decoding"] = sorted(int(q) for q in ids)

    loop._turn = turn
    return loop, loop.run(), seen


def test_a_destination_that_fills_after_groups_landed_finishes_the_move(dsv32):
    _, pol = dsv32
    t = pol.tables
    loop, res, seen = _serve(t, room=2)
    m = loop.moves[0]
    fin = m["finished_early"]
    assert 0 < m["landed"] < GROUPS and fin is not None  # groups had landed when the destination filled
    assert [(s.from_layout, s.to_layout, s.aborted) for s in loop.switches] == [("dop", "cp", "")] and not loop.aborted
    # the groups not landed are what was preempted, and the rest decode in CP
    unlanded = {q for g in m["members"][m["landed"]:] for q in g}
    assert fin["preempted"] == len(unlanded) and fin["kept"] == 16 * t.ranks - len(unlanded)
    assert not unlanded & set(seen["decoding"])
    held, want, prefilling = seen["ledger"]  # the ledger's tokens per owner rank: the decoders' own
    assert prefilling == 0 and held == pytest.approx(want, rel=1e-12)
    assert (res.status == DONE).all()  # nothing lost: the preempted requests were served again
    assert res.preemptions.sum() >= len(unlanded)


def test_a_destination_with_room_for_the_move_commits_it_whole(dsv32):
    _, pol = dsv32
    loop, res, _ = _serve(pol.tables, room=20)
    assert [(s.from_layout, s.to_layout, s.aborted) for s in loop.switches] == [("dop", "cp", "")]
    assert loop.moves[0]["finished_early"] is None and (res.status == DONE).all()


def test_a_destination_that_fills_before_any_group_landed_aborts_the_move(dsv32):
    _, pol = dsv32
    loop, res, _ = _serve(pol.tables, room=0)
    assert not loop.switches and [(s.from_layout, s.to_layout) for s in loop.aborted] == [("dop", "cp")]
    assert loop.moves[0]["finished_early"] is None and (res.status == DONE).all()
