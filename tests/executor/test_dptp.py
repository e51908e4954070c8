"""DP attention with attention TP inside groups (dptp) on the torch executor, and every registered
layout run or refused (gloo, tiny dims with 8 heads, T = 2 and 4; at T = 4 the tables' default G = 2
groups of R = 2 ranks, at T = 2 two groups of one rank: DP's placement).

dptp's decode output equals TP's on the same requests (the same attention, heads split R ways
inside the owner group instead of T ways over all ranks), chunked prefill then decode through dptp
matches the reference, switches into and out of dptp keep outputs and KV, and every layout of the
registry (runtime_policy.tables.layout_names) either runs three steps against the reference or is
refused in one line naming it: never a silent no-pool, never a crash (dptp_scenarios.py).
"""

import pytest

torch = pytest.importorskip("torch")

import dptp_scenarios as sc  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402
from runtime_policy.tables import layout_names  # noqa: E402

FP32_TOL = 1e-5


@pytest.fixture(scope="module", params=[2, 4], ids=lambda t: f"T{t}")
def ran(request):
    per_rank = spawn_ranks(sc.scenario_dptp, request.param)
    for other in per_rank[1:]:  # every rank saw the same outcomes (its own holdings and head slice aside)
        assert {k: v for k, v in other.items() if "holds" not in k and "free" not in k and "heads" not in k
                and not k.startswith("switch/")} == \
            {k: v for k, v in per_rank[0].items() if "holds" not in k and "free" not in k and "heads" not in k
             and not k.startswith("switch/")}
    merged = dict(per_rank[0])
    merged["heads_by_rank"] = [r["dptp_heads"] for r in per_rank]
    merged["holds_by_rank"] = [r[f"dptp_holds_its_group/{k}"] for k, r in enumerate(per_rank)]
    merged["switch_by_rank"] = [{k: v for k, v in r.items() if k.startswith("switch/")} for r in per_rank]
    return merged


def test_dptp_places_g_groups_of_r_ranks(ran):
    t = ran["world_size"]
    g = 2
    r = t // g
    # T = 2: two groups of one rank, weights replicated: DP's primitive; T = 4: TP-2 inside 2 groups
    assert ran["dptp_placement"] == (("dp" if r == 1 else "dptp"), g, r, r if r > 1 else 1)
    # each rank keeps its R-th of the 8 heads, by its index inside the group
    assert ran["heads_by_rank"] == [((k % r) * (8 // r), 8 // r) if r > 1 else (0, 8) for k in range(t)]
    assert all(ran["holds_by_rank"])  # a rank holds exactly its group's requests


def test_dptp_decode_equals_tp_and_the_reference(ran):
    assert ran["dptp_vs_tp_err"] <= FP32_TOL
    assert ran["dptp_ref_err"] <= FP32_TOL
    assert ran["dptp_ranks_agree"]
    assert ran["dptp_single_err"] <= FP32_TOL  # groups that own no request
    assert ran["dptp_churn_err"] <= FP32_TOL  # requests leave and join every step


def test_dptp_prefill_then_decode(ran):
    assert ran["dptp_prefill_err"] <= FP32_TOL
    assert ran["dptp_prefill_kv_err"] <= FP32_TOL
    for src, dst in sc.DPTP_PREFILL_PAIRS:
        state, layout, err, kv_err = ran[f"prefill_switch/{src}->{dst}"]
        assert (state, layout) == ("committed", dst) and err <= FP32_TOL and kv_err <= FP32_TOL


@pytest.mark.parametrize("pair", sc.DPTP_PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_switches_into_and_out_of_dptp(ran, pair):
    """Pages move from the source's holders to the destination's (a DP owner's pages to the other
    rank of its DPTP group; TP's copies dropped outside the owner group), head weights are sliced,
    kept or all-gathered and re-cut from the placements' weight splits; outputs equal the
    never-switched run's and KV is identical across the commit."""
    key = f"{pair[0]}->{pair[1]}"
    t = ran["world_size"]
    for rank, per in enumerate(ran["switch_by_rank"]):
        s = per[f"switch/{key}"]
        assert s["states"] == ["copying", "committed"] and s["layout"] == pair[1]
        assert s["kv_identical"] is True
        assert s["err"] <= FP32_TOL and s["ref_err"] <= FP32_TOL
        ws = {"tp": t, "dop": t, "cp": 1, "dp": 1, "dptp": 2 if t == 4 else 1}
        w_src, w_dst = ws[pair[0]], ws[pair[1]]
        assert s["weights"] == ("keep" if w_src == w_dst else "slice" if w_src == 1 else "gather")
        assert (s["head_start"], s["heads"]) == ((rank % w_dst) * (8 // w_dst), 8 // w_dst)
    if t == 4:
        tp_dptp = ran["switch_by_rank"][0]["switch/tp->dptp"]
        assert tp_dptp["pages_moved"] == 0  # TP holds every page everywhere: DPTP only frees some
        assert ran["switch_by_rank"][0]["switch/dp->dptp"]["pages_moved"] > 0  # to the owner's group peer


@pytest.mark.parametrize("name", layout_names())
def test_every_registered_layout_runs_or_is_refused_in_one_line(ran, name):
    got = ran[f"registry/{name}"]
    if got[0] == "ran":
        assert got[1] <= FP32_TOL, got
    else:
        assert got[0] == "refused" and name in got[1] and "\n" not in got[1] and "torch executor" in got[1], got
