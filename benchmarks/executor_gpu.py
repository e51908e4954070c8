"""GPU benchmark of the torch executor on one host (written for 2 x H200, generic in T).

Parts (--parts, comma separated); the copy and bf16 GEMM ceilings are measured first, every time:
- tune (kernel_gpu.tune_triton): the Triton launch configs per head count (else --kernel-json's
  best_config, default the committed kernel.json).
- kernel (kernel_gpu.part_kernel): the Triton kernel and FlashInfer's FA3 MLA decode side by side
  over batch x context at 128/T heads per launch for T = 1, 2, 4, 8 (128: a DP/CP rank; 64, 32, 16:
  a TP/DOP rank of 2, 4, 8 GPUs), mixed lengths and DSA-style sparse launches: time, bytes, FLOPs,
  roofline time and fraction, error vs an fp32 torch reference (kernel_grid.json).
- layouts: bf16 outputs of each layout vs an fp32 single-device reference (DeepSeek dims, 2 layers).
- steps: step time of each layout (--layouts) and kernel choice (--backends) over a batch x context
  grid plus mixed workloads (many short, few very long), each with the attention kernel's own
  time and roofline fraction on that step's inputs; written also as step-profile rows (CSV) for
  calibration, one file per backend.
- switch: all 12 transitions, >= 30 switches each (an Eulerian circuit of the 12 ordered pairs,
  repeated): commit stall as % of the step, background slowdown per step, total cost.
Everything goes to --out (JSON per part + step_profile{tag}.csv); a table is printed, and one JSON
summary is the last line. `--floors CSV` (CPU, no GPU part) prices every row of a step profile with
the planner (calibration.triage) and writes the fraction of its floors each step reached.
Steps are CUDA-graph replays (one graph per layout, batch and page
capacity); kernel times are graph replays over several KV sets (no launch gaps, not L2-resident).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor.torch_executor import KernelConfig, RankRunner, deepseek_v32  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402
from executor.torch_executor.kernels import mla_decode_triton  # noqa: E402
from kernel_gpu import MIXED, ceilings, conditions, part_kernel, roofline_fields, time_graph, tune_triton  # noqa: E402

LAYOUTS = ("tp", "cp", "dp", "dop")
CIRCUIT = ("tp", "cp", "tp", "dp", "tp", "dop", "cp", "dp", "cp", "dop", "dp", "dop", "tp")  # 12 distinct pairs


# ---------------------------------------------------------------- distributed parts
def _layouts_check(g, kcfg):
    from executor.torch_executor.reference import ReferenceDecoder
    dims = deepseek_v32(2)
    lengths = {0: 70, 1: 300, 2: 1, 3: 129, 4: 1000}
    out = {}
    ref_outs = None
    if g.rank == 0:
        ref = ReferenceDecoder(dims, seed=3, device=g.device, dtype=torch.float32, stored_dtype=torch.bfloat16)
        ref.add_requests(dict(lengths))
        ref_outs = [ref.step() for _ in range(3)]
        del ref
    for kind in LAYOUTS:
        r = RankRunner(dims, g, kind, num_slots=256 + r_weight_slots(dims, g, kind), dtype=torch.bfloat16, seed=3,
                       kernel_config=kcfg)
        r.add_requests(dict(lengths))
        outs = [r.step().clone() for _ in range(3)]  # a graph's output is overwritten by the next replay
        if g.rank == 0:
            out[kind] = max(float((o.float() - rf).norm() / rf.norm()) for o, rf in zip(outs, ref_outs))
        del r
        torch.cuda.empty_cache()
    return out


def _kernel_on_step(runner, ceil) -> dict:
    """Time the step's own attention kernel alone (graph replays) on this rank's inputs of the
    current step (layer 0's pool): the planned FlashInfer object if the step has one, else the
    Triton kernel; with its roofline fields."""
    dims = runner.dims
    sb = runner.last_exec.inputs.batch
    n = sb.block_table.shape[0]
    h = dims.num_heads if runner.layout in ("cp", "dp", "dop") else dims.num_heads // runner.g.world_size
    if n == 0:
        return {"kernel_us": 0.0}
    q = torch.randn(n, h, dims.latent_dim, device=runner.g.device, dtype=runner.dtype)
    if sb.kernel is not None:
        fn = (lambda: sb.kernel(q, runner.pool[0]))
    else:
        kc = runner.kernel_config.get(h) if isinstance(runner.kernel_config, dict) else runner.kernel_config
        fn = (lambda: mla_decode_triton(q, runner.pool[0], sb.block_table, sb.local_lens, dims.softmax_scale,
                                        dims.kv_lora_rank, sb.max_pages, kc or KernelConfig()))
    t = time_graph([fn], reps=10)
    attended = int(sb.local_lens.sum().item())
    rf = roofline_fields(attended, n, h, t, ceil)
    return {"kernel_us": t * 1e6, "kernel_roofline_fraction": rf["roofline_fraction"],
            "kernel_bandwidth_fraction": rf["bandwidth_fraction_of_copy"]}


def _time_steps(runner, n) -> list[float]:
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    evs[0].record()
    for i in range(n):
        runner.step()
        evs[i + 1].record()
    torch.cuda.synchronize()
    return [evs[i].elapsed_time(evs[i + 1]) for i in range(n)]


def _steps(g, layers, kcfgs, ceil, points, layouts, budget_s=150.0, out_dir=None):
    """Step rows for each kernel backend (kcfgs: {backend: {heads: KernelConfig}}) x layout x point."""
    dims = deepseek_v32(layers)
    rows = []
    t0 = time.time()
    runs = [(be, kind) for be in kcfgs for kind in layouts]
    page_bytes = dims.kv_bytes_per_page(2)
    for k, (be, kind) in enumerate(runs):
        share = 1.0 if kind == "tp" or g.world_size == 1 else 0.75  # DP/DOP/CP: ~1/T of the KV, with headroom
        # NOTE: the pool is sized from the GPU found (an 80 GB H100 holds less than an H200): points
        # whose KV does not fit are skipped and named
        need = {p["name"] + str(len(p["lengths"])) + str(max(p["lengths"])):
                int(share * sum(p["lengths"]) / dims.page_size) + 2 * len(p["lengths"]) + 64 for p in points}
        budget = pool_slots_budget(g, page_bytes)
        fit = [p for p in points if need[p["name"] + str(len(p["lengths"])) + str(max(p["lengths"]))] <= budget]
        if len(fit) < len(points) and g.rank == 0:
            print(f"steps {be} {kind}: {len(points) - len(fit)} points skipped (KV beyond this GPU's pool of "
                  f"{budget} pages)", flush=True)
        if not fit:
            continue
        slots = max(int(share * sum(p["lengths"]) / dims.page_size) + 2 * len(p["lengths"]) for p in fit) + 64
        r = RankRunner(dims, g, kind, num_slots=slots + r_weight_slots(dims, g, kind), dtype=torch.bfloat16,
                       seed=1, kernel_config=kcfgs[be])
        for p in fit:
            over = torch.tensor([1 if time.time() - t0 > budget_s * (k + 1) / len(runs) else 0])
            torch.distributed.all_reduce(over, group=g.ctrl)
            if over.item():
                break
            lengths = {i: n for i, n in enumerate(p["lengths"])}
            r.add_requests(lengths)
            _time_steps(r, 4)
            ts = _time_steps(r, 16)
            kr = _kernel_on_step(r, ceil)
            kt_all = [None] * g.world_size
            torch.distributed.all_gather_object(kt_all, kr, group=g.ctrl)
            busiest = max(kt_all, key=lambda x: x["kernel_us"])
            if g.rank == 0:
                print(f"steps {be} {kind} {p['name']} B={len(lengths)} {statistics.median(ts):.3f} ms "
                      f"kernel {busiest['kernel_us']:.0f} us t={time.time() - t0:.0f}s", flush=True)
            rows.append({"attn": kind, "backend": be,
                         "kernel": "flashinfer" if r.last_exec.inputs.batch.kernel is not None else "triton",
                         "graph": r.last_exec.graph is not None, "capture_error": r.last_exec.capture_error,
                         "batch": len(lengths), "context": int(sum(p["lengths"]) / len(lengths)),
                         "context_max": max(p["lengths"]), "workload": p["name"],
                         "step_ms": statistics.median(ts), "step_ms_min": min(ts),
                         "kernel_us_busiest_rank": busiest["kernel_us"],
                         "kernel_roofline_fraction": busiest.get("kernel_roofline_fraction"),
                         "kernel_bandwidth_fraction": busiest.get("kernel_bandwidth_fraction")})
            if g.rank == 0 and out_dir:
                json.dump(rows, open(os.path.join(out_dir, "steps_partial.json"), "w"))
            for q in list(r.order):
                r.finish_request(q)
        del r
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def pool_slots_budget(g, page_bytes: int, fraction: float = 0.55) -> int:
    """Page slots one rank's KV pool may take: `fraction` of the GPU memory free now, after weights
    (torch.cuda.mem_get_info: an 80 GB H100 and a 141 GB H200 get pools of their own size)."""
    free, _ = torch.cuda.mem_get_info(g.device)
    return int(fraction * free // page_bytes)


def r_weight_slots(dims, g, kind):
    from executor.torch_executor.layouts import weight_slots_needed
    head_bytes = dims.num_layers * dims.num_heads * 2 * (
        (dims.qk_nope_head_dim + dims.qk_rope_head_dim) * dims.q_lora_rank
        + dims.qk_nope_head_dim * dims.kv_lora_rank + dims.kv_lora_rank * dims.v_head_dim
        + dims.v_head_dim * dims.hidden_size)
    return weight_slots_needed(kind, head_bytes, g.world_size, dims.kv_bytes_per_page(2)) + 8


def _switch(g, layers, kcfg, batch, ctx, rounds, bytes_per_step, budget_s=110.0, out_dir=None):
    dims = deepseek_v32(layers)
    pages = batch * (-(-(ctx + 4096) // dims.page_size))
    r = RankRunner(dims, g, CIRCUIT[0], num_slots=2 * pages + 2 * r_weight_slots(dims, g, "cp"),
                   dtype=torch.bfloat16, seed=2, kernel_config=kcfg)
    r.add_requests({i: ctx for i in range(batch)})
    _time_steps(r, 3)
    records = []
    t0 = time.time()
    for _ in range(rounds):
        over = torch.tensor([1 if time.time() - t0 > budget_s else 0])
        torch.distributed.all_reduce(over, group=g.ctrl)
        if over.item():
            break
        for src, dst in zip(CIRCUIT[:-1], CIRCUIT[1:]):
            if r.seq_lens[0] > ctx + 2048:  # keep the context near ctx: restart the requests
                for q in list(r.order):
                    r.finish_request(q)
                r.add_requests({i: ctx for i in range(batch)})
            before = _time_steps(r, 3)
            b0, b1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b0.record()
            t_plan = time.perf_counter()
            sw = r.switch_to(dst, bytes_per_step)
            t_plan = time.perf_counter() - t_plan
            b1.record()
            plan = sw.plan
            n_after = 5
            n = plan.commit_step - r.step_index + n_after
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
            host_commit = None
            evs[0].record()
            for i in range(n):
                if r.step_index == plan.commit_step and sw.state.value == "copying":
                    t_commit = time.perf_counter()
                    sw.before_step(r)
                    host_commit = time.perf_counter() - t_commit
                r.step()
                evs[i + 1].record()
            torch.cuda.synchronize()
            ts = [evs[i].elapsed_time(evs[i + 1]) for i in range(n)]
            k_commit = n - n_after
            after = ts[k_commit + 1:]
            base_new = statistics.median(after)
            copying = ts[:k_commit]
            begin_gpu_ms = b0.elapsed_time(b1)
            records.append({
                "src": src, "dst": dst, "state": sw.state.value, "reason": sw.reason,
                "num_chunks": plan.num_chunks, "recv_bytes_rank": plan.recv_bytes[g.rank],
                "step_before_ms": statistics.median(before), "step_after_ms": base_new,
                "commit_step_ms": ts[k_commit],
                "stall_pct": 100.0 * (ts[k_commit] - base_new) / base_new,
                "copy_steps_ms": copying,
                "background_slowdown_pct": 100.0 * (statistics.median(copying) / statistics.median(before) - 1)
                if copying else 0.0,
                "begin_device_ms": begin_gpu_ms,  # dry warm-up + capture + dry replay of the new layout's step
                "extra_ms_total": sum(copying) - len(copying) * statistics.median(before) + ts[k_commit] - base_new
                + begin_gpu_ms,
                "host_commit_us": host_commit * 1e6 if host_commit is not None else None,
                "host_plan_begin_ms": t_plan * 1e3, "wall_s": time.time() - t0,
                "graph": r.last_exec.graph is not None, "capture_error": r.last_exec.capture_error,
            })
            if g.rank == 0 and out_dir and len(records) % 12 == 0:
                json.dump(records, open(os.path.join(out_dir, "switch_partial.json"), "w"))
            if g.rank == 0 and (len(records) <= 13 or len(records) % 60 == 0):
                print(f"switch {src}->{dst} plan+begin {t_plan * 1e3:.1f} ms, t={time.time() - t0:.1f}s", flush=True)
    return records


def dist_main(g, parts, layers, kcfgs, backends, layouts, ceil, step_points, switch_cfg, out_dir, steps_budget_s):
    torch.cuda.set_device(g.device)
    per_be = {be: {int(h): KernelConfig(**{**c, "backend": be}) for h, c in kcfgs.items()} for be in backends}
    kcfg = per_be[backends[0]]  # layouts and switches: the first backend
    out = {}
    jobs = {"layouts": ("layouts_rel_err_bf16_vs_fp32", lambda: _layouts_check(g, kcfg)),
            "switch": ("switches", lambda: _switch(g, layers, kcfg, out_dir=out_dir, **switch_cfg)),
            "steps": ("steps", lambda: _steps(g, layers, per_be, ceil, step_points, layouts, steps_budget_s,
                                              out_dir))}
    for part in ("layouts", "switch", "steps"):
        if part in parts:
            key, job = jobs[part]
            try:
                out[key] = job()
            except Exception as e:  # report and go on: the other parts still measure
                import traceback
                out[f"{part}_error"] = traceback.format_exc()[-2000:]
                print(f"rank {g.rank} part {part} failed: {e!r}", flush=True)
            if g.rank == 0:
                json.dump(out, open(os.path.join(out_dir, f"dist_partial_{part}.json"), "w"), default=str)
                print(f"part {part} done", flush=True)
    return out if g.rank == 0 else None


def summarize_switches(records):
    by = {}
    for rec in records:
        by.setdefault(f"{rec['src']}->{rec['dst']}", []).append(rec)
    out = {}
    for key, recs in by.items():
        ok = [x for x in recs if x["state"] == "committed"]
        st = sorted(x["stall_pct"] for x in ok)
        out[key] = {
            "switches": len(recs), "committed": len(ok),
            "stall_pct_median": statistics.median(st) if st else None,
            "stall_pct_p99": st[min(len(st) - 1, int(round(0.99 * (len(st) - 1))))] if st else None,
            "background_slowdown_pct_median": statistics.median([x["background_slowdown_pct"] for x in ok] or [0]),
            "total_extra_ms_median": statistics.median([x["extra_ms_total"] for x in ok] or [0]),
            "copy_steps": ok[0]["num_chunks"] if ok else None,
            "recv_bytes_rank0": ok[0]["recv_bytes_rank"] if ok else None,
            "step_ms_median": statistics.median([x["step_after_ms"] for x in ok] or [0]),
            "host_commit_us_median": statistics.median([x["host_commit_us"] for x in ok if x["host_commit_us"]] or [0]),
            "meets_0p5pct_target": (statistics.median(st) <= 0.5) if st else False,
        }
    return out


CSV_COLS = ["model", "hardware", "gpus", "attn", "moe", "batch", "context", "prefill_tokens", "weight_dtype",
            "kv_dtype", "step_ms", "num_layers", "context_max", "workload", "kernel", "kernel_us_busiest_rank",
            "kernel_roofline_fraction", "kernel_bandwidth_fraction", "ffn"]


def write_profile(path, rows, model_config, world, layers) -> None:
    """Step rows in the step-profile CSV format `floorfirst calibrate --profile` reads."""
    f4 = (lambda x: f"{x:.4f}" if x else "")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLS)
        for rw in rows:
            w.writerow([model_config, "h200", world, rw["attn"], "tp", rw["batch"], rw["context"], 0, "bf16", "bf16",
                        f"{rw['step_ms']:.4f}", layers, rw["context_max"], rw["workload"], rw["kernel"],
                        f"{rw['kernel_us_busiest_rank']:.1f}", f4(rw["kernel_roofline_fraction"]),
                        f4(rw["kernel_bandwidth_fraction"]), "dense"])


def step_floors(profile_csv: str, out_path: str) -> dict:
    """Every row of a step profile against the planner's datasheet floors (calibration.triage, as
    `floorfirst triage --profile`): floor_max / measured is the fraction of the optimistic floor a
    step reached. CPU only; run from the repository root (the rows' model column is a path)."""
    from calibration.triage import triage_profile
    tr = triage_profile(profile_csv)
    rows = [{"line": r["line"], "deployment": r["deployment"], "batch": r["batch"], "context": r["context_tokens"],
             "measured_ms": r["measured_s"] * 1e3, "floor_max_ms": r["floor_max_s"] * 1e3,
             "floor_sum_ms": r["floor_sum_s"] * 1e3, "floor_max_fraction": r["floor_max_s"] / r["measured_s"],
             "verdict": r["verdict"]} for r in tr.rows]
    fr = [r["floor_max_fraction"] for r in rows]
    doc = {"profile": profile_csv, "pricing": "datasheet", "counts": tr.counts(), "issues": tr.issues, "rows": rows,
           "floor_max_fraction": {"min": min(fr), "median": statistics.median(fr), "max": max(fr)} if fr else {}}
    json.dump(doc, open(out_path, "w"), indent=1)
    return doc


def _print_kernel_table(kres) -> None:
    by = {(r["heads"], r["batch"], r["context"], r["backend"]): r for r in kres.get("grid", []) if "error" not in r}
    print("kernel heads batch context | triton us  roof | flashinfer us  roof | faster")
    for (h, b, c, be), r in sorted(by.items()):
        if be != "triton" or b not in (1, 16, 64) or c not in (4096, 16384, 65536):
            continue
        fi = by.get((h, b, c, "flashinfer"))
        fis = f"{fi['time_us']:9.1f} {fi['roofline_fraction']:.2f}" if fi else "        -    -"
        fast = f"{r['time_us'] / fi['time_us']:.2f}x" if fi else ""
        print(f"       {h:5d} {b:5d} {c:7d} | {r['time_us']:9.1f} {r['roofline_fraction']:.2f} | {fis} | {fast}")
    for r in kres.get("sparse", []):
        if "error" not in r:
            print(f"sparse {r['heads']:4d}h B={r['batch']:3d} ctx={r['context']:6d} top-{r['topk']}: "
                  f"{r['time_us']:7.1f} us "
                  f"roof {r['roofline_fraction']:.2f} err {r['rel_err_vs_fp32']:.1e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="kernel,layouts,steps,switch")
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--tag", default="", help="suffix of the steps/step-profile file names")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kernel-json", default="benchmarks/results/executor_gpu/kernel.json",
                    help="the Triton kernel's best_config per head count (unless --parts has tune)")
    ap.add_argument("--layouts", default="tp,cp,dp,dop")
    ap.add_argument("--backends", default="auto", help="kernel backends of the step rows, comma separated")
    ap.add_argument("--kernel-budget-s", type=float, default=400.0)
    ap.add_argument("--switch-rounds", type=int, default=30)
    ap.add_argument("--switch-batch", type=int, default=32)
    ap.add_argument("--switch-context", type=int, default=8192)
    ap.add_argument("--bytes-per-step", type=int, default=128 << 20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--switch-budget-s", type=float, default=110.0)
    ap.add_argument("--steps-budget-s", type=float, default=150.0)
    ap.add_argument("--model-config", default="benchmarks/results/executor_gpu/executor-stack-config.json",
                    help="config.json describing exactly the benchmarked stack (the rows' model column)")
    ap.add_argument("--floors", default=None, metavar="PROFILE_CSV",
                    help="CPU only: price a step profile's rows with the planner, write step_floors{tag}.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.floors:
        doc = step_floors(a.floors, os.path.join(a.out, f"step_floors{a.tag}.json"))
        print(json.dumps({k: doc[k] for k in ("counts", "floor_max_fraction")}))
        return
    parts = a.parts.split(",")
    world = torch.cuda.device_count()
    cond = conditions()
    t_start = time.time()
    ceil = ceilings()
    summary = {"conditions": cond, "layers": a.layers, **ceil}
    print(f"ceilings: copy {ceil['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s, "
          f"bf16 GEMM {ceil['gemm_bf16_flops_per_s'] / 1e12:.0f} TFLOP/s", flush=True)
    if "tune" in parts:
        best = tune_triton(a.out, ceil)
    else:
        best = {int(h): KernelConfig(**c) for h, c in json.load(open(a.kernel_json))["best_config"].items()}
    kres = {}
    if "kernel" in parts:
        kres = part_kernel(a.out, best, ceil, budget_s=a.kernel_budget_s)
        summary["kernel"] = kres.get("summary")
        summary["flashinfer_unavailable"] = kres.get("flashinfer_unavailable")
    print(f"[{time.time() - t_start:.0f}s] kernel done", flush=True)
    dparts = [p for p in parts if p in ("layouts", "steps", "switch")]
    if dparts:
        bs = (1, 16, 64) if a.quick else (1, 4, 16, 32, 64)
        cs = (4096, 65536) if a.quick else (1024, 4096, 16384, 32768, 65536)
        points = [{"name": n, "lengths": v} for n, v in MIXED.items()]  # first: these matter most
        points += [{"name": "uniform", "lengths": [c] * b} for b in bs for c in cs]
        sw = {"batch": a.switch_batch, "ctx": a.switch_context, "rounds": a.switch_rounds,
              "bytes_per_step": a.bytes_per_step, "budget_s": a.switch_budget_s}
        backends = a.backends.split(",")
        res = spawn_ranks(dist_main, world, dparts, a.layers, {str(h): vars(c) for h, c in best.items()}, backends,
                          a.layouts.split(","), ceil, points, sw, a.out, a.steps_budget_s, use_cuda=True)[0]
        for k in ("layouts_error", "switch_error", "steps_error"):
            if k in res:
                summary[k] = res[k]
        if "layouts_rel_err_bf16_vs_fp32" in res:
            summary["layouts_rel_err_bf16_vs_fp32"] = res["layouts_rel_err_bf16_vs_fp32"]
        if "steps" in res:
            rows = res["steps"]
            json.dump({"conditions": cond, "layers": a.layers, **ceil, "rows": rows},
                      open(os.path.join(a.out, f"steps{a.tag}.json"), "w"), indent=1)
            for i, be in enumerate(backends):
                name = f"step_profile{a.tag}.csv" if i == 0 else f"step_profile{a.tag}_{be}.csv"
                write_profile(os.path.join(a.out, name), [r for r in rows if r["backend"] == be], a.model_config,
                              world, a.layers)
            summary["step_rows"] = len(rows)
        if "switches" in res:
            s = summarize_switches(res["switches"])
            json.dump({"conditions": cond, "layers": a.layers, "config": sw, "per_transition": s,
                       "records": res["switches"]}, open(os.path.join(a.out, "switches.json"), "w"), indent=1)
            summary["switches"] = s
    summary["wall_s"] = time.time() - t_start
    json.dump(summary, open(os.path.join(a.out, f"summary{a.tag}.json"), "w"), indent=1, default=str)
    # table last, then the JSON line
    _print_kernel_table(kres)
    for key, v in summary.get("switches", {}).items():
        print(f"switch {key:8s} n {v['committed']:3d} stall med {v['stall_pct_median']}% p99 {v['stall_pct_p99']}% "
              f"bg {v['background_slowdown_pct_median']:.2f}% step {v['step_ms_median']:.2f}ms")
    print(json.dumps({k: summary[k] for k in summary if k not in ("kernel",)}, default=str)[:3000])


if __name__ == "__main__":
    main()
