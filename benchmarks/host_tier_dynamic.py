"""Switching the host KV tier at run time: long-context DSA (DeepSeek-V3.2) on 8 x H200 whose load
varies, under the best fixed HBM-only layout, the best fixed tiered layout, the dynamic policy
without twins (HBM-only, and tiered for the whole run) and the dynamic policy with twins (each
layout and its "+host" twin: it may turn the tier on and off, runtime_policy/host_tier_tables.py).

Workload (seeded, fixed before any run): three phases of Poisson arrivals, prompts log-uniform over
64K-128K tokens, outputs log-normal (median `output_median`, sigma 0.5, at most 4x the median):
  quiet  `quiet_s` seconds at `quiet_rate` /s  (every layout's HBM holds what arrives),
  burst  `burst_s` seconds at `burst_rate` /s  (the queue outgrows every HBM-only KV wall),
  quiet  again, then the queue drains.
The tier: planner.host_tier defaults (4,096 HBM slots per request and layer, locality 0.8, entry
fetches), reference context the workload's mean context over a request's life. Step times:
datasheet floors combined as the tables do (max + 0.5 (sum - max)); prefill colocated with decode
(8K-token chunks), FCFS, max batch 1,024.

Prints one JSON document as its last line; `--out` writes it too.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import planner
from executor.sim import simulate
from planner.host_tier import HostTierSpec
from runtime_policy.host_tier_tables import TWIN_SUFFIX
from runtime_policy.loop import LoopConfig
from runtime_policy.workloads import Workload

KEEP = ("throughput_tokens_per_s", "makespan_s", "completed", "aborted", "preemptions", "ttft_p50_s", "ttft_p99_s",
        "tpot_p50_s", "tpot_p99_s", "ttlt_mean_s", "steps", "decode_steps")
MAX_BATCH = 1024


def phased(seed: int, quiet_rate: float, quiet_s: float, burst_rate: float, burst_s: float,
           output_median: int) -> Workload:
    """Quiet, burst, quiet: Poisson arrivals at each phase's rate (module docstring)."""
    rng = np.random.default_rng(seed)
    arrivals, t0 = [], 0.0
    for rate, span in ((quiet_rate, quiet_s), (burst_rate, burst_s), (quiet_rate, quiet_s)):
        t = t0 + rng.exponential(1.0 / rate)
        while t < t0 + span:
            arrivals.append(t)
            t += rng.exponential(1.0 / rate)
        t0 += span
    n = len(arrivals)
    prompts = np.rint(np.exp(rng.uniform(np.log(65536), np.log(131072), n))).astype(np.int64)
    out = np.clip(np.rint(np.exp(rng.normal(np.log(output_median), 0.5, n))), 1, 4 * output_median).astype(np.int64)
    params = {"phases": [{"rate_per_s": quiet_rate, "span_s": quiet_s}, {"rate_per_s": burst_rate, "span_s": burst_s},
                         {"rate_per_s": quiet_rate, "span_s": quiet_s}],
              "input_tokens": "log-uniform 65536-131072",
              "output_tokens": f"log-normal median {output_median} sigma 0.5, <= {4 * output_median}", "seed": seed}
    return Workload("phased_long_context", np.array(arrivals), prompts, out, params)


def _row(variant: str, policy: str, doc: dict, wall_s: float) -> dict:
    sw = doc["switches"]
    tier_on = sum(1 for s in sw if s["to"].endswith(TWIN_SUFFIX) and not s["from"].endswith(TWIN_SUFFIX))
    tier_off = sum(1 for s in sw if s["from"].endswith(TWIN_SUFFIX) and not s["to"].endswith(TWIN_SUFFIX))
    return {"variant": variant, "policy": policy, "wall_s": wall_s, **{k: doc[k] for k in KEEP},
            "switches": len(sw), "tier_on_switches": tier_on, "tier_off_switches": tier_off,
            "layout_time_s": {k: v for k, v in doc["layout_time_s"].items() if v > 0}}


def run(args) -> dict:
    m, hw = planner.load_model(args.model), planner.load_hardware(args.hardware)
    w = phased(args.seed, args.quiet_rate, args.quiet_s, args.burst_rate, args.burst_s, args.output_median)
    ref = int(np.mean(w.input_tokens) + np.mean(w.output_tokens) / 2)
    tier = HostTierSpec(reference_context_tokens=ref)
    cfg = LoopConfig(max_batch=MAX_BATCH)
    rows = []

    def go(variant, attn, policy, with_tier, twins=False):
        base = planner.make_deployment(m, hw, attn=attn, gpus=args.gpus)
        dep = planner.replace_deployment(base, host_tier=tier) if with_tier else base
        t0 = time.perf_counter()
        doc = simulate(dep, w, policy, "fcfs", config=cfg, tier_choice=twins)
        r = _row(variant, policy, doc, time.perf_counter() - t0)
        rows.append(r)
        print(f"{variant:17s} {policy:8s} {r['throughput_tokens_per_s']:7.0f} tok/s  ttft p50/p99 "
              f"{r['ttft_p50_s']:.1f}/{r['ttft_p99_s']:.1f} s  tpot p50/p99 {r['tpot_p50_s'] * 1e3:.1f}/"
              f"{r['tpot_p99_s'] * 1e3:.1f} ms  preempt {r['preemptions']}  switches {r['switches']}", flush=True)
        return r

    for a in args.layouts.split(","):
        go("fixed_hbm_only", a, a, False)
        go("fixed_tiered", a, a, True)
    go("dynamic_hbm_only", "dp", "dynamic", False)
    go("dynamic_tiered", "dp", "dynamic", True)
    go("dynamic_twins", "dp", "dynamic", True, twins=True)

    def best(variant):
        return max((r for r in rows if r["variant"] == variant), key=lambda r: r["throughput_tokens_per_s"])

    summary = {}
    for v in ("fixed_hbm_only", "fixed_tiered", "dynamic_hbm_only", "dynamic_tiered", "dynamic_twins"):
        b = best(v)
        summary[v] = {"policy": b["policy"], **{k: b[k] for k in ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
                                                                 "tpot_p50_s", "tpot_p99_s", "preemptions", "switches")}}
    ref_best = max((best("fixed_hbm_only"), best("fixed_tiered")), key=lambda r: r["throughput_tokens_per_s"])
    for v in summary:
        summary[v]["throughput_over_best_fixed"] = summary[v]["throughput_tokens_per_s"] / ref_best["throughput_tokens_per_s"]
    return {"model": m.name, "hardware": hw.name, "gpus": args.gpus, "requests": w.requests, "workload": w.params,
            "tier": tier.model_dump(), "step_time_model": "datasheet floors, max + 0.5 (sum - max)", "order": "fcfs",
            "max_batch": MAX_BATCH, "best_fixed": {"variant": ref_best["variant"], "policy": ref_best["policy"]},
            "summary": summary, "rows": rows}


def decide_latency(args, rounds: int = 3) -> dict:
    """decide() with and without twins, on states recorded from serving this workload and the chat
    and long-prompt ones (decide_latency.py's method: each state replayed 5 times, the median per
    state, percentiles over states), the two policies alternated `rounds` times."""
    import gc

    from decide_latency import PASSES, record_states
    from runtime_policy.policy import LayoutPolicy
    from runtime_policy.workloads import make_workload

    m, hw = planner.load_model(args.model), planner.load_hardware(args.hardware)
    w = phased(args.seed, args.quiet_rate, args.quiet_s, args.burst_rate, args.burst_s, args.output_median)
    tier = HostTierSpec(reference_context_tokens=int(np.mean(w.input_tokens) + np.mean(w.output_tokens) / 2))
    dep = planner.replace_deployment(planner.make_deployment(m, hw, attn="tp", gpus=args.gpus), host_tier=tier)
    out = {}
    pols = {k: LayoutPolicy.compile(dep, tier_choice=k == "twins") for k in ("tiered_no_twins", "twins")}
    states = {k: record_states(p, w) + record_states(p, make_workload("chat", 1000, 0))
              + record_states(p, make_workload("longprompt", 200, 0)) for k, p in pols.items()}
    clock = time.perf_counter_ns
    for r in range(rounds):
        for k, pol in pols.items():
            st = states[k]
            for s in st[:2000]:
                pol.decide(s)
            lat = np.empty((PASSES, len(st)))
            gc.disable()
            for j in range(PASSES):
                for i, s in enumerate(st):
                    t0 = clock()
                    pol.decide(s)
                    lat[j, i] = clock() - t0
            gc.enable()
            us = np.median(lat, axis=0) / 1e3
            row = out.setdefault(k, {"layouts": len(pol.tables.layouts), "states": len(st), "p50_us": [], "p99_us": []})
            row["p50_us"].append(float(np.percentile(us, 50)))
            row["p99_us"].append(float(np.percentile(us, 99)))
            print(f"round {r} {k:16s} p50 {row['p50_us'][-1]:.2f} us  p99 {row['p99_us'][-1]:.2f} us", flush=True)
    import os

    return {"benchmark": "decide_latency_twins", "deployment": f"{m.name} on {args.gpus} x {hw.name}, host tier, tp",
            "load_average": os.getloadavg(), "cpus": os.cpu_count(), **out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="deepseek-v3.2")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet-rate", type=float, default=0.03)
    ap.add_argument("--quiet-s", type=float, default=600.0)
    ap.add_argument("--burst-rate", type=float, default=0.5)
    ap.add_argument("--burst-s", type=float, default=120.0)
    ap.add_argument("--output-median", type=int, default=4096)
    ap.add_argument("--layouts", default="tp,cp,dcp,dp,dop")
    ap.add_argument("--out", default=None)
    ap.add_argument("--decide-latency", action="store_true", help="time decide() with and without twins instead")
    a = ap.parse_args()
    if a.decide_latency:
        doc = decide_latency(a)
        if a.out:
            Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc))
        return
    doc = run(a)
    doc["command"] = (f"python benchmarks/host_tier_dynamic.py --model {a.model} --hardware {a.hardware} --gpus {a.gpus} "
                      f"--seed {a.seed} --quiet-rate {a.quiet_rate} --quiet-s {a.quiet_s} --burst-rate {a.burst_rate} "
                      f"--burst-s {a.burst_s} --output-median {a.output_median} --layouts {a.layouts}")
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
