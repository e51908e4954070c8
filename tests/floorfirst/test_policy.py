"""floorfirst.Policy: layout names in and out for every layout the registry holds (a toy one
included), the same answers as runtime_policy.LayoutPolicy on states the serving loop recorded, and
a refused state answered with no layout (never one the server may not be running)."""

from dataclasses import replace

import numpy as np
import pytest

import planner
from floorfirst import BatchState, Decision, Policy
from floorfirst.policy import from_policy_state
from runtime_policy.decision import Reason
from runtime_policy.tables import layout_names

LAUNCH = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"


@pytest.fixture(scope="module")
def recorded():
    """(a Policy, the PolicyStates the serving loop handed its LayoutPolicy): a shrinking batch and
    long prompts on DeepSeek-V3.2, 8 x H200, so that stays of several kinds and switches occur."""
    from executor.sim import SimExecutor
    from runtime_policy.loop import LoopConfig, serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.workloads import make_workload

    pol = Policy.from_launch(LAUNCH, hardware="h200", policy_knobs={"max_batch": 512}, max_prefill_tokens=2048)
    raw = pol.raw
    states, inner = [], raw.decide

    def spy(s):
        states.append(replace(s, context_tokens=s.context_tokens.copy(), owner_kv_tokens=list(s.owner_kv_tokens),
                              free_kv_bytes=list(s.free_kv_bytes), waiting_tokens=s.waiting_tokens.copy()))
        return inner(s)

    raw.decide = spy
    try:
        for name, n in (("shrinking", 200), ("longprompt", 40)):
            w = make_workload(name, n, 0)
            serve(w.arrival_s, w.input_tokens, w.output_tokens, raw.tables, raw, Ordering("fcfs"), SimExecutor(raw.tables),
                  LoopConfig(max_batch=512))
    finally:
        del raw.decide
    return pol, states


def test_the_tables_layouts_are_the_registry_s(recorded):
    pol, _ = recorded
    assert pol.layouts == layout_names() == tuple(planner.ATTN_LAYOUTS)
    assert pol.spec.engine == "sglang" and pol.spec.attn == "tp" and pol.ranks == 8
    assert pol.step_model.startswith("prior: h200 × sglang")  # the deployment's default step model


@pytest.mark.parametrize("name", layout_names())
def test_a_stay_names_the_layout_the_server_runs(recorded, name):
    """Every layout of the registry, in and out: a switch in flight is a stay in the current layout."""
    pol, states = recorded
    s = from_policy_state(states[len(states) // 2], layout_names())
    s.layout, s.switch_in_flight = name, True
    d = pol.decide(s)
    assert (d.layout, d.switch, d.reason) == (name, False, "stay_in_flight")


def test_every_answer_is_the_raw_policy_s_in_names(recorded):
    """Each recorded state replayed in every layout: the wrapper's answer is LayoutPolicy's, its index
    read in the registry's names (not the wrapper's own list)."""
    pol, states = recorded
    names = layout_names()
    raw = pol.raw
    seen = set()
    for s in states[::3]:
        for i, name in enumerate(names):
            r = raw.decide(replace(s, layout=i))
            b = from_policy_state(s, names)
            b.layout = name
            d = pol.decide(b)
            assert d.reason == r.reason.name.lower()
            assert d.layout == names[r.layout] and d.switch == r.switch
            assert (d.gain_s, d.cost_s, d.shed_kv_tokens, d.capacity_stands_steps) == \
                   (r.gain_s, r.cost_s, r.shed_kv_tokens, r.capacity_stands_steps)
            seen.add((name, d.layout if d.switch else None))
    switches = {(a, b) for a, b in seen if b is not None}
    assert len(switches) >= 3 and len({b for _, b in switches}) >= 2  # several targets, not one index


def test_a_refused_state_names_no_layout(recorded):
    pol, states = recorded
    s = from_policy_state(states[len(states) // 2], layout_names())
    s.layout = "dp"
    s.kv_tokens_per_rank = [0.0] * 3  # 3 ranks of 8: LayoutPolicy refuses it and "stays" in dp
    before = pol.refused_states
    d = pol.decide(s)
    assert (d.layout, d.switch, d.reason, d.refused) == (None, False, "cant_decide", "kv_tokens_per_rank")
    assert pol.refused_states == before + 1
    raw = pol.raw.decide(replace(states[len(states) // 2], layout=3, owner_kv_tokens=[0.0] * 3))
    assert raw.reason is Reason.CANT_DECIDE and raw.layout == 3  # what the wrapper must not pass on as "dp"

    s.kv_tokens_per_rank = [0.0] * 8
    s.layout = "tp-but-not-quite"
    d = pol.decide(s)
    assert d.layout is None and d.reason == "cant_decide" and "is not one of tp, cp" in d.refused
    s.layout = 0  # an index is not a name
    assert pol.decide(s).layout is None
    for junk in (None, "state", {"layout": "tp"}):
        assert pol.decide(junk).layout is None
    s.layout, s.context_tokens = "tp", ["a", "b"]
    assert pol.decide(s).layout is None


def test_stays_are_built_once(recorded):
    pol, states = recorded
    s = from_policy_state(states[0], layout_names())
    s.switch_in_flight = True
    assert pol.decide(s) is pol.decide(s)
    assert isinstance(pol.decide(s), Decision)


def test_a_new_layout_needs_no_wrapper_edit(monkeypatch):
    """A toy layout registered now is in the policy's names and decided on by name."""
    from planner.layouts.base import _ATTN, register_attention_layout
    from tests.runtime_policy.test_toy_layout import ToyDecodeContextParallel

    register_attention_layout(ToyDecodeContextParallel)
    monkeypatch.setattr("planner.deployment.ATTN_LAYOUTS", planner.ATTN_LAYOUTS + ("toy",))
    try:
        pol = Policy.from_deployment(model="deepseek-v3.2", hardware="h200", gpus=8, attn="toy",
                                     policy_knobs={"max_batch": 64}, max_prefill_tokens=512)
        assert pol.layouts[-1] == "toy" and "toy" in pol.usable_layouts
        s = pol.new_state()
        assert s.layout == "toy"
        s.context_tokens = np.full(4, 4096.0)
        s.running_requests = 4
        s.kv_tokens_per_rank = [4 * 4096.0 / 8] * 8
        d = pol.decide(s)
        assert d.layout in pol.layouts and d.reason != "cant_decide"
        s.switch_in_flight = True
        assert pol.decide(s).layout == "toy"
    finally:
        _ATTN.unregister("toy")


def test_the_helpers_speak_names(recorded):
    pol, _ = recorded
    assert pol.initial_layout([4096.0] * 16) in pol.usable_layouts
    s = pol.new_state()
    assert isinstance(s, BatchState) and s.layout == "tp" and len(s.kv_tokens_per_rank) == 8
    s.context_tokens = np.full(32, 8192.0)
    times = pol.step_times_s(s)
    assert list(times) == list(pol.layouts) and all(t > 0 for t in times.values())
    pol.observe_completion(512)
    pol.observe_completion(float("nan"))  # ignored, as LayoutPolicy does
    assert pol.raw.ignored_observations >= 1
