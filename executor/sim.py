"""The simulated executor: runtime_policy's `Executor` protocol with step times from the compiled
step-time tables (datasheet floors or a calibration), optionally with seeded multiplicative noise.

A run of k steps is priced in one vectorized call: contexts grow by one token per step, so the
attention terms are arithmetic in the step index; for the owner layouts the busiest owner is
found per step over the T ranks. Switches take the plan's link time in the background; its
interference is added to the next step run, its commit stall returned at the hand-off.

Does not: choose layouts or requests, or import torch. NOTE: Σ min(L, top-k) over a run is
interpolated linearly between its first and last step (exact unless a request crosses top-k
inside the run, then off by at most the crossing requests' share of one run).
"""

from __future__ import annotations

import numpy as np

from runtime_policy.executor import StepBatch
from runtime_policy.tables import StepTimeTable
from runtime_policy.transitions import TransitionPlan


class SimExecutor:
    def __init__(self, tables: StepTimeTable, noise: float = 0.0, seed: int = 0):
        if not np.isfinite(noise) or noise < 0:
            from planner.errors import SpecError

            raise SpecError(f"noise={noise} must be a finite fraction ≥ 0")
        self.tables = tables
        self.noise = float(noise)
        self._rng = np.random.default_rng(seed)
        self._pending_interference_s = 0.0
        self.steps_run = 0

    def run_steps(self, batch: StepBatch, prefill_tokens: np.ndarray) -> np.ndarray:
        t = self.tables
        k = prefill_tokens.shape[0]
        ctx = batch.context_tokens
        b = ctx.shape[0]
        j = np.arange(k, dtype=np.float64)
        if b:
            s2_0 = float(ctx.sum())
            s1_0 = float(np.minimum(ctx, t.topk).sum())
            s1_end = float(np.minimum(ctx + (k - 1), t.topk).sum())
            s1 = s1_0 + (s1_end - s1_0) * (j / (k - 1) if k > 1 else j)
            s2 = s2_0 + b * j
            if t.info.is_owner[batch.layout]:
                own_ctx = np.bincount(batch.owners, weights=ctx, minlength=t.ranks)
                own_cnt = np.bincount(batch.owners, minlength=t.ranks).astype(np.float64)
                per_rank = own_ctx[:, None] + own_cnt[:, None] * j[None, :]  # [T, k]
                s2_own = per_rank.max(axis=0)
                frac = np.divide(s2_own, s2, out=np.zeros(k), where=s2 > 0)
                s1, s2 = s1 * frac, s2_own
        else:
            s1 = s2 = np.zeros(k)
        dur = t.step_s(batch.layout, b, prefill_tokens, s1, s2)
        if self.noise > 0:
            dur = dur * np.maximum(1.0 + self.noise * self._rng.standard_normal(k), 0.05)
        if self._pending_interference_s and k:
            dur[0] += self._pending_interference_s
            self._pending_interference_s = 0.0
        self.steps_run += k
        return dur

    def start_switch(self, plan: TransitionPlan) -> float:
        self._pending_interference_s += plan.interference_s
        return plan.link_s

    def commit_switch(self, plan: TransitionPlan) -> float:
        return plan.commit_stall_s


def simulate(dep, workload, policy: str = "dynamic", order: str = "fcfs", model=None, noise: float = 0.0,
             seed: int = 0, knobs=None, config=None, boost: float | None = None, progress=None) -> dict:
    """Serve `workload` on deployment `dep` with the simulated executor; the metrics dict plus the
    timeline (under 'timeline') and the conditions. `policy` is a layout name or 'dynamic'.

    With replicas > 1, requests go round-robin to identical groups, each simulated on its own."""
    from dataclasses import replace

    from planner.errors import SpecError
    from runtime_policy.loop import LoopConfig, ServeResult, serve
    from runtime_policy.metrics import summarize
    from runtime_policy.ordering import DEFAULT_BOOST, Ordering
    from runtime_policy.policy import FixedPolicy, LayoutPolicy, PolicyKnobs
    from runtime_policy.tables import LAYOUTS, datasheet_model

    model = model or datasheet_model()
    config = config or LoopConfig()
    knobs = replace(knobs or PolicyKnobs(), max_batch=config.max_batch)
    if policy not in LAYOUTS + ("dynamic",):
        raise SpecError(f"policy={policy!r} is not one of {', '.join(LAYOUTS + ('dynamic',))}")
    results = []
    groups = dep.replicas
    for g in range(groups):
        lp = LayoutPolicy.compile(dep, model, knobs, max_prefill_tokens=config.prefill_chunk_tokens)
        pol = lp if policy == "dynamic" else FixedPolicy(LAYOUTS.index(policy))
        if policy != "dynamic" and lp.tables.info.kv_pool_bytes[LAYOUTS.index(policy)] <= 0:
            raise SpecError(f"layout {policy} leaves no KV pool for {dep.model.name} on {dep.ranks} × {dep.hardware.name}")
        ordering = Ordering(order, DEFAULT_BOOST if boost is None else boost)
        ex = SimExecutor(lp.tables, noise, seed + g)
        w = workload.subset(np.arange(g, workload.requests, groups))
        if w.requests == 0:
            continue
        cb = (lambda done, total, g=g: progress(g, groups, done, total)) if progress else None
        results.append(serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol, ordering, ex, config, cb))
    merged = results[0] if len(results) == 1 else _merge(results, ServeResult)
    out = summarize(merged)
    out["timeline"] = merged.timeline
    out["step_time_model"] = model.label
    return out


def _merge(results, cls):
    cat = lambda name: np.concatenate([getattr(r, name) for r in results])  # noqa: E731
    m = cls(cat("arrival_s"), cat("input_tokens"), cat("output_tokens"), cat("first_token_s"), cat("finish_s"),
            cat("status"), cat("preemptions"))
    m.switches = sorted((s for r in results for s in r.switches), key=lambda s: s.at_s)
    m.steps = sum(r.steps for r in results)
    m.decode_steps = sum(r.decode_steps for r in results)
    m.layout_time_s = {k: sum(r.layout_time_s[k] for r in results) for k in results[0].layout_time_s}
    m.timeline = results[0].timeline
    return m
