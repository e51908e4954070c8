"""benchmarks/host_tier_sim.py's `--loop-wall planner`: the loop counts tokens at the tables'
kv_bytes_per_token (below every window), ~7× too tight for DeepSeek-V4 at long context; the
script sets each layout's loop wall to the planner's capacity at the reference context."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import planner
from planner.capacity import max_concurrency
from runtime_policy.tables import compile_tables

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "host_tier_sim.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("host_tier_sim", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_planner_wall_is_the_planners_capacity_at_the_reference(sim):
    m, hw = planner.load_model("deepseek-v4-flash"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="dp", gpus=8)
    t = compile_tables(d, max_batch=64, max_prefill_tokens=1024)
    ref = 103488.0
    w = sim.planner_wall(t, d, ref)
    k = t.layouts.index("dp")
    held = max_concurrency(d, [ref])[0] / 8  # per owner: 210 requests of 103,488 tokens
    assert w.info.kv_pool_bytes[k] / (w.kv_bytes_per_token * ref) == pytest.approx(held)
    # compiled as is the loop holds 29: 28,962 B per token below the window vs 3,850 B past it
    assert t.info.kv_pool_bytes[k] / (t.kv_bytes_per_token * ref) < held / 7
    assert sim.needs_planner_wall(m) and not sim.needs_planner_wall(planner.load_model("deepseek-v3.2"))
