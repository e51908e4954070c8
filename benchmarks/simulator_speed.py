"""Simulator speed: simulated decode steps per second of wall time, per workload, DeepSeek-V3.2
on 8 × H200, dynamic layout policy, FCFS, datasheet step model:

- `shrinking`: 2,000 requests at t = 0 (long runs of steps: few membership changes);
- `chat`: 2,000 Poisson requests at 20 req/s (arrivals cut runs to a few steps);
- `bursty`: 2,000 requests, gamma inter-arrivals (CV 4) at 20 req/s mean.

Timed: the serving loop (`runtime_policy.loop.serve` with the simulated executor), best of 3
repeats, each on a freshly built policy and executor; the one-off compile of the step-time tables
(`LayoutPolicy.compile`, per deployment) is timed separately and also reported folded into an
end-to-end figure for this workload size. `steps_per_s` counts decode steps (steps that advance
decoding requests). Target (issue 5): ≥ 100,000 steps/s, here required of every workload. Also
reported: the same per CPU second of the serving thread (`time.thread_time`, best of the repeats:
on a shared, loaded host the wall clock counts the time other processes hold the core, the CPU
clock far less). Prints a table and one JSON document (with the CPU, its load and versions) as its
last line.

`--bytecodes` also counts the Python bytecodes one serve of each workload executes (`sys.settrace`
with opcode events, every frame; numpy's C time is not in it): a figure the host's load does not
move, for A/B work on a shared machine where wall and CPU time swing by 2× (that serve is traced, not
timed; ~10 s a workload).

Run: python benchmarks/simulator_speed.py [--bytecodes]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

import planner
from conditions import cpu_name, git_commit
from executor.sim import SimExecutor
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import LayoutPolicy
from runtime_policy.workloads import make_workload

WORKLOADS = ("shrinking", "chat", "bursty")
REQUESTS, REPEATS, TARGET = 2000, 3, 100_000


def count_bytecodes(fn) -> int:
    """Python bytecodes executed by fn() (opcode trace events of every frame it runs)."""
    n = 0

    def trace(frame, event, arg):
        nonlocal n
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            n += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytecodes", action="store_true", help="also count one serve's Python bytecodes per workload")
    args = ap.parse_args()
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    t0 = time.perf_counter()
    lp = LayoutPolicy.compile(dep)
    compile_s = time.perf_counter() - t0
    load_before = os.getloadavg()
    rows = []
    for name in WORKLOADS:
        w = make_workload(name, REQUESTS, seed=0)
        best = best_cpu = np.inf
        for _ in range(REPEATS):
            pol, ex = LayoutPolicy(lp.tables, lp.knobs), SimExecutor(lp.tables)
            c0, t0 = time.thread_time(), time.perf_counter()
            res = serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol, Ordering("fcfs"), ex, LoopConfig())
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.thread_time() - c0)
        runs = len(res.timeline["t_s"])
        rows.append({"workload": name, "requests": w.requests, "decode_steps": res.decode_steps, "steps": res.steps,
                     "runs": runs, "steps_per_run": res.steps / runs, "loop_wall_s": best,
                     "us_per_run": best / runs * 1e6, "steps_per_s": res.decode_steps / best,
                     "loop_cpu_s": best_cpu, "steps_per_cpu_s": res.decode_steps / best_cpu,
                     "end_to_end_steps_per_s": res.decode_steps / (best + compile_s),
                     "simulated_s": float(np.nanmax(res.finish_s)), "target_met": bool(res.decode_steps / best >= TARGET)})
        if args.bytecodes:
            pol, ex = LayoutPolicy(lp.tables, lp.knobs), SimExecutor(lp.tables)
            n = count_bytecodes(lambda: serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol,
                                              Ordering("fcfs"), ex, LoopConfig()))
            rows[-1].update(bytecodes=n, bytecodes_per_run=n / runs, bytecodes_per_decode_step=n / res.decode_steps)
    print(f"{'workload':<10} {'decode steps':>12} {'runs':>6} {'steps/run':>9} {'us/run':>7} {'loop s':>7} "
          f"{'steps/s':>9} {'per CPU s':>9} {'incl. compile':>13} {'simulated s':>11}")
    for r in rows:
        print(f"{r['workload']:<10} {r['decode_steps']:>12} {r['runs']:>6} {r['steps_per_run']:>9.1f} "
              f"{r['us_per_run']:>7.1f} {r['loop_wall_s']:>7.3f} {r['steps_per_s']:>9.0f} {r['steps_per_cpu_s']:>9.0f} "
              f"{r['end_to_end_steps_per_s']:>13.0f} {r['simulated_s']:>11.1f}")
    if args.bytecodes:
        print("Python bytecodes per serve: " + ", ".join(f"{r['workload']} {r['bytecodes'] / 1e6:.2f} M "
                                                         f"({r['bytecodes_per_run']:.0f} a run)" for r in rows))
    print(f"table compile (once per deployment): {compile_s * 1e3:.0f} ms; target ≥ {TARGET} steps/s per workload: "
          + ", ".join(f"{r['workload']} {'met' if r['target_met'] else 'NOT met'}" for r in rows))
    commit = git_commit()
    print(json.dumps({"benchmark": "simulator_speed", "steps_per_s": min(r["steps_per_s"] for r in rows),
                      "steps_per_s_by_workload": {r["workload"]: r["steps_per_s"] for r in rows},
                      "target_steps_per_s": TARGET, "target_met_every_workload": all(r["target_met"] for r in rows),
                      "compile_s": compile_s, "rows": rows,
                      "deployment": "deepseek-v3.2 on 8 x h200, policy dynamic, order fcfs, datasheet step model",
                      "timing": f"serve() only, best of {REPEATS} (wall and the thread's CPU time); compile timed apart",
                      "cpu": cpu_name(), "cpus": os.cpu_count(), "load_average_before": load_before,
                      "python": platform.python_version(), "numpy": np.__version__, "git_commit": commit}))


if __name__ == "__main__":
    main()
