"""What floorfirst.Policy.decide adds to runtime_policy.LayoutPolicy.decide: both answer the same
recorded states (benchmarks/decide_latency.py's: DeepSeek-V3.2 on 8 x H200, the shrinking batch,
chat and long prompts, recorded from simulated serving), the wrapper wrapping the very policy the
raw calls reach, each state as a BatchState with layout names. Each state is replayed PASSES times
through both, alternating which goes first, each call timed alone with perf_counter_ns; percentiles
are over states of each one's median call, and the overhead is the per-state difference of medians.
Writes api_decide_latency.json to --out (default: a temporary folder) and prints one JSON document
as its last line. Target (the project's): decide p99 ≤ 20 µs.

Run: python benchmarks/api_decide_latency.py [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

import planner
from conditions import cpu_name, git_commit
from decide_latency import record_states
from floorfirst.knobs import DeploymentSpec
from floorfirst.policy import Policy, from_policy_state
from runtime_policy.policy import LayoutPolicy
from runtime_policy.workloads import make_workload

PASSES = 7


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="Folder to write to (default: a temporary one).")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="api_decide_latency_"))
    out.mkdir(parents=True, exist_ok=True)

    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    raw = LayoutPolicy.compile(dep)  # as decide_latency.py compiles it: the same tables, the same states
    states = (record_states(raw, make_workload("shrinking", 1000, 0)) + record_states(raw, make_workload("chat", 1000, 0))
              + record_states(raw, make_workload("longprompt", 200, 0)))
    pol = Policy(raw, DeploymentSpec(attn="tp"))
    batch_states = [from_policy_state(s, pol.layouts) for s in states]
    for s, b in zip(states, batch_states):  # the same answers, in names
        r, d = raw.decide(s), pol.decide(b)
        assert d.reason == r.reason.name.lower() and d.layout == (pol.layouts[r.layout] if d.reason != "cant_decide" else None)
    for s, b in zip(states[:2000], batch_states[:2000]):  # warm-up
        raw.decide(s), pol.decide(b)
    n = len(states)
    lat_raw, lat_api = np.empty((PASSES, n)), np.empty((PASSES, n))
    clock = time.perf_counter_ns
    rd, ad = raw.decide, pol.decide
    gc.disable()
    for k in range(PASSES):
        for i in range(n):
            s, b = states[i], batch_states[i]
            if (i + k) & 1:
                t0 = clock(); rd(s); t1 = clock(); ad(b); t2 = clock()
                lat_raw[k, i], lat_api[k, i] = t1 - t0, t2 - t1
            else:
                t0 = clock(); ad(b); t1 = clock(); rd(s); t2 = clock()
                lat_api[k, i], lat_raw[k, i] = t1 - t0, t2 - t1
    gc.enable()
    raw_us, api_us = np.median(lat_raw, axis=0) / 1e3, np.median(lat_api, axis=0) / 1e3
    extra_us = api_us - raw_us

    def pct(x):
        return {f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)}

    doc = {"benchmark": "api_decide_latency", "raw_decide_us": pct(raw_us), "api_decide_us": pct(api_us),
           "api_overhead_us": pct(extra_us), "target_p99_us": 20.0,
           "timing": f"per state median of {PASSES} replays, raw and wrapper alternating first", "states": n,
           "deployment": "deepseek-v3.2 on 8 x h200, sglang (datasheet floor midpoint tables, as decide_latency.py)",
           "cpu": cpu_name(), "cpus": os.cpu_count(), "load_average": os.getloadavg(), "commit": git_commit(),
           "python": platform.python_version(), "numpy": np.__version__}
    print(f"{n} recorded states, each replayed {PASSES} times through both (per-state medians):")
    for name in ("raw_decide_us", "api_decide_us", "api_overhead_us"):
        print(f"  {name:16s} " + "   ".join(f"{k} {v:.2f} µs" for k, v in doc[name].items()))
    (out / "api_decide_latency.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
