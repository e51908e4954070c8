"""Host KV tier on one GPU: fetch rates by granularity, and DSA-shaped tiered decode steps vs all-in-HBM.

Part `rates`: units of row_bytes x unit_rows (rows of 132 B indexer key, 584 B DeepSeek-V4 entry,
656 B DSA fp8 latent, 1152 B bf16 MLA latent; units of 1 row and of 64-row pages) at random
offsets of a 2 GiB pinned host pool, moved to random device units through the executor's own
paths: the zero-copy kernel (host_fetch.copy_units, two launch shapes), one cudaMemcpyBatchAsync,
one cudaMemcpyAsync per unit, and a host-side gather into pinned staging plus one contiguous copy;
the contiguous copy is the ceiling. Part `steps`: L layers of sparse MLA decode (bf16 576-wide
latent rows, 512 for values, top-k 2048 per request per layer, H query heads), B requests of one
context each, a fraction f of each request's pages in host memory only (budget = ceil((1-f) x
pages) slots, preloaded with the request's last pages), indices from executor.sparse_trace (reuse,
cluster_rows stated per point); per point the tiered step (resolve + fetch + attention, one CUDA
graph), the all-in-HBM step on the same indices, resolve alone and resolve + fetch, with hits,
misses, units and bytes of the timed steps. Outputs are checked bit-identical (tiered vs HBM) on
the first timed step of every point. Writes conditions.json, rates.json, steps.json under --out and
prints a short table last. Needs CUDA and Triton.

Run: python benchmarks/host_tier_gpu.py --out DIR [--parts rates,steps] [--deadline-s 280]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor.host_cache import HostCacheSpec, budget_pages_for, pages_for  # noqa: E402
from executor.sparse_trace import TopKTraceSpec, step_overlap, topk_trace  # noqa: E402
from executor.torch_executor.host_fetch import BatchCopier, copy_units, pinned_empty, tile_shape, words  # noqa: E402
from executor.torch_executor.host_tier import HostKVTier, chunk_bounds, resident_layer, tiered_layer  # noqa: E402

ROW_BYTES = (132, 584, 656, 1152)
E, C, K, L = 576, 512, 2048, 3  # latent+rope, latent, top-k, layers
SCALE = 192 ** -0.5  # DeepSeek-V3.2: 1/sqrt(qk_nope 128 + qk_rope 64)


def conditions() -> dict:
    import triton
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,"
                          "clocks.sm,clocks.mem", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    mem = next((ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), "")
    return {"gpu": props.name, "sms": props.multi_processor_count, "nvidia_smi": smi, "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": triton.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "cpu": cpu, "cpus": os.cpu_count(), "mem_total_kib": mem,
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE",)}}


def _events(n):
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


def time_device(fn, reps=8, warm=2, stream=None) -> float:
    """Median device seconds of fn() between events on `stream` (default: current)."""
    s = stream or torch.cuda.current_stream()
    for _ in range(warm):
        fn()
    ev = _events(reps)
    for a, b in ev:
        a.record(s)
        fn()
        b.record(s)
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) / 1e3 for a, b in ev)


def time_wall(fn, reps=5, warm=1) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def part_rates(log) -> list[dict]:
    host_bytes = 2 << 30
    host = pinned_empty((host_bytes,), torch.uint8, "cuda")
    host.copy_(torch.randint(0, 255, (host_bytes,), dtype=torch.uint8, device="cuda"))
    dev = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    rng = np.random.default_rng(0)
    copier, stream = BatchCopier(), torch.cuda.Stream()
    rows = []
    contiguous = dev[: 256 << 20]
    rows.append({"method": "contiguous_copy", "unit_bytes": 256 << 20, "units": 1,
                 "rate_bytes_per_s": (256 << 20) / time_device(lambda: contiguous.copy_(host[: 256 << 20], non_blocking=True))})
    log(f"contiguous H2D {rows[-1]['rate_bytes_per_s'] / 1e9:.1f} GB/s")
    for row_bytes in ROW_BYTES:
        for unit_rows in (1, 64):
            ub = row_bytes * unit_rows
            n = min((128 << 20) // ub, host_bytes // ub // 2, (512 << 20) // ub)
            su = rng.choice(host_bytes // ub, n, replace=False).astype(np.int64)
            du = rng.permutation((512 << 20) // ub)[:n].astype(np.int64)
            hw = words(host[: host_bytes // ub * ub])
            dw = words(dev[: (512 << 20) // ub * ub])
            s_row = torch.as_tensor(su * unit_rows, device="cuda")
            d_row = torch.as_tensor(du * unit_rows, device="cuda")
            bounds = torch.tensor([0, n], device="cuda")
            base = {"row_bytes": row_bytes, "unit_rows": unit_rows, "unit_bytes": ub}
            for grid_mult, warps in ((4, 4), (16, 8)):
                grid = max(1, min(-(-n // tile_shape(ub // 4)[0]), grid_mult * torch.cuda.get_device_properties(0).multi_processor_count))
                t = time_device(lambda: copy_units(hw, dw, s_row, d_row, bounds, 0, 1, ub // 4, row_bytes // 4, n,
                                                   row_align=unit_rows, grid=grid, num_warps=warps))
                rows.append({**base, "method": f"kernel_grid{grid_mult}xSM_w{warps}", "units": n, "seconds": t,
                             "rate_bytes_per_s": n * ub / t})
            got = dev.view(-1)[: (512 << 20) // ub * ub].view(-1, ub)[torch.as_tensor(du[:64], device="cuda")].cpu()
            ok = torch.equal(got, host[: host_bytes // ub * ub].view(-1, ub)[torch.as_tensor(su[:64])])
            rows[-1]["checked"] = ok
            nb = min(n, 20000)
            dptr = (dev.data_ptr() + du[:nb] * ub).astype(np.uint64)
            sptr = (host.data_ptr() + su[:nb] * ub).astype(np.uint64)
            size = np.full(nb, ub, dtype=np.uint64)
            try:
                t = time_wall(lambda: copier.batch(dptr, sptr, size, stream))
                rows.append({**base, "method": "cudaMemcpyBatchAsync", "units": nb, "seconds": t,
                             "rate_bytes_per_s": nb * ub / t})
                ne = min(nb, 2000)
                t = time_wall(lambda: copier.each(dptr[:ne], sptr[:ne], size[:ne], stream), reps=3)
                rows.append({**base, "method": "cudaMemcpyAsync_each", "units": ne, "seconds": t,
                             "rate_bytes_per_s": ne * ub / t})
            except (OSError, RuntimeError, AttributeError) as exc:
                rows.append({**base, "method": "cudaMemcpyBatchAsync", "error": str(exc)[:300]})
            hv = host[: host_bytes // ub * ub].view(-1, ub)
            idx = torch.as_tensor(su)
            stage = pinned_empty((n, ub), torch.uint8, "cuda")
            dst2 = dev[: n * ub].view(n, ub)

            def staged():
                torch.index_select(hv, 0, idx, out=stage)
                dst2.copy_(stage, non_blocking=True)
            t = time_wall(staged, reps=3)
            rows.append({**base, "method": "host_gather_then_copy", "units": n, "seconds": t,
                         "rate_bytes_per_s": n * ub / t, "torch_threads": torch.get_num_threads()})
            del stage
            best = max((r for r in rows if r.get("unit_bytes") == ub and "rate_bytes_per_s" in r),
                       key=lambda r: r["rate_bytes_per_s"])
            log(f"rates {row_bytes:5d} B x {unit_rows:2d}: " + ", ".join(
                f"{r['method']} {r['rate_bytes_per_s'] / 1e9:.1f}" for r in rows
                if r.get("unit_bytes") == ub and "rate_bytes_per_s" in r) + f" GB/s (best {best['method']})")
    del host, dev
    torch.cuda.empty_cache()
    return rows


def step_grid() -> list[dict]:
    """Points in priority order: main grid, overlap, reuse sweep, cluster sweep, 64 heads."""
    pts, seen = [], set()

    def add(**kw):
        p = {"B": 32, "ctx": 131072, "H": 128, "page_rows": 1, "cluster_rows": 16, "host_fraction": 0.5,
             "reuse": 0.9, "chunks": 1, **kw}
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            pts.append(p)
    for b, ctx in ((32, 131072), (8, 131072), (32, 65536), (16, 262144), (8, 65536)):
        for pr in (1, 64):
            for f in (0.1, 0.5, 0.9):
                add(B=b, ctx=ctx, page_rows=pr, host_fraction=f)
    for b, ctx in ((32, 131072), (32, 65536)):
        for pr in (1, 64):
            for f in (0.1, 0.5, 0.9):
                add(B=b, ctx=ctx, page_rows=pr, host_fraction=f, chunks=4)
    for r in (0.5, 0.8, 0.95, 0.99):
        for pr in (1, 64):
            add(page_rows=pr, host_fraction=0.9, reuse=r)
    for c in (1, 64):
        for pr in (1, 64):
            for f in (0.5, 0.9):
                add(page_rows=pr, host_fraction=f, cluster_rows=c)
    for pr in (1, 64):
        for f in (0.5, 0.9):
            add(H=64, page_rows=pr, host_fraction=f)
    return pts


class StepBench:
    """Shared pools for every step point: pinned host KV, the all-in-HBM pool (same rows), a device cache."""

    def __init__(self, max_rows: int, log):
        self.log = log
        t0 = time.perf_counter()
        self.pool = torch.empty(L, max_rows, E, dtype=torch.bfloat16, device="cuda")
        for layer in range(L):
            for r0 in range(0, max_rows, 1 << 20):
                self.pool[layer, r0:r0 + (1 << 20)].normal_()
        self.host = pinned_empty((L, max_rows, E), torch.bfloat16, "cuda")
        self.host.copy_(self.pool)
        self.cache_rows = int(0.9 * max_rows) + 64 * 64
        self.cache = torch.empty(L, self.cache_rows, E, dtype=torch.bfloat16, device="cuda")
        self.copy_stream, self.side = torch.cuda.Stream(), torch.cuda.Stream()
        self.traces: dict = {}
        log(f"pools: host {self.host.numel() * 2 / 2**30:.1f} GiB pinned, cache {self.cache.numel() * 2 / 2**30:.1f} GiB,"
            f" {time.perf_counter() - t0:.1f} s")

    def trace(self, p, steps):
        key = (p["B"], p["ctx"], p["reuse"], p["cluster_rows"])
        if key not in self.traces:
            spec = TopKTraceSpec(topk=K, reuse=p["reuse"], cluster_rows=p["cluster_rows"], seed=len(self.traces))
            tr = topk_trace(spec, [p["ctx"]] * p["B"], L, steps)
            self.traces[key] = (tr, torch.as_tensor(tr, device="cuda"),
                                {"token": step_overlap(tr[:4, :1]), "page64": step_overlap(tr[:4, :1], 64)})
        return self.traces[key]

    def point(self, p, warm=3, timed=10) -> dict:
        B, ctx, P, H = p["B"], p["ctx"], p["page_rows"], p["H"]
        pages = pages_for(ctx, P)
        budget = budget_pages_for(ctx, p["host_fraction"], P)
        total = B * budget
        if total * P > self.cache_rows:
            return {**p, "error": "cache too small"}
        spec = HostCacheSpec(num_layers=L, max_requests=B, page_rows=P, max_pages=pages, max_budget_pages=budget, topk=K)
        tier = HostKVTier(spec, total, self.host, self.cache)
        for b in range(B):
            tier.admit(b, ctx, budget, preload_pages=np.arange(pages - budget, pages), source=self.pool)
        tr, tr_dev, overlap = self.trace(p, warm + timed + 8)
        torch.manual_seed(1)
        q = torch.randn(L, B, H, E, device="cuda").to(torch.bfloat16)
        row0 = torch.arange(B, device="cuda") * ctx
        chunks = chunk_bounds(B, p["chunks"])
        cs = self.copy_stream if p["chunks"] > 1 else None
        events = [[torch.cuda.Event() for _ in chunks] for _ in range(L)]
        idx = torch.empty_like(tr_dev[0])
        out_t = torch.empty(L, B, H, C, dtype=torch.bfloat16, device="cuda")
        out_r = torch.empty_like(out_t)

        def tiered():
            for layer in range(L):
                tiered_layer(tier, layer, q[layer], idx[layer], out_t[layer], chunks, SCALE, C, cs, events[layer])
            tier.cache.advance()

        def resident():
            for layer in range(L):
                resident_layer(self.pool[layer], row0, q[layer], idx[layer], out_r[layer], chunks, SCALE, C)

        def resolve_only():
            for layer in range(L):
                tier.cache.resolve(layer, idx[layer])
            tier.cache.advance()

        def resolve_fetch():
            for layer in range(L):
                tier.fetch(layer, tier.cache.resolve(layer, idx[layer]), 0, B)
            tier.cache.advance()

        side = self.side
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for t in range(warm):
                idx.copy_(tr_dev[t])
                tiered()
                resident()
        torch.cuda.synchronize()
        over = int(tier.cache.stats[:, 3].sum())
        out = {**p, "layers": L, "topk": K, "row_bytes": E * 2, "unit_bytes": tier.unit_bytes, "pages": pages,
               "budget_pages": budget, "trace_overlap": overlap, "eager_bit_identical": bool(torch.equal(out_t, out_r))}
        if over:
            out.update(infeasible=True, overflow_units_warmup=over)
            return out
        graphs = {}
        for name, fn in (("tiered", tiered), ("resident", resident), ("resolve", resolve_only), ("resolve_fetch", resolve_fetch)):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                fn()
            graphs[name] = g
        s0 = tier.cache.stats.clone()
        ev_t, ev_r = _events(timed), _events(timed)
        same = True
        for i in range(timed):
            idx.copy_(tr_dev[warm + i])
            ev_t[i][0].record()
            graphs["tiered"].replay()
            ev_t[i][1].record()
            ev_r[i][0].record()
            graphs["resident"].replay()
            ev_r[i][1].record()
            if i == 0:
                torch.cuda.synchronize()
                same = bool(torch.equal(out_t, out_r))
        torch.cuda.synchronize()
        s1 = tier.cache.stats.clone()
        comp = {}
        for j, name in enumerate(("resolve_fetch", "resolve")):  # fresh trace steps for each: a step
            ev = _events(4)                                       # resolved once is all hits the next time
            for i, (a, b) in enumerate(ev):
                idx.copy_(tr_dev[warm + timed + 4 * j + i])
                a.record()
                graphs[name].replay()
                b.record()
            torch.cuda.synchronize()
            comp[name] = statistics.median(a.elapsed_time(b) / 1e3 for a, b in ev)
        d = (s1 - s0).cpu().numpy().sum(axis=0)
        del graphs
        out.update({
            "graph_bit_identical": same, "timed_steps": timed,
            "step_tiered_s": statistics.median(a.elapsed_time(b) / 1e3 for a, b in ev_t),
            "step_hbm_s": statistics.median(a.elapsed_time(b) / 1e3 for a, b in ev_r),
            "resolve_s": comp["resolve"], "resolve_fetch_s": comp["resolve_fetch"],
            "hit_entries_per_step": int(d[0]) / timed, "miss_entries_per_step": int(d[1]) / timed,
            "fetched_units_per_step": int(d[2]) / timed, "overflow_units": int(d[3]),
            "host_link_bytes_per_step": int(d[2]) * tier.unit_bytes / timed,
            "hbm_selected_bytes_per_step": L * B * K * E * 2,
        })
        tier.cache.check()
        return out


def part_steps(log, deadline: float, dump) -> list[dict]:
    grid = step_grid()
    bench = StepBench(max(p["B"] * p["ctx"] for p in grid), log)
    rows = []
    for p in grid:
        if time.perf_counter() > deadline:
            log(f"deadline: {len(grid) - len(rows)} points not run")
            break
        t0 = time.perf_counter()
        try:
            r = bench.point(p)
        except Exception as exc:  # one bad point must not lose the others
            r = {**p, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        r["wall_s"] = time.perf_counter() - t0
        rows.append(r)
        dump("steps.json", rows)
        torch.cuda.empty_cache()
        tag = (f"B{p['B']} {p['ctx'] // 1024}K H{p['H']} P{p['page_rows']} c{p['cluster_rows']} f{p['host_fraction']} "
               f"r{p['reuse']} ch{p['chunks']}")
        if "step_tiered_s" in r:
            log(f"{tag:34s}|miss {r['miss_entries_per_step'] / (L * p['B'] * K):5.1%} "
                f"{r['host_link_bytes_per_step'] / 1e6:6.1f}MB|hbm {r['step_hbm_s'] * 1e3:5.2f} tier "
                f"{r['step_tiered_s'] * 1e3:6.2f}ms {r['step_tiered_s'] / r['step_hbm_s']:5.2f}x|res "
                f"{r['resolve_s'] * 1e3:4.2f} fet {(r['resolve_fetch_s'] - r['resolve_s']) * 1e3:5.2f}"
                f"|{'eq' if r['graph_bit_identical'] and r['eager_bit_identical'] else 'DIFF'}")
        else:
            log(f"{tag:34s}|{({k: r[k] for k in r if k in ('error', 'infeasible', 'overflow_units_warmup')})}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="rates,steps")
    ap.add_argument("--deadline-s", type=float, default=200.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    lines = []

    def log(msg):
        lines.append(msg)
        print(msg, flush=True)

    def dump(name, obj):
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(obj, f, indent=1)

    dump("conditions.json", conditions())
    if "rates" in args.parts:
        dump("rates.json", part_rates(log))
    if "steps" in args.parts:
        part_steps(log, start + args.deadline_s, dump)
    log(f"total {time.perf_counter() - start:.0f} s")
    print("\n".join(lines[-75:]))


if __name__ == "__main__":
    main()
