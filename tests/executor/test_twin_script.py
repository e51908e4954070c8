"""benchmarks/twin_1gpu.py: the executor's repetitions are compared by their median per metric, their
spread is reported, and the whole pipeline (rows, fit, executor runs, twin, served-step check) runs on the
CPU in its smoke mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def twin():
    return load_benchmark("twin_1gpu", "twin_1gpu_bench")


def test_the_twin_is_compared_with_the_executors_median(twin):
    runs = [{"throughput_tokens_per_s": v, "ttft_p50_s": t, "tpot_p50_s": 0.003} for v, t in
            ((1000.0, 0.30), (1300.0, 0.24), (900.0, 0.25))]
    sim = {"shrinking": {"throughput_tokens_per_s": 1050.0, "ttft_p50_s": 0.26, "tpot_p50_s": 0.0031}}
    got = twin.side_by_side({"shrinking": runs}, sim)["shrinking"]
    thr = got["metrics"]["throughput_tokens_per_s"]
    assert thr["executor"] == 1000.0 and thr["twin_error"] == pytest.approx(0.05)
    assert thr["executor_runs"] == [1000.0, 1300.0, 900.0] and thr["executor_spread"] == pytest.approx(0.4)
    assert got["metrics"]["ttft_p50_s"]["executor"] == 0.25 and got["within_10pct"]  # +4 % on the median
    one = twin.side_by_side({"shrinking": runs[0]}, sim)["shrinking"]  # one run: no spread, its own figures
    assert "executor_spread" not in one["metrics"]["ttft_p50_s"] and not one["within_10pct"]  # -13 % on the first run alone


def test_repetitions_are_read_back_in_order(twin, tmp_path):
    for k, v in enumerate((1.0, 2.0, 3.0)):
        (tmp_path / twin.run_file("chat", k)).write_text(json.dumps({"throughput_tokens_per_s": v}))
    (tmp_path / twin.run_file("rollout", 0)).write_text(json.dumps({"throughput_tokens_per_s": 9.0}))
    got = twin.executor_summaries(str(tmp_path))
    assert [r["throughput_tokens_per_s"] for r in got["chat"]] == [1.0, 2.0, 3.0]
    assert len(got["rollout"]) == 1 and "shrinking" not in got


def test_the_smoke_pipeline_runs_on_the_cpu(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "benchmarks/twin_1gpu.py", "--smoke", "--repeat", "2", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "twin.json").read_text())
    for name, d in doc["twin"].items():
        assert len(d["metrics"]["steps"]["executor_runs"]) == 2, name
        assert d["metrics"]["steps"]["twin"] > 0
    assert set(doc["served_steps"]) == set(doc["twin"])
    assert (tmp_path / "executor_chat_r1.json").exists()
    rows = json.loads((tmp_path / "engine_rows.json").read_text())["rows"]
    assert all(r["step_ms_first"] > 0 for r in rows if r["kind"] in ("prefill", "mixed"))


def test_a_repeat_below_one_is_refused():
    r = subprocess.run([sys.executable, "benchmarks/twin_1gpu.py", "--repeat", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--repeat must be at least 1" in r.stderr
