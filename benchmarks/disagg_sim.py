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

The users' own conditions differ from these (sglang-omni docs/basic_usage/pd_disaggregation.md and
docs/developer_reference/pd_vs_colocated.md; the results README quotes them): Qwen3-Omni thinker
(Qwen3-30B-A3B's shape) on one H200 per half, 32 or 128 output tokens, a closed loop at concurrency 8
or 16 (the +46 % / +66 % / −0.3 %: 1P1D against 1P2D, absolute req/s, a GPU added) or open-loop Poisson
at 8–44 req/s (two colocated replicas against one 1P1D pair on the same two GPUs, where "1P:1D is the
worst ratio" comes from). `users_rows` serves those cells under those conditions, each beside the
reported figure.

Usage: python benchmarks/disagg_sim.py [--out DIR] [--requests N] [--part all|splits|users]
[--rounds R] (default: a temporary folder, N = 2048, all, R = 12). Writes disagg_sim.json and
disagg_sim.txt there; prints the JSON document last. CPU only.
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


# ---- the users' own conditions (sgl-project/sglang-omni) -----------------------------------------
# Qwen3-Omni thinker's text tower has Qwen3-30B-A3B's shape (48 layers, 32 query / 4 KV heads of 128,
# hidden 2048, 128 experts of 768, top-8: keras-team/keras-hub keras_hub/src/models/qwen3_omni/
# qwen3_omni_presets.py); floorfirst reads that shape from the Qwen3-30B-A3B config.json fixture. One
# H200 per instance or replica (TP 1), SGLang, bf16.
USERS_MODEL = "tests/fixtures/hf_configs/Qwen--Qwen3-30B-A3B/config.json"
# sglang-omni docs/basic_usage/pd_disaggregation.md "Sizing beyond one prefill and one decode" (issue
# #1760's "+46 % at c8 and +66 % at c16 on 1024-token prompts, −0.3 % at 8128"): three H200s, one
# prefill half and one or two decode halves, closed loop at a fixed concurrency, output 32 tokens,
# requests/s (absolute: the 1:2 arm has a GPU more).
USERS_1760 = [  # (prompt, output, concurrency, reported 1:1 req/s, reported 1:2 req/s)
    (1024, 32, 8, 13.925, 20.375),
    (1024, 32, 16, 15.328, 25.431),
    (8128, 32, 8, 4.835, 4.819),
]
USERS_1760_URL = "https://github.com/sgl-project/sglang-omni/issues/1760"
# sglang-omni docs/developer_reference/pd_vs_colocated.md (PR #1599's "1P:1D is the worst ratio", data in
# PR #1696): two H200s, two colocated replicas against one prefill + one decode half, text prompts of
# 42-44 tokens, 128 output tokens, open-loop Poisson for 90 s; achieved req/s = completions / (first
# sent to last completion).
USERS_1599 = [  # (offered req/s, reported colocated req/s, reported 1P1D req/s)
    (8, 7.69, 8.14), (16, 16.15, 10.54), (24, 23.43, 10.60), (44, 37.76, 10.70),
]
USERS_1599_URL = "https://github.com/sgl-project/sglang-omni/pull/1599"
USERS_1599_MAX_RUNNING = 64  # pd_vs_colocated.md: "about 437 requests in the decode tail against max_running_requests=64"
USERS_1599_BEYOND = (64, 96)  # floorfirst only (the users' sweep stops at 44): where each arm's ceiling lies


def closed_loop(serve_fn, n: int, conc: int, max_iter: int = 200) -> tuple[np.ndarray, np.ndarray, int]:
    """(arrivals, finishes, iterations) of n requests through `serve_fn(arrivals) -> finishes` under a
    client that keeps `conc` in flight (SGLang's bench_serving --max-concurrency: a semaphore; request
    k starts at the (k − conc + 1)-th completion). The arrivals are the fixed point of the finishes,
    iterated from all-at-t=0 (each pass settles at least one more round of requests in time)."""
    arr = np.zeros(n)
    for it in range(1, max_iter + 1):
        fin = serve_fn(arr)
        if not np.all(np.isfinite(fin)):
            raise SystemExit("closed loop: a request did not finish")
        new = np.zeros(n)
        for k in range(conc, n):
            new[k] = np.partition(fin[:k], k - conc)[k - conc]
        if np.max(np.abs(new - arr)) < 1e-9:
            return arr, fin, it
        arr = new
    raise SystemExit(f"closed loop at concurrency {conc} did not settle in {max_iter} passes")


def steady_rate(fin: np.ndarray) -> float:
    """Completions per second over the middle half of the completions (no ramp, no drain)."""
    f = np.sort(fin)
    lo, hi = f.size // 4, 3 * f.size // 4
    return (hi - lo) / (f[hi] - f[lo])


def wall_rate(arr: np.ndarray, fin: np.ndarray) -> float:
    """Completions / (first arrival to last completion): pd_vs_colocated.md's achieved_rate_rps."""
    return fin.size / (float(np.max(fin)) - float(np.min(arr)))


def users_pools(isl: int, osl: int):
    """(prefill Pool, decode Pool, colocated (dep, tables)) of the users' model on one H200 each."""
    from executor.sim import engine_chunk_tokens
    from floorfirst.disagg_serving import role_deployment
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.planning import make
    from floorfirst.points import load_specs
    from runtime_policy.disagg import Pool
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.serving_types import LoopConfig
    from runtime_policy.tables import default_step_model

    spec = DeploymentSpec.of(model=USERS_MODEL, hardware="h200", gpus=1)
    m, hw = load_specs(USERS_MODEL, "h200")

    def tables(dep):
        return LayoutPolicy.compile(dep, default_step_model(dep), PolicyKnobs(),
                                    max_prefill_tokens=engine_chunk_tokens(dep, LoopConfig())).tables

    p, _ = role_deployment(spec, m, hw, "prefill", "tp", 1)
    d, _ = role_deployment(spec, m, hw, "decode", "tp", 1)
    colo = make(spec, m, hw, "tp")
    return Pool("prefill", p, tables(p), "tp", 1), Pool("decode", d, tables(d), "tp", 1), (colo, tables(colo))


def serve_split(pp, dp, split: str, inp: np.ndarray, out: np.ndarray, max_running: int = 4096):
    """`serve_fn` of an xPyD split for closed_loop: arrivals → finishes (request order)."""
    from executor.sim import SimExecutor
    from planner.resources.vector import Pricing
    from runtime_policy.disagg import parse_xpyd, serve_disagg
    from runtime_policy.serving_types import LoopConfig

    x, y = parse_xpyd(split)
    p, d = replace(pp, instances=x), replace(dp, instances=y)

    def fn(arr):
        run = serve_disagg(arr, inp, out, p, d, lambda tables, k: SimExecutor(tables, 0.0, k),
                           Pricing.datasheet(p.dep.hardware), config=LoopConfig(max_batch=max_running))
        return run.result.finish_s
    return fn


def serve_colocated(colo, replicas: int, inp: np.ndarray, out: np.ndarray, max_running: int = 4096):
    """`serve_fn` of `replicas` colocated replicas, round robin by arrival (executor/sim.py simulate)."""
    from executor.sim import SimExecutor
    from runtime_policy.loop import serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy
    from runtime_policy.serving_types import LoopConfig

    _, tables = colo
    fixed = FixedPolicy(tables.layouts.index("tp"))

    def fn(arr):
        fin = np.full(arr.size, np.nan)
        for g in range(replicas):
            ids = np.arange(g, arr.size, replicas)
            r = serve(arr[ids], inp[ids], out[ids], tables, fixed, Ordering("fcfs", 0.0), SimExecutor(tables, 0.0, g),
                      LoopConfig(max_batch=max_running))
            fin[ids] = r.finish_s
        return fin
    return fn


def users_rows(rounds: int, seed: int = 0) -> dict:
    """The users' cells under their conditions (module docstring), each with the reported figures."""
    rows_1760 = []
    for isl, osl, conc, rep11, rep12 in USERS_1760:
        pp, dp, colo = users_pools(isl, osl)
        n = conc * rounds
        inp, out = np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
        got, colo_got = {}, {}
        for split in ("1P1D", "1P2D"):
            arr, fin, it = closed_loop(serve_split(pp, dp, split, inp, out), n, conc)
            got[split] = {"req_per_s": steady_rate(fin), "wall_req_per_s": wall_rate(arr, fin), "passes": it,
                          "latency_p50_s": float(np.median(fin - arr))}
        for reps in (2, 3):
            arr, fin, it = closed_loop(serve_colocated(colo, reps, inp, out), n, conc)
            colo_got[f"{reps}x colocated"] = {"req_per_s": steady_rate(fin), "passes": it,
                                              "latency_p50_s": float(np.median(fin - arr))}
        gain = got["1P2D"]["req_per_s"] / got["1P1D"]["req_per_s"] - 1.0
        rows_1760.append({"input_tokens": isl, "output_tokens": osl, "concurrency": conc, "requests": n,
                          "reported_1P1D_req_per_s": rep11, "reported_1P2D_req_per_s": rep12,
                          "reported_gain_pct": 100 * (rep12 / rep11 - 1.0), "shapes": got, "colocated": colo_got,
                          "second_decode_gain_pct": 100 * gain})
    rows_1599 = []
    pp, dp, colo = users_pools(43, 128)
    rng = np.random.default_rng(seed)
    for offered, rep_c, rep_pd in USERS_1599 + [(r, None, None) for r in USERS_1599_BEYOND]:
        n = int(round(offered * 90))
        arr = np.cumsum(rng.exponential(1.0 / offered, n))
        inp, out = np.full(n, 43, dtype=np.int64), np.full(n, 128, dtype=np.int64)
        fin_pd = serve_split(pp, dp, "1P1D", inp, out, USERS_1599_MAX_RUNNING)(arr)
        fin_c = serve_colocated(colo, 2, inp, out, USERS_1599_MAX_RUNNING)(arr)
        rows_1599.append({"offered_req_per_s": offered, "requests": n, "reported_colocated_req_per_s": rep_c,
                          "reported_1P1D_req_per_s": rep_pd, "colocated_req_per_s": wall_rate(arr, fin_c),
                          "1P1D_req_per_s": wall_rate(arr, fin_pd),
                          "1P1D_latency_p50_s": float(np.median(fin_pd - arr)),
                          "colocated_latency_p50_s": float(np.median(fin_c - arr))})
    return {"model": USERS_MODEL, "hardware": "h200", "gpus_per_instance": 1, "engine": "sglang",
            "closed_loop_1760": {"source": USERS_1760_URL, "rows": rows_1760},
            "equal_gpus_1599": {"source": USERS_1599_URL, "max_running_requests": USERS_1599_MAX_RUNNING,
                                "rows": rows_1599}}


def users_lines(u: dict) -> list[str]:
    """The text tables of users_rows: floorfirst's figure beside the reported one."""
    out = ["", f"users' conditions: Qwen3-Omni thinker's shape ({u['model']}), 1 H200 per instance, SGLang",
           f"closed loop at concurrency c ({u['closed_loop_1760']['source']}); req/s, floorfirst (reported)",
           "in/out    c        1P1D           1P2D       +2nd D (rep.)   2x colo  3x colo"]
    for r in u["closed_loop_1760"]["rows"]:
        s, c = r["shapes"], r["colocated"]
        out.append(f"{r['input_tokens']:>5}/{r['output_tokens']:<3}{r['concurrency']:>3}  "
                   f"{s['1P1D']['req_per_s']:>5.1f} ({r['reported_1P1D_req_per_s']:>5.1f})  "
                   f"{s['1P2D']['req_per_s']:>5.1f} ({r['reported_1P2D_req_per_s']:>5.1f})  "
                   f"{r['second_decode_gain_pct']:+5.0f}% ({r['reported_gain_pct']:+4.0f}%)  "
                   f"{c['2x colocated']['req_per_s']:>7.1f}  {c['3x colocated']['req_per_s']:>7.1f}")
    e = u["equal_gpus_1599"]
    out += ["", f"equal GPUs, 2 x H200: 2 colocated replicas vs 1P1D, 43/128 tokens, open-loop Poisson 90 s, "
                f"max_running_requests {e['max_running_requests']} ({e['source']}); achieved req/s, floorfirst "
                "(reported)",
            "offered   2x colocated         1P1D     1P1D/colo  latency p50 colo / 1P1D (s)"]
    for r in e["rows"]:
        rep = lambda v: "    —" if v is None else f"{v:>5.1f}"  # noqa: E731
        out.append(f"{r['offered_req_per_s']:>7}  {r['colocated_req_per_s']:>6.1f} ({rep(r['reported_colocated_req_per_s'])})"
                   f"  {r['1P1D_req_per_s']:>6.1f} ({rep(r['reported_1P1D_req_per_s'])})  "
                   f"{r['1P1D_req_per_s'] / r['colocated_req_per_s']:>8.2f}   "
                   f"{r['colocated_latency_p50_s']:>6.2f} / {r['1P1D_latency_p50_s']:.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for disagg_sim.json/.txt (default: a temporary one)")
    ap.add_argument("--requests", type=int, default=2048, help="at least; each row takes 6 × the decode cap if more")
    ap.add_argument("--part", choices=("all", "splits", "users"), default="all",
                    help="splits: the xPyD table; users: the sglang-omni reports' own conditions; all: both")
    ap.add_argument("--rounds", type=int, default=12, help="closed-loop rows: requests = concurrency × rounds")
    a = ap.parse_args()
    out_dir = Path(a.out or tempfile.mkdtemp(prefix="disagg_sim_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cases, lines = [], []
    lines.append(f"disagg_sim: >= {a.requests} requests at t = 0, FCFS, SGLang; decode running cap "
                 f"at the planner's TPOT <= {TPOT_S * 1e3:.0f} ms batch; output tok/s per GPU of each xPyD shape "
                 "(+2nd D: 1P2D over 1P1D)")
    for name, model, size, pl, dl in (CASES if a.part != "users" else []):
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
    users = users_rows(a.rounds) if a.part != "splits" else None
    if users is not None:
        lines += users_lines(users)
        print("\n".join(lines[-12:]), file=sys.stderr, flush=True)
    doc = {"benchmark": "disagg_sim", "issue": 29, "part": a.part, "users_conditions": users, "requests_at_least": a.requests, "rows": ROWS, "tpot_cap_s": TPOT_S,
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
