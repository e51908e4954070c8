"""The oracle's RecordingExecutor serves exactly as the executor it wraps (issue 27's sweep records
every run through it): over every registered engine, a dynamic run and a fixed run through the
recorder finish every request at the same time, make the same switches and the same steps as the
bare simulator. It didn't forward the engine's scheduling capabilities (SGLang's separate prefill
step), so recorded SGLang runs were mixed-step runs."""

import numpy as np
import pytest

import planner
from executor.oracle import RecordingExecutor
from executor.sim import SimExecutor, engine_chunk_tokens
from planner.engines.base import engines
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import FixedPolicy, LayoutPolicy
from runtime_policy.tables import default_step_model
from runtime_policy.workloads import make_workload


@pytest.mark.parametrize("engine", sorted(engines()))
def test_a_recorded_run_serves_as_the_bare_one(engine):
    dep = planner.make_deployment(planner.load_model("deepseek-v3.2"), planner.load_hardware("h200"), attn="tp",
                                  moe="ep", gpus=8, engine=engine)
    cfg = LoopConfig()
    lp = LayoutPolicy.compile(dep, default_step_model(dep), max_prefill_tokens=engine_chunk_tokens(dep, cfg))
    w = make_workload("chat", 300, 0)
    dop = lp.tables.layouts.index("dop")
    for make in (lambda: LayoutPolicy(lp.tables, lp.knobs), lambda: FixedPolicy(dop)):
        bare = serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, make(), Ordering("fcfs"),
                     SimExecutor(lp.tables), cfg)
        rec = RecordingExecutor(SimExecutor(lp.tables))
        seen = serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, make(), Ordering("fcfs"), rec, cfg)
        assert np.array_equal(bare.finish_s, seen.finish_s)
        assert bare.steps == seen.steps and bare.switches == seen.switches
        assert sum(r.durations_s.size for r in rec.runs) == seen.steps  # every step recorded
