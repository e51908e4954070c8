"""Single-GPU microbenchmarks: one function per kernel family, each returning plain dict rows
with units in the keys. Sizes are arguments so tests run them tiny on a CPU.

- HBM copy: device-to-device copy of a buffer, bytes read + written over time.
- GEMM per dtype (bf16, fp8 via `torch._scaled_mm`) at decode shapes (M = 1…256 tokens against a
  model-sized weight: the weight-streaming rate) and prefill shapes (M in the thousands: the
  FLOP rate).
- Attention proxy: absorbed-MLA decode attention in plain torch (bmm · softmax · bmm over a
  576-wide latent cache), KV bytes read over time — the rate a torch engine without a fused
  MLA kernel gets.
- Host link: pinned host ↔ device copies.

Does not: rotate input sets (every buffer here is many times the 50 MB L2, so repeats stream
from HBM), or report anything but medians and the spread.
"""

from __future__ import annotations

import math
import statistics
import time


def time_samples(fn, device, warmup: int = 3, reps: int = 10) -> list[float]:
    """Seconds of each of `reps` calls of `fn()` after `warmup` — CUDA events on a GPU,
    perf_counter on a CPU."""
    import torch

    for _ in range(warmup):
        fn()
    out = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def time_s(fn, device, warmup: int = 3, reps: int = 10) -> tuple[float, float, float]:
    """(median, min, max) seconds of `fn()`."""
    out = time_samples(fn, device, warmup, reps)
    return statistics.median(out), min(out), max(out)


def _rand(shape, device, dtype):
    import torch

    return torch.randn(*shape, device=device, dtype=torch.float32 if dtype == "fp8" else dtype)


def hbm_copy(device, nbytes: int, reps: int = 10) -> dict:
    import torch

    n = nbytes // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    med, lo, hi = time_s(lambda: dst.copy_(src), device, reps=reps)
    moved = 2 * n * 2  # read + write
    return dict(bench="hbm_copy", buffer_bytes=n * 2, moved_bytes=moved, time_s=med, time_min_s=lo, time_max_s=hi,
                bytes_per_s=moved / med)


def gemm(device, dtype: str, m: int, n: int, k: int, reps: int = 10) -> dict:
    """x [M, K] @ w [K, N]. Reports FLOP/s and the weight-streaming rate (weight bytes / time)."""
    import torch

    row = dict(bench="gemm", dtype=dtype, m=m, n=n, k=k)
    try:
        if dtype == "fp8":
            if device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
                return {**row, "error": "fp8 needs CUDA and torch._scaled_mm"}
            f8 = torch.float8_e4m3fn
            a = _rand((m, k), device, "fp8").to(f8)
            b = _rand((n, k), device, "fp8").to(f8).t()  # column-major [K, N], as _scaled_mm wants
            one = torch.ones((), device=device, dtype=torch.float32)
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            wbytes = k * n
        else:
            dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
            a, b = _rand((m, k), device, dt), _rand((k, n), device, dt)
            fn = lambda: a @ b  # noqa: E731
            wbytes = k * n * b.element_size()
        med, lo, hi = time_s(fn, device, reps=reps)
    except Exception as exc:  # a missing kernel is a result, not a crash
        return {**row, "error": f"{exc.__class__.__name__}: {str(exc)[:160]}"}
    flops = 2.0 * m * n * k
    return {**row, "time_s": med, "time_min_s": lo, "time_max_s": hi, "flops_per_s": flops / med,
            "weight_bytes": wbytes, "weight_bytes_per_s": wbytes / med}


def weight_stream(device, ms=(1, 16, 64, 256), n: int = 18432, k: int = 7168, layers: int = 4, reps: int = 10) -> list[dict]:
    """bf16 decode GEMMs over `layers` distinct weights (so no weight is re-read from L2)."""
    import torch

    ws = [torch.randn(k, n, device=device, dtype=torch.bfloat16) for _ in range(layers)]
    rows = []
    for m in ms:
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)

        def fn():
            for w in ws:
                x @ w

        med, lo, hi = time_s(fn, device, reps=reps)
        wbytes = layers * k * n * 2
        rows.append(dict(bench="weight_stream", dtype="bf16", m=m, n=n, k=k, layers=layers, time_s=med, time_min_s=lo,
                         time_max_s=hi, weight_bytes=wbytes, weight_bytes_per_s=wbytes / med,
                         flops_per_s=2.0 * m * n * k * layers / med))
    return rows


def mla_attention(device, batch: int, heads: int, context: int, latent: int = 576, value: int = 512,
                  reps: int = 10) -> dict:
    """Absorbed-MLA decode attention proxy: q [B, H, 576] over a latent cache [B, L, 576]."""
    import torch

    q = torch.randn(batch, heads, latent, device=device, dtype=torch.bfloat16)
    kv = torch.randn(batch, context, latent, device=device, dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(192.0)

    def fn():
        p = torch.softmax(torch.bmm(q, kv.transpose(1, 2)) * scale, dim=-1)  # [B, H, L]
        return torch.bmm(p, kv[..., :value])  # [B, H, 512]

    med, lo, hi = time_s(fn, device, reps=reps)
    kv_bytes = batch * context * latent * 2
    flops = batch * heads * context * (2.0 * latent + 2.0 * value)
    return dict(bench="mla_attention", batch=batch, heads=heads, context=context, time_s=med, time_min_s=lo,
                time_max_s=hi, kv_bytes=kv_bytes, kv_bytes_per_s=kv_bytes / med, flops_per_s=flops / med)


def host_link(device, nbytes: int, reps: int = 10) -> list[dict]:
    import torch

    if device.type != "cuda":
        return [dict(bench="host_link", direction=d, bytes=nbytes, error="no CUDA device") for d in ("h2d", "d2h")]
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    host.random_(0, 255)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    rows = []
    for direction, fn in (("h2d", lambda: dev.copy_(host, non_blocking=True)),
                          ("d2h", lambda: host.copy_(dev, non_blocking=True))):
        med, lo, hi = time_s(fn, device, reps=reps)
        rows.append(dict(bench="host_link", direction=direction, bytes=nbytes, time_s=med, time_min_s=lo,
                         time_max_s=hi, bytes_per_s=nbytes / med))
    return rows
