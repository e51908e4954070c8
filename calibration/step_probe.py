"""A model-shaped decode step on 1–2 GPUs, timed over a grid of batch × context × layout, written
as profile rows (the `calibration.schema` step-profile schema, JSONL).

What it runs, per rank, per layer (DeepSeek-V3 attention dims, a dense SwiGLU FFN; the model is
`calibration/data/probe-mla-dense-4l.json`, so the planner prices exactly this stack):
  q_a → RMSNorm → q_b; kv_a (the new token's latent, written into the cache); absorbed MLA
  attention in plain torch (q·W_UK, scores = bmm over the latent cache, softmax, bmm, ·W_UV);
  o_proj; [TP: all-reduce]; [DP-attention: all-gather tokens]; gate/up → SiLU·mul → down;
  [TP: all-reduce | DP: reduce-scatter]; then the LM head ([TP: vocab-sharded + all-gather]).
Layouts: `tp` (heads and FFN sharded over T, KV replicated: MLA's latent cannot split by heads)
and `dp` (attention weights replicated, each rank owns ⌈B/T⌉ requests' KV; FFN sharded, entered
by all-gather and left by reduce-scatter) on T = 2, and T = 1.

What it is not: a serving engine. It has no paging, sampling, scheduler or fused attention kernel
(PyTorch has none for 576/512 MLA dims, see shared/reference/hardware.md); q_a and kv_a are
replicated under TP as engines do. Each step is captured in a CUDA graph and replayed, so
Python launch overhead is out of the numbers (eager fallback is recorded per row). Every rank
runs the busiest rank's share (DP: ⌈B/T⌉ each), so rank 0's time is the step time.

torch is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from calibration.microbench.kernels import time_samples

PROBE_MODEL = "calibration/data/probe-mla-dense-4l.json"
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_CONTEXTS = (256, 1024, 4096, 16384, 32768)


@dataclass(frozen=True)
class ProbeDims:
    """Dimensions of the probed stack (defaults: DeepSeek-V3 attention, dense FFN, 4 layers)."""

    hidden: int = 7168
    heads: int = 128
    q_lora: int = 1536
    kv_lora: int = 512
    nope: int = 128
    rope: int = 64
    v_dim: int = 128
    ffn: int = 18432
    layers: int = 4
    vocab: int = 129280

    @classmethod
    def tiny(cls) -> "ProbeDims":
        """CPU-test sized."""
        return cls(hidden=64, heads=4, q_lora=32, kv_lora=16, nope=8, rope=4, v_dim=8, ffn=96, layers=2, vocab=128)


def _weights(dims: ProbeDims, layout: str, world: int, device, dtype):
    import torch

    heads_r = dims.heads // world if layout == "tp" else dims.heads
    ffn_r = dims.ffn // world
    vocab_r = dims.vocab // world if layout == "tp" else dims.vocab

    def w(*shape):
        # Random on the device (not zeros: zeros run faster than real data on Hopper).
        t = torch.empty(*shape, device=device, dtype=dtype)
        return t.normal_(0.0, 1.0 / math.sqrt(shape[-2] if len(shape) > 1 else shape[0]))

    layers = []
    for _ in range(dims.layers):
        layers.append(dict(
            q_a=w(dims.hidden, dims.q_lora),  # replicated under TP, as engines do
            q_b=w(dims.q_lora, heads_r * (dims.nope + dims.rope)),
            kv_a=w(dims.hidden, dims.kv_lora + dims.rope),  # replicated under TP
            w_uk=w(heads_r, dims.nope, dims.kv_lora),  # [H, 128, 512] absorbed into q
            w_uv=w(heads_r, dims.kv_lora, dims.v_dim),  # [H, 512, 128] applied after attention
            o=w(heads_r * dims.v_dim, dims.hidden),
            gate_up=w(dims.hidden, 2 * ffn_r),
            down=w(ffn_r, dims.hidden),
        ))
    head = w(dims.hidden, vocab_r)
    return layers, head, heads_r


def _rms(x, eps=1e-6):
    import torch

    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)


def make_step(dims: ProbeDims, layout: str, world: int, batch: int, context: int, device, dtype, pool, group=None,
              weights=None):
    """Build the step closure for one operating point. `pool` is a flat KV buffer reused across
    points (random data), sliced per layer into [n, context, 576]; `weights` is the layout's
    `_weights(...)`, built here when not given (a sweep builds it once per layout)."""
    import torch
    import torch.nn.functional as F

    dist = None
    if world > 1:
        import torch.distributed as dist
    layers, head, heads_r = weights if weights is not None else _weights(dims, layout, world, device, dtype)
    n_attn = batch if layout == "tp" else math.ceil(batch / world)  # requests this rank attends for
    width = dims.kv_lora + dims.rope
    per_layer = n_attn * context * width
    if per_layer * dims.layers > pool.numel():
        raise ValueError(f"KV pool too small for batch={batch} context={context}")
    caches = [pool[i * per_layer:(i + 1) * per_layer].view(n_attn, context, width) for i in range(dims.layers)]
    x0 = torch.randn(n_attn, dims.hidden, device=device, dtype=dtype)
    scale = 1.0 / math.sqrt(dims.nope + dims.rope)

    def step():
        x = x0  # [n, D]
        for lw, cache in zip(layers, caches):
            h = _rms(x)
            q = (_rms(h @ lw["q_a"]) @ lw["q_b"]).view(n_attn, heads_r, dims.nope + dims.rope)  # [n, H, 192]
            kv_new = h @ lw["kv_a"]  # [n, 576]
            cache[:, context - 1, :].copy_(kv_new)  # the new token's latent joins the cache
            q_lat = torch.bmm(q[..., :dims.nope].transpose(0, 1), lw["w_uk"]).transpose(0, 1)  # [n, H, 512]
            q_full = torch.cat([q_lat, q[..., dims.nope:]], dim=-1)  # [n, H, 576]
            s = torch.bmm(q_full, cache.transpose(1, 2)) * scale  # [n, H, L]
            p = torch.softmax(s, dim=-1)
            o_lat = torch.bmm(p, cache[..., :dims.kv_lora])  # [n, H, 512]
            o = torch.bmm(o_lat.transpose(0, 1), lw["w_uv"]).transpose(0, 1).reshape(n_attn, heads_r * dims.v_dim)
            attn_out = o @ lw["o"]  # [n, D]
            if layout == "tp" and world > 1:
                dist.all_reduce(attn_out, group=group)
            x = x + attn_out
            h = _rms(x)
            if layout == "dp" and world > 1:
                full = torch.empty(n_attn * world, dims.hidden, device=device, dtype=dtype)
                dist.all_gather_into_tensor(full, h.contiguous(), group=group)  # [B, D]
                h = full
            gu = h @ lw["gate_up"]
            a, b = gu.chunk(2, dim=-1)
            m = (F.silu(a) * b) @ lw["down"]
            if world > 1:
                if layout == "tp":
                    dist.all_reduce(m, group=group)
                else:
                    part = torch.empty(n_attn, dims.hidden, device=device, dtype=dtype)
                    dist.reduce_scatter_tensor(part, m.contiguous(), group=group)
                    m = part
            x = x + m
        logits = _rms(x) @ head  # [n, V or V/T]
        if layout == "tp" and world > 1:
            full = torch.empty(world * logits.shape[0], logits.shape[1], device=device, dtype=dtype)
            dist.all_gather_into_tensor(full, logits.contiguous(), group=group)
            logits = full
        return logits

    return step


def time_step(step, device, warmup: int = 2, reps: int = 8, use_graph: bool = True) -> tuple[list[float], bool]:
    """Seconds per step for `reps` replays (CUDA graph where possible), and whether a graph ran."""
    import torch

    if device.type != "cuda":
        return time_samples(step, device, warmup, reps), False
    for _ in range(warmup):
        step()
    torch.cuda.synchronize(device)
    fn, graphed = step, False
    if use_graph:
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream(device)
            s.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(s):
                step()  # warm-up on the side stream, as graph capture requires
                torch.cuda.synchronize(device)
                with torch.cuda.graph(g, stream=s):
                    step()
            torch.cuda.current_stream(device).wait_stream(s)
            fn, graphed = g.replay, True
            fn()
        except Exception as exc:  # a capture failure falls back to eager; the row records it
            sys.stderr.write(f"step_probe: graph capture failed ({exc.__class__.__name__}: {exc}); eager\n")
            torch.cuda.synchronize(device)
    return time_samples(fn, device, 0, reps), graphed


def sweep(rank: int, world: int, layout: str, dims: ProbeDims, batches, contexts, device, dtype, pool,
          hardware: str, model: str, group=None, use_graph: bool = True, reps: int = 8,
          max_tokens_per_rank: float = math.inf, out_path: str | None = None) -> list[dict]:
    """Time every (batch, context) point of one layout; rows on rank 0 (other ranks return [])."""
    import torch

    rows = []
    weights = _weights(dims, layout, world, device, dtype)  # one set per layout, shared by its points
    for batch in batches:
        for context in contexts:
            n_attn = batch if layout == "tp" else math.ceil(batch / world)
            if n_attn * context > max_tokens_per_rank:
                continue
            step = make_step(dims, layout, world, batch, context, device, dtype, pool, group, weights)
            times, graphed = time_step(step, device, reps=reps, use_graph=use_graph)
            del step
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if rank == 0:
                med = statistics.median(times)
                rows.append(dict(model=model, hardware=hardware, gpus=world, attn=layout, moe="tp", batch=batch,
                                 context=context, prefill_tokens=0, weight_dtype="bf16", kv_dtype="bf16",
                                 step_ms=round(med * 1e3, 5), step_ms_min=round(min(times) * 1e3, 5),
                                 step_ms_max=round(max(times) * 1e3, 5), reps=len(times),
                                 source="calibration/step_probe.py", cuda_graph=graphed))
                if out_path:  # row by row, so a later failure keeps what was measured
                    with open(out_path, "a") as fh:
                        fh.write(json.dumps(rows[-1]) + "\n")
    return rows


def _worker(rank: int, world: int, cfg: dict, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dims = ProbeDims(**cfg["dims"])
    dtype = torch.bfloat16 if cuda else torch.float32
    group = None
    if world > 1:
        # NOTE: a short timeout turns a collective that never completes into an error, not a hang.
        dist.init_process_group("nccl" if cuda else "gloo", init_method=cfg["init"], rank=rank, world_size=world,
                                timeout=timedelta(seconds=120), **({"device_id": device} if cuda else {}))
        warm = torch.ones(8, device=device)
        dist.all_reduce(warm)  # the communicator exists before any graph capture
    width = dims.kv_lora + dims.rope
    pool = torch.empty(int(cfg["pool_tokens"]) * width * dims.layers, device=device, dtype=dtype).normal_()
    for layout in cfg["layouts"]:
        sweep(rank, world, layout, dims, cfg["batches"], cfg["contexts"], device, dtype, pool, cfg["hardware"],
              cfg["model"], group, cfg["use_graph"], cfg["reps"], cfg["pool_tokens"], out_path)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_probe(out_path: str, world: int, layouts, dims: ProbeDims | None = None, batches=DEFAULT_BATCHES,
              contexts=DEFAULT_CONTEXTS, hardware: str = "h200", model: str = PROBE_MODEL, pool_tokens: int = 0,
              use_graph: bool = True, reps: int = 8) -> None:
    """Run one sweep on `world` processes (spawned when > 1), appending rows to `out_path`."""
    import torch.multiprocessing as mp

    dims = dims or ProbeDims()
    if not pool_tokens:
        pool_tokens = max(b if "tp" in layouts else math.ceil(b / world) for b in batches) * max(contexts)
    init = f"file://{Path(out_path).resolve()}.rendezvous.{os.getpid()}.{world}"
    cfg = dict(dims=asdict(dims), layouts=list(layouts), batches=list(batches), contexts=list(contexts),
               hardware=hardware, model=model, pool_tokens=pool_tokens, use_graph=use_graph, reps=reps, init=init)
    if world == 1:
        _worker(0, 1, cfg, out_path)
    else:
        mp.spawn(_worker, args=(world, cfg, out_path), nprocs=world, join=True)
    rdv = Path(init[len("file://"):])
    if rdv.exists():
        rdv.unlink()


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSONL file rows are appended to")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="CPU-sized dims (tests)")
    ap.add_argument("--batches", type=str, default=",".join(map(str, DEFAULT_BATCHES)))
    ap.add_argument("--contexts", type=str, default=",".join(map(str, DEFAULT_CONTEXTS)))
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args(argv)
    dims = ProbeDims.tiny() if a.tiny else ProbeDims()
    batches = [int(x) for x in a.batches.split(",")]
    contexts = [int(x) for x in a.contexts.split(",")]
    t0 = time.time()
    if a.gpus > 1:
        run_probe(a.out, a.gpus, ("tp", "dp"), dims, batches, contexts, reps=a.reps)
    run_probe(a.out, 1, ("tp",), dims, batches, contexts, reps=a.reps)
    print(f"step_probe: rows appended to {a.out} in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
