"""The policy drives the torch executor (gloo, tiny dims, T = 2 and 4): the serving loop on real
layers switches layout three times, every request completes, every request's outputs match a
never-switching run, KV is identical across each commit, and the loop on the simulator decides
exactly as on the torch executor given the same step times (executor_serving_scenarios.py says what
runs; faults in the loop: test_executor_faults.py)."""

import pytest

torch = pytest.importorskip("torch")

import executor_serving_scenarios as sc  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

FP32_TOL = 1e-5
DONE = 4  # runtime_policy.loop.DONE


@pytest.fixture(scope="module", params=[2, 4], ids=lambda t: f"T{t}")
def served(request):
    # NOTE: generous fault and side-transfer timeouts (defaults 1.5 s and 5 s, dist.py): this scenario
    # injects no fault. The simulator-vs-executor check on the measured tables failed on loaded hosts:
    # step times measured there made the policy move DOP -> CP in groups, and the loop committed the
    # move one boundary after it began where the executor lands one group a boundary (fixed in
    # runtime_policy/switching.py `account_move`; those tables are pinned in
    # test_an_incremental_move_lands_one_group_a_boundary_in_both)
    return spawn_ranks(sc.scenario_serving, request.param, fault_timeout_s=60.0, side_timeout_s=120.0)


def test_every_rank_saw_the_same_run(served):
    keys = ("sim", "torch", "fixed", "measured_sim", "measured_torch", "kv_identical", "final_layout")
    for other in served[1:]:
        assert {k: other[k] for k in keys} == {k: served[0][k] for k in keys}


def test_policy_switches_on_real_layers_and_every_request_completes(served):
    r = served[0]["torch"]
    assert len(r["switches"]) >= 2, r["switches"]
    assert [s[:3] for s in r["switches"]][:2] == [("dop", "tp", "switch_throughput"), ("tp", "dop", "switch_capacity")]
    assert all(s == DONE for s in r["status"])
    assert served[0]["kv_identical"] == [True] * len(r["switches"])  # logical-order checksum across each commit
    assert all(s >= 0 for s in served[0]["stalls_measured_s"]) and len(served[0]["stalls_measured_s"]) == len(r["switches"])


def test_outputs_match_a_never_switching_run(served):
    assert served[0]["fixed"]["switches"] == []
    err, compared = served[0]["outputs_vs_fixed"]
    n_out = sum(1 for s in served[0]["torch"]["status"] if s == DONE)
    assert compared >= 20 * n_out  # every request's positions, not a few
    assert err <= FP32_TOL


def test_the_simulator_and_the_torch_executor_decide_the_same(served):
    """Same tables, same clock (the tables'), same loop: every decision, switch and request time
    equal; then again on tables holding the torch executor's measured step times."""
    for sim, real in (("sim", "torch"), ("measured_sim", "measured_torch")):
        assert served[0][real] == served[0][sim]


def test_an_incremental_move_lands_one_group_a_boundary_in_both():
    """Step tables under which the policy moves DOP -> CP in groups: the simulator commits the move
    when the torch executor does, after each group has landed at a boundary of its own."""
    got = spawn_ranks(sc.scenario_incremental_landing, 4, fault_timeout_s=60.0, side_timeout_s=120.0)[0]
    assert [s[:2] for s in got["torch"]["switches"]] == [("dop", "cp")]
    assert got["torch"] == got["sim"]
