"""Measured rows from deployments larger than one node are priced, not rejected: 16–64-GPU
groups (two tiers), and an explicit `nodes` field."""

import json

import numpy as np

from calibration.costs import price_profile
from calibration.loaders import load_profiles
from planner.layouts.base import SCALEOUT

ROWS = [
    {"model": "deepseek-v3.2", "hardware": "h20", "gpus": 16, "attn": "tp", "moe": "ep", "batch": 16, "context": 8192, "step_ms": 40},
    {"model": "deepseek-v3.2", "hardware": "h20", "gpus": 16, "attn": "dp", "moe": "ep", "batch": 64, "context": 8192, "step_ms": 45},
    {"model": "deepseek-v3.2", "hardware": "h200", "gpus": 32, "attn": "dp", "moe": "ep", "batch": 128, "context": 4096, "step_ms": 50},
    {"model": "deepseek-v3.2", "hardware": "h200", "gpus": 64, "attn": "dp", "moe": "ep", "batch": 256, "context": 4096, "step_ms": 60},
    {"model": "deepseek-v3.2", "hardware": "h200", "gpus": 8, "nodes": 2, "attn": "tp", "moe": "ep", "batch": 8, "context": 4096, "step_ms": 30},
    {"model": "deepseek-v3.2", "hardware": "h20", "gpus": 16, "attn": "dp", "moe": "ep", "isl": 8000, "osl": 1000, "concurrency": 64, "tpot_ms": 50},
]


def test_multinode_rows_are_priced_with_their_nic_share(tmp_path):
    p = tmp_path / "multinode.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    costs = price_profile(load_profiles([str(p)], {}))
    assert costs.issues == [] and costs.size == len(ROWS)
    for g in costs.groups:
        c = g.cost
        assert np.all(c.network_bytes_by_tier[SCALEOUT] > 0), g.label
        # the fit sees NIC bytes and messages at their datasheet cost in scale-up units
        assert np.all(c.network_bytes_scaleup_equivalent > c.network_bytes)
        assert np.all(c.network_messages_scaleup_equivalent > c.network_messages)
    assert np.all(costs.features.steps.network_bytes_s > 0)
