"""Collective microbenchmarks: all-reduce, all-gather and all-to-all across payload sizes, one
process per GPU (NCCL), or per CPU worker (gloo, for tests).

Bus bandwidth follows the planner's link-bytes convention (planner.layouts.base): an all-reduce of
S bytes moves 2(T−1)/T·S per rank, an all-gather or all-to-all of S bytes (the whole gathered
tensor / everything one rank holds for all peers) (T−1)/T·S. So `bus_bytes_per_s` is directly
comparable to the hardware file's per-direction link bandwidth, and the time of the smallest
payload is the per-message latency. Small all-reduces are also timed inside a CUDA graph, the
way serving engines launch them.

Does not: test multi-node, NVLS/multicast (kept off: see the device notes), or reduce-scatter
(priced like all-gather).
"""

from __future__ import annotations

import json
import os
import statistics
from datetime import timedelta
from pathlib import Path

from calibration.microbench.kernels import time_samples
from planner.layouts.base import link_bytes_factor as link_factor

DEFAULT_SIZES = (8 << 10, 256 << 10, 4 << 20, 64 << 20, 512 << 20)
OPS = ("all_reduce", "all_gather", "all_to_all")


def _time(fn, device, reps, warmup=3):
    return statistics.median(time_samples(fn, device, warmup, reps))


def _graph_time(fn, device, reps, inner=20):
    """Median per-launch seconds of `inner` launches captured in one CUDA graph."""
    import torch

    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize(device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(inner):
                fn()
    torch.cuda.current_stream(device).wait_stream(s)
    return _time(g.replay, device, reps) / inner


def _worker(rank: int, world: int, sizes, reps: int, init: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120), **({"device_id": device} if cuda else {}))
    rows = []
    for size in sizes:
        n = max(world, size // 2 // world * world)  # bf16 elements, divisible by world
        x = torch.randn(n, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
        shard = torch.randn(n // world, device=device, dtype=x.dtype)
        gathered = torch.empty(n, device=device, dtype=x.dtype)
        out = torch.empty_like(x)
        fns = {
            "all_reduce": lambda: dist.all_reduce(x),
            "all_gather": lambda: dist.all_gather_into_tensor(gathered, shard),
            "all_to_all": lambda: dist.all_to_all_single(out, x),
        }
        payload = n * x.element_size()
        for op, fn in fns.items():
            try:
                t = _time(fn, device, reps)
                err = None
            except Exception as exc:  # gloo lacks some ops; a missing op is a result
                t, err = None, f"{exc.__class__.__name__}: {str(exc)[:120]}"
            row = dict(bench="collective", op=op, mode="eager", world=world, payload_bytes=payload)
            if t is not None:
                row.update(time_s=t, bus_bytes_per_s=payload * link_factor(op, world) / t)
            else:
                row.update(error=err)
            rows.append(row)
        if cuda and size <= (1 << 20):
            try:
                t = _graph_time(fns["all_reduce"], device, reps)
                rows.append(dict(bench="collective", op="all_reduce", mode="cuda_graph", world=world, payload_bytes=payload,
                                 time_s=t, bus_bytes_per_s=payload * link_factor("all_reduce", world) / t))
            except Exception as exc:
                rows.append(dict(bench="collective", op="all_reduce", mode="cuda_graph", world=world,
                                 payload_bytes=payload, error=f"{exc.__class__.__name__}: {str(exc)[:120]}"))
        del x, shard, gathered, out
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(out_path).write_text(json.dumps(rows))


def run_collectives(world: int, sizes=DEFAULT_SIZES, reps: int = 10, scratch: str = "/tmp") -> list[dict]:
    """Spawn `world` processes and return rank 0's rows."""
    import torch.multiprocessing as mp

    tag = f"{os.getpid()}.{world}"
    out_path = str(Path(scratch) / f"floorfirst_collectives.{tag}.json")
    init = f"file://{Path(scratch) / f'floorfirst_collectives.{tag}.rdv'}"
    mp.spawn(_worker, args=(world, list(sizes), reps, init, out_path), nprocs=world, join=True)
    rows = json.loads(Path(out_path).read_text())
    for p in (out_path, init[len("file://"):]):
        if os.path.exists(p):
            os.unlink(p)
    return rows
