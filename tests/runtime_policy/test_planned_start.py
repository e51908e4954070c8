"""Issue 27 item 2, a start that fits: the policy's first layout is the one planned for the load the
operator states (PolicyKnobs.planned_rate_per_s and the mean prompt and output tokens), priced at
the steady batch that load gives by Little's law with each layout's own step times and prefill
(LayoutPolicy.planned_prices), and the throughput rule stays among the layouts that carry it while
the load is not falling.

The scenario: a chat load (600 requests at 20/s, prompts ~1.7K, outputs ~430 tokens) on
DeepSeek-V3.2 and GLM-5, 8 GPUs each, priced by the shipped (GPU, engine) prior. Its queue at
t = 0 is one request, for which TP's step is the fastest; TP's pool can't hold the batch 20/s
builds, so fixed TP serves 9 % (DS-V3.2) and 5 % (GLM-5) less than fixed DOP. Without a stated load
the policy starts (and stays) in TP; with it, it starts in DOP and is within 1 % of the best fixed
layout.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import planner
from executor.sim import simulate
from runtime_policy.policy import LayoutPolicy, PolicyKnobs, planned_knobs
from runtime_policy.tables import default_step_model
from runtime_policy.workloads import make_workload

CASES = (("deepseek-v3.2", "h200"), ("glm-5", "b200"))


def _dep(model, hw):
    return planner.make_deployment(planner.load_model(model), planner.load_hardware(hw), attn="tp", moe="ep", gpus=8)


def _tput(d):
    return d["throughput_tokens_per_s"]


@pytest.mark.parametrize("model,hw", CASES)
def test_the_start_from_the_stated_load_is_within_one_percent_of_the_best_fixed_layout(model, hw):
    dep = _dep(model, hw)
    sm = default_step_model(dep)
    w = make_workload("chat", 600, 0)
    knobs = planned_knobs(PolicyKnobs(), w)
    assert knobs.planned_rate_per_s == 20.0 and 1000 < knobs.planned_input_tokens and 100 < knobs.planned_output_tokens
    pol = LayoutPolicy.compile(dep, sm, knobs)
    fixed = {a: _tput(simulate(dep, w, a, "fcfs", sm)) for a in pol.tables.layouts
             if pol.tables.info.kv_pool_bytes[pol.tables.layouts.index(a)] > 0}
    best = max(fixed.values())
    planned = simulate(dep, w, "dynamic", "fcfs", sm, knobs=knobs)
    assert _tput(planned) >= 0.99 * best, (_tput(planned), fixed, planned["switches"])
    # the premise: started on the queue at t = 0 (one request) the policy loses more than 1 %
    cold = simulate(dep, w, "dynamic", "fcfs", sm)
    assert _tput(cold) < 0.99 * best, (_tput(cold), fixed)


def test_the_layouts_priced_at_the_stated_load():
    """DS-V3.2, 8 x H200 (prior), 20 requests/s of ~1.7K-token prompts and ~430-token outputs: no
    layout keeps up (an overload; the sweep's fixed layouts serve 3.3-3.8K tokens/s of the 8.5K
    asked); TP's pool holds the fewest requests and serves fewer a second than DOP, which is the
    start and the only layout within `min_gain_fraction` of the most served. At 2 requests/s DOP
    keeps up with a steady batch its pool holds, and TP's replicated cache can't hold it."""
    dep = _dep("deepseek-v3.2", "h200")
    w = make_workload("chat", 600, 0)
    pol = LayoutPolicy.compile(dep, default_step_model(dep), planned_knobs(PolicyKnobs(), w))
    names = pol.tables.layouts
    prices = {names[i]: p for i, p in pol.planned_prices().items()}
    assert not any(p["keeps_up"] for p in prices.values())
    assert prices["tp"]["pool_requests"] == min(p["pool_requests"] for p in prices.values())
    assert prices["dop"]["served_per_s"] == max(p["served_per_s"] for p in prices.values())
    assert names[pol.planned_start()] == "dop" and [names[i] for i in pol.planned_layouts] == ["dop"]
    assert names[pol.initial_layout(np.array([1024.0]))] == "dop"
    # Little's law at a rate every layout's prefill leaves room for: N = λ × O × step(N) / (1 − λ p)
    low = LayoutPolicy.compile(dep, default_step_model(dep), replace(pol.knobs, planned_rate_per_s=2.0))
    lp = {names[i]: p for i, p in low.planned_prices().items()}
    d = lp["dop"]
    assert d["keeps_up"] and d["batch"] <= d["pool_requests"]
    assert d["batch"] == pytest.approx(2.0 * low.knobs.planned_output_tokens * d["step_s"] / (1 - d["prefill_share"]),
                                       rel=2e-3)
    assert d["service_s"] == pytest.approx(d["batch"] / 2.0, rel=0.05)  # Little: N = λ × T (T: decode + prefill)


def test_no_stated_load_is_todays_start():
    """A workload that states no rate (a batch at t = 0) leaves the knobs as they are; a policy with
    no stated load prices the start on the queue (initial_layout as before) and filters nothing."""
    w = make_workload("rollout", 64, 0)
    k = PolicyKnobs()
    assert planned_knobs(k, w) is k
    dep = _dep("deepseek-v3.2", "h200")
    pol = LayoutPolicy.compile(dep, default_step_model(dep), k)
    assert pol.planned_layouts == () and pol.planned_start() == -1 and pol.planned_prices() == {}


@pytest.mark.parametrize("name,value", [("planned_rate_per_s", -1.0), ("planned_input_tokens", float("nan")),
                                        ("planned_output_tokens", True)])
def test_a_bad_planned_load_knob_is_one_line_naming_it(name, value):
    from planner.errors import SpecError
    from runtime_policy.compile_checks import check_knobs
    from runtime_policy.tables import layout_names

    with pytest.raises(SpecError, match=name):
        check_knobs(PolicyKnobs(**{name: value}), layout_names())


def test_a_stated_load_where_two_layouts_are_within_one_percent_makes_no_thrash():
    """The load of test_hysteresis.test_two_layouts_within_one_percent_make_no_thrash (GLM-5, 8 x
    B200, longprompt at 1/s: fixed TP and CP within 1 %) with its rate stated: every layout keeps
    up with it, so the filter holds nothing back, and still no switch."""
    dep = _dep("glm-5", "b200")
    w = make_workload("longprompt", 200, 0)
    knobs = planned_knobs(PolicyKnobs(), w)
    pol = LayoutPolicy.compile(dep, None, knobs)
    assert len(pol.planned_layouts) >= 2
    d = simulate(dep, w, "dynamic", "fcfs", knobs=knobs)
    assert len(d["switches"]) == 0, d["switches"]
    best = max(_tput(simulate(dep, w, a, "fcfs")) for a in ("tp", "cp"))
    assert _tput(d) >= 0.99 * best


def test_with_a_stated_load_the_start_holds_throughput_moves_for_a_half_life():
    """The start is a switch whose cooldown is the horizon's half-life (`stats_half_life_steps`):
    a 60K request in DOP, for which TP is faster and repays the move (test_hysteresis), is held as
    STAY_COOLDOWN at the run's step 100 and moved at step 5,000; without a stated load it moves at
    step 100."""
    from tests.runtime_policy.conftest import make_policy
    from tests.runtime_policy.test_policy import DOP, TP, state

    from runtime_policy.policy import Reason

    _, plain = make_policy()
    _, pol = make_policy(planned_rate_per_s=0.02, planned_input_tokens=60000.0, planned_output_tokens=500.0)
    assert TP in pol.planned_layouts and DOP in pol.planned_layouts
    for p, held in ((plain, False), (pol, True)):
        s = state([60000.0], DOP, policy=p)
        s.step_index = 100
        d = p.decide(s)
        assert d.switch != held and (d.reason == Reason.STAY_COOLDOWN) == held, d
        s.step_index = 5000
        assert p.decide(s).switch and p.decide(s).layout == TP


def test_a_drain_frees_the_stated_load_only_once_its_arrivals_fall_off():
    """GLM-5, 8 x B200 (the prior), longprompt at 1/s with its rate stated: CP, DCP and DOP carry
    it, TP (whose replicated cache holds 29 of its requests) does not. A falling window mid-load
    (a lull between Poisson arrivals) moved CP -> TP at 285 s and the capacity rule back 72 s later;
    with the drain read as arrivals fallen off (DRAIN_PREFILL_SCALE) one switch is left, CP -> TP
    in the last drain, and the run is at least the best fixed layout's."""
    dep = _dep("glm-5", "b200")
    sm = default_step_model(dep)
    w = make_workload("longprompt", 400, 0)
    knobs = planned_knobs(PolicyKnobs(), w)
    pol = LayoutPolicy.compile(dep, sm, knobs)
    assert "tp" not in [pol.tables.layouts[i] for i in pol.planned_layouts]
    d = simulate(dep, w, "dynamic", "fcfs", sm, knobs=knobs)
    assert len(d["switches"]) <= 1 and all(s["at_s"] > 400 for s in d["switches"]), d["switches"]
    assert _tput(d) >= max(_tput(simulate(dep, w, a, "fcfs", sm)) for a in ("cp", "tp", "dop"))
