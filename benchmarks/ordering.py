"""Request ordering: prediction-free boosted ordering (β = 1, the default, fixed a priori) vs FCFS
and shortest-remaining-first with oracle output lengths, on P99 time-to-last-token and TTFT.

Simulator with the datasheet-floor step model; fixed DOP layout (so the ordering is the only
difference), DeepSeek-V3.2 on 8 × H200 and GLM-5 on 8 × B200; workloads where requests queue:
bursty arrivals (gamma inter-arrivals, CV 4, 20 req/s mean) and chat at 40 req/s (above what
either deployment serves, so the queue grows), 2,000 requests each, seeds 0–2 (figures are the
mean over seeds). Target (issue 5): boost's P99 at or below the oracle's. Prints a table per
case and one JSON document as its last line.

Run: python benchmarks/ordering.py
"""

from __future__ import annotations

import json
import platform

import numpy as np

import planner
from executor.sim import simulate
from runtime_policy.ordering import DEFAULT_BOOST, ORDERS
from runtime_policy.workloads import make_workload

DEPLOYMENTS = (("deepseek-v3.2", "h200"), ("glm-5", "b200"))
CASES = (("bursty", 20.0), ("chat", 40.0))
REQUESTS, SEEDS, LAYOUT = 2000, (0, 1, 2), "dop"
KEYS = ("ttlt_p99_s", "ttft_p99_s", "ttlt_p50_s", "ttft_p50_s", "throughput_tokens_per_s", "preemptions")


def main() -> None:
    out = []
    for model, hw_name in DEPLOYMENTS:
        m, hw = planner.load_model(model), planner.load_hardware(hw_name)
        dep = planner.make_deployment(m, hw, attn=LAYOUT, moe="ep", gpus=8)
        for wl, rate in CASES:
            rows = {}
            for order in ORDERS:
                runs = [simulate(dep, make_workload(wl, REQUESTS, s, rate), LAYOUT, order) for s in SEEDS]
                rows[order] = {k: float(np.mean([r[k] for r in runs])) for k in KEYS}
            print(f"\n{model} on 8 × {hw_name}, {wl} at {rate:g} req/s, layout {LAYOUT}, mean of seeds {SEEDS}")
            print(f"{'order':<12} {'ttlt p99 s':>11} {'ttft p99 s':>11} {'ttlt p50 s':>11} {'ttft p50 s':>11} {'tokens/s':>9}")
            for o, r in rows.items():
                print(f"{o:<12} {r['ttlt_p99_s']:>11.2f} {r['ttft_p99_s']:>11.2f} {r['ttlt_p50_s']:>11.2f} "
                      f"{r['ttft_p50_s']:>11.2f} {r['throughput_tokens_per_s']:>9.0f}")
            b, o = rows["boost"], rows["srpt-oracle"]
            met = b["ttlt_p99_s"] <= o["ttlt_p99_s"] and b["ttft_p99_s"] <= o["ttft_p99_s"]
            print(f"boost vs oracle: P99 TTLT {b['ttlt_p99_s'] / o['ttlt_p99_s'] - 1:+.1%}, "
                  f"P99 TTFT {b['ttft_p99_s'] / o['ttft_p99_s'] - 1:+.1%}  (target ≤ 0: {'met' if met else 'NOT met'})")
            out.append({"model": model, "hardware": hw_name, "gpus": 8, "layout": LAYOUT, "workload": wl,
                        "rate_per_s": rate, "requests": REQUESTS, "seeds": list(SEEDS), "rows": rows,
                        "boost_vs_oracle_ttlt_p99": b["ttlt_p99_s"] / o["ttlt_p99_s"] - 1,
                        "boost_vs_oracle_ttft_p99": b["ttft_p99_s"] / o["ttft_p99_s"] - 1,
                        "boost_vs_fcfs_ttlt_p99": b["ttlt_p99_s"] / rows["fcfs"]["ttlt_p99_s"] - 1,
                        "target_met": bool(met)})
    print(json.dumps({"benchmark": "ordering", "boost": DEFAULT_BOOST, "step_time_model": "datasheet_floor_midpoint",
                      "results": out, "python": platform.python_version(), "numpy": np.__version__}))


if __name__ == "__main__":
    main()
