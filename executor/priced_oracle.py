"""The priced oracle: the best layout schedule over a recorded step trace when every change pays
what the switch costs, computed exactly — next to the free-switch oracle (executor/oracle.py),
whose per-step alternation no switch that moves KV can follow (benchmarks/oracle_alternation.py).

The trace is a `RecordingExecutor`'s runs (the serving loop's trajectory: which requests ran
together, each step's prefill chunk). Every step j is repriced in every layout l by the simulated
executor (t_l(j), the same step-time tables; infeasible where l's KV pool can't hold the run's
decoders at its first step, except the layout the run was recorded in — the free oracle's rule, so
every schedule here is one the free oracle could take; each step is priced with the decoders that
ran in it, `RecordedRun.decoding`). A switch a -> b is priced by the transition planner at the KV
held at its pricing point (the run's start; each step of a run that prefills), as the policy
prices it (runtime_policy/policy.py rule
2; runtime_policy/transitions.py `plan_transition`), and charged as the simulator charges it
(executor/sim.py): decided at a step boundary, its KV moves for `link_s` in the background while the
steps go on in a; it commits at the first step boundary after that, where it costs `cost_s`
(interference + commit stall) of time; one switch at a time; a switch whose memory does not fit
(`feasible`) is not made. The schedule (its start layout too) is chosen with perfect foresight:

    V[b][j'] = min over a, j of V[a][j] + Σ_{i=j}^{j'-1} t_a(i) + cost_s(a→b, point(j)),
               j' the first boundary with Σ_{i=j}^{j'-1} t_a(i) ≥ link_s(a→b, point(j));
    V[a][j+1] = min(…, V[a][j] + t_a(j));   V[l][0] = 0;   busy = min_l V[l][N]

— a Viterbi recursion over (step boundary, layout), O(N · L²), exact for this model. As the free
oracle, the busy time replaces the recorded one in the makespan (`OracleBound.makespan_s`).
Given the arrivals (`priced_best(..., arrival_s)`), V is the time the boundary is reached and each
step starts no earlier than its release r_i, the latest arrival of the requests it prefills
(`RecordingExecutor.release_s`), as the free oracle's replay:

    V[a][j+1] = min(…, max(V[a][j], r_j) + t_a(j)),
    a switch from (a, j) reaches j' at
        max(V[a][j] + Σ_{i=j}^{j'-1} t_a(i), max_{j≤m<j'} r_m + Σ_{i=m}^{j'-1} t_a(i)) + cost_s

(the max over m by a sparse table), and busy_s is the makespan. NOTE: the commit boundary j' is
still where the steps' own time covers `link_s`; a move whose link runs through an idle wait for
arrivals would commit earlier (the bound is that much tighter there).

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
(`held_kv`). The requests being prefilled are left out of feasibility, as the free oracle leaves
them out, but not out of the move: a plan also carries the prefix each has prefilled so far
(`prefilling_kv`, from the recorded prefill pieces, on the owner it decodes on), as the policy's
own plans carry them (its per-rank KV, the ledger's, holds every admitted request). What the
prefill writes while the move's link runs is not priced (a chunk a step at most).
NOTE: before, they were left out of the move too, and on DeepSeek-V3.2's longprompt (8 x H200, the
prior) a CP -> DOP move decided as a 46K-token prompt was prefilled was priced for the one decoder
then running (34K tokens), as if the prompt's KV, split by tokens over the eight ranks, needed no
gathering to its owner.
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
    busy_s: float  # Σ step times of the schedule + Σ its switches' cost_s (with releases: its makespan)
    switches: int
    switch_cost_s: float  # Σ cost_s of its switches
    start_layout: int
    layout_steps: tuple[int, ...]  # [L] steps served in each layout
    changes: tuple[tuple[int, int, int, int], ...] = ()  # (decided at step, committed at step, from, to), in order


def best_schedule(times: np.ndarray, run_of: np.ndarray, link_s: np.ndarray, cost_s: np.ndarray,
                  release_s: np.ndarray | None = None, start_s: float = 0.0) -> PricedSchedule:
    """The exact recursion of the module docstring. `times` [L, N] step seconds (inf: infeasible);
    `run_of` [N] each step's pricing point (`trace`: its run, or its own step in a run that
    prefills); `link_s`, `cost_s` [R, L, L] per point and (from, to) pair (inf cost: not allowed;
    the diagonal is never read); `release_s` [N] the earliest each step starts
    (−inf: any time; None: no releases), the clock starting at `start_s` (busy_s is then the
    makespan, the end less `start_s`)."""
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
    rel = None
    if release_s is not None:
        rel = np.asarray(release_s, dtype=np.float64).tolist()
        # floor[a][b][j]: the latest a switch decided at j can reach its commit whatever the time it
        # was decided (the releases in [j, commit) and the steps after them): cum_a[j'] + the range
        # max of r_m - cum_a[m] over [j, j'), by a sparse table; -inf where the range is empty
        floor = np.full((n_l, n_l, n), -_INF)
        idx = np.arange(n)
        for a in range(n_l):
            q = np.asarray(release_s, dtype=np.float64) - cum[a, :n]
            table = [q]
            w = 1
            while 2 * w <= n:
                prev = table[-1]
                table.append(np.maximum(prev[:-w], prev[w:]))
                w *= 2
            for b in range(n_l):
                if a == b:
                    continue
                hi = commit[a, b]
                length = np.minimum(hi, n) - idx
                ok = length > 0
                lvl = np.zeros(n, dtype=np.int64)
                lvl[ok] = np.floor(np.log2(length[ok])).astype(np.int64)
                out = np.full(n, -_INF)
                for k in np.unique(lvl[ok]):
                    sel = ok & (lvl == k)
                    lo_i, hi_i = idx[sel], np.minimum(hi, n)[sel] - (1 << int(k))
                    out[sel] = np.maximum(table[k][lo_i], table[k][hi_i])
                floor[a, b] = np.where(ok, out + cum[a, np.minimum(hi, n)], -_INF)
        floorl = floor.tolist()
    v = np.full((n_l, n + 1), _INF)
    v[:, 0] = np.where(finite[:, 0], start_s, _INF) if n else start_s
    par = np.full((n_l, n + 1, 2), -1, dtype=np.int64)  # (from layout, from boundary); -1: a stay / the start
    vl = v.tolist()
    cuml = cum.tolist()
    badl = bad.tolist()
    tl = times.tolist()
    pairs = [(a, b) for a in range(n_l) for b in range(n_l) if a != b]
    for j in range(n + 1):
        # NOTE: a move with no link commits at the boundary it is decided at, and the layout it lands
        # in may be one whose moves were already relaxed at j: the pass repeats until no such landing
        # improves (a chain of instant moves, at most L long). Once, the later pairs were skipped and a
        # schedule 0.5 % dearer than the best was returned (found by the brute force with releases)
        again = j < n
        while again:
            again = False
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
                x = va + cuml[a][jj] - cuml[a][j]
                if rel is not None:
                    fl = floorl[a][b][j]
                    if fl > x:
                        x = fl
                x += c
                if x < vl[b][jj]:
                    vl[b][jj] = x
                    par[b, jj] = (a, j)
                    if jj == j:
                        again = True
        if j == n:
            break
        for a in range(n_l):
            va = vl[a][j]
            if va < _INF and tl[a][j] < _INF:
                if rel is not None and rel[j] > va:
                    va = rel[j]
                x = va + tl[a][j]
                if x < vl[a][j + 1]:
                    vl[a][j + 1] = x
                    par[a, j + 1] = (-1, -1)
    end = [vl[a][n] for a in range(n_l)]
    last = int(np.argmin(end))
    busy = end[last] - start_s
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
    """(times [L, N], price_of [N], link_s [P, L, L], cost_s [P, L, L]) of a recorded trajectory:
    every step repriced in every layout (module docstring), every switch planned at a pricing point:
    each run's start, and each step of a run that prefills (its prompts' KV grows by a chunk a
    step: a move decided at the run's last chunk carries what the earlier ones wrote)."""
    info, bpt, page = tables.info, tables.kv_bytes_per_token, float(tables.page_tokens)
    slack = float(tables.request_slack_tokens)
    extra = np.asarray(info.extra_slack_tokens, dtype=np.float64)
    share = np.asarray(info.group_share, dtype=np.float64)
    pool = np.asarray(info.kv_pool_bytes, dtype=np.float64)
    groups = np.asarray(info.owner_groups, dtype=np.int64)
    n_l = len(tables.layouts)
    usable = [i for i in range(n_l) if pool[i] > 0]
    sim = SimExecutor(tables)
    cols, price_of = [], []
    links_l, costs_l = [], []
    held = held_kv(rec)
    pre = prefilling_kv(rec)
    for r_i, r in enumerate(rec.runs):
        k = r.prefill_tokens.shape[0]
        b = int(r.context_tokens.size)
        ctx_d, own_d = held[r_i]
        # feasibility as the free oracle's (executor/oracle.py: context + a page each), of the KV held
        need = ctx_d + page
        per_owner = np.bincount(own_d, weights=need, minlength=tables.ranks) if ctx_d.size else np.zeros(tables.ranks)
        fits = np.array([(float(need.sum()) if groups[lay] == 1 else float(per_owner.reshape(groups[lay], -1)
                                                                             .sum(axis=1).max())) * share[lay] * bpt
                         <= pool[lay] for lay in range(n_l)])
        t = np.full((n_l, k), _INF)
        ctx_run, own_run = r.decoding(tables.ranks)  # the decoders that ran (the free oracle's NOTE)
        for lay in usable:
            if not fits[lay] and lay != r.layout:
                continue
            t[lay] = np.asarray(sim.run_steps(StepBatch(lay, ctx_run, own_run, np.arange(own_run.size)),
                                              r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
        cols.append(t)
        points = pre[r_i] if pre is not None else [(np.zeros(0), np.zeros(0, dtype=np.int64))]
        first = len(links_l)
        price_of.append(first + np.minimum(np.arange(k), len(points) - 1))
        n_row = min(b, tables.base_s.shape[0] - 1)
        for s_i, (pfx, own_p) in enumerate(points):
            # the KV held at the point: the decoders' (grown a token a step that ran) and the prompts
            # prefilled so far (`prefilling_kv`): a move carries both
            ctx_h = np.concatenate([ctx_d + s_i if b else ctx_d, pfx]) if pfx.size else (ctx_d + s_i if b else ctx_d)
            own_h = np.concatenate([own_d, own_p]) if pfx.size else own_d
            b_h = int(ctx_h.size)
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
            busy_b = (busy * bpt).tolist()
            link = np.full((n_l, n_l), _INF)
            cost = np.full((n_l, n_l), _INF)
            for a in usable:
                step_a = float(t[a, s_i]) if k and np.isfinite(t[a, s_i]) else 0.0
                net = float(tables.base_s[n_row, a, NET_BYTES]) / step_a if step_a > 0 else 0.0
                for c in usable:
                    if a == c:
                        continue
                    p = plan_transition(tables, a, c, total * bpt, busy_b, b_h, step_a, net)
                    if p.feasible:
                        link[a, c] = p.link_s
                        cost[a, c] = p.cost_s
            links_l.append(link)
            costs_l.append(cost)
    times = np.concatenate(cols, axis=1) if cols else np.zeros((n_l, 0))
    runs = np.concatenate(price_of) if price_of else np.zeros(0, dtype=np.int64)
    links = np.array(links_l) if links_l else np.zeros((0, n_l, n_l))
    costs = np.array(costs_l) if costs_l else np.zeros((0, n_l, n_l))
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


def prefilling_kv(rec: RecordingExecutor) -> list[list[tuple[np.ndarray, np.ndarray]]] | None:
    """Per run, its pricing points: [(prefix tokens [P], owners [P])] of the requests whose prefill
    has begun and who don't decode yet — at its first step, and for a run that prefills at each of
    its steps: what each has prefilled so far (the recorded prefill pieces), on the owner it
    decodes on later (0 if it never does). None where a run was recorded without its pieces or
    request ids."""
    runs = rec.runs
    if any(r.prefill_request_ids is None or r.prefill_request_tokens is None or r.request_ids is None for r in runs):
        return None
    owner: dict[int, int] = {}
    for r in reversed(runs):  # each request's first decoding owner
        owner.update(zip(r.request_ids.tolist(), r.owners.tolist()))
    progress: dict[int, float] = {}
    out = []

    def snap() -> tuple[np.ndarray, np.ndarray]:
        return (np.fromiter(progress.values(), dtype=np.float64, count=len(progress)),
                np.fromiter((owner.get(q, 0) for q in progress), dtype=np.int64, count=len(progress)))

    for r in runs:
        for q in r.request_ids.tolist():
            progress.pop(q, None)  # it decodes: the run's own decoders hold its KV
        points = [snap()]
        steps = list(zip(r.prefill_request_ids, r.prefill_request_tokens))
        prefills = any(ids.size for ids, _ in steps)
        for j, (ids, tok) in enumerate(steps):
            for q, x in zip(ids.tolist(), tok.tolist()):
                progress[q] = progress.get(q, 0.0) + x
            if prefills and j + 1 < len(steps):
                points.append(snap())
        out.append(points)
    return out


def priced_best(tables: StepTimeTable, rec: RecordingExecutor, arrival_s=None) -> PricedSchedule:
    """The priced oracle's schedule over `rec`'s trajectory (module docstring); with `arrival_s`
    [requests] by request id, each step held to its requests' arrivals and busy_s the makespan."""
    rel = rec.release_s(arrival_s) if arrival_s is not None and len(arrival_s) else None
    if rel is None:
        return best_schedule(*trace(tables, rec))
    return best_schedule(*trace(tables, rec), release_s=rel, start_s=float(np.min(arrival_s)))
