"""The simulated executor: runtime_policy's `Executor` protocol with step times from the compiled
step-time tables (datasheet floors or a calibration), optionally with seeded multiplicative noise.

A run of k steps is priced by the one step-time formula (runtime_policy/step_time.py): contexts
grow by one token per step, so the attention terms are arithmetic in the step index; for layouts
of several owner groups the busiest group is found per step over the G groups (the batch's
`owner_*` sums and `chunk_owner` are per group of its layout: runtime_policy/executor.py). Short runs go through the formula's
kernels in plain floats, long ones through `StepTimeTable.step_s` (numpy), bit-identical. It holds
no KV (`tracks_kv = False`: the loop need not admit or retire requests here). Switches take the
plan's link time in the background (ready whenever the loop's clock passes it); their
interference is added to the next step run, their commit stall returned at the hand-off.

Does not: choose layouts or requests, or import torch. NOTE: Σ min(L, top-k) over a run is
interpolated linearly between its first and last step (exact unless a request crosses top-k
inside the run, then off by at most the crossing requests' share of one run).
"""

from __future__ import annotations

import numpy as np

from runtime_policy import step_time
from runtime_policy.executor import StepBatch, SwitchStatus
from runtime_policy.tables import NO_TOPK, StepTimeTable
from runtime_policy.transitions import TransitionPlan

SCALAR_RUN_STEPS = 8  # runs this short are priced in plain Python floats (faster than numpy below ~10 steps)
# NOTE: longer runs too, up to this many steps + 2 × steps with a chunk: the numpy path costs ~20 µs
# whatever k, the Python one ~0.5 µs per step and ~1.5 µs more per chunk (measured on 8 × H200
# DeepSeek-V3.2 tables: equal at ~48 decode steps, or ~16–24 steps that all carry a chunk)
SCALAR_RUN_UNITS = 48
_add = np.add.reduce


class SimExecutor:
    tracks_kv = False  # the loop need not call admit/retire: each run's batch says what decodes
    separate_prefill = True  # a run's batch may leave out the owner groups that prefill instead (SGLang)
    # a run is priced from the batch's sums (the loop keeps them all): its per-request arrays are not
    # read, so the loop need not build them (`active_decoders` gives the batch's size)
    reads_batch_arrays = False

    def __init__(self, tables: StepTimeTable, noise: float = 0.0, seed: int = 0):
        if not np.isfinite(noise) or noise < 0:
            from planner.errors import SpecError

            raise SpecError(f"noise={noise} must be a finite fraction ≥ 0")
        self.tables = tables
        self.noise = float(noise)
        self._rng = np.random.default_rng(seed)
        self._pending_interference_s = 0.0
        self.steps_run = 0
        self._groups = [int(x) for x in tables.info.owner_groups]
        self._has_topk = tables.topk < NO_TOPK
        self._c1 = tables.c1_s.tolist()
        self._c2 = tables.c2_s.tolist()
        self._alpha, self._over = float(tables.alpha), float(tables.overhead_s)
        self.scalar_run_steps = SCALAR_RUN_STEPS  # 0: every run through the vectorized path
        # per layout, base_s rows and (prefill, prefix slopes) chunk rows as Python floats, filled on use
        self._rows: list[dict[int, list[float]]] = [{} for _ in range(tables.base_s.shape[1])]
        self._chunk_rows: list[dict[int, tuple]] = [{} for _ in range(tables.base_s.shape[1])]
        self._knee = float(tables.prefix_knee_tokens)
        # the fixed seconds of a step with a chunk, without and with decode rows beside it (the
        # eager-step overheads: tables.StepTimeTable.chunk_overhead_s)
        self._over_chunk = (tables.chunk_overhead_s(False), tables.chunk_overhead_s(True))
        # where they overlap the device's time (tables.StepTimeTable.host_overlap): the formula with
        # overhead 0, then `chunk_step_s` (the same arithmetic as StepTimeTable.step_s)
        self._host = tables.host_overlap
        if self._host:
            self._over_chunk = (0.0, 0.0)
        # per layout, what a short run reads: its c1 and c2 rows, alpha, overhead, table bounds, rows
        # (decode-only rows from the compiled lists, longer ones cached here)
        dec = tables.base_rows_py
        self._scalar = [(self._c1[i], self._c2[i], self._alpha, self._over, tables.max_prefill_tokens,
                         tables.max_tokens, dec, len(dec), self._rows[i]) for i in range(len(self._rows))]

    def run_steps(self, batch: StepBatch, prefill_tokens, prefill_context_tokens=None,
                  chunk_owner=None) -> list[float] | np.ndarray:
        """See `runtime_policy.executor.Executor.run_steps` (the [k] sequences may be lists or
        arrays). Returns a list from the short-run path, an array from the vectorized one."""
        t = self.tables
        k = len(prefill_tokens)
        b = batch.owners.shape[0] if batch.active_decoders < 0 else batch.active_decoders
        groups = self._groups[batch.layout]
        owner_layout = groups > 1  # requests spread over owner groups: the busiest group prices the step
        own_ctx = own_cnt = None
        if b:
            # NOTE: contexts are whole token counts, so these float sums are exact in any order; the
            # contexts are built (batch.context_tokens) only for the sums the caller did not keep
            s2_0 = batch.context_sum_tokens if batch.context_sum_tokens >= 0 else float(_add(batch.context_tokens))
            if self._has_topk:
                s1_0 = (batch.context_capped_sum_tokens if batch.context_capped_sum_tokens >= 0
                        else float(_add(np.minimum(batch.context_tokens, t.topk))))
                if k <= 1:
                    s1_end = s1_0
                elif batch.context_capped_sum_last_tokens >= 0:
                    s1_end = batch.context_capped_sum_last_tokens
                else:
                    s1_end = float(_add(np.minimum(batch.context_tokens + (k - 1), t.topk)))
            else:
                s1_0, s1_end = s2_0, s2_0 + b * (k - 1)
            if owner_layout:
                if batch.owner_context_tokens is not None and batch.owner_requests is not None:
                    own_ctx, own_cnt = batch.owner_context_tokens, batch.owner_requests  # whole numbers: exact
                else:
                    grp = batch.owners * groups // t.ranks  # each request's owner group
                    own_ctx = np.bincount(grp, weights=batch.context_tokens, minlength=groups).tolist()
                    own_cnt = np.bincount(grp, minlength=groups).tolist()
        else:
            s1_0 = s1_end = s2_0 = 0.0
        chunk_owner = chunk_owner if owner_layout else None  # TP and CP spread every chunk
        if k == 1 and not self.noise and self.scalar_run_steps:
            # NOTE: one step (most runs, when arrivals cut them): `_run_scalar` of it, without its
            # per-run set-up
            layout = batch.layout
            c1, c2, alpha, over, max_p, max_n, dec, n_dec, _ = self._scalar[layout]
            p = prefill_tokens[0]
            p = min(int(p), max_p) if p else 0
            n = b + p
            if n > max_n:
                n = max_n
            row = dec[n][layout] if n < n_dec else self._row(layout, n)
            s1 = s1_all = s1_0
            s2 = s2_all = s2_0
            if b and owner_layout:
                s2_own = max(own_ctx)
                frac = s2_own / s2 if s2 > 0 else 0.0
                s1, s2 = s1 * frac, s2_own
            if not p:
                dur = [step_time.step_seconds(row, None, 0.0, 0.0, c1, c2, s1, s2, alpha, over)]
            elif chunk_owner is None:  # the chunk over every rank (or, unknown, on the busiest)
                lo, hi = step_time.prefix_split(None if prefill_context_tokens is None
                                                else float(prefill_context_tokens[0]), self._knee)
                dur = [step_time.step_seconds(row, self._chunk_row(layout, p), lo, hi, c1, c2, s1, s2, alpha,
                                              self._over_chunk[1 if b else 0])]
                if self._host:
                    dur[0] = t.chunk_step_s(dur[0], b > 0)
            else:  # owner layouts: the slower of the decode-busiest owner and the chunk's owner
                g = chunk_owner[0][0]
                if groups != t.ranks:  # the chunk's owner rank → its owner group
                    g = g * groups // t.ranks
                lo, hi = step_time.prefix_split(float(chunk_owner[2][0]), self._knee)
                if b:
                    s2c = own_ctx[g] + own_cnt[g] * 0
                    s1c = s1_all * (s2c / s2_all if s2_all > 0 else 0.0)
                else:
                    s1c = s2c = 0.0
                dur = [step_time.owner_step_seconds(row, self._chunk_row(layout, min(int(chunk_owner[1][0]), max_p)),
                                                    lo, hi, c1, c2, s1, s2, s1c, s2c, alpha,
                                                    self._over_chunk[1 if b else 0])]
                if self._host:
                    dur[0] = t.chunk_step_s(dur[0], b > 0)
            if self._pending_interference_s:
                dur[0] += self._pending_interference_s
                self._pending_interference_s = 0.0
            self.steps_run += 1
            return dur
        if k <= self.scalar_run_steps:
            scalar = not self.noise
        elif self.scalar_run_steps and k <= SCALAR_RUN_UNITS and not self.noise:
            chunks = (k - prefill_tokens.count(0.0) if type(prefill_tokens) is list
                      else int(np.count_nonzero(prefill_tokens)))
            scalar = k + 2 * chunks <= SCALAR_RUN_UNITS
        else:
            scalar = False
        if scalar:
            if type(prefill_tokens) is not list:
                prefill_tokens = prefill_tokens.tolist()
            if prefill_context_tokens is not None and type(prefill_context_tokens) is not list:
                prefill_context_tokens = prefill_context_tokens.tolist()
            if chunk_owner is not None:
                chunk_owner = [x if type(x) is list else x.tolist() for x in chunk_owner]
                if groups != t.ranks:  # the chunk's owner rank → its owner group
                    chunk_owner[0] = [r * groups // t.ranks for r in chunk_owner[0]]
            dur = self._run_scalar(batch.layout, b, prefill_tokens, k, s1_0, s1_end, s2_0, own_ctx, own_cnt,
                                   prefill_context_tokens, chunk_owner)
        else:
            prefill_tokens = np.asarray(prefill_tokens, dtype=np.float64)
            if prefill_context_tokens is not None:
                prefill_context_tokens = np.asarray(prefill_context_tokens, dtype=np.float64)
            if chunk_owner is not None:
                chunk_owner = (np.asarray(chunk_owner[0], dtype=np.int64),
                               np.asarray(chunk_owner[1], dtype=np.float64), np.asarray(chunk_owner[2], dtype=np.float64))
            j = np.arange(k, dtype=np.float64)
            co = None
            if b:
                s1 = s1_0 + (s1_end - s1_0) * (j / (k - 1) if k > 1 else j)
                s2 = s2_0 + b * j
                if owner_layout:
                    per_rank = (np.asarray(own_ctx, dtype=np.float64)[:, None]
                                + np.asarray(own_cnt, dtype=np.float64)[:, None] * j[None, :])  # [G, k]
                    if chunk_owner is not None:
                        rank, tok, pfx = chunk_owner
                        grp = np.asarray(rank, dtype=np.int64) * groups // t.ranks  # the chunk's owner group
                        s2c = per_rank[grp, np.arange(k)]
                        s1c = s1 * np.divide(s2c, s2, out=np.zeros(k), where=s2 > 0)
                        co = (tok, pfx, s1c, s2c)
                    s2_own = per_rank.max(axis=0)
                    frac = np.divide(s2_own, s2, out=np.zeros(k), where=s2 > 0)
                    s1, s2 = s1 * frac, s2_own
            else:
                s1 = s2 = np.zeros(k)
                if chunk_owner is not None:
                    co = (chunk_owner[1], chunk_owner[2], s1, s2)
            dur = t.step_s(batch.layout, b, prefill_tokens, s1, s2, prefill_context=prefill_context_tokens,
                           chunk_owner=co)
            if self.noise > 0:
                dur = dur * np.maximum(1.0 + self.noise * self._rng.standard_normal(k), 0.05)
        if self._pending_interference_s and k:
            dur[0] += self._pending_interference_s
            self._pending_interference_s = 0.0
        self.steps_run += k
        return dur

    def _row(self, layout: int, n: int) -> list[float]:
        """The base table's row for n tokens in `layout` past the decode-only rows, as Python floats (cached)."""
        rows = self._rows[layout]
        row = rows.get(n)
        if row is None:
            row = rows[n] = self.tables.base_s[n, layout].tolist()
        return row

    def _chunk_row(self, layout: int, p: int) -> list[float]:
        """The table's chunk row (3R floats) for a chunk of p tokens in `layout`, as Python floats."""
        rows = self._chunk_rows[layout]
        r = rows.get(p)
        if r is None:
            if len(rows) > 8192:
                rows.clear()
            r = rows[p] = self.tables.chunk_rows_s[p, layout].tolist()  # prefill, prefix below / above the knee
        return r

    def _run_scalar(self, layout: int, b: int, prefill_tokens: list, k: int, s1_0: float, s1_end: float,
                    s2_0: float, own_ctx: list | None, own_cnt: list | None, prefix: list | None,
                    chunk_owner: list | None) -> list[float]:
        """`run_steps` for a short run in plain Python floats: each step's sums, then the one
        formula (runtime_policy/step_time.py's kernels, bit-identical to `StepTimeTable.step_s`),
        without the ~20 numpy dispatches of the vectorized path, which dominate when arrivals cut
        runs to a few steps."""
        c1, c2, alpha, over, max_p, max_n, dec, n_dec, rows = self._scalar[layout]
        seconds, owner_seconds, split, knee = step_time.step_seconds, step_time.owner_step_seconds, \
            step_time.prefix_split, self._knee
        out = [0.0] * k
        over_c = self._over_chunk[1 if b else 0]
        host = self._host
        ds1 = s1_end - s1_0
        km1 = k - 1
        if own_ctx is not None:
            # NOTE: only owners that can catch the step-0 busiest within the run can be busiest
            # (an owner below it at the last step is below it throughout), usually just one
            top = max(own_ctx)
            cands = [(oc, cnt) for oc, cnt in zip(own_ctx, own_cnt) if oc + cnt * km1 >= top]
            lead_ctx, lead_cnt = cands[0] if len(cands) == 1 else (-1.0, 0)
        for j, p in enumerate(prefill_tokens):
            p = min(int(p), max_p) if p else 0
            n = min(b + p, max_n)
            row = dec[n][layout] if n < n_dec else self._row(layout, n)
            s1 = s1_0 + ds1 * (j / km1) if km1 else s1_0
            s2 = s2_0 + b * j  # NOTE: whole numbers, so the int product adds as float(b) * float(j) would
            s1_all, s2_all = s1, s2
            if b and own_ctx is not None:
                s2_own = lead_ctx + lead_cnt * j if lead_ctx >= 0 else max([oc + cnt * j for oc, cnt in cands])
                frac = s2_own / s2 if s2 > 0 else 0.0
                s1, s2 = s1 * frac, s2_own
            if not p:
                out[j] = seconds(row, None, 0.0, 0.0, c1, c2, s1, s2, alpha, over)
            elif chunk_owner is None:  # the chunk over every rank (or, unknown, on the busiest)
                lo, hi = split(None if prefix is None else float(prefix[j]), knee)
                out[j] = seconds(row, self._chunk_row(layout, p), lo, hi, c1, c2, s1, s2, alpha, over_c)
                if host:
                    out[j] = self.tables.chunk_step_s(out[j], b > 0)
            else:  # owner layouts: the slower of the decode-busiest owner and the chunk's owner
                rank = chunk_owner[0][j]
                lo, hi = split(float(chunk_owner[2][j]), knee)
                if b:
                    s2c = own_ctx[rank] + own_cnt[rank] * j
                    s1c = s1_all * (s2c / s2_all if s2_all > 0 else 0.0)
                else:
                    s1c = s2c = 0.0
                out[j] = owner_seconds(row, self._chunk_row(layout, min(int(chunk_owner[1][j]), max_p)), lo, hi,
                                       c1, c2, s1, s2, s1c, s2c, alpha, over_c)
                if host:
                    out[j] = self.tables.chunk_step_s(out[j], b > 0)
        return out

    def admit(self, request_id: int, context_tokens: int, owner: int) -> None:
        """Nothing to hold: the batch of each run says what decodes."""

    def retire(self, request_id: int, preempted: bool = False) -> None:
        """Nothing to free."""

    def start_switch(self, plan: TransitionPlan) -> float:
        """The move's interference is charged to the next run; ready after the plan's link time."""
        self._pending_interference_s += plan.interference_s
        return plan.link_s

    def poll_switch(self) -> SwitchStatus:
        """Ready whenever the loop's clock says so (the link time it was given)."""
        return SwitchStatus.READY

    def commit_switch(self, plan: TransitionPlan) -> float:
        return plan.commit_stall_s

    def abort_switch(self, plan: TransitionPlan) -> None:
        """Nothing moved, nothing to undo."""


def engine_chunk_tokens(dep, config) -> int:
    """The chunk setting a run compiles its tables for: the loop's, else the engine's default
    (SGLang's chunked_prefill_size, vLLM's max_num_batched_tokens: planner.engines.scheduling)."""
    if config.prefill_chunk_tokens is not None:
        return config.prefill_chunk_tokens
    g = dep if dep.replicas == 1 else replace_dep(dep)
    return g.engine_model.scheduler(g).engine_chunk_tokens


def replace_dep(dep):
    from planner.deployment import replace_deployment

    return replace_deployment(dep, gpus=dep.ranks, replicas=1)


def simulate(dep, workload, policy: str = "dynamic", order: str = "fcfs", model=None, noise: float = 0.0,
             seed: int = 0, knobs=None, config=None, boost: float | None = None, progress=None,
             tier_choice: bool = False) -> dict:
    """Serve `workload` on deployment `dep` with the simulated executor; the metrics dict plus the
    timeline (under 'timeline') and the conditions. `policy` is a layout name or 'dynamic'
    (`tier_choice`: the tables carry each layout's "+host" twin, so `dep`'s host tier may be
    switched on and off, and `policy` may name a twin; runtime_policy/host_tier_tables.py).

    With replicas > 1, requests go round-robin to identical groups, each simulated on its own."""
    from dataclasses import replace

    from planner.errors import SpecError
    from runtime_policy.loop import LoopConfig, ServeResult, serve
    from runtime_policy.metrics import summarize
    from runtime_policy.ordering import DEFAULT_BOOST, Ordering
    from runtime_policy.policy import FixedPolicy, LayoutPolicy, PolicyKnobs
    from runtime_policy.host_tier_tables import twin_layout_names
    from runtime_policy.tables import datasheet_model, layout_names

    model = model or datasheet_model()
    config = config or LoopConfig()
    knobs = replace(knobs or PolicyKnobs(), max_batch=config.max_batch)
    names = twin_layout_names(layout_names()) if tier_choice else layout_names()
    if policy not in names + ("dynamic",):
        raise SpecError(f"policy={policy!r} is not one of {', '.join(names + ('dynamic',))}")
    results = []
    groups = dep.replicas
    for g in range(groups):
        lp = LayoutPolicy.compile(dep, model, knobs, max_prefill_tokens=engine_chunk_tokens(dep, config),
                                  tier_choice=tier_choice)
        pol = lp if policy == "dynamic" else FixedPolicy(lp.tables.layouts.index(policy))
        if policy != "dynamic" and lp.tables.info.kv_pool_bytes[lp.tables.layouts.index(policy)] <= 0:
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
    m.aborted_switches = sorted((s for r in results for s in r.aborted_switches), key=lambda s: s.at_s)
    m.cant_decide = sum(r.cant_decide for r in results)
    return m
