"""HBM-only against a host KV tier in the simulator: a long-context workload on 8 x H200 under fixed
layouts and the dynamic policy, for any sparse-attention card (`--model`: DeepSeek-V3.2's DSA,
DeepSeek-V4-Flash/Pro, whose tier holds only the C4 layers' compressed entries in host memory).
Throughput, TTFT, TPOT, preemptions.

Workload (seeded, fixed a priori): `N` requests, Poisson arrivals at `rate` requests/s, prompts
log-uniform over `--prompt-min`..`--prompt-max` tokens (default 64K-128K), outputs log-normal
(median `output_median`, default 4096, sigma 0.5, at most 4x the median). The tier:
planner.host_tier defaults (4,096 HBM slots per request and tiered layer, in entries: tokens for
DSA, compressed entries for V4's C4 layers; locality 0.8; entry fetches), reference context the
workload's mean context over a request's life (mean prompt + half the mean output). Step times:
datasheet floors combined as the tables do (max + 0.5 (sum - max)). The simulator colocates
prefill and decode (HiSparse runs the tier on PD decode instances): prefill chunks run in the same
loop and fetch nothing. A policy whose layout can't run the model (DCP on V4's sliding windows) is
skipped and listed under "skipped".

The loop's KV wall (`--loop-wall`): 'tables' (the default) runs the compiled tables as they are:
their ledger prices a request as the planner's capacity does (runtime_policy/kv_ledger.py: the rate
past every window, DeepSeek-V4-Flash's 3,850 B per token, and a per-request slack for its windows
and compressor rings; the tier's tables set their wall from both tier walls at the reference
context, rings included). 'planner' sets both runs' wall, per layout, to the requests the planner's
capacity holds at the reference context (planner.capacity.max_concurrency: HBM-only, or both tier
walls), as the ledger's bytes of that many requests of the reference context: a check on the
compiled ledger, which agrees with it there to within one request per owner
(tests/runtime_policy/test_host_tier_sim_wall.py). NOTE: it was the default for stacks with
windows or states while the ledger counted every token at the bytes below the windows (28,962 B
for V4-Flash, ~7× too tight at 128K).

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
from planner.errors import SpecError
from planner.host_tier import HostTierSpec
from runtime_policy.loop import LoopConfig
from runtime_policy.workloads import Workload

KEEP = ("throughput_tokens_per_s", "makespan_s", "completed", "aborted", "preemptions", "ttft_p50_s", "ttft_p90_s",
        "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "ttlt_mean_s", "steps", "decode_steps", "layout_time_s")


def long_context(n: int, rate_per_s: float, seed: int, output_median: int = 4096, prompt_min: int = 65536,
                 prompt_max: int = 131072) -> Workload:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    prompts = np.rint(np.exp(rng.uniform(np.log(prompt_min), np.log(prompt_max), n))).astype(np.int64)
    out = np.clip(np.rint(np.exp(rng.normal(np.log(output_median), 0.5, n))), 1, 4 * output_median).astype(np.int64)
    return Workload("long_context_128k", arrival - arrival[0], prompts, out,
                    {"rate_per_s": rate_per_s, "input_tokens": f"log-uniform {prompt_min}-{prompt_max}",
                     "output_tokens": f"log-normal median {output_median} sigma 0.5, <= {4 * output_median}", "seed": seed})


def planner_wall(tables, dep, ref: float):
    """`tables` with each layout's KV pool set to the requests the planner's capacity holds at `ref`
    tokens (per busiest rank: its owner group's share), as KV-equivalent
    bytes at the ledger's price (context + the tables' slack, at its rate); the memory budget moves
    by the dep's layout's change."""
    from dataclasses import replace

    from planner.capacity import max_concurrency
    from runtime_policy.tables import layout_deployments

    pools = tables.info.kv_pool_bytes.copy()
    for i, d in enumerate(layout_deployments(dep, tables.layouts)):
        if d is None or pools[i] <= 0:
            continue
        held = float(max_concurrency(d, [ref])[0]) / float(tables.info.owner_groups[i])  # one group's
        per_request = (ref + tables.request_slack_tokens) * tables.kv_bytes_per_token
        pools[i] = held * per_request * float(tables.info.group_share[i])
    k = tables.layouts.index(dep.attn)
    budget = tables.memory_budget_bytes + (float(pools[k]) - float(tables.info.kv_pool_bytes[k]))
    pools.setflags(write=False)
    return replace(tables, info=replace(tables.info, kv_pool_bytes=pools), memory_budget_bytes=budget)


def simulate_with_wall(dep, w, pol: str, max_batch: int, wall: str, ref: float) -> dict:
    """`executor.sim.simulate`, its compiled tables' KV wall replaced by `planner_wall` when asked."""
    import runtime_policy.policy as policy_mod

    compile_tables = policy_mod.compile_tables
    if wall == "planner":
        policy_mod.compile_tables = lambda d, *a, **k: planner_wall(compile_tables(d, *a, **k), d, ref)
    try:
        return simulate(dep, w, pol, "fcfs", config=LoopConfig(max_batch=max_batch))
    finally:
        policy_mod.compile_tables = compile_tables


def run(model: str, hardware: str, gpus: int, n: int, rate: float, seed: int, policies: list[str],
        output_median: int = 4096, prompt_min: int = 65536, prompt_max: int = 131072, max_batch: int = 1024,
        loop_wall: str = "tables") -> dict:
    m, hw = planner.load_model(model), planner.load_hardware(hardware)
    wall = loop_wall
    w = long_context(n, rate, seed, output_median, prompt_min, prompt_max)
    # NOTE: the loop counts tokens; the tier's fixed per-request budget makes its HBM wall exact at
    # one context, so it is set at the workload's mean context over a request's life
    ref = int(np.mean(w.input_tokens) + np.mean(w.output_tokens) / 2)
    tier = HostTierSpec(reference_context_tokens=ref)
    rows, skipped = [], []
    for pol in policies:
        attn = "dp" if pol == "dynamic" else pol
        try:
            base = planner.make_deployment(m, hw, attn=attn, gpus=gpus)
        except SpecError as exc:
            skipped.append({"policy": pol, "reason": str(exc)})
            continue
        for label, dep in (("hbm_only", base), ("host_tier", planner.replace_deployment(base, host_tier=tier))):
            t0 = time.perf_counter()
            doc = simulate_with_wall(dep, w, pol, max_batch, wall, float(ref))
            rows.append({"policy": pol, "kv": label, "wall_s": time.perf_counter() - t0,
                         **{k: doc[k] for k in KEEP}, "switches": len(doc["switches"])})
            print(f"{pol:8s} {label:9s} {doc['throughput_tokens_per_s']:8.0f} tok/s  ttft p50 {doc['ttft_p50_s']:.1f} s  "
                  f"tpot p50 {doc['tpot_p50_s'] * 1e3:.1f} ms  preempt {doc['preemptions']}", flush=True)
    gains = {}
    for pol in dict.fromkeys(r["policy"] for r in rows):
        a, b = (next(r for r in rows if r["policy"] == pol and r["kv"] == k) for k in ("hbm_only", "host_tier"))
        gains[pol] = {"throughput_ratio": b["throughput_tokens_per_s"] / a["throughput_tokens_per_s"],
                      "ttft_p50_ratio": b["ttft_p50_s"] / a["ttft_p50_s"] if a["ttft_p50_s"] else None,
                      "tpot_p50_ratio": b["tpot_p50_s"] / a["tpot_p50_s"] if a["tpot_p50_s"] else None}
    return {"model": m.name, "hardware": hw.name, "gpus": gpus, "workload": w.params, "requests": n,
            "tier": tier.model_dump(), "step_time_model": "datasheet floors, max + 0.5 (sum - max)",
            "order": "fcfs", "max_batch": max_batch, "loop_wall": wall, "reference_context_tokens": ref, "rows": rows, "skipped": skipped, "gain_tiered_over_hbm_only": gains}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="deepseek-v3.2")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--rate", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policies", default="dp,dcp,dop,dynamic")
    ap.add_argument("--output-median", type=int, default=4096)
    ap.add_argument("--prompt-min", type=int, default=65536)
    ap.add_argument("--prompt-max", type=int, default=131072)
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--loop-wall", choices=("tables", "planner"), default="tables")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    doc = run(a.model, a.hardware, a.gpus, a.requests, a.rate, a.seed, a.policies.split(","), a.output_median,
              a.prompt_min, a.prompt_max, a.max_batch, a.loop_wall)
    doc["command"] = (f"python benchmarks/host_tier_sim.py --model {a.model} --hardware {a.hardware} --gpus {a.gpus} "
                      f"--requests {a.requests} --rate {a.rate} --seed {a.seed} --policies {a.policies} "
                      f"--output-median {a.output_median} --prompt-min {a.prompt_min} --prompt-max {a.prompt_max} "
                      f"--max-batch {a.max_batch} --loop-wall {a.loop_wall}")
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
