"""Transition plans: what moves, what memory it needs, and refusals when it doesn't fit."""

import pytest

from runtime_policy.tables import LAYOUTS, layout_names
from runtime_policy.transitions import all_plans, memory_fits, plan_transition

TP, CP, DP, DOP = (LAYOUTS.index(x) for x in ("tp", "cp", "dp", "dop"))
GB = 1e9


def test_every_ordered_switch_has_a_plan(dsv32):
    _, pol = dsv32
    n = len(pol.tables.layouts)  # every registered layout: n × (n − 1) ordered pairs
    plans = all_plans(pol.tables, 8 * GB, 1 * GB)
    assert pol.tables.layouts == layout_names() and len(plans) == n * (n - 1)
    assert len({(p.src, p.dst) for p in plans}) == n * (n - 1)
    for p in plans:
        assert p.cost_s >= 0 and p.link_s >= 0 and p.recv_bytes_per_rank >= 0


def test_tp_to_owner_moves_no_kv_and_owner_to_tp_gathers_everything(dsv32):
    _, pol = dsv32
    t = pol.tables
    drop = plan_transition(t, TP, DOP, 8 * GB, 1 * GB)
    assert drop.kv_recv_bytes_per_rank == 0 and drop.weight_recv_bytes_per_rank == 0 and drop.link_s == 0
    gather = plan_transition(t, DOP, TP, 8 * GB, 1 * GB)
    # each rank receives the other 7/8 of the KV (MLA: TP keeps all of it on every rank)
    assert gather.kv_recv_bytes_per_rank == pytest.approx(8 * GB * 7 / 8)
    assert gather.memory_needed_bytes == pytest.approx(t.info.weights_bytes[DOP] + 8 * GB)


def test_weight_replication_takes_room_from_kv(dsv32):
    _, pol = dsv32
    t = pol.tables
    p = plan_transition(t, DOP, DP, 8 * GB, 1 * GB)
    assert p.kv_recv_bytes_per_rank == 0
    assert p.weight_recv_bytes_per_rank == pytest.approx(t.info.weights_bytes[DP] - t.info.weights_bytes[DOP])
    assert plan_transition(t, DP, DOP, 8 * GB, 1 * GB).recv_bytes_per_rank == 0


def test_refused_when_memory_lacks(dsv32):
    _, pol = dsv32
    t = pol.tables
    # 30 GB on the busiest owner fits DOP's 36.6 GB pool but not DP's 22.6 GB (weights replicated)
    assert not plan_transition(t, DOP, DP, 8 * 30 * GB, 30 * GB).feasible
    assert plan_transition(t, DOP, DP, 8 * 10 * GB, 10 * GB).feasible
    # moving to TP needs every request's KV on every rank
    assert not plan_transition(t, DOP, TP, 40 * GB, 5 * GB).feasible
    assert plan_transition(t, DOP, TP, 20 * GB, 2.5 * GB).feasible


def test_memory_fits_agrees_with_the_plan(dsv32):
    _, pol = dsv32
    t = pol.tables
    for total, own in ((8 * GB, 1 * GB), (40 * GB, 5 * GB), (240 * GB, 30 * GB), (20 * GB, 2.5 * GB)):
        for a in range(4):
            for b in range(4):
                if a != b:
                    assert memory_fits(t, a, b, total, own) == plan_transition(t, a, b, total, own).feasible
