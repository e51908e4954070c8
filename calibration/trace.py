"""PyTorch profiler Chrome traces: GPU kernel time by category, and the achieved rate per resource
that time implies for a known step.

`trace_breakdown(path)` reads a trace (`prof.export_chrome_trace`, .json or .json.gz), keeps the
device events (`ph: X`, categories kernel / gpu_memcpy / gpu_memset) and sums their durations by
category, classifying kernels by name: collective (NCCL), gemm (cuBLAS/CUTLASS/nvjet/Triton mm),
attention (flash/MLA/fmha/softmax), memcpy, other. `achieved_rates(breakdown, cost, steps)` divides
the step's planner-counted work by the category's time: weight bytes / GEMM time, KV bytes /
attention time, network bytes and messages / collective time — the rate each resource actually ran
at while its kernels ran, to compare with the microbenchmarks and the datasheet.

Does not: attribute overlapping kernels on several streams (times are summed per category, so
they can exceed wall time), or read CPU-side operator events.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import SpecError

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Order matters: the first pattern that matches names the category.
KERNEL_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("collective", re.compile(r"nccl|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|cross_device", re.I)),
    ("attention", re.compile(r"flash|fmha|attn|attention|mla|softmax|decode_kernel|split_kv", re.I)),
    ("gemm", re.compile(r"gemm|gemv|cutlass|cublas|xmma|nvjet|matmul|wgmma|splitk|_mm_|\bmm\b|bmm", re.I)),
    ("memcpy", re.compile(r"memcpy|memset|copy", re.I)),
)


@dataclass(frozen=True)
class TraceBreakdown:
    path: str
    category_s: dict[str, float]  # summed kernel seconds per category
    kernel_count: dict[str, int]
    span_s: float  # first kernel start to last kernel end

    @property
    def total_kernel_s(self) -> float:
        return float(sum(self.category_s.values()))


def classify(name: str, cat: str) -> str:
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    for label, pat in KERNEL_PATTERNS:
        if pat.search(name):
            return label
    return "other"


def trace_breakdown(path) -> TraceBreakdown:
    p = Path(path)
    try:
        raw = gzip.open(p, "rt").read() if p.suffix == ".gz" else p.read_text()
        doc = json.loads(raw)
    except FileNotFoundError:
        raise SpecError(f"trace file not found: {path}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"trace {path}: cannot read ({exc.__class__.__name__})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise SpecError(f"trace {path}: no traceEvents list (not a Chrome trace)")
    cat_s: dict[str, float] = {}
    count: dict[str, int] = {}
    start, end = np.inf, -np.inf
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in DEVICE_CATEGORIES:
            continue
        try:
            ts, dur = float(e["ts"]), float(e["dur"])
        except (KeyError, TypeError, ValueError):
            continue
        c = classify(str(e.get("name", "")), e["cat"])
        cat_s[c] = cat_s.get(c, 0.0) + dur * 1e-6  # Chrome traces count microseconds
        count[c] = count.get(c, 0) + 1
        start, end = min(start, ts), max(end, ts + dur)
    if not count:
        raise SpecError(f"trace {path}: no GPU kernel events (profile with ProfilerActivity.CUDA)")
    return TraceBreakdown(str(path), cat_s, count, (end - start) * 1e-6)


def achieved_rates(b: TraceBreakdown, cost, steps: int, point: int = 0) -> dict[str, float]:
    """Rates implied by `steps` repetitions of operating point `point` of a StepCost."""
    if steps < 1:
        raise SpecError(f"steps={steps} must be ≥ 1")
    hbm = cost.components.get("hbm_bytes", {})
    weights = sum(float(np.ravel(v)[point]) for k, v in hbm.items() if k.endswith("_weights"))
    kv = float(np.ravel(cost.hbm_bytes)[point]) - weights
    out: dict[str, float] = {}

    def rate(key, amount, cat):
        t = b.category_s.get(cat, 0.0)
        if t > 0 and amount > 0:
            out[key] = amount * steps / t

    rate("weight_bytes_per_s_in_gemm", weights, "gemm")
    rate("linear_flops_per_s_in_gemm", float(np.ravel(cost.flops)[point])
         - float(np.ravel(cost.components["flops"].get("attention_core", [0.0] * (point + 1)))[point]), "gemm")
    rate("kv_bytes_per_s_in_attention", kv, "attention")
    rate("network_bytes_per_s_in_collectives", float(np.ravel(cost.network_bytes)[point]), "collective")
    msgs = float(np.ravel(cost.network_messages)[point])
    if msgs > 0 and b.category_s.get("collective", 0) > 0:
        out["seconds_per_message"] = b.category_s["collective"] / (msgs * steps)
    return out
