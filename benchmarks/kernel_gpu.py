"""The kernel part of the executor's GPU benchmarks, and the timing helpers they share.

- `conditions`, `ceilings` (the device-to-device copy rate and the bf16 GEMM rate, measured in the
  same run: every kernel figure is a fraction of the roofline they make), `time_graph` (device
  seconds per call from CUDA-graph replays);
- `kernel_inputs`, `kernel_point`: one batch of lengths at h heads per launch, by the Triton kernel
  or FlashInfer's FA3 MLA decode, timed over rotated KV sets (not L2-resident), with its bytes,
  FLOPs, roofline time (`kernels.mla_decode_work`, `roofline_s`) and the fraction of it reached,
  optionally checked against the fp32 torch reference;
- `part_kernel`: both kernels side by side over heads x batch x context, mixed lengths, and DSA-style
  sparse launches (FA3 with 1-token pages over top-k token indices); `tune_triton`: the Triton
  launch configs tried per head count (how kernel.json's best_config was chosen).
Used by executor_gpu.py (`--parts kernel`, `tune`) and kernel_ab.py. Needs CUDA and Triton
(and flashinfer for its rows: benchmarks/flashinfer_bundle.py says how to carry it).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor.torch_executor import KernelConfig  # noqa: E402
from executor.torch_executor.kernels import (flashinfer_unsupported, mla_decode_torch, mla_decode_triton,  # noqa: E402
                                             mla_decode_work, roofline_s)


def conditions() -> dict:
    import triton
    props = torch.cuda.get_device_properties(0)
    try:
        import flashinfer
        fi = flashinfer.__version__
    except Exception as e:  # reported, not fatal: the Triton rows still measure
        fi = f"unavailable: {e!r}"[:200]
    return {"gpu": props.name, "gpus": torch.cuda.device_count(), "sms": props.multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__, "flashinfer": fi,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": platform.python_version(),
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")}}


def copy_bandwidth() -> float:
    """Bytes/s of a large device-to-device copy, read + write counted (median of 20)."""
    n = 1 << 30
    a = torch.randn(n // 4, device="cuda")
    b = torch.empty_like(a)
    ts = []
    for i in range(25):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); e.synchronize()
        if i >= 5:
            ts.append(s.elapsed_time(e) / 1e3)
    return 2 * n / statistics.median(ts)


def gemm_rate(n: int = 8192) -> float:
    """FLOP/s of an n x n x n bf16 matrix product on random data (median of 20 after 5 warm-ups)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ts = []
    for i in range(25):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.mm(a, b); e.record(); e.synchronize()
        if i >= 5:
            ts.append(s.elapsed_time(e) / 1e3)
    return 2 * n ** 3 / statistics.median(ts)


def ceilings() -> dict:
    """The roofline's two ceilings, measured now: copy bytes/s and bf16 GEMM FLOP/s."""
    return {"copy_bandwidth_bytes_per_s": copy_bandwidth(), "gemm_bf16_flops_per_s": gemm_rate()}


def roofline_fields(attended: int, batch: int, heads: int, t: float, ceil: dict) -> dict:
    """Bytes, FLOPs, roofline time and the fraction of it a launch of t seconds reached."""
    nbytes, flops = mla_decode_work(attended, batch, heads, LATENT, WIDTH - LATENT, 2)
    bw, fl = ceil["copy_bandwidth_bytes_per_s"], ceil["gemm_bf16_flops_per_s"]
    roof = roofline_s(nbytes, flops, bw, fl)
    return {"bytes": nbytes, "flops": flops, "roofline_us": roof * 1e6, "roofline_fraction": roof / t,
            "bound": "compute" if flops / fl > nbytes / bw else "hbm", "bandwidth_fraction_of_copy": nbytes / t / bw,
            "tflops": flops / t / 1e12}


def time_graph(fns, reps=15) -> float:
    """Device seconds per call of fns (run in turn), from CUDA-graph replays (no launch gaps)."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # thread-local: the process group's watchdog thread may query events while this captures
        g.capture_begin(capture_error_mode="thread_local")
        for f in fns:
            f()
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); e.record(); e.synchronize()
        ts.append(a.elapsed_time(e) / 1e3 / len(fns))
    return statistics.median(ts)


ROTATE_BYTES = 512 << 20  # NOTE: several KV sets per point so replays don't run out of the 50 MB L2
PAGE, WIDTH, LATENT = 64, 576, 512  # page tokens; latent + rope width; latent (value) width
SCALE = 192 ** -0.5  # DeepSeek-V3.2's softmax scale (qk head dim 128 + 64)


def kernel_inputs(lengths: list[int], heads: int) -> tuple:
    """Random bf16 queries and a paged latent pool for one kernel point, with `sets` block tables
    (permutations of the pool's pages) to rotate so replays don't run out of L2.
    -> (q [B, H, 576], pool, block tables [sets, B, maxp], lens [B], maxp, KV bytes read)."""
    b = len(lengths)
    maxp = -(-max(lengths) // PAGE)
    kv_bytes = sum(lengths) * WIDTH * 2
    sets = max(1, min(8, -(-ROTATE_BYTES // kv_bytes)))
    pool = torch.randn(sets * b * maxp, PAGE, WIDTH, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(b, heads, WIDTH, device="cuda", dtype=torch.bfloat16)
    perm = torch.randperm(sets * b * maxp, device="cuda").view(sets, b, maxp).int()
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return q, pool, perm, lens, maxp, kv_bytes


def flashinfer_decoders(q, pool, perm, lens, page=PAGE) -> list:
    """One planned FlashInfer decoder per rotated block table (each keeps its own reserved buffers,
    so one graph can replay them in turn)."""
    from executor.torch_executor.mla_flashinfer import FlashInferDecode
    b, h = q.shape[0], q.shape[1]
    lens_h = lens.cpu().numpy()
    out = []
    for bt in perm:
        fi = FlashInferDecode(b, bt.shape[1], h, LATENT, WIDTH - LATENT, page, SCALE, q.dtype, q.device)
        fi.plan(bt.cpu().numpy(), lens_h)
        out.append(fi)
    return out


def kernel_point(lengths: list[int], h: int, cfg, ceil: dict, check_rows: int = 0, backend: str = "triton") -> dict:
    """Time one kernel on one batch of `lengths` at h heads; check_rows > 0: also compare the first
    check_rows requests with the fp32 torch reference."""
    q, pool, perm, lens, maxp, kv_bytes = kernel_inputs(lengths, h)
    b = len(lengths)
    row = {"backend": backend, "batch": b, "heads": h, "context": int(sum(lengths) / b), "context_max": max(lengths),
           "kv_sets_rotated": perm.shape[0], "kv_bytes": kv_bytes}
    if backend == "flashinfer":
        fis = flashinfer_decoders(q, pool, perm, lens)
        fns = [(lambda fi=fi: fi(q, pool)) for fi in fis]
        bt_h, lens_h = perm[0].cpu().numpy(), lens.cpu().numpy()
        t0 = time.perf_counter()
        for _ in range(20):  # what a step's host work gains: one plan, device idle here
            fis[0].plan(bt_h, lens_h)
        row["plan_host_us"] = (time.perf_counter() - t0) / 20 * 1e6
        run0 = fns[0]
    else:
        row.update({k: v for k, v in vars(cfg).items() if k != "backend"})  # the launch shape
        fns = [(lambda bt=bt.contiguous(): mla_decode_triton(q, pool, bt, lens, SCALE, LATENT, maxp, cfg))
               for bt in perm]
        stats: dict = {}
        run0 = (lambda: mla_decode_triton(q, pool, perm[0].contiguous(), lens, SCALE, LATENT, maxp, cfg,
                                          compile_stats=stats))
    t = time_graph(fns)
    row["time_us"] = t * 1e6
    row.update(roofline_fields(sum(lengths), b, h, t, ceil))
    if check_rows:
        sub = min(b, check_rows)
        o, lse = run0()
        ro, rl = mla_decode_torch(q[:sub].float(), pool.float(), perm[0][:sub].contiguous(), lens[:sub], SCALE, LATENT)
        row["rel_err_vs_fp32"] = float((o[:sub].float() - ro).norm() / ro.norm())
        row["lse_max_abs_err"] = float((lse[:sub] - rl).abs().max())
        row["nan"] = bool(torch.isnan(o).any())
        if backend == "triton":
            row.update(stats)
    return row


def sparse_point(batch: int, context: int, topk: int, h: int, ceil: dict) -> dict:
    """DSA-style decode: FA3 with 1-token pages over `topk` random token slots of each request's
    `context` cached tokens, timed like a dense point, checked against the fp32 reference."""
    from executor.torch_executor.mla_flashinfer import FlashInferDecode
    pool = torch.randn(batch * context, 1, WIDTH, device="cuda", dtype=torch.bfloat16)  # [tokens, 1, W]
    q = torch.randn(batch, h, WIDTH, device="cuda", dtype=torch.bfloat16)
    picks = torch.stack([torch.randperm(context, device="cuda")[:topk] + i * context for i in range(batch)]).int()
    fi = FlashInferDecode(batch, topk, h, LATENT, WIDTH - LATENT, 1, SCALE, q.dtype, q.device)
    fi.kv_indices.copy_(picks.view(-1))  # what an indexer writes in-graph; offsets i * topk
    fi.plan_indices([topk] * batch)
    t = time_graph([lambda: fi(q, pool)])
    o, lse = fi(q, pool)
    ro, rl = mla_decode_torch(q.float(), pool.float(), picks, torch.full((batch,), topk, device="cuda"), SCALE, LATENT)
    return {"backend": "flashinfer-sparse", "batch": batch, "heads": h, "context": context, "topk": topk,
            "time_us": t * 1e6, **roofline_fields(batch * topk, batch, h, t, ceil),
            "rel_err_vs_fp32": float((o.float() - ro).norm() / ro.norm()),
            "lse_max_abs_err": float((lse - rl).abs().max())}


# (block_h, num_warps, num_stages, block_n, ctas_per_sm, tma) tried per heads a program sees
# (128/T for T = 1, 2, 4, 8). Session 2 chose these from the sm_90a compile report (HGMMA at
# block_h 64, mma.sync below); session 3 swept TMA tile loads, deeper pipelines at 32-token tiles,
# 4 warps at 64 heads and one 16-warp program for 128 heads (results/executor_gpu/
# kernel_configs_sweep.json: registers, spills, shared memory per config); kept here are the
# configs that won a point there.
SWEEP = {128: [(64, 8, 2, 64, 1, False), (64, 8, 2, 64, 1, True)],
         64: [(64, 8, 2, 64, 1, False), (64, 8, 2, 64, 1, True)],
         32: [(32, 4, 2, 64, 2, False), (32, 8, 3, 64, 2, True), (32, 8, 2, 64, 2, False)],
         16: [(16, 4, 2, 64, 2, False), (16, 4, 2, 32, 2, False), (16, 4, 4, 32, 3, True)]}
HEADS = (128, 64, 32, 16)
# many short + a few very long: where the unit rule matters (the old rule sized units from the longest)
MIXED = {"60x1K+4x64K": [1024] * 60 + [65536] * 4, "28x2K+4x32K": [2048] * 28 + [32768] * 4,
         "120x512+8x16K": [512] * 120 + [16384] * 8, "1x64K+15x1K": [65536] + [1024] * 15}


def tune_triton(out_dir, ceil: dict) -> dict:
    """The Triton launch configs of SWEEP at two points per head count; best = fastest summed over
    both. Writes kernel_tuning.json; returns {heads: KernelConfig}."""
    tune = []
    for h in HEADS:
        for cfg_t in SWEEP[h]:
            cfg = KernelConfig(*cfg_t[:5], tma=cfg_t[5])
            for b, ctx in ((32, 16384), (16, 4096)):
                try:
                    tune.append(kernel_point([ctx] * b, h, cfg, ceil, check_rows=4))
                except Exception as e:  # a config that fails to compile is reported, not fatal
                    tune.append({"heads": h, "batch": b, "context": ctx, **vars(cfg), "error": repr(e)[:300]})
                print(f"tune h={h} {cfg_t} B={b} ctx={ctx}: {tune[-1].get('time_us', tune[-1].get('error'))}",
                      flush=True)
    best = {}
    for h in HEADS:
        tot = {}
        for r in tune:
            if r.get("heads") == h and "error" not in r and r["rel_err_vs_fp32"] < 1e-2:
                tot.setdefault(tuple(r[f] for f in KernelConfig.__dataclass_fields__), []).append(r["time_us"])
        best[h] = KernelConfig(*min((k for k in tot if len(tot[k]) == 2), key=lambda k: sum(tot[k])))
    json.dump({"conditions": conditions(), **ceil, "tuning": tune,
               "best_config": {str(h): vars(c) for h, c in best.items()}},
              open(os.path.join(out_dir, "kernel_tuning.json"), "w"), indent=1)
    return best


def _point(res_list, *args, **kw) -> dict:
    try:
        row = kernel_point(*args, **kw)
    except Exception as e:  # one failing point is reported, the grid goes on
        row = {"backend": kw.get("backend"), "heads": args[1], "batch": len(args[0]), "error": repr(e)[:400]}
    res_list.append(row)
    return row


def part_kernel(out_dir, best: dict, ceil: dict, grid_b=(1, 4, 16, 32, 64),
                grid_c=(1024, 4096, 16384, 32768, 65536), budget_s: float = 400.0) -> dict:
    """Both kernels side by side on the same inputs: the grid, mixed lengths, sparse launches.
    best: {heads: KernelConfig} for the Triton kernel. Writes kernel_grid.json as it goes."""
    t0 = time.time()
    res = {"conditions": conditions(), **ceil, "triton_configs": {str(h): vars(c) for h, c in best.items()},
           "grid": [], "mixed": [], "sparse": []}
    path = os.path.join(out_dir, "kernel_grid.json")
    backends = ["triton"]
    why = flashinfer_unsupported(torch.bfloat16, LATENT, WIDTH - LATENT, "cuda")
    if why is None:
        t1 = time.time()
        first = _point(res["grid"], [4096] * 16, 128, None, ceil, check_rows=4, backend="flashinfer")
        res["flashinfer_first_point_s"] = time.time() - t1  # includes the JIT build of batch_mla_sm90
        res["grid"].clear()
        if "error" in first:
            why = first["error"]
        else:
            backends.append("flashinfer")
    res["flashinfer_unavailable"] = why
    print(f"[{time.time() - t0:.0f}s] kernel backends {backends} ({why})", flush=True)
    for h in HEADS:
        for b in grid_b:
            for ctx in grid_c:
                for be in backends:
                    _point(res["grid"], [ctx] * b, h, best[h], ceil, check_rows=4 if b in (1, 16) else 0, backend=be)
        json.dump(res, open(path, "w"), indent=1)
        print(f"[{time.time() - t0:.0f}s] grid heads {h} done", flush=True)
        if time.time() - t0 > budget_s:
            break
    for h in HEADS:
        for name, lens in MIXED.items():
            for be in backends:
                _point(res["mixed"], lens, h, best[h], ceil, check_rows=len(lens), backend=be)
                res["mixed"][-1]["workload"] = name
    json.dump(res, open(path, "w"), indent=1)
    if "flashinfer" in backends:
        for h in (128, 64):
            for b in (16, 64):
                for ctx in (16384, 65536):
                    try:
                        res["sparse"].append(sparse_point(b, ctx, 2048, h, ceil))
                    except Exception as e:
                        res["sparse"].append({"heads": h, "batch": b, "context": ctx, "error": repr(e)[:400]})
    res["summary"] = summarize(res)
    json.dump(res, open(path, "w"), indent=1)
    return res


def summarize(res: dict) -> dict:
    """Per head count: each kernel's roofline fractions over B 16-64 x 16K-64K (the targets: >= 0.6 at
    128 heads, >= 0.8 at 64), the faster kernel per point, and for each `flashinfer_min_heads`
    threshold the points where that rule's kernel is slower than the Triton kernel alone."""
    by = {}
    for r in res["grid"] + res["mixed"]:
        if "error" not in r:
            by.setdefault((r["heads"], r["batch"], r.get("workload") or r["context"]), {})[r["backend"]] = r
    out = {"fractions_b16_64_ctx16k_64k": {}, "faster": {}, "rule_slower_than_triton": {}}
    for h in HEADS:
        for be in ("triton", "flashinfer"):
            v = [p[be]["roofline_fraction"] for (hh, b, c), p in by.items()
                 if hh == h and be in p and 16 <= b <= 64 and isinstance(c, int) and c >= 16384]
            if v:
                out["fractions_b16_64_ctx16k_64k"][f"{be}@{h}"] = {"min": min(v), "median": statistics.median(v),
                                                                   "max": max(v)}
    for (h, b, c), p in sorted(by.items(), key=str):
        if {"triton", "flashinfer"} <= p.keys():
            out["faster"][f"{h}h B={b} {c}"] = min(p, key=lambda k: p[k]["time_us"]) + \
                f" {p['triton']['time_us'] / p['flashinfer']['time_us']:.2f}x"
    for thr in (16, 32, 64, 128, 256):
        slow = [f"{h}h B={b} {c}: {p['flashinfer']['time_us'] / p['triton']['time_us']:.2f}x"
                for (h, b, c), p in by.items() if {"triton", "flashinfer"} <= p.keys() and h >= thr
                and p["flashinfer"]["time_us"] > p["triton"]["time_us"]]
        out["rule_slower_than_triton"][str(thr)] = slow
    return out
