"""Simulator speed: simulated decode steps per second of wall time, DeepSeek-V3.2 on 8 × H200,
dynamic policy, FCFS, on the shrinking batch (2,000 requests) and on chat (2,000 requests at
20 req/s). Prints a short table and one JSON document as its last line (`steps_per_s` is over
both workloads together). Target: ≥ 100,000 steps/s.

Run: python benchmarks/simulator_speed.py
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np

import planner
from executor.sim import simulate
from runtime_policy.workloads import make_workload


def main() -> None:
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    rows = []
    for name in ("shrinking", "chat"):
        w = make_workload(name, 2000, seed=0)
        simulate(dep, w.subset(np.arange(50)), "dynamic", "fcfs")  # warm-up (imports, tables)
        t0 = time.perf_counter()
        d = simulate(dep, w, "dynamic", "fcfs")
        wall = time.perf_counter() - t0
        rows.append({"workload": name, "requests": w.requests, "decode_steps": d["decode_steps"], "steps": d["steps"],
                     "wall_s": wall, "steps_per_s": d["decode_steps"] / wall, "simulated_s": d["makespan_s"]})
    print(f"{'workload':<10} {'decode steps':>12} {'wall s':>8} {'steps/s':>10} {'simulated s':>12}")
    for r in rows:
        print(f"{r['workload']:<10} {r['decode_steps']:>12} {r['wall_s']:>8.2f} {r['steps_per_s']:>10.0f} {r['simulated_s']:>12.1f}")
    steps = sum(r["decode_steps"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    print(json.dumps({"benchmark": "simulator_speed", "steps_per_s": steps / wall, "target_steps_per_s": 100000,
                      "rows": rows, "deployment": "deepseek-v3.2 on 8 x h200, policy dynamic, order fcfs",
                      "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
