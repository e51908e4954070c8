"""benchmarks/host_tier_sim.py's `--loop-wall planner` (each layout's loop wall set to the planner's
capacity at the reference context) now agrees with the compiled tables' own ledger, which prices a
request past DeepSeek-V4's windows as the planner does (runtime_policy/kv_ledger.py): the check
the option is kept for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import planner
from planner.capacity import max_concurrency
from runtime_policy.kv_ledger import ledger_admits
from runtime_policy.tables import compile_tables

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "host_tier_sim.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("host_tier_sim", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_planner_wall_and_the_compiled_ledger_agree_at_the_reference(sim):
    m, hw = planner.load_model("deepseek-v4-flash"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="dp", gpus=8)
    t = compile_tables(d, max_batch=64, max_prefill_tokens=1024)
    ref = 103488.0
    w = sim.planner_wall(t, d, ref)
    k = t.layouts.index("dp")
    held = max_concurrency(d, [ref])[0]  # 210 requests of 103,488 tokens per owner
    assert held == 8 * 210
    per_request = (ref + t.request_slack_tokens) * t.kv_bytes_per_token
    assert w.info.kv_pool_bytes[k] / per_request == pytest.approx(held / 8)
    # the compiled ledger admits as many (it held 29 per owner when it counted 28,962 B a token)
    assert ledger_admits(t, k, ref) == ledger_admits(w, k, ref) == held
