"""Run the whole microbenchmark suite on this machine and return one JSON-able document.

`run_microbench` times the single-GPU families on GPU 0 (kernels.py), then the collectives on
every visible GPU (collectives.py, one process each), and attaches `results.summarize`'s figures.
Sizes come in two sets: full (H200-sized: buffers of GiBs, model-sized weights) and `quick`
(tiny, for CPU tests). `progress(label)` is called before each item (the CLI draws a bar).

Runs as a script too (`python -m calibration.microbench.runner --out FILE`), which needs torch
and nothing else of floorfirst's dependencies, so it runs on a bare GPU image.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from datetime import datetime, timezone

from calibration.microbench import collectives, kernels
from calibration.microbench.results import SCHEMA_VERSION, summarize

FULL = dict(
    hbm_bytes=(1 << 30, 4 << 30),
    decode_ms=(1, 16, 64, 256), decode_nk=(18432, 7168),
    prefill=((4096, 18432, 7168), (8192, 8192, 8192)),
    stream_ms=(1, 16, 64, 256), stream_nk=(18432, 7168), stream_layers=4,
    attention=((16, 128, 4096), (64, 128, 8192), (4, 128, 65536), (16, 64, 4096), (128, 128, 2048)),
    host_bytes=1 << 30,
    coll_sizes=collectives.DEFAULT_SIZES,
)
QUICK = dict(
    hbm_bytes=(1 << 16,), decode_ms=(1, 4), decode_nk=(64, 32), prefill=((64, 64, 64),),
    stream_ms=(1, 4), stream_nk=(64, 32), stream_layers=2, attention=((2, 4, 32),), host_bytes=1 << 12,
    coll_sizes=(1 << 10, 1 << 14),
)


def plan(quick: bool, world: int) -> list[tuple[str, object]]:
    """(label, thunk-maker) items, so the caller can count them for a progress bar."""
    s = QUICK if quick else FULL
    items: list[tuple[str, object]] = []
    for nb in s["hbm_bytes"]:
        items.append((f"hbm copy {nb >> 20} MiB", lambda d, nb=nb: [kernels.hbm_copy(d, nb)]))
    n, k = s["decode_nk"]
    for dtype in ("bf16", "fp8"):
        for m in s["decode_ms"]:
            items.append((f"gemm {dtype} decode M={m}", lambda d, dtype=dtype, m=m: [kernels.gemm(d, dtype, m, n, k)]))
        for (m, nn, kk) in s["prefill"]:
            items.append((f"gemm {dtype} prefill {m}x{nn}x{kk}",
                          lambda d, dtype=dtype, m=m, nn=nn, kk=kk: [kernels.gemm(d, dtype, m, nn, kk)]))
    sn, sk = s["stream_nk"]
    items.append(("weight streaming", lambda d: kernels.weight_stream(d, s["stream_ms"], sn, sk, s["stream_layers"])))
    for (b, h, l) in s["attention"]:
        items.append((f"mla attention B={b} H={h} L={l}", lambda d, b=b, h=h, l=l: [kernels.mla_attention(d, b, h, l)]))
    items.append(("host link", lambda d: kernels.host_link(d, s["host_bytes"])))
    if world > 1:
        items.append((f"collectives on {world} ranks", lambda d: collectives.run_collectives(world, s["coll_sizes"])))
    return items


def run_microbench(quick: bool = False, gpus: int | None = None, allow_cpu: bool = False, progress=None) -> dict:
    """Time everything; raise RuntimeError without CUDA unless `allow_cpu` (tests)."""
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not allow_cpu:
        raise RuntimeError("microbench needs a CUDA GPU and torch.cuda.is_available() is False on this machine")
    world = (torch.cuda.device_count() if cuda else 1) if gpus is None else gpus
    device = torch.device("cuda:0") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    doc = dict(kind="floorfirst.microbench", schema_version=SCHEMA_VERSION,
               created_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               device=torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
               gpus=world, torch=torch.__version__, cuda=torch.version.cuda,
               nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
               quick=quick, rows=[])
    t0 = time.time()
    for label, make in plan(quick, world):
        if progress:
            progress(label)
        doc["rows"].extend(make(device))
        if cuda:
            torch.cuda.empty_cache()
    doc["wall_s"] = round(time.time() - t0, 2)
    doc["summary"] = summarize(doc["rows"])
    return doc


def table(doc: dict) -> str:
    """A short human table of the summary."""
    return "\n".join(f"{k:<40} {v:.4g}" if isinstance(v, float) else f"{k:<40} {v}" for k, v in doc["summary"].items())


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="floorfirst GPU microbenchmarks")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, default=None)
    a = ap.parse_args(argv)
    doc = run_microbench(quick=a.quick, gpus=a.gpus, progress=lambda s: print(f"microbench: {s}", file=sys.stderr, flush=True))
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(table(doc), flush=True)


if __name__ == "__main__":
    main()
