"""The destination's KV pool fills while an incremental move runs, after some groups landed (Issue
27 item 1; gloo, tiny dims, T = 2 and 4): the move ends with every request's KV whole in exactly
one layout — the landed requests served in the destination, the others preempted and served
again later — and the loop's decoders are the executor's at every boundary (move_fill_scenarios.py
says what runs). Every request's output at every position is a never-switching run's."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import move_fill_scenarios as sc  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402


@pytest.mark.parametrize("t", [2, 4])
def test_a_destination_that_fills_after_groups_landed_keeps_every_request(t):
    per_rank = spawn_ranks(sc.scenario_move_fill, t)
    r = per_rank[0]
    assert r["landed"] > 0  # groups had landed when the destination filled
    assert r["switches"] == [("dop", "tp")] and not r["aborted"]  # finished into the destination
    fin = r["finished_early"]
    assert fin is not None and fin["preempted"] > 0 and fin["kept"] > 0
    assert r["status"] == [4]  # every request done (runtime_policy.waiting.DONE)
    assert r["preemptions"] >= fin["preempted"]
    err, n = r["outputs_vs_fixed"]
    assert n > 0 and err < 1e-5  # the preempted requests prefilled again in TP compute what DOP did
    for rr in per_rank:
        assert rr["mismatch"] == [] and rr["whole"] and rr["layout_after"] == "tp"
