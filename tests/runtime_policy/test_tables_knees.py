"""The compiled tables price a layered model's decode step as the planner does: the knee is the
one its variants declare (a window, a top-k span), a per-request state lives in the base rows, and
the engine's state slots cap the running set."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from runtime_policy.tables import NO_TOPK, compile_tables, cost_knee, datasheet_model, request_caps

CONTEXTS = [512.0, 4096.0, 32768.0]


def _planner_step_s(dep, batch, context):
    c = planner.step_cost(dep, planner.DecodeLoad.equal(batch, context))
    terms = datasheet_model().terms_s(c)[:, 0]
    terms[planner.TIMED_RESOURCES.index("compute")] -= c.fixed_latency_s[0]
    return terms.max() + 0.5 * (terms.sum() - terms.max())


@pytest.mark.parametrize("model, knee, tolerance", [
    ("gemma-4-26b-a4b", 1024.0, 1e-3),  # sliding window 1,024
    ("gpt-oss-120b", 128.0, 1e-3),  # sliding window 128
    ("qwen3.5-397b-a17b", NO_TOPK, 1e-3),  # no knee: GDN state in the base rows, full layers linear
    ("llama-4-maverick", 8192.0, 1e-3),  # chunked local attention
    ("deepseek-v4-flash", 2048.0, 8e-3),  # two knees (window 128, CSA span 4 × 512): the larger one
])
def test_table_step_time_matches_the_planner(model, knee, tolerance):
    m = planner.load_model(model)
    assert cost_knee(m) == knee
    d = planner.make_deployment(m, planner.load_hardware("h200"), attn="tp", moe="ep", gpus=8)
    # the datasheet midpoint, named (the default is now the deployment's prior, issue 26)
    t = compile_tables(d, datasheet_model(), max_batch=32, max_prefill_tokens=16)
    i = t.layouts.index("tp")
    for ctx in CONTEXTS:
        s1, s2 = 16 * min(ctx, t.topk), 16 * ctx
        got = float(t.step_s(i, np.array([16]), np.zeros(1), np.array([s1]), np.array([s2]))[0])
        assert got == pytest.approx(_planner_step_s(d, 16, ctx), rel=tolerance)


def test_sglang_state_slots_cap_the_running_set_per_layout():
    m = planner.load_model("qwen3.5-397b-a17b")
    hw = planner.load_hardware("h200")
    tp = planner.make_deployment(m, hw, attn="tp", moe="ep", gpus=8)
    dp = planner.make_deployment(m, hw, attn="dp", moe="ep", gpus=8)
    # TP: every GPU holds a 1/8 head slice of every request's state, so the group runs slots // 3;
    # DP: each GPU holds its own requests' whole states, 8 GPUs of slots // 3 each
    assert request_caps(tp) == tp.memory.max_running_requests
    assert request_caps(dp) == 8 * dp.memory.max_running_requests
    t = compile_tables(tp, max_batch=32, max_prefill_tokens=16)
    assert t.info.max_requests[t.layouts.index("tp")] == tp.memory.max_running_requests
    dense = planner.make_deployment(planner.load_model("llama-3.1-70b"), hw, attn="tp", moe="tp", gpus=8)
    assert request_caps(dense) == float("inf")
