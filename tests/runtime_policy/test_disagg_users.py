"""benchmarks/disagg_sim.py under the users' own conditions (sglang-omni's PD reports): the closed-loop
client is a semaphore, the reported shape comes out (a second decode half pays at 1,024-token prompts,
nothing at 8,128; at equal GPUs a 1P1D pair saturates below two colocated
replicas), and `--part users` reproduces the committed record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.bench_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("disagg_sim", "disagg_sim_bench")


def test_the_closed_loop_keeps_c_in_flight(bench):
    # each request takes 1 s + 0.1 s per request started with it: a semaphore of 2 starts them in pairs
    def serve(arr):
        return arr + 1.0 + 0.1 * np.array([np.sum(arr == a) for a in arr])

    arr, fin, passes = bench.closed_loop(serve, 6, 2)
    assert arr.tolist() == pytest.approx([0, 0, 1.2, 1.2, 2.4, 2.4]) and passes <= 4
    arr, fin, _ = bench.closed_loop(lambda a: a + np.arange(1, a.size + 1), 4, 1)  # one at a time
    assert arr.tolist() == pytest.approx([0, 1, 3, 6])


def test_the_users_shape_under_their_conditions(bench):
    u = bench.users_rows(rounds=8)
    rows = {(r["input_tokens"], r["concurrency"]): r for r in u["closed_loop_1760"]["rows"]}
    gain = {k: r["second_decode_gain_pct"] for k, r in rows.items()}
    assert gain[1024, 16] > 30 and gain[1024, 8] > 30  # reported +66 % and +46 %
    assert abs(gain[8128, 8]) < 3  # the one prefill card binds
    eq = {r["offered_req_per_s"]: r for r in u["equal_gpus_1599"]["rows"]}
    assert eq[8]["1P1D_req_per_s"] == pytest.approx(eq[8]["colocated_req_per_s"], rel=0.05)  # both keep up
    assert eq[44]["1P1D_req_per_s"] < 0.8 * eq[44]["colocated_req_per_s"]  # 1:1 saturates first
    assert eq[96]["1P1D_req_per_s"] == pytest.approx(eq[64]["1P1D_req_per_s"], rel=0.05)  # its ceiling


@pytest.mark.xfail(strict=True, reason="floorfirst's one prefill card binds at c16 once packed chunks are priced as "
                   "engines run them: +44 % at c16 against +56 % at c8 (reported +66 % / +46 %); "
                   "benchmarks/results/disagg_sim/README.md, 'What doesn't'")
def test_the_reported_gain_grows_from_c8_to_c16(bench):
    u = bench.users_rows(rounds=8)
    gain = {(r["input_tokens"], r["concurrency"]): r["second_decode_gain_pct"] for r in u["closed_loop_1760"]["rows"]}
    assert gain[1024, 16] > gain[1024, 8]


def test_the_users_part_reproduces_its_record(tmp_path):
    r = subprocess.run([sys.executable, "benchmarks/disagg_sim.py", "--part", "users", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    new = json.loads(r.stdout.strip().splitlines()[-1])["users_conditions"]
    old = json.loads((ROOT / "benchmarks/results/disagg_sim/disagg_sim.json").read_text())["users_conditions"]
    for a, b in zip(new["closed_loop_1760"]["rows"], old["closed_loop_1760"]["rows"]):
        assert a["second_decode_gain_pct"] == pytest.approx(b["second_decode_gain_pct"], rel=1e-6, abs=1e-6)
        for k in ("1P1D", "1P2D"):
            assert a["shapes"][k]["req_per_s"] == pytest.approx(b["shapes"][k]["req_per_s"], rel=1e-6)
    for a, b in zip(new["equal_gpus_1599"]["rows"], old["equal_gpus_1599"]["rows"]):
        assert a["1P1D_req_per_s"] == pytest.approx(b["1P1D_req_per_s"], rel=1e-6)
        assert a["colocated_req_per_s"] == pytest.approx(b["colocated_req_per_s"], rel=1e-6)
