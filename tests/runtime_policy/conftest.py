"""Shared fixtures: compiled policies for the two benchmark deployments (small tables, so fast)."""

import pytest

import planner
from runtime_policy.tables import datasheet_model
from runtime_policy.policy import LayoutPolicy, PolicyKnobs


def datasheet_share(hw, share: float) -> float:
    """The engine fraction that gives the pools these scenarios were sized with.

    NOTE (issue 12): the scenarios here were written when the pool was `share` × the datasheet
    HBM − weights; pools are now the engine's (SGLang: mem_fraction_static × the free memory
    before weights, 139.29 GiB on an H200), so the same budget is this fraction of it."""
    return share * hw.peak.hbm_bytes / (hw.usable_hbm_bytes - hw.memory.context_bytes)


def make_policy(model="deepseek-v3.2", hardware="h200", mem_fraction=0.88, **knobs):
    m, hw = planner.load_model(model), planner.load_hardware(hardware)
    dep = planner.make_deployment(m, hw, attn="tp", moe="ep", gpus=8, mem_fraction=datasheet_share(hw, mem_fraction))
    # NOTE: the datasheet midpoint, named: these scenarios (and the golden loop cases) were sized on it;
    # without a model the tables now take the deployment's shipped prior (issue 26)
    return dep, LayoutPolicy.compile(dep, datasheet_model(), knobs=PolicyKnobs(max_batch=1024, **knobs),
                                     max_prefill_tokens=2048)


@pytest.fixture(scope="session")
def dsv32():
    return make_policy()
