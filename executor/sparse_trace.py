"""Synthetic DSA-style top-k index traces with a stated locality, and the overlap they show.

What it does: `topk_trace` draws, for every step, layer and request, K token positions the way a
sparse-attention indexer's top-k might move: a fraction `reuse` of step t's entries is a uniform
sample of step t-1's set, the rest are fresh positions uniform over the context, in runs of
`cluster_rows` consecutive tokens (1 = scattered, 64 = page-sized spans). Contexts of at most K
tokens select every token (DSA's short-sequence case), padded with -1. `step_overlap` measures
what the planner calls locality: the fraction of a step's entries (or pages) that the previous
step of the same request and layer already touched.
What it does not do: model what a real indexer selects. The overlap of a trace is its `reuse` by
construction (plus chance collisions), so it is an input to the cache measurements, not a
measurement of DeepSeek's top-k; a default for the planner needs indices logged from a real model.
Duplicates inside one step's set are possible (a fresh run landing on a kept entry) and left in:
attention over a duplicated row is the same function in the tiered and the all-resident paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TopKTraceSpec:
    """How the synthetic indices move from step to step."""

    topk: int = 2048
    """Entries per request per layer per step (DeepSeek-V3.2 index_topk)."""
    reuse: float = 0.9
    """Fraction of a step's entries sampled from the previous step's set."""
    cluster_rows: int = 1
    """Fresh entries come in runs of this many consecutive positions."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.topk, int) or self.topk <= 0:
            raise ValueError(f"TopKTraceSpec.topk={self.topk!r} must be a positive int")
        if not 0.0 <= self.reuse <= 1.0:
            raise ValueError(f"TopKTraceSpec.reuse={self.reuse} must be in [0, 1]")
        if not isinstance(self.cluster_rows, int) or self.cluster_rows <= 0:
            raise ValueError(f"TopKTraceSpec.cluster_rows={self.cluster_rows!r} must be a positive int")


def _fresh(rng: np.random.Generator, ctx: np.ndarray, n: int, run: int) -> np.ndarray:
    """[R] contexts -> [R, n] positions in runs of `run` (shorter where a context is)."""
    r = ctx.shape[0]
    run_r = np.minimum(run, ctx)[:, None]  # [R, 1]
    runs = -(-n // run)
    starts = np.floor(rng.random((r, runs)) * (ctx[:, None] - run_r + 1)).astype(np.int64)  # [R, runs]
    offs = np.arange(run, dtype=np.int64)[None, None, :] % run_r[:, :, None]  # [R, 1, run]
    return (starts[:, :, None] + offs).reshape(r, runs * run)[:, :n]


def topk_trace(spec: TopKTraceSpec, ctx_rows, num_layers: int, num_steps: int) -> np.ndarray:
    """Indices [T, L, B, K] int64 for requests of ctx_rows [B] tokens (fixed over the trace)."""
    ctx = np.asarray(ctx_rows, dtype=np.int64)
    if ctx.ndim != 1 or (ctx <= 0).any():
        raise ValueError(f"ctx_rows must be a 1-d list of positive lengths, got {ctx_rows!r}")
    rng = np.random.default_rng(spec.seed)
    k, b = spec.topk, len(ctx)
    ctx_r = np.tile(ctx, num_layers)  # rows r = layer * B + request
    keep = int(round(spec.reuse * k))
    out = np.empty((num_steps, num_layers * b, k), dtype=np.int64)
    cur = _fresh(rng, ctx_r, k, spec.cluster_rows)
    for t in range(num_steps):
        if t:
            pick = np.argsort(rng.random(cur.shape), axis=1)[:, :keep]
            cur = np.concatenate([np.take_along_axis(cur, pick, axis=1),
                                  _fresh(rng, ctx_r, k - keep, spec.cluster_rows)], axis=1)
        out[t] = cur
    short = ctx_r <= k
    if short.any():
        lane = np.arange(k, dtype=np.int64)[None, :]
        out[:, short] = np.where(lane < ctx_r[short][:, None], lane, -1)[None]
    return out.reshape(num_steps, num_layers, b, k)


def step_overlap(trace: np.ndarray, page_rows: int = 1) -> float:
    """Mean over (step > 0, layer, request) of |U_t ∩ U_{t-1}| / |U_t|, U = distinct pages selected."""
    t_steps = trace.shape[0]
    flat = trace.reshape(t_steps, -1, trace.shape[-1])
    fracs = []
    for t in range(1, t_steps):
        for r in range(flat.shape[1]):
            now = np.unique(flat[t, r][flat[t, r] >= 0] // page_rows)
            before = np.unique(flat[t - 1, r][flat[t - 1, r] >= 0] // page_rows)
            if len(now):
                fracs.append(np.isin(now, before, assume_unique=True).mean())
    return float(np.mean(fracs)) if fracs else 1.0
