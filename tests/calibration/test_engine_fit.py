"""Calibration with an engine dimension (issue 26): rows of several engines fit shared physics
(link, message latency, α) and each engine's own efficiencies and overhead; the artifact names the
engine; `--holdout engine` predicts an engine from the others' rows; the shipped priors are the
default model of their (GPU, engine)."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from calibration.artifact import PARAM_NAMES, engine_code, per_step_params, predict_from_features, step_features
from calibration.costs import price_profile, rates_for
from calibration.fit import fit_calibration
from calibration.loaders import load_profile
from calibration.validate import holdout_predictions
from tests.calibration.conftest import TRUE, write_jsonl

VLLM = dict(hbm_weight_efficiency=0.6, hbm_kv_efficiency=0.7, compute_linear_efficiency=0.5,
            compute_attention_efficiency=0.5, overhead_s=1.5e-3)


def engine_rows(engine, params, layouts=(("tp", "ep"), ("dp", "ep")), batches=(1, 4, 8, 16, 32, 64, 128),
                contexts=(1024, 8192, 65536)):
    x = np.array([params[n] for n in PARAM_NAMES])
    rows = []
    for attn, moe in layouts:
        dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn=attn, moe=moe,
                                      gpus=8, engine=engine)
        b, c = (a.ravel() for a in np.meshgrid(batches, contexts, indexing="ij"))
        cost = planner.step_cost(dep, planner.DecodeLoad.equal(b.astype(float), c.astype(float)))
        t = predict_from_features(step_features(cost, rates_for(dep.hardware)), x)
        rows += [dict(model="deepseek-v3", hardware="h200", gpus=8, attn=attn, moe=moe, batch=int(bi), context=float(ci),
                      engine=engine, step_ms=float(ti * 1e3)) for bi, ci, ti in zip(b, c, t)]
    return rows


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory):
    rows = engine_rows("sglang", TRUE) + engine_rows("vllm", {**TRUE, **VLLM})[:-4]  # sglang has the most rows
    prof = load_profile(write_jsonl(tmp_path_factory.mktemp("eng") / "rows.jsonl", rows))
    return prof, price_profile(prof)


def test_rows_name_their_engine_and_are_priced_with_its_kernels(two_engines):
    _, costs = two_engines
    codes = set(costs.features.steps.engine_code.tolist())
    assert codes == {engine_code("sglang"), engine_code("vllm")}


def test_a_fit_over_two_engines_recovers_each_engine_s_own_parameters(two_engines):
    prof, costs = two_engines
    cal = fit_calibration(costs, prof.sources)
    assert cal.engine == "sglang" and set(cal.engines) == {"vllm"}
    assert cal.params.overhead_s == pytest.approx(TRUE["overhead_s"], rel=0.05)
    v = cal.engines["vllm"]
    assert v.overhead_s == pytest.approx(VLLM["overhead_s"], rel=0.05)
    assert v.hbm_weight_efficiency == pytest.approx(VLLM["hbm_weight_efficiency"], rel=0.05)
    assert cal.fit.median_abs_pct_error < 0.5
    # the artifact prices each engine's steps with its own parameters
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn="tp", gpus=8,
                                  engine="vllm")
    c = planner.step_cost(dep, planner.DecodeLoad.equal(32.0, 8192.0))
    want = predict_from_features(step_features(c, cal.rates), np.array([{**TRUE, **VLLM}[n] for n in PARAM_NAMES]))
    assert cal.predict_s(c)[0] == pytest.approx(want[0], rel=0.02)


def test_holdout_by_engine_predicts_an_engine_from_the_others(two_engines):
    _, costs = two_engines
    h = holdout_predictions(costs, {**TRUE}, "engine")
    assert [g["group"] for g in h.groups] == ["sglang", "vllm"]
    assert all("median_abs_pct_error" in g for g in h.groups)
    # vLLM's own overhead and efficiencies were never seen: its rows are predicted with SGLang's
    assert h.groups[1]["median_abs_pct_error"] > 5.0


def test_per_step_params_use_each_engine_s_block():
    x = np.concatenate([np.arange(11.0), [11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]])
    p = per_step_params(x, np.array([1.0, 2.0]), (2.0,))
    assert p[:, 0].tolist() == list(range(11))
    assert p[[0, 1, 2, 3, 7, 8, 9, 10], 1].tolist() == [11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]
    assert p[[4, 5, 6], 1].tolist() == [4.0, 5.0, 6.0]  # link, latency and α are shared


def test_default_step_model_is_the_prior_of_the_deployment_s_gpu_and_engine():
    from runtime_policy.tables import DATASHEET_MODEL, default_step_model

    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    for engine in ("sglang", "vllm", "trtllm"):
        sm = default_step_model(planner.make_deployment(m, hw, attn="tp", gpus=8, engine=engine))
        assert sm.label.startswith(f"prior: h200 × {engine}") and sm.calibration.origin == "prior"
        assert sm.calibration.engine == engine and sm.overhead_s > 0
    h20 = planner.make_deployment(m, planner.load_hardware("h20"), attn="tp", gpus=8)
    assert default_step_model(h20).label == DATASHEET_MODEL  # no prior ships for H20
    bare = planner.make_deployment(m, hw, attn="tp", gpus=8, engine_kernels=False)
    assert default_step_model(bare).label == DATASHEET_MODEL  # no engine, no engine's prior


def test_every_gpu_and_engine_pair_ships_a_prior_with_its_notice():
    from calibration.priors import PRIOR_DIR, prior_for, shipped

    pairs = set(shipped())
    assert pairs == {(h, e) for h in ("h100", "h200", "b200", "b300", "gb200") for e in ("sglang", "vllm", "trtllm")}
    notice = (PRIOR_DIR / "NOTICE.txt").read_text()
    assert "Apache License, Version 2.0" in notice and "aiconfigurator-core 0.12.0" in notice
    for h, e in pairs:
        cal = prior_for(h, e)
        assert cal.origin == "prior" and cal.fit.rows == 0 and cal.engine == e and cal.rates.hardware == h
        assert all("silicon" not in s.path and s.path.split("!")[-1].endswith("_perf.parquet") for s in cal.sources)
