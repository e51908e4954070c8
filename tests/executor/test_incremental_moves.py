"""Incremental moves in the torch executor (Issue 27; gloo, tiny dims, T = 2 and 4): a switch moves
its requests in groups, each served in the destination once it lands (its source pages freed), the
rest in the source — so a move starts in a pool that holds its peak (the rest of the source + the
landed groups + one group in both) but not the whole union, completes, and computes every step as
the single-process reference; the pages each rank holds while each group is in flight are the
plan's (move_plan.group_page_profile); a transfer fault after a group landed drops only the group
in flight, which moves again, and no request is lost (incremental_scenarios.py says what runs)."""

import pytest

torch = pytest.importorskip("torch")

import incremental_scenarios as sc  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

FP32_TOL = 1e-5


@pytest.fixture(scope="module", params=[2, 4])
def inc(request):
    per_rank = spawn_ranks(sc.scenario_incremental, request.param)
    return request.param, per_rank


def _pairs(t):
    return [f"{a}->{b}" for a, b in sc._inc_pairs(t)]


def test_a_move_that_never_fit_whole_completes_in_groups(inc):
    t, per_rank = inc
    r = per_rank[0]
    for tag in _pairs(t):
        assert r[f"state/{tag}"] == "committed", tag
        assert r[f"layout/{tag}"] == tag.split("->")[1]
        assert r[f"groups/{tag}"] == sc.INC_GROUPS
        assert r[f"mixed_steps/{tag}"] >= 2, tag  # steps with rows served in both layouts
        assert r[f"err/{tag}"] < FP32_TOL, tag  # every step as the reference computes it
    # out of an owner layout's pool into a token split: the pool the groups move in (their peak +
    # both layouts' growth over the run) is smaller than the whole union needs
    for tag in ("dop->cp",) + (("dptp->cp",) if t >= 4 else ()):
        inc_slots, whole_slots = r[f"slots/{tag}"]
        assert whole_slots > inc_slots, tag
    # and the whole move, in that pool, is refused before it starts (DOP -> CP: its union exceeds the
    # pool by more than the growth margin; DPTP -> CP's by less, so its whole move would still start)
    assert r["whole_state/dop->cp"] == "aborted" and "free page slots" in r["whole_reason/dop->cp"]


def test_each_rank_holds_the_plans_pages_while_each_group_moves(inc):
    t, per_rank = inc
    for rank, r in enumerate(per_rank):
        for tag in _pairs(t):
            # group 0 at the switch's start, each later group as it starts (nothing finished meanwhile)
            assert r[f"group_pages/{tag}"] == r[f"profile/{tag}"], (rank, tag)


def test_a_fault_after_a_group_landed_loses_nothing(inc):
    _, per_rank = inc
    for r in per_rank:
        assert r["fault/state"] == "committed" and r["fault/failures"] == 1
        assert "injected" in r["fault/reason"] and "\n" not in r["fault/reason"]
        assert r["fault/err"] < FP32_TOL  # the group in flight kept serving in the source, then moved again
        assert r["fault/requests_whole"]


@pytest.mark.parametrize("t", [2, 4])
def test_the_serving_loop_moves_incrementally_on_the_torch_executor(t):
    r = spawn_ranks(sc.scenario_loop_incremental, t)[0]
    assert r["switches"] == [("dop", "cp")] and not r["aborted"]
    assert r["groups"] == sc.INC_GROUPS and r["landed_before_commit"] > 0  # groups served in CP before the commit
    assert r["status"] == [4]  # every request done (runtime_policy.waiting.DONE)
    err, n = r["outputs_vs_fixed"]
    assert n > 0 and err < 1e-5  # every position as a never-switching DOP run computes it
    assert all(r["kv_identical"])


def test_the_executors_page_profile_is_the_ledgers_formula():
    """Equal requests, owners alternating, groups of one request per owner: the pages a rank holds
    while each group moves (DOP -> CP on 2 ranks) follow kv_ledger.move_held_bytes in pages, and their
    most is its move_peak_bytes — the executor's move is the plan's and the ledger's."""
    from executor.torch_executor.move_plan import plan_incremental
    from runtime_policy.kv_ledger import move_held_bytes, move_peak_bytes

    t, page, n_req, pages_each, groups = 2, 4, 8, 6, 4
    lens = {q: page * pages_each for q in range(n_req)}
    owners = {q: q % t for q in range(n_req)}
    inc = plan_incremental("dop", "cp", t, lens, owners, page, groups)
    assert [len(g) for g in inc.groups] == [2] * groups and all({owners[q] for q in g} == {0, 1} for g in inc.groups)
    h_s = n_req // t * pages_each  # an owner's requests, whole
    h_d = n_req * pages_each // t  # CP: every request's pages interleaved over the ranks
    union = h_s + (n_req - n_req // t) * pages_each // t  # + the other owner's requests' share
    for r in range(t):
        col = [row[r] for row in inc.profile]
        assert col == [move_held_bytes(h_s, h_d, union, groups, k) for k in range(groups)]
        assert inc.peak_pages[r] == move_peak_bytes(h_s, h_d, union, groups) < union
