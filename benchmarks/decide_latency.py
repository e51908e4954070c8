"""decide() latency: the policy's per-step cost on states recorded from simulated serving
(DeepSeek-V3.2 on 8 × H200; the shrinking batch, chat and long prompts, batches from 1 to ~1,000
requests; most states carry the loop's prefill statistics, so the chunk blend is timed too).
Each recorded state is replayed through `LayoutPolicy.decide` 5 times, each call timed alone with
perf_counter_ns (the timer's own ~0.1 µs is included); percentiles are over states of each one's
median call (the pooled percentiles of every call, host interference included, are printed too). Prints a short table and one JSON
document as its last line (`decide_p50_us`, `decide_p99_us`). Target: p99 ≤ 20 µs on this CPU.

Run: python benchmarks/decide_latency.py
"""

from __future__ import annotations

import gc
import os
from dataclasses import replace
import json
import platform
import time
from collections import Counter

import numpy as np

import planner
from conditions import cpu_name
from executor.sim import SimExecutor
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import LayoutPolicy, PolicyState
from runtime_policy.workloads import make_workload


def record_states(pol: LayoutPolicy, workload) -> list[PolicyState]:
    states = []
    inner = pol.decide

    def spy(s):
        # every field, the loop's prefill statistics and context sums included
        states.append(replace(s, context_tokens=s.context_tokens.copy(), owner_kv_tokens=s.owner_kv_tokens.copy(),
                              free_kv_bytes=s.free_kv_bytes.copy(), waiting_tokens=s.waiting_tokens.copy()))
        return inner(s)

    pol.decide = spy
    try:
        serve(workload.arrival_s, workload.input_tokens, workload.output_tokens, pol.tables, pol, Ordering("fcfs"),
              SimExecutor(pol.tables), LoopConfig())
    finally:
        del pol.decide
    return states


PASSES = 5



def main() -> None:
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.make_deployment(m, hw, attn="tp", gpus=8)
    pol = LayoutPolicy.compile(dep)
    states = (record_states(pol, make_workload("shrinking", 1000, 0)) + record_states(pol, make_workload("chat", 1000, 0))
              + record_states(pol, make_workload("longprompt", 200, 0)))
    with_prefill = sum(s.prefill_step_fraction > 0 for s in states)
    for s in states[:2000]:  # warm-up
        pol.decide(s)
    lat = np.empty((PASSES, len(states)))
    reasons = Counter()
    clock = time.perf_counter_ns
    decide = pol.decide
    gc.disable()
    for k in range(PASSES):
        for i, s in enumerate(states):
            t0 = clock()
            d = decide(s)
            lat[k, i] = clock() - t0
            if k == 0:
                reasons[d.reason.name] += 1
    gc.enable()
    # NOTE: per state, the median of the passes: a call the (shared, 2-vCPU) VM preempts is the
    # host's cost, not decide's; the pooled percentiles over every call are reported too.
    us = np.median(lat, axis=0) / 1e3
    pooled = lat.ravel() / 1e3
    batch = np.array([s.context_requests if s.context_requests >= 0 else s.context_tokens.size for s in states])
    p50, p90, p99, mx = (float(np.percentile(us, q)) for q in (50, 90, 99, 100))
    pooled_p50, pooled_p99 = (float(np.percentile(pooled, q)) for q in (50, 99))
    print(f"{pooled.size} decide() calls on {len(states)} recorded states (batch 0–{batch.max()}, median {np.median(batch):.0f}; "
          f"{with_prefill} with prefill statistics, which blend a chunk into the step times)")
    print(f"per state (median of {PASSES} replays): p50 {p50:.2f} µs   p90 {p90:.2f} µs   p99 {p99:.2f} µs   max {mx:.1f} µs")
    print(f"every call pooled ({pooled.size} calls): p50 {pooled_p50:.2f} µs   p99 {pooled_p99:.2f} µs")
    print("reasons:", dict(reasons))
    print(json.dumps({"benchmark": "decide_latency", "decide_p50_us": p50, "decide_p90_us": p90, "decide_p99_us": p99,
                      "decide_max_us": mx, "decide_pooled_p50_us": pooled_p50, "decide_pooled_p99_us": pooled_p99,
                      "timing": f"per state median of {PASSES} replays (pooled: every call)",
                      "target_p99_us": 20.0, "calls": int(pooled.size), "states": len(states),
                      "batch_max": int(batch.max()), "batch_median": float(np.median(batch)), "reasons": dict(reasons),
                      "deployment": "deepseek-v3.2 on 8 x h200 (datasheet floor midpoint tables)",
                      "states_with_prefill_statistics": int(with_prefill),
                      "cpu": cpu_name(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
                      "python": platform.python_version(),
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
