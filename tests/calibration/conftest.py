"""Factories: synthetic step profiles generated from known calibration parameters."""

import json

import numpy as np
import pytest

import planner
from calibration.artifact import PARAM_NAMES, predict_from_features
from calibration.costs import rates_for
from calibration.artifact import step_features

TRUE = dict(hbm_weight_efficiency=0.8, hbm_kv_efficiency=0.45, compute_linear_efficiency=0.7,
            compute_attention_efficiency=0.35, network_efficiency=0.6, message_latency_s=15e-6,
            overlap_alpha=0.3, overhead_s=0.8e-3, prefill_step_overhead_s=1.5e-3, mixed_step_overhead_s=0.0,
            host_overlap_alpha=1.0)
LAYOUTS = [("deepseek-v3", "h200", 8, "tp", "ep"), ("deepseek-v3", "h200", 8, "dp", "ep"),
           ("deepseek-v3", "h200", 8, "dp", "tp")]


def synthetic_rows(params=None, layouts=LAYOUTS, batches=(1, 8, 32, 128, 512), contexts=(1024, 8192, 65536),
                   prefills=(0, 4096), noise=0.0, outliers=0.0, seed=0):
    """Rows whose step_ms is the calibrated model's prediction at `params` (× lognormal noise;
    a fraction `outliers` multiplied by 2)."""
    x = np.array([(params or TRUE)[n] for n in PARAM_NAMES])
    rng = np.random.default_rng(seed)
    rows = []
    for model, hw, gpus, attn, moe in layouts:
        # NOTE: step rows without an engine are priced with the layout's ideal kernels (issue 26), so the
        # synthetic truth is generated the same way
        dep = planner.make_deployment(planner.load_model(model), planner.load_hardware(hw), attn=attn, moe=moe, gpus=gpus,
                                      engine_kernels=False)
        b, c, p = (a.ravel() for a in np.meshgrid(batches, contexts, prefills, indexing="ij"))
        cost = planner.step_cost(dep, planner.DecodeLoad.equal(b.astype(float), c.astype(float)), prefill_tokens=p.astype(float))
        t = predict_from_features(step_features(cost, rates_for(dep.hardware)), x)
        t = t * np.exp(rng.normal(0.0, noise, t.size)) if noise else t
        if outliers:
            t = np.where(rng.random(t.size) < outliers, t * 2.0, t)
        for bi, ci, pi, ti in zip(b, c, p, t):
            rows.append(dict(model=model, hardware=hw, gpus=gpus, attn=attn, moe=moe, batch=int(bi), context=float(ci),
                             prefill_tokens=float(pi), step_ms=float(ti * 1e3)))
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def synthetic_profile(tmp_path):
    return write_jsonl(tmp_path / "synthetic.jsonl", synthetic_rows())
