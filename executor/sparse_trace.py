"""Synthetic DSA-style top-k index traces with a stated locality, and the overlap they show.

What it does: `topk_trace` draws, for every step, layer and request, K token positions the way a
sparse-attention indexer's top-k might move: the K entries are K / cluster_rows runs of
`cluster_rows` consecutive tokens (1 = scattered, 64 = page-sized spans); each step a fraction
`reuse` of the runs (a uniform sample) stays where it was and the others move to fresh positions
uniform over the context. Whole runs persist, so the selected set's page footprint stays
stationary instead of fragmenting over the steps. Contexts of at most K
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
    """Fraction of a step's runs kept from the previous step (rounded to whole runs)."""
    cluster_rows: int = 1
    """Entries come in runs of this many consecutive positions (the last run of K may be shorter)."""
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
    k, b, run = spec.topk, len(ctx), spec.cluster_rows
    ctx_r = np.tile(ctx, num_layers)  # rows r = layer * B + request
    runs = -(-k // run)
    keep = int(round(spec.reuse * runs))
    out = np.empty((num_steps, num_layers * b, k), dtype=np.int64)
    cur = _fresh(rng, ctx_r, runs * run, run).reshape(-1, runs, run)  # [R, runs, run]
    for t in range(num_steps):
        if t:
            pick = np.argsort(rng.random(cur.shape[:2]), axis=1)[:, :keep]  # runs that stay
            kept = np.take_along_axis(cur, pick[:, :, None], axis=1)
            moved = _fresh(rng, ctx_r, (runs - keep) * run, run).reshape(-1, runs - keep, run)
            cur = np.concatenate([kept, moved], axis=1)
        out[t] = cur.reshape(-1, runs * run)[:, :k]
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
