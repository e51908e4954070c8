"""A new attention layout needs no runtime edit: a toy one, registered from this fixture (vLLM
DCP's shape: CP's token-split KV with TP-sharded weights), is compiled into the tables, gets its
transition plans from what it declares, is decided on, and served in the simulator."""

import numpy as np
import pytest

import planner
from planner.layouts.base import _ATTN, register_attention_layout
from planner.layouts.cp import ContextParallel

GB = 1e9


class ToyDecodeContextParallel(ContextParallel):
    """CP's busiest-rank loads and collectives, with sharded weights declared."""

    name = "toy"
    description = "test layout: KV split by tokens, weights sharded"
    group_rule = "one"
    kv_in_group = "tokens"
    weights_sharded = True
    head_sharded = True


@pytest.fixture
def toy(monkeypatch):
    register_attention_layout(ToyDecodeContextParallel)
    # NOTE: make_deployment checks a typed tuple of names (planner/deployment.py), not the registry
    monkeypatch.setattr("planner.deployment.ATTN_LAYOUTS", planner.ATTN_LAYOUTS + ("toy",))
    yield
    _ATTN.unregister("toy")


def test_toy_layout_is_compiled_planned_decided_and_served(toy):
    from executor.sim import simulate
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs, PolicyState
    from runtime_policy.transitions import all_plans, plan_transition
    from runtime_policy.workloads import chat, shrinking

    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    pol = LayoutPolicy.compile(dep, knobs=PolicyKnobs(max_batch=256), max_prefill_tokens=1024)
    t = pol.tables
    assert t.layouts[-1] == "toy" and t.layouts[:-1] == tuple(n for n in planner.ATTN_LAYOUTS if n != "toy")
    toy_i, tp, cp, dop = (t.layouts.index(x) for x in ("toy", "tp", "cp", "dop"))
    assert t.info.placements[toy_i].token_split == 8 and t.info.owner_groups[toy_i] == 1
    assert t.info.group_share[toy_i] == pytest.approx(1 / 8)  # from CP's own share, not from a name
    assert t.info.weights_bytes[toy_i] == pytest.approx(t.info.weights_bytes[tp])  # sharded, as declared
    n = len(t.layouts)
    assert len(all_plans(t, 8 * GB, 1 * GB)) == n * (n - 1)  # every ordered pair
    # toy -> tp: every rank gathers the 7/8 of every request it lacks; weights stay sharded
    p = plan_transition(t, toy_i, tp, 8 * GB, 1 * GB)
    assert p.kv_recv_bytes_per_rank == pytest.approx(8 * GB * 7 / 8) and p.weight_recv_bytes_per_rank == 0
    # cp -> toy: two token slices taken as independent, 1/8 − 1/64 of all; CP's replicated weights dropped
    p = plan_transition(t, cp, toy_i, 8 * GB, 1 * GB)
    assert p.kv_recv_bytes_per_rank == pytest.approx(8 * GB * (1 / 8 - 1 / 64)) and p.weight_recv_bytes_per_rank == 0
    # toy -> cp: the replicated weights CP holds beyond the shards are gathered
    p = plan_transition(t, toy_i, cp, 8 * GB, 1 * GB)
    assert p.weight_recv_bytes_per_rank == pytest.approx(t.info.weights_bytes[cp] - t.info.weights_bytes[toy_i])
    # dop -> toy: each owner keeps 1/8 of its own requests and receives 1/8 of the others'
    p = plan_transition(t, dop, toy_i, 8 * GB, 1 * GB)
    assert p.kv_recv_bytes_per_rank == pytest.approx((8 * GB - 1 * GB) / 8)

    ctx = np.full(64, 8000.0)
    own = np.full(8, 8 * 8064.0)
    s = PolicyState(ctx, own, np.full(8, 1e12), np.zeros(0), toy_i, False, 1 << 30, 64)
    d = pol.decide(s)
    assert 0 <= d.layout < len(t.layouts) == n and pol.cant_decide == 0
    assert len(pol.step_times_s(s)) == n

    served = simulate(dep, shrinking(60, seed=1), "dynamic", "fcfs")
    assert served["completed"] == 60 and set(served["layout_time_s"]) == set(t.layouts)
    fixed = simulate(dep, chat(40, seed=1), "toy", "fcfs")
    assert fixed["completed"] == 40 and fixed["layout_time_s"]["toy"] > 0


def test_the_toy_layout_is_gone_after_its_fixture():
    from runtime_policy.tables import layout_names

    assert "toy" not in layout_names()
