"""Both oracles replay a repriced trajectory against the workload's arrivals (issue 27): a step
starts no earlier than the requests it prefills arrive, and each step is repriced with the decoders
that ran in it (SGLang's owner groups that sat out to prefill did no decode work). Without the
arrivals the bound over a slower layout's trajectory (its backlog run in large batches) moved every
step earlier, arrivals included: on DeepSeek-V3.2's 20/s chat (8 x H200, the prior) the free oracle
read 1.137x fixed DOP, 1.025x replayed."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from executor.oracle import RecordingExecutor, per_step_best, released_end_s
from executor.priced_oracle import priced_best, trace
from executor.sim import SimExecutor, engine_chunk_tokens
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import FixedPolicy, LayoutPolicy
from runtime_policy.tables import default_step_model
from runtime_policy.workloads import make_workload


@pytest.fixture(scope="module")
def recorded():
    dep = planner.make_deployment(planner.load_model("deepseek-v3.2"), planner.load_hardware("h200"), attn="tp",
                                  moe="ep", gpus=8)
    cfg = LoopConfig()
    lp = LayoutPolicy.compile(dep, default_step_model(dep), max_prefill_tokens=engine_chunk_tokens(dep, cfg))
    t = lp.tables
    w = make_workload("chat", 240, 0)
    out = {}
    for name in ("dop", "cp"):
        rec = RecordingExecutor(SimExecutor(t))
        res = serve(w.arrival_s, w.input_tokens, w.output_tokens, t, FixedPolicy(t.layouts.index(name)),
                    Ordering("fcfs"), rec, cfg)
        out[name] = (rec, float(np.max(res.finish_s) - np.min(res.arrival_s)), float(res.output_tokens.sum()))
    return t, w, out


def test_a_layouts_own_steps_reprice_to_what_it_ran_and_replay_to_its_makespan(recorded):
    t, w, out = recorded
    rec, makespan, _ = out["dop"]
    assert any(r.group_requests is not None for r in rec.runs)  # groups sat out to prefill (SGLang)
    times = trace(t, rec)[0][t.layouts.index("dop")]
    ran = np.concatenate([r.durations_s for r in rec.runs])
    np.testing.assert_allclose(times, ran, rtol=1e-12)
    rel = rec.release_s(w.arrival_s)
    assert rel is not None and rel.size == ran.size
    assert released_end_s(ran, rel, 0.0) == pytest.approx(makespan, rel=1e-12)


def test_no_step_of_a_bound_starts_before_its_requests_arrive(recorded):
    t, w, out = recorded
    span = float(w.arrival_s[-1] - w.arrival_s[0])
    fixed = {name: tokens / mk for name, (_, mk, tokens) in out.items()}
    for name, (rec, makespan, tokens) in out.items():
        free = per_step_best(t, rec, w.arrival_s)
        loose = per_step_best(t, rec)  # the recorded idle kept, the arrivals not
        assert free.makespan_s(makespan, span) >= loose.makespan_s(makespan, span) - 1e-9
        # every step of the replay at or after the arrivals of what it prefills
        best = np.min(trace(t, rec)[0], axis=0)
        rel = rec.release_s(w.arrival_s)
        end, starts = 0.0, []
        for x, r in zip(best.tolist(), rel.tolist()):
            end = max(end, r)
            starts.append(end)
            end += x
        assert np.all(np.array(starts) >= rel)
        assert end == pytest.approx(free.released_makespan_s, rel=1e-12)
        priced = priced_best(t, rec, w.arrival_s)
        # best fixed (its own run) <= priced <= free, all replayed against the arrivals
        assert free.makespan_s(makespan, span) <= priced.busy_s * (1 + 1e-12)
        if name == max(fixed, key=fixed.get):
            assert priced.busy_s <= makespan * (1 + 1e-12)
