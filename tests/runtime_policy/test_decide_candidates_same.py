"""Issue 27: the throughput rule's generated candidate filter (`LayoutPolicy._cands_fn`, one per
current layout) passes the same candidates as the loop over `_cand_rows` it replaces (kept here as
the reference): KV with headroom, admitting what the current layout admits, the expected peak, and
a host twin only where its HBM-only layout did not pass — over boundaries, NaN growth and twins."""

import numpy as np
import pytest

from dataclasses import replace

import planner
from planner.host_tier import HostTierSpec
from runtime_policy.policy import LayoutPolicy, PolicyKnobs
from runtime_policy.tables import datasheet_model


def _reference(pol, rows, busy, lite, head_admits_cur, head, grows, growth, outgrown):
    bpt, mask = pol._bpt, 0
    for i, bit, dom_bit, sh, room, fill in rows:
        if busy[i] * sh * bpt > fill:
            continue
        if head_admits_cur and (lite[i] + head) * sh * bpt > room:
            continue
        if grows and (busy[i] + growth[i]) * sh * bpt > room and not outgrown:
            continue
        if mask & dom_bit:
            continue
        mask |= bit
    return mask


@pytest.mark.parametrize("tier,planned", [(False, False), (True, False), (False, True)])
def test_generated_candidates_equal_the_loop(tier, planned):
    """`planned`: a stated load (PolicyKnobs.planned_*), whose candidates in the moment's and the
    horizon's pricing are only the layouts that carry it (`_plan_rows`), compiled apart."""
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    if tier:
        dep = planner.replace_deployment(dep, host_tier=HostTierSpec(reference_context_tokens=8192))
    knobs = (replace(PolicyKnobs(), planned_rate_per_s=20.0, planned_input_tokens=2000.0, planned_output_tokens=500.0)
             if planned else None)
    pol = LayoutPolicy.compile(dep, datasheet_model(), knobs, tier_choice=tier, max_prefill_tokens=2048)
    n = len(pol.tables.layouts)
    if planned:
        assert 0 < len(pol.planned_layouts) < n  # the stated load's filter is exercised
    assert any(d >= 0 for d in pol._dominated_by) == tier  # the twins' rule is exercised
    rng = np.random.default_rng(11)
    edges = [row[5] / (row[3] * pol._bpt) for rows in pol._cand_rows for row in rows]  # tokens at each pool's fill
    seen = set()
    for trial in range(3000):
        scale = float(rng.choice(edges)) * float(rng.choice([0.5, 0.9, 0.999999, 1.0, 1.000001, 1.2]))
        busy = tuple((rng.random(n) * scale).tolist())
        lite = tuple((np.asarray(busy) * rng.random(n)).tolist())
        growth = (rng.random(n) * scale * 0.3).tolist()
        if trial % 7 == 0:
            growth[int(rng.integers(0, n))] = float("nan")
        args = (busy, lite, bool(rng.random() < 0.5), float(rng.integers(0, 20_000)), bool(rng.random() < 0.5),
                growth, bool(rng.random() < 0.3))
        for cur in range(n):
            for sel in range(3):
                got = pol._fns_by_mode[sel][cur](*args)
                assert got == _reference(pol, pol._rows_by_mode[sel][cur], *args)
                seen.add(got)
            assert pol._fns_by_mode[2][cur] is pol._cands_fn[cur]  # a drain: every layout a candidate
    assert len(seen) > 8  # many different candidate sets, not one answer
