"""GPU benchmark of the torch executor on one host (written for 2 x H200, generic in T).

Parts (--parts, comma separated):
- kernel (kernel_gpu.py): device-to-device copy ceiling, then the Triton paged split-KV MLA decode
  kernel over batch x context at 128/T heads per program for T = 1, 2, 4, 8 (128: a DP/CP rank; 64, 32, 16: a
  TP/DOP rank of 2, 4, 8 GPUs): time, KV bytes read, `bandwidth_fraction_of_copy`, error vs an
  fp32 torch reference; a few launch configs tried per head count; and mixed lengths (many
  short, a few very long) with the balanced unit rule and the old one side by side.
- layouts: bf16 outputs of each layout vs an fp32 single-device reference (DeepSeek dims, 2 layers).
- steps: step time of each layout over a batch x context grid plus mixed workloads (many short,
  few very long), each with the attention kernel's own bandwidth on that step's inputs;
  written also as step-profile rows (CSV) for calibration.
- switch: all 12 transitions, >= 30 switches each (an Eulerian circuit of the 12 ordered pairs,
  repeated): commit stall as % of the step, background slowdown per step, total cost.
Everything goes to --out (JSON per part + step_profile.csv); a table is printed, and one JSON
summary is the last line. Steps are CUDA-graph replays (one graph per layout, batch and page
capacity); kernel times are graph replays over several KV sets (no launch gaps, not L2-resident).
"""

from __future__ import annotations

import argparse
import csv
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
from kernel_gpu import MIXED, conditions, copy_bandwidth, part_kernel, time_graph  # noqa: E402

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


def _kernel_on_step(runner) -> tuple[float, int]:
    """Time the attention kernel alone (graph replays) on this rank's inputs of the current step (layer 0)."""
    dims = runner.dims
    sb = runner.exec.inputs.batch
    n = sb.block_table.shape[0]
    h = dims.num_heads if runner.layout in ("cp", "dp", "dop") else dims.num_heads // runner.g.world_size
    if n == 0:
        return 0.0, 0
    q = torch.randn(n, h, dims.latent_dim, device=runner.g.device, dtype=runner.dtype)
    kc = runner.kernel_config.get(h) if isinstance(runner.kernel_config, dict) else runner.kernel_config
    t = time_graph([lambda: mla_decode_triton(q, runner.pool[0], sb.block_table, sb.local_lens, dims.softmax_scale,
                                              dims.kv_lora_rank, sb.max_pages, kc or KernelConfig())], reps=10)
    kv_bytes = int(sb.local_lens.sum().item()) * dims.latent_dim * runner.pool.element_size()
    return t, kv_bytes


def _time_steps(runner, n) -> list[float]:
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    evs[0].record()
    for i in range(n):
        runner.step()
        evs[i + 1].record()
    torch.cuda.synchronize()
    return [evs[i].elapsed_time(evs[i + 1]) for i in range(n)]


def _steps(g, layers, kcfg, copy_bw, points, budget_s=150.0, out_dir=None):
    dims = deepseek_v32(layers)
    rows = []
    t0 = time.time()
    max_tokens = max(sum(p["lengths"]) for p in points)
    for kind in LAYOUTS:
        share = 1.0 if kind == "tp" else 0.75  # DP/DOP/CP: ~1/T of the KV, with imbalance headroom
        slots = int(share * max_tokens / dims.page_size) + 2 * max(len(p["lengths"]) for p in points) + 64
        r = RankRunner(dims, g, kind, num_slots=slots + r_weight_slots(dims, g, kind), dtype=torch.bfloat16,
                       seed=1, kernel_config=kcfg)
        for p in points:
            over = torch.tensor([1 if time.time() - t0 > budget_s * (LAYOUTS.index(kind) + 1) / 4 else 0])
            torch.distributed.all_reduce(over, group=g.ctrl)
            if over.item():
                break
            lengths = {i: n for i, n in enumerate(p["lengths"])}
            r.add_requests(lengths)
            _time_steps(r, 3)
            ts = _time_steps(r, 8)
            kt, kv_bytes = _kernel_on_step(r)
            kt_all = [None] * g.world_size
            torch.distributed.all_gather_object(kt_all, (kt, kv_bytes), group=g.ctrl)
            busiest = max(kt_all, key=lambda x: x[0])
            if g.rank == 0:
                print(f"steps {kind} {p['name']} B={len(lengths)} t={time.time() - t0:.0f}s", flush=True)
            rows.append({"attn": kind, "graph": r.exec.graph is not None, "capture_error": r.exec.capture_error,
                         "batch": len(lengths), "context": int(sum(p["lengths"]) / len(lengths)),
                         "context_max": max(p["lengths"]), "workload": p["name"],
                         "step_ms": statistics.median(ts), "step_ms_min": min(ts),
                         "kernel_us_busiest_rank": busiest[0] * 1e6,
                         "kernel_bandwidth_fraction": (busiest[1] / busiest[0] / copy_bw) if busiest[0] else None})
            if g.rank == 0 and out_dir:
                json.dump(rows, open(os.path.join(out_dir, "steps_partial.json"), "w"))
            for q in list(r.order):
                r.finish_request(q)
        del r
        torch.cuda.empty_cache()
    return rows


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
                "graph": r.exec.graph is not None, "capture_error": r.exec.capture_error,
            })
            if g.rank == 0 and out_dir and len(records) % 12 == 0:
                json.dump(records, open(os.path.join(out_dir, "switch_partial.json"), "w"))
            if g.rank == 0 and (len(records) <= 13 or len(records) % 60 == 0):
                print(f"switch {src}->{dst} plan+begin {t_plan * 1e3:.1f} ms, t={time.time() - t0:.1f}s", flush=True)
    return records


def dist_main(g, parts, layers, kcfgs, copy_bw, step_points, switch_cfg, out_dir, steps_budget_s):
    torch.cuda.set_device(g.device)
    kcfg = {int(h): KernelConfig(**c) for h, c in kcfgs.items()}  # per heads a program sees
    out = {}
    jobs = {"layouts": ("layouts_rel_err_bf16_vs_fp32", lambda: _layouts_check(g, kcfg)),
            "switch": ("switches", lambda: _switch(g, layers, kcfg, out_dir=out_dir, **switch_cfg)),
            "steps": ("steps", lambda: _steps(g, layers, kcfg, copy_bw, step_points, steps_budget_s, out_dir))}
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="kernel,layouts,steps,switch")
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kernel-json", default=None, help="reuse best configs from an earlier kernel part")
    ap.add_argument("--switch-rounds", type=int, default=30)
    ap.add_argument("--switch-batch", type=int, default=32)
    ap.add_argument("--switch-context", type=int, default=8192)
    ap.add_argument("--bytes-per-step", type=int, default=128 << 20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--switch-budget-s", type=float, default=110.0)
    ap.add_argument("--steps-budget-s", type=float, default=150.0)
    ap.add_argument("--model-config", default="benchmarks/results/executor_gpu/executor-stack-config.json",
                    help="config.json describing exactly the benchmarked stack (the rows' model column)")
    a = ap.parse_args()
    parts = a.parts.split(",")
    os.makedirs(a.out, exist_ok=True)
    world = torch.cuda.device_count()
    cond = conditions()
    summary = {"conditions": cond, "layers": a.layers}
    t_start = time.time()
    if "kernel" in parts:
        kres = part_kernel(a.out, world)
    else:
        kres = json.load(open(a.kernel_json)) if a.kernel_json else {
            "copy_bandwidth_bytes_per_s": copy_bandwidth(), "best_config": {}}
    copy_bw = kres["copy_bandwidth_bytes_per_s"]
    summary["copy_bandwidth_TBps"] = copy_bw / 1e12
    if "grid" in kres:
        per_h = {}
        for r in kres["grid"]:
            if r["batch"] >= 16 and r["context"] >= 4096:
                per_h.setdefault(str(r["heads"]), []).append(r["bandwidth_fraction_of_copy"])
        summary["kernel_bw_fraction_b16_64_ctx4k_64k"] = {
            h: {"min": min(v), "max": max(v), "median": statistics.median(v), "meets_0p70": min(v) >= 0.70}
            for h, v in per_h.items()}
        if kres.get("mixed"):
            summary["kernel_mixed_balanced_vs_old"] = {
                f"{r['workload']}@{r['heads']}": {"balanced_us": r["time_us"], "old_us": o["time_us"],
                                                  "speedup": o["time_us"] / r["time_us"],
                                                  "balanced_bw_fraction": r["bandwidth_fraction_of_copy"]}
                for r, o in zip(kres["mixed"][0::2], kres["mixed"][1::2])}
        summary["kernel_best_config"] = kres["best_config"]
        summary["kernel_max_rel_err"] = max(r.get("rel_err_vs_fp32", 0) for r in kres["grid"] + kres["tuning"]
                                            if "error" not in r)
    print(f"[{time.time() - t_start:.0f}s] kernel done", flush=True)
    dparts = [p for p in parts if p in ("layouts", "steps", "switch")]
    if dparts:
        bs = (1, 16, 64) if a.quick else (1, 4, 16, 32, 64)
        cs = (4096, 65536) if a.quick else (1024, 4096, 16384, 32768, 65536)
        points = [{"name": n, "lengths": v} for n, v in MIXED.items()]  # first: these matter most
        points += [{"name": "uniform", "lengths": [c] * b} for b in bs for c in cs]
        sw = {"batch": a.switch_batch, "ctx": a.switch_context, "rounds": a.switch_rounds,
              "bytes_per_step": a.bytes_per_step, "budget_s": a.switch_budget_s}
        res = spawn_ranks(dist_main, world, dparts, a.layers, kres.get("best_config", {}), copy_bw, points, sw,
                          a.out, a.steps_budget_s, use_cuda=True)[0]
        for k in ("layouts_error", "switch_error", "steps_error"):
            if k in res:
                summary[k] = res[k]
        if "layouts_rel_err_bf16_vs_fp32" in res:
            summary["layouts_rel_err_bf16_vs_fp32"] = res["layouts_rel_err_bf16_vs_fp32"]
        if "steps" in res:
            rows = res["steps"]
            json.dump({"conditions": cond, "layers": a.layers, "rows": rows},
                      open(os.path.join(a.out, "steps.json"), "w"), indent=1)
            with open(os.path.join(a.out, "step_profile.csv"), "w", newline="") as f:
                w = csv.writer(f)
                cols = ["model", "hardware", "gpus", "attn", "moe", "batch", "context", "prefill_tokens",
                        "weight_dtype", "kv_dtype", "step_ms", "num_layers", "context_max", "workload",
                        "kernel_bandwidth_fraction", "kernel_us_busiest_rank", "ffn"]
                w.writerow(cols)
                for rw in rows:
                    w.writerow([a.model_config, "h200", world, rw["attn"], "tp", rw["batch"], rw["context"], 0,
                                "bf16", "bf16", f"{rw['step_ms']:.4f}", a.layers, rw["context_max"], rw["workload"],
                                f"{rw['kernel_bandwidth_fraction']:.4f}" if rw["kernel_bandwidth_fraction"] else "",
                                f"{rw['kernel_us_busiest_rank']:.1f}", "dense"])
            summary["step_rows"] = len(rows)
        if "switches" in res:
            s = summarize_switches(res["switches"])
            json.dump({"conditions": cond, "layers": a.layers, "config": sw, "per_transition": s,
                       "records": res["switches"]}, open(os.path.join(a.out, "switches.json"), "w"), indent=1)
            summary["switches"] = s
    summary["wall_s"] = time.time() - t_start
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    # table last, then the JSON line
    if "grid" in kres:
        print("kernel  heads batch context  us  bw_frac")
        for r in kres["grid"]:
            if r["batch"] in (16, 64) and r["context"] in (4096, 65536):
                print(f"        {r['heads']:5d} {r['batch']:5d} {r['context']:7d} {r['time_us']:7.1f} "
                      f"{r['bandwidth_fraction_of_copy']:.3f}")
        for key, v in summary.get("kernel_mixed_balanced_vs_old", {}).items():
            print(f"mixed {key:22s} balanced {v['balanced_us']:8.1f} us old {v['old_us']:8.1f} us "
                  f"x{v['speedup']:.2f} bw {v['balanced_bw_fraction']:.3f}")
    for key, v in summary.get("switches", {}).items():
        print(f"switch {key:8s} n {v['committed']:3d} stall med {v['stall_pct_median']}% p99 {v['stall_pct_p99']}% "
              f"bg {v['background_slowdown_pct_median']:.2f}% step {v['step_ms_median']:.2f}ms")
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
