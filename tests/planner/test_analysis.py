import numpy as np
import pytest

import planner
from planner.capacity import capacity, max_concurrency
from planner.errors import SpecError
from planner.load import DecodeLoad
from planner.regimes import regimes
from planner.triage import triage_step
from planner.walls import walls
from tests.planner.factories import deployment


def test_max_concurrency_is_the_largest_batch_that_fits():
    dep = deployment(attn="dp", gpus=8)
    n = max_concurrency(dep, [32768])[0]
    assert planner.step_cost(dep, DecodeLoad.equal(n, 32768)).kv_fits[0]
    assert not planner.step_cost(dep, DecodeLoad.equal(n + 1, 32768)).kv_fits[0]


def test_dp_holds_about_t_times_tp_for_mla():
    tp = capacity(deployment(attn="tp", gpus=8), [32768])
    dop = capacity(deployment(attn="dop", gpus=8), [32768])
    # same weights per rank (both shard attention), MLA KV replicated 8× under TP, owned once under DOP
    assert tp.kv_replication == 8 and dop.kv_replication == 1
    assert dop.distinct_tokens == pytest.approx(8 * tp.distinct_tokens, abs=8)  # each floored
    assert dop.max_concurrency[0] >= 7 * tp.max_concurrency[0]


def test_gqa_tp_splits_kv_by_heads():
    # llama 70B has 8 KV heads: on 8 ranks TP splits KV 8 ways (no replication); on 8 ranks of a
    # 4-KV-head model it would replicate 2×.
    tp = capacity(deployment(model="llama-3.1-70b", attn="tp", gpus=8), [8192])
    assert tp.kv_replication == 1
    q = capacity(deployment(model="qwen3-235b-a22b", attn="tp", gpus=8), [8192])
    assert q.kv_replication == 2


def test_walls_kv_wall_is_max_concurrency_plus_one():
    dep = deployment(attn="tp", gpus=8)
    w = walls(dep, "batch", 32768, 1, 4096)
    assert w.walls["kv_capacity"] == max_concurrency(dep, [32768])[0] + 1
    assert [r for r, _ in w.order][0] == str(w.binding[0])
    loads = [x for _, x in w.order]
    assert loads == sorted(loads)


def test_walls_along_context_finds_a_kv_wall():
    w = walls(deployment(attn="dp", gpus=8), "context", 64, 512, 1 << 20)
    kv = w.walls["kv_capacity"]
    assert kv is not None
    dep = deployment(attn="dp", gpus=8)
    assert not planner.step_cost(dep, DecodeLoad.equal(64, kv)).kv_fits[0]
    assert planner.step_cost(dep, DecodeLoad.equal(64, kv * 0.999)).kv_fits[0]


def test_walls_reject_bad_ranges():
    with pytest.raises(SpecError):
        walls(deployment(), "batch", 1000, 10, 5)
    with pytest.raises(SpecError):
        walls(deployment(), "width", 1000, 1, 5)


def test_regimes_marks_infeasible_and_picks_the_fastest():
    deps = [deployment(attn=a, gpus=8) for a in planner.ATTN_LAYOUTS]
    r = regimes(deps, [1, 64, 100_000], [4096, 1 << 20])
    assert r.best[2, 1] == -1 and r.best_label(2, 1) == "infeasible"
    i, j = 1, 0
    k = r.best[i, j]
    assert r.times_s[k, i, j] == np.min(r.times_s[:, i, j])
    # TP wins single-stream decode (weights sharded, fewest collectives per token)
    assert r.best_label(0, 0).startswith("tp/")


def test_triage_verdicts():
    c = planner.step_cost(deployment(attn="dp", gpus=8), DecodeLoad.equal(32, 8192))
    lo, hi = c.floor_max_s[0], c.floor_sum_s[0]
    m = np.array([0.5 * lo, (lo + hi) / 2, hi * 1.05, hi * 1.5])
    t = triage_step(c, m)
    assert t.verdict.tolist() == ["below_floor", "inside", "above_sum", "above_sum"]
    assert t.overlap_quality[1] == pytest.approx(0.5)
    assert "hbm" in t.violated_resources[0]
    assert t.profile.tolist() == [False, False, False, True]
    assert t.profile_resource[3] == "hbm"
    assert t.residual_fraction[3] == pytest.approx(0.5)
    with pytest.raises(SpecError):
        triage_step(c, -1.0)
