"""Chrome-trace breakdown on a hand-made trace whose arithmetic is visible."""

import json

import numpy as np
import pytest

import planner
from calibration.trace import achieved_rates, classify, trace_breakdown


def _trace(tmp_path):
    ev = [
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_h_bz_coopA", "ts": 0, "dur": 600},
        {"ph": "X", "cat": "kernel", "name": "_mla_decode_split_kv_kernel", "ts": 600, "dur": 300},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ts": 900, "dur": 50},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 950, "dur": 40},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 990, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},  # host side: ignored
    ]
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_breakdown_sums_device_time_by_category(tmp_path):
    b = trace_breakdown(_trace(tmp_path))
    assert b.category_s == pytest.approx({"gemm": 600e-6, "attention": 300e-6, "collective": 50e-6, "other": 40e-6,
                                          "memcpy": 10e-6})
    assert b.span_s == pytest.approx(1000e-6)


def test_classify():
    assert classify("sm90_xmma_gemm_bf16bf16_bf16f32", "kernel") == "gemm"
    assert classify("flash_fwd_splitkv_kernel", "kernel") == "attention"
    assert classify("ncclKernel_AllGather_RING", "kernel") == "collective"


def test_achieved_rates_divide_counted_work_by_kernel_time(tmp_path):
    b = trace_breakdown(_trace(tmp_path))
    dep = planner.make_deployment(planner.load_model("calibration/data/probe-mla-dense-4l.json"),
                                  planner.load_hardware("h200"), attn="tp", moe="tp", gpus=2)
    cost = planner.step_cost(dep, planner.DecodeLoad.equal(8, 4096))
    r = achieved_rates(b, cost, steps=1)
    w = sum(v[0] for k, v in cost.components["hbm_bytes"].items() if k.endswith("_weights"))
    assert r["weight_bytes_per_s_in_gemm"] == pytest.approx(w / 600e-6)
    assert r["seconds_per_message"] == pytest.approx(50e-6 / cost.network_messages[0])


def test_not_a_trace(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1}]}))
    with pytest.raises(planner.SpecError, match="no GPU kernel events"):
        trace_breakdown(tmp_path / "x.json")
    with pytest.raises(planner.SpecError, match="not found"):
        trace_breakdown(tmp_path / "missing.json")
