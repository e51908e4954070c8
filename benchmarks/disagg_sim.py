"""Disaggregated serving simulated (issue 29 item 4): every xPyD shape of one instance size served by
`floorfirst simulate --disagg` (runtime_policy/disagg.py: two pools of the colocated serving loop,
a hand-off queue between them) at short and long prompts, per GPU — DeepSeek-V3.2 (DSA) with one
8 × H200 node per instance (1P1D is 2 × 8 H200) and Llama-3.1-70B (GQA) with 4-GPU instances.

What users report (serving-stacks-2026.md "Disaggregated prefill/decode"): at short prompts a second
decode pool pays (+46–66 % at 1,024-token prompts, sglang-omni #1760) and 1P:1D is the worst ratio
(sglang-omni PR #1599); at 8K prompts the second decode pool gains nothing (−0.3 %): the balance
moves toward prefill. benchmarks/disagg_ratio.py answers from the planner's rates (no queues); this
one serves a workload through the queues and the engines' schedulers.

Conditions: a batch of at least `--requests` requests of one (prompt, output) length, all
arriving at t = 0 (saturation: throughput = output tokens / makespan), FCFS, SGLang (its role memory,
schedulers and Mooncake hand-off), DeepSeek-V3.2 prefill TP + EP and decode DP attention + EP,
Llama-3.1-70B TP both; each decode instance's running requests capped at the batch the planner finds
for TPOT ≤ 50 ms (planner/disagg/pools.py decode_pool), as an operator sets --max-running-requests;
step times from the shipped H200 × SGLang prior.

Usage: python benchmarks/disagg_sim.py [--out DIR] [--requests N] (default: a temporary folder,
N = 1536). Writes disagg_sim.json and disagg_sim.txt there; prints the JSON document last. CPU only.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import planner  # noqa: E402

# (prompt, output) tokens: the users' 1K and 8K prompts at 1K outputs, 4K between, and 1K prompts at 4K
# outputs (prefill a smaller share of a request's GPU time: the case for "1P:1D is the worst ratio")
ROWS = [(1024, 1024), (4096, 1024), (8192, 1024), (1024, 4096)]
TPOT_S = 0.05
SPLITS = ["1P1D", "1P2D", "1P3D", "2P1D", "3P1D"]
CASES = [
    # (name, model, instance GPUs, prefill layout, decode layout)
    ("dsa", "deepseek-v3.2", 8, "tp", "dp"),
    ("gqa", "llama-3.1-70b", 4, "tp", "tp"),
]


def pools(model: str, gpus: int, p_layout: str, d_layout: str, isl: int, osl: int):
    from executor.sim import engine_chunk_tokens
    from floorfirst.disagg_serving import role_deployment
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.points import load_specs
    from planner.disagg.pools import decode_pool
    from runtime_policy.disagg import Pool
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.serving_types import LoopConfig
    from runtime_policy.tables import default_step_model

    spec = DeploymentSpec.of(model=model, hardware="h200", gpus=gpus)
    m, hw = load_specs(model, "h200")
    out = []
    for role, lay in (("prefill", p_layout), ("decode", d_layout)):
        dep, _ = role_deployment(spec, m, hw, role, lay, gpus)
        sm = default_step_model(dep)
        lp = LayoutPolicy.compile(dep, sm, PolicyKnobs(), max_prefill_tokens=engine_chunk_tokens(dep, LoopConfig()))
        cap = None
        if role == "decode":
            cap = max(decode_pool(dep, isl, osl, TPOT_S).batch, 1)
        out.append((Pool(role, dep, lp.tables, lay, 1, cap), sm.label))
    return out


def sustained_rate(run) -> tuple[float, list[float]]:
    """Output tokens/s while the deployment is saturated: between the first finish (the decode pool has
    ramped up) and the last decode admission (after it, nothing waits: the pools drain), each request's
    tokens spread evenly from its first token to its finish. NOTE: throughput over the makespan would
    count the ramp and the drain, a fixed ~output × TPOT that a short batch can't amortize."""
    r = run.result
    ok = np.isfinite(r.finish_s) & np.isfinite(r.first_token_s)
    first, fin, out = r.first_token_s[ok], r.finish_s[ok], r.output_tokens[ok].astype(np.float64)
    t0, t1 = float(fin.min()), float(np.nanmax(run.admitted_s))
    if t1 <= t0:
        raise SystemExit(f"no saturated window (first finish {t0:.1f} s ≥ last admission {t1:.1f} s): more --requests")
    span = np.maximum(fin - first, 1e-12)
    inside = np.clip(np.minimum(fin, t1) - np.maximum(first, t0), 0.0, None)
    return float(((out - 1.0) * inside / span).sum() / (t1 - t0)), [t0, t1]


def run_split(pp, dp, split: str, isl: int, osl: int, n: int) -> dict:
    from executor.sim import SimExecutor
    from planner.resources.vector import Pricing
    from runtime_policy.disagg import parse_xpyd, serve_disagg, summarize_disagg

    x, y = parse_xpyd(split)
    p, d = replace(pp, instances=x), replace(dp, instances=y)
    arr = np.zeros(n)
    inp = np.full(n, isl, dtype=np.int64)
    out = np.full(n, osl, dtype=np.int64)
    t0 = time.perf_counter()
    run = serve_disagg(arr, inp, out, p, d, lambda tables, k: SimExecutor(tables, 0.0, k),
                       Pricing.datasheet(p.dep.hardware))
    s = summarize_disagg(run)
    gpus = p.gpus + d.gpus
    rate, window = sustained_rate(run)
    return {"split": split, "gpus": gpus, "requests": n, "output_tokens_per_s": rate,
            "output_tokens_per_s_per_gpu": rate / gpus, "window_s": window,
            "makespan_output_tokens_per_s": s["throughput_tokens_per_s"], "makespan_s": s["makespan_s"],
            "completed": s["completed"], "ttft_p50_s": s["ttft_p50_s"], "tpot_p50_s": s["tpot_p50_s"],
            "handoff_queue_p50_s": s["handoff_queue_p50_s"], "handoff_queue_p90_s": s["handoff_queue_p90_s"],
            "handoff_transfer_p50_s": s["handoff_transfer_p50_s"], "ttft_parts_mean_s": s["ttft_parts_mean_s"],
            "decode_max_batch": d.max_batch, "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for disagg_sim.json/.txt (default: a temporary one)")
    ap.add_argument("--requests", type=int, default=2048, help="at least; each row takes 6 × the decode cap if more")
    a = ap.parse_args()
    out_dir = Path(a.out or tempfile.mkdtemp(prefix="disagg_sim_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cases, lines = [], []
    lines.append(f"disagg_sim: >= {a.requests} requests at t = 0, FCFS, SGLang; decode running cap "
                 f"at the planner's TPOT <= {TPOT_S * 1e3:.0f} ms batch; output tok/s per GPU of each xPyD shape "
                 "(+2nd D: 1P2D over 1P1D)")
    for name, model, size, pl, dl in CASES:
        lines.append("")
        lines.append(f"{model} on H200, {size} GPUs per instance, prefill {pl}, decode {dl}")
        lines.append("in/out     " + "".join(f"{s:>7}" for s in SPLITS) + "   best  worst  +2nd D  worst 1PyD")
        rows = []
        for isl, osl in ROWS:
            (pp, label_p), (dp, label_d) = pools(model, size, pl, dl, isl, osl)
            # NOTE: enough requests to keep the largest decode pool full for several request lifetimes
            n = max(a.requests, 2 * 3 * dp.max_batch)
            shapes = {s: run_split(pp, dp, s, isl, osl, n) for s in SPLITS}
            per = {s: v["output_tokens_per_s_per_gpu"] for s, v in shapes.items()}
            best, worst = max(per, key=per.get), min(per, key=per.get)
            gain = shapes["1P2D"]["output_tokens_per_s"] / shapes["1P1D"]["output_tokens_per_s"] - 1.0
            worst_1py = min(("1P1D", "1P2D", "1P3D"), key=per.get)
            rows.append({"input_tokens": isl, "output_tokens": osl, "shapes": shapes, "best": best, "worst": worst,
                         "worst_of_1PyD": worst_1py, "second_decode_gain_pct": 100 * gain,
                         "decode_max_batch": dp.max_batch, "step_time_model": label_d})
            lines.append(f"{isl:>5}/{osl:<4}" + "".join(f"{per[s]:>7.0f}" for s in SPLITS)
                         + f"   {best:>4}   {worst:>4}  {100 * gain:+5.0f}%   {worst_1py:>4}")
            print(lines[-1], file=sys.stderr, flush=True)
        cases.append({"case": name, "model": model, "gpus_per_instance": size, "prefill_layout": pl,
                      "decode_layout": dl, "rows": rows})
    doc = {"benchmark": "disagg_sim", "issue": 29, "requests_at_least": a.requests, "rows": ROWS, "tpot_cap_s": TPOT_S,
           "arrivals": "all at t = 0", "order": "fcfs", "engine": "sglang", "hardware": "h200", "cases": cases,
           "conditions": {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
                          "system": platform.system(), "planner": getattr(planner, "__version__", "")},
           "wall_s": time.perf_counter() - t0}
    (out_dir / "disagg_sim.txt").write_text("\n".join(lines) + "\n")
    (out_dir / "disagg_sim.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines), file=sys.stderr)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
