"""How the best prefill:decode split moves with prompt length (issue 29): every xPyD shape of one
instance size, per GPU, as `floorfirst disagg` prices it (planner.disagg), for DeepSeek-V3.2 (DSA)
with one 8 × H200 node per instance and Llama-3.1-70B (GQA) with TP4 instances on H200 nodes,
against colocated replicas of the same instance.

What users report (shared reference, serving-stacks-2026.md "Disaggregated prefill/decode"): at
short prompts a second decode pool pays (+46–66 % at 1,024-token prompts, sglang-omni #1760) and
1P:1D is the worst ratio (sglang-omni PR #1599: prefill is ≤ 2.6 % of a request's GPU work); at
8K prompts the second decode pool gains nothing (−0.3 %). The record holds, per prompt length, each
shape's output tokens/s per GPU, what binds it, the best shape and its prefill share.

Usage: python benchmarks/disagg_ratio.py [--out DIR] (default: a temporary folder). Writes
disagg_ratio.json and disagg_ratio.txt there; prints the JSON document last. CPU only, ~1 min.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import planner  # noqa: E402
from planner.disagg.search import Workload, best_per_shape, search, split_shape  # noqa: E402

INPUTS = [1024, 2048, 4096, 8192, 16384, 32768]
OUTPUTS = [1024, 4096]
TPOT_S = 0.05
CASES = [
    # (name, model, weight dtype, instance GPUs, budget GPUs)
    ("dsa", "deepseek-v3.2", None, 8, 32),
    ("gqa", "llama-3.1-70b", None, 4, 16),
]


def sweep(model: str, weight_dtype, size: int, budget: int, engine: str) -> dict:
    m, hw = planner.load_model(model), planner.load_hardware("h200")
    rows = []
    for osl, isl in ((o, i) for o in OUTPUTS for i in INPUTS):
        r = search(m, hw, budget, Workload(isl, osl, None, TPOT_S), engine=engine, weight_dtype=weight_dtype,
                   sizes=[size])
        shapes = {}
        for o in best_per_shape(r.options):
            x, _, y, _ = split_shape(o)
            shapes[f"{x}P{y}D"] = {"output_tokens_per_s_per_gpu": o.output_tokens_per_s / o.gpus, "gpus": o.gpus,
                                   "binding": o.binding, "label": o.deployment.label(), "feasible": o.feasible,
                                   "ttft_s": o.ttft_s, "handoff_exposed_s": o.exposed_s}
        colo = [c for c in r.colocated_options if c.dep.gpus == size and c.feasible]
        feasible = {k: v for k, v in shapes.items() if v["feasible"]}
        best = max(feasible, key=lambda k: (feasible[k]["output_tokens_per_s_per_gpu"], -feasible[k]["gpus"]))
        x, y = (int(v) for v in best.rstrip("D").split("P"))
        worst_of = {k: v for k, v in feasible.items() if k in ("1P1D", "1P2D", "1P3D", "2P1D", "3P1D", "2P2D")}
        rows.append({"input_tokens": isl, "output_tokens": osl, "shapes": shapes, "best_shape": best,
                     "best_prefill_share_fraction": x / (x + y),
                     "worst_shape": min(worst_of, key=lambda k: worst_of[k]["output_tokens_per_s_per_gpu"]),
                     "second_decode_gain_pct": 100.0 * (shapes["1P2D"]["output_tokens_per_s_per_gpu"] * 3 /
                                                        (shapes["1P1D"]["output_tokens_per_s_per_gpu"] * 2) - 1.0),
                     "colocated_label": f"{colo[0].dep.label()}" if colo else None,
                     "colocated_output_tokens_per_s_per_gpu": colo[0].output_tokens_per_s / colo[0].gpus if colo else None})
    return {"model": model, "hardware": "h200", "weight_dtype": weight_dtype or "checkpoint", "instance_gpus": size,
            "budget_gpus": budget, "engine": engine, "rows": rows}


def text(doc: dict) -> str:
    lines = [f"disagg_ratio: TPOT ≤ {TPOT_S * 1e3:.0f} ms, datasheet floors (max), "
             f"{doc['conditions']['engine']} memory and hand-off; output tok/s per GPU of each xPyD shape "
             "(colocated: replicas of one instance; +2nd D: 1P2D over 1P1D, absolute)"]
    for case in doc["cases"]:
        shapes = sorted({s for r in case["rows"] for s in r["shapes"]}, key=lambda s: (int(s[0]), int(s[2])))
        for osl in OUTPUTS:
            lines.append(f"\n{case['model']} on H200, {case['instance_gpus']} GPUs per instance, output {osl} tokens")
            lines.append("input   " + " ".join(f"{s:>7}" for s in shapes) + "  colocated  best   +2nd D")
            lines += [_row(r, shapes) for r in case["rows"] if r["output_tokens"] == osl]
    return "\n".join(lines)


def _row(r: dict, shapes: list[str]) -> str:
    vals = " ".join(f"{r['shapes'][s]['output_tokens_per_s_per_gpu']:7.0f}" if s in r["shapes"] else "      —"
                    for s in shapes)
    colo = r["colocated_output_tokens_per_s_per_gpu"]
    return f"{r['input_tokens']:>6} {vals}  {colo:9.0f}  {r['best_shape']:>5} {r['second_decode_gain_pct']:+6.0f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder to write into (default: a temporary one)")
    ap.add_argument("--engine", default="sglang", choices=["sglang", "vllm"])
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="disagg_ratio-"))
    out.mkdir(parents=True, exist_ok=True)
    sys.stderr.write(f"writing under {out}\n")
    t0 = time.perf_counter()
    cases = [{"name": n, **sweep(mo, w, s, b, args.engine)} for n, mo, w, s, b in CASES]
    doc = {"benchmark": "disagg_ratio", "conditions": {
        "engine": args.engine, "outputs_tokens": OUTPUTS, "tpot_target_s": TPOT_S, "inputs_tokens": INPUTS,
        "floor": "max", "pricing": "datasheet", "hardware": "h200 (h200.yaml: 4.8 TB/s, 989 TFLOP/s bf16, NIC 50 GB/s)",
        "python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
        "note": "model figures from the planner (no GPU run): per-GPU output throughput of each xPyD shape at its rate"},
        "cases": cases, "wall_s": time.perf_counter() - t0}
    (out / "disagg_ratio.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "disagg_ratio.txt").write_text(text(doc) + "\n")
    sys.stderr.write(text(doc) + "\n")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
