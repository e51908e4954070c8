"""Shared fixtures: compiled policies for the two benchmark deployments (small tables, so fast)."""

import pytest

import planner
from runtime_policy.policy import LayoutPolicy, PolicyKnobs


def make_policy(model="deepseek-v3.2", hardware="h200", mem_fraction=0.88, **knobs):
    m, hw = planner.load_model(model), planner.load_hardware(hardware)
    dep = planner.make_deployment(m, hw, attn="tp", moe="ep", gpus=8, mem_fraction=mem_fraction)
    return dep, LayoutPolicy.compile(dep, knobs=PolicyKnobs(max_batch=1024, **knobs), max_prefill_tokens=2048)


@pytest.fixture(scope="session")
def dsv32():
    return make_policy()
