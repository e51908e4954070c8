"""The priced oracle: the best layout schedule over a recorded step trace when every change pays
what the switch costs, computed exactly — next to the free-switch oracle (executor/oracle.py),
whose per-step alternation no switch that moves KV can follow (benchmarks/oracle_alternation.py).

The trace is a `RecordingExecutor`'s runs (the serving loop's trajectory: which requests ran
together, each step's prefill chunk). Every step j is repriced in every layout l by the simulated
executor (t_l(j), the same step-time tables; infeasible where l's KV pool can't hold the run's
decoders at its first step, except the layout the run was recorded in — the free oracle's rule, so
every schedule here is one the free oracle could take). A switch a -> b is priced by the transition
planner at the KV the run held at its start, as the policy prices it (runtime_policy/policy.py rule
2; runtime_policy/transitions.py `plan_transition`), and charged as the simulator charges it
(executor/sim.py): decided at a step boundary, its KV moves for `link_s` in the background while the
steps go on in a; it commits at the first step boundary after that, where it costs `cost_s`
(interference + commit stall) of time; one switch at a time; a switch whose memory does not fit
(`feasible`) is not made. The schedule (its start layout too) is chosen with perfect foresight:

    V[b][j'] = min over a, j of V[a][j] + Σ_{i=j}^{j'-1} t_a(i) + cost_s(a→b, run(j)),
               j' the first boundary with Σ_{i=j}^{j'-1} t_a(i) ≥ link_s(a→b, run(j));
    V[a][j+1] = min(…, V[a][j] + t_a(j));   V[l][0] = 0;   busy = min_l V[l][N]

— a Viterbi recursion over (step boundary, layout), O(N · L²), exact for this model. As the free
oracle, the busy time replaces the recorded one in the makespan (`OracleBound.makespan_s`).

Bounds it keeps, on one trajectory: ≤ the free oracle (a priced schedule is a free one plus its
switches' costs) and ≥ any fixed layout repriced over the trajectory (staying is a schedule);
over the trajectories of every fixed layout and the dynamic policy, its largest is ≥ the best
fixed layout's own run (on that run's trajectory, staying in it reprices every step to its time).

NOTE: the network share of a switch's interference is the source layout's network-bytes term of a
decode step of the run's batch (the policy's pricer reads its last priced step's); the KV a plan
reads is the KV held at the run (context + the ledger's slack of every running decoder): the run's
decoders, and for a prefill-only run (every decoder waits while its group prefills: SGLang's
separate prefill batch, recorded with no decoders) the decoders that wait through it — those of
the last run that decoded which also decode in the next one, at their contexts after it
(`held_kv`). The requests being prefilled (their prefix so far, at most a prompt each) are left
out, as the free oracle leaves them out of feasibility.
NOTE: before, a prefill-only run's plan read no KV: a switch decided there moved nothing. On
DeepSeek-V3.2's 20/s chat load (8 x H200, the prior; the trajectory of fixed DOP) 44 of the
schedule's 46 CP -> DP moves (CP prefill, then decode in DP) were decided at such runs, each
priced 0.14 ms of link with ~1,000 requests' KV split by tokens over the ranks, which the move must
gather to each request's owner (~70 ms of link and ~18 ms of interference, as the DOP -> CP move
of the same KV was priced).

Does not: schedule, simulate the loop again (the trajectory is kept), or import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from executor.oracle import RecordingExecutor
from executor.sim import SimExecutor
from runtime_policy.executor import StepBatch
from runtime_policy.step_time import NET_BYTES
from runtime_policy.tables import StepTimeTable
from runtime_policy.transitions import plan_transition

_INF = float("inf")


@dataclass(frozen=True)
class PricedSchedule:
    busy_s: float  # Σ step times of the schedule + Σ its switches' cost_s
    switches: int
    switch_cost_s: float  # Σ cost_s of its switches
    start_layout: int
    layout_steps: tuple[int, ...]  # [L] steps served in each layout
    changes: tuple[tuple[int, int, int, int], ...] = ()  # (decided at step, committed at step, from, to), in order


def best_schedule(times: np.ndarray, run_of: np.ndarray, link_s: np.ndarray, cost_s: np.ndarray) -> PricedSchedule:
    """The exact recursion of the module docstring. `times` [L, N] step seconds (inf: infeasible);
    `run_of` [N] each step's run; `link_s`, `cost_s` [R, L, L] per run and (from, to) pair (inf
    cost: not allowed; the diagonal is never read)."""
    n_l, n = times.shape
    finite = np.isfinite(times)
    t0 = np.where(finite, times, 0.0)
    cum = np.zeros((n_l, n + 1))
    np.cumsum(t0, axis=1, out=cum[:, 1:])
    # bad[a][j]: the first step ≥ j infeasible in a (n: none)
    bad = np.full((n_l, n + 1), n, dtype=np.int64)
    for a in range(n_l):
        nxt = n
        for j in range(n - 1, -1, -1):
            if not finite[a, j]:
                nxt = j
            bad[a, j] = nxt
    # commit boundary of a switch a -> b decided at boundary j: [L, L, N]
    links = link_s[run_of]  # [N, L, L]
    commit = np.empty((n_l, n_l, n), dtype=np.int64)
    for a in range(n_l):
        target = cum[a, :n, None] + links[:, a, :]  # [N, L]
        for b in range(n_l):
            # NOTE: ≥ j: infeasible steps add 0 to cum, so an equal earlier entry must not be taken
            commit[a, b] = np.maximum(np.searchsorted(cum[a], target[:, b], side="left"), np.arange(n))
    costs = cost_s[run_of]  # [N, L, L]
    v = np.full((n_l, n + 1), _INF)
    v[:, 0] = np.where(finite[:, 0], 0.0, _INF) if n else 0.0
    par = np.full((n_l, n + 1, 2), -1, dtype=np.int64)  # (from layout, from boundary); -1: a stay / the start
    vl = v.tolist()
    cuml = cum.tolist()
    badl = bad.tolist()
    tl = times.tolist()
    pairs = [(a, b) for a in range(n_l) for b in range(n_l) if a != b]
    for j in range(n + 1):
        if j < n:
            cj = costs[j]
            cm = commit[:, :, j]
            for a, b in pairs:
                va = vl[a][j]
                c = cj[a, b]
                if va == _INF or c == _INF:
                    continue
                jj = int(cm[a, b])
                if jj >= n or jj > badl[a][j]:
                    continue  # it would commit at the trace's end or past it, or a's steps before it don't fit
                x = va + cuml[a][jj] - cuml[a][j] + c
                if x < vl[b][jj]:
                    vl[b][jj] = x
                    par[b, jj] = (a, j)
        if j == n:
            break
        for a in range(n_l):
            va = vl[a][j]
            if va < _INF and tl[a][j] < _INF:
                x = va + tl[a][j]
                if x < vl[a][j + 1]:
                    vl[a][j + 1] = x
                    par[a, j + 1] = (-1, -1)
    end = [vl[a][n] for a in range(n_l)]
    last = int(np.argmin(end))
    busy = end[last]
    # walk back: count switches, their cost, and each layout's steps
    steps = [0] * n_l
    switches, cost_total, changes = 0, 0.0, []
    a, j = last, n
    while j > 0:
        pa, pj = par[a, j]
        if pa < 0:
            steps[a] += 1
            j -= 1
            continue
        switches += 1
        changes.append((int(pj), int(j), int(pa), int(a)))
        cost_total += float(costs[pj][pa, a])
        steps[pa] += j - pj
        a, j = int(pa), int(pj)
    return PricedSchedule(float(busy), switches, cost_total, int(a), tuple(int(x) for x in steps),
                          tuple(reversed(changes)))


def trace(tables: StepTimeTable, rec: RecordingExecutor) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(times [L, N], run_of [N], link_s [R, L, L], cost_s [R, L, L]) of a recorded trajectory: every
    step repriced in every layout (module docstring), every switch planned at each run's start."""
    info, bpt, page = tables.info, tables.kv_bytes_per_token, float(tables.page_tokens)
    slack = float(tables.request_slack_tokens)
    extra = np.asarray(info.extra_slack_tokens, dtype=np.float64)
    share = np.asarray(info.group_share, dtype=np.float64)
    pool = np.asarray(info.kv_pool_bytes, dtype=np.float64)
    groups = np.asarray(info.owner_groups, dtype=np.int64)
    n_l = len(tables.layouts)
    usable = [i for i in range(n_l) if pool[i] > 0]
    sim = SimExecutor(tables)
    cols, run_of = [], []
    links = np.full((len(rec.runs), n_l, n_l), _INF)
    costs = np.full((len(rec.runs), n_l, n_l), _INF)
    held = held_kv(rec)
    for r_i, r in enumerate(rec.runs):
        k = r.prefill_tokens.shape[0]
        b = int(r.context_tokens.size)
        ctx_h, own_h = held[r_i]
        b_h = int(ctx_h.size)
        # feasibility as the free oracle's (executor/oracle.py: context + a page each), of the KV held
        need = ctx_h + page
        per_owner = np.bincount(own_h, weights=need, minlength=tables.ranks) if b_h else np.zeros(tables.ranks)
        fits = np.array([(float(need.sum()) if groups[lay] == 1 else float(per_owner.reshape(groups[lay], -1)
                                                                             .sum(axis=1).max())) * share[lay] * bpt
                         <= pool[lay] for lay in range(n_l)])
        # the KV a plan reads: the ledger's tokens (context + slack, each layout's extra slack)
        led = ctx_h + slack
        led_owner = np.bincount(own_h, weights=led, minlength=tables.ranks) if b_h else np.zeros(tables.ranks)
        cnt_owner = np.bincount(own_h, minlength=tables.ranks) if b_h else np.zeros(tables.ranks, dtype=np.int64)
        total = float(led.sum())
        busy = np.empty(n_l)
        for lay in range(n_l):
            g = int(groups[lay])
            if g <= 1:
                busy[lay] = total + extra[lay] * b_h
            else:
                busy[lay] = float((led_owner.reshape(g, -1).sum(axis=1)
                                   + extra[lay] * cnt_owner.reshape(g, -1).sum(axis=1)).max())
        t = np.full((n_l, k), _INF)
        for lay in usable:
            if not fits[lay] and lay != r.layout:
                continue
            t[lay] = np.asarray(sim.run_steps(StepBatch(lay, r.context_tokens, r.owners, np.arange(b)),
                                              r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
        cols.append(t)
        run_of.append(np.full(k, r_i, dtype=np.int64))
        busy_b = (busy * bpt).tolist()
        n_row = min(b, tables.base_s.shape[0] - 1)
        for a in usable:
            step_a = float(t[a, 0]) if k and np.isfinite(t[a, 0]) else 0.0
            net = float(tables.base_s[n_row, a, NET_BYTES]) / step_a if step_a > 0 else 0.0
            for c in usable:
                if a == c:
                    continue
                p = plan_transition(tables, a, c, total * bpt, busy_b, b_h, step_a, net)
                if p.feasible:
                    links[r_i, a, c] = p.link_s
                    costs[r_i, a, c] = p.cost_s
    times = np.concatenate(cols, axis=1) if cols else np.zeros((n_l, 0))
    runs = np.concatenate(run_of) if run_of else np.zeros(0, dtype=np.int64)
    links = np.where(np.isfinite(links), links, 0.0)  # where the cost is inf the pair is never taken
    return times, runs, links, costs


def held_kv(rec: RecordingExecutor) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per run, (contexts [H], owners [H]) of the decoders holding KV at its first step: the run's
    own decoders; for a run recorded with none but a prefill chunk (a prefill-only run: every
    decoder waits while its group prefills), those of the last run that decoded which also decode
    in the next such run, at their contexts after that last run's steps (a waiting decoder does not
    grow). A run with neither, or recorded without request ids, holds what it recorded."""
    runs = rec.runs
    out: list = [(r.context_tokens, r.owners) for r in runs]
    prev = -1
    pending: list[int] = []
    for i, r in enumerate(runs):
        if r.context_tokens.size:
            if pending and prev >= 0:
                p = runs[prev]
                if p.request_ids is not None and r.request_ids is not None:
                    keep = np.isin(p.request_ids, r.request_ids)
                    ctx = p.context_tokens[keep] + float(p.prefill_tokens.shape[0])
                    own = p.owners[keep]
                    for j in pending:
                        out[j] = (ctx, own)
            pending = []
            prev = i
        elif r.prefill_tokens.size and float(np.max(r.prefill_tokens)) > 0:
            pending.append(i)
    return out


def priced_best(tables: StepTimeTable, rec: RecordingExecutor) -> PricedSchedule:
    """The priced oracle's schedule over `rec`'s trajectory (module docstring)."""
    return best_schedule(*trace(tables, rec))
