"""The running set's expected KV peak, from the observed output lengths (no per-request prediction).

A running request has produced `a` tokens; by the observed distribution of completed output
lengths (the sliding window the boost ordering keeps, `LengthStats`), it is still running `s`
steps from now with probability N(a + s) / N(a), N(x) = how many observed lengths exceed x, and
then holds its context + s tokens. The running set's expected KV `s` steps ahead is the sum of
those, and its expected peak is the largest over a geometric grid of `s` (the set grows while its
requests run and shrinks as they finish). A request longer than every observed one gets the
survival whose mean residual life is its attained length (the Lindy rule
`LengthStats.expected_remaining` uses): a Pareto tail of index 2, P(still running at s) =
(a / (a + s))², under which its expected KV never rises above its current one (c ≥ a): it is as
likely to finish as to grow. NOTE: a deterministic "runs as long again" doubles every such
request's KV, and in a batch that started together every running request is past every observed
one: the projection then saw the running set double and moved DP → DOP at 262 s on the
calibrated DS-V3.2 shrinking batch, where DP stays best (1.051× of fixed DP instead of 1.086×).

What the policy reads: the peak's growth over the current KV, for all ranks and for the busiest
owner (the peak of each owner's requests, owners kept), so a layout's pool can be compared with
what the running set will need, not only what it holds now.

Does not: count admissions or preemptions to come, or see the unobserved part of the
distribution: in a batch that started together the window holds only lengths shorter than what
every running request has attained, so it projects no growth there; it sees growth where running
requests are younger than the completed ones (an open workload, requests admitted later). It is
zero before the first completion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import numpy as np

from runtime_policy.kv_ledger import group_counts
from runtime_policy.waiting import sum_as_numpy

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop

# NOTE: steps ahead at which the expected KV is evaluated: doubling from 16 to 2^20 (17 points),
# which covers any output length a server runs; the peak is read to within the grid's factor of 2
# in time, where the expected KV changes slowly (it is a sum over many requests).
HORIZON_STEPS = 16.0 * 2.0 ** np.arange(17)
PROJECTION_EVERY_STEPS = 256  # NOTE: the policy's cooldown scale: the serving loop refreshes the projection this often (decode steps)


def expected_kv_peak_growth(sorted_lengths: np.ndarray, context_tokens: np.ndarray, attained_tokens: np.ndarray,
                            owners: np.ndarray, ranks: int) -> tuple[float, float]:
    """(growth of all ranks' KV, growth of the busiest owner's) from now to the expected peak, in
    tokens, both ≥ 0. Arrays [B]: each running request's context, output produced so far and owner
    rank; `sorted_lengths` [n] the observed output lengths, ascending (n = 0: no projection, 0, 0)."""
    n = sorted_lengths.shape[0]
    b = context_tokens.shape[0]
    if n == 0 or b == 0:
        return 0.0, 0.0
    c = np.asarray(context_tokens, dtype=np.float64)
    a = np.asarray(attained_tokens, dtype=np.float64)
    # beyond the longest observed length only requests past it still run, and their expected KV
    # only falls (module docstring): the grid stops there
    s = HORIZON_STEPS[: int(np.searchsorted(HORIZON_STEPS, float(sorted_lengths[-1]))) + 1, None]  # [G, 1]
    alive0 = n - np.searchsorted(sorted_lengths, a, side="right")  # [B] observed lengths above a
    alive = n - np.searchsorted(sorted_lengths, a[None, :] + s, side="right")  # [G, B]
    with np.errstate(divide="ignore", invalid="ignore"):
        lindy = np.maximum(a, 1.0)
        p = np.where(alive0 > 0, alive / alive0, (lindy / (lindy + s)) ** 2)  # [G, B] P(still running)
    kv = (c[None, :] + s) * p  # [G, B]
    g = kv.shape[0]
    idx = (np.arange(g)[:, None] * ranks + np.asarray(owners, dtype=np.int64)[None, :]).ravel()
    per_owner = np.bincount(idx, weights=kv.ravel(), minlength=g * ranks).reshape(g, ranks)  # [G, T]
    now_owner = np.bincount(owners, weights=c, minlength=ranks)  # [T]
    total_now = float(c.sum())
    total_peak = max(float(per_owner.sum(axis=1).max()), total_now)
    owner_peak = max(float(per_owner.max()), float(now_owner.max()))
    return total_peak - total_now, owner_peak - float(now_owner.max())


def project_growth(loop: "ServingLoop", total: float) -> None:
    """Refresh a serving loop's projected KV growth for its policy (every PROJECTION_EVERY_STEPS decode steps)."""
    dec, state = loop.dec, loop.state
    loop.proj_at = dec.dsteps + PROJECTION_EVERY_STEPS
    lens = loop.ordering.stats.sorted_lengths
    # NOTE: no request's expected KV grows by more than the longest observed length
    # (projection.py), so below this bound the running set can't outgrow the layout it runs
    # in, and the projection (~10 µs per 100 requests) is skipped: none is reported
    longest = float(lens[-1]) if lens.shape[0] else 0.0
    g = loop.groups[loop.layout]
    if g > 1:
        bound = loop.kv.busiest(loop.layout) + (max(group_counts(dec.per_owner, g)) + len(loop.prefill_q)) * longest
    else:
        bound = loop.kv.busiest(loop.layout) + (dec.b + len(loop.prefill_q)) * longest
    if lens.shape[0] and bound > loop.cap[loop.layout]:
        state.kv_growth_tokens, state.owner_kv_growth_tokens = _kv_growth(loop)
    else:
        state.kv_growth_tokens = state.owner_kv_growth_tokens = 0.0

def _kv_growth(loop: "ServingLoop") -> tuple[float, float]:
    """The running set's expected KV peak over its KV now (projection.py), all and busiest owner."""
    dec = loop.dec
    ids, c0, own = dec.arrays()
    ctx = c0 + dec.dsteps
    if loop.prefill_q:
        q = np.asarray(loop.prefill_q, dtype=np.int64)
        q_own = np.array([loop.owner[i] for i in loop.prefill_q], dtype=np.int64)
        ids, ctx, own = np.concatenate([ids, q]), np.concatenate([ctx, loop.ctxf[q]]), np.concatenate([own, q_own])
    return expected_kv_peak_growth(loop.ordering.stats.sorted_lengths, ctx, ctx - loop.inp[ids], own, loop.T)


# ---- the loads the throughput rule compares layouts on (issue 27) ---------------------------
# NOTE: it compared them on the batch of the moment (and the horizon's prefill statistics), and
# made switches the run never repaid:
# - DeepSeek-V3.2 chat, 8 x H200 (the sweep's prior): DOP -> DPTP at 144 s, as the backlog's queue
#   emptied 44 s after the last arrival: 308 decoding, DPTP predicted 4 % faster on a prefill share
#   of 34 % (the backlog's admissions); 5,306 steps of drain followed, no prefill, 37 decoding on
#   average, where DOP is 4 % faster (the run: 0.962x fixed DOP);
# - GLM-5 longprompt, 8 x B200: TP <-> CP on gains of ~5 % that turn on whether 12 or 2 requests
#   decode at the moment, which changes with every arrival.
# So the caller keeps two loads (HorizonLoad) and the throughput rule prices them (policy.py):
# - the horizon's: the batch averaged over the policy's horizon (stats_half_life_steps, as the
#   prefill statistics), with its spread and the recent prefill share's: the load as it has been;
# - the window's: the batch over the window the switch must repay in
#   (LayoutPolicy.payback_window_steps), projected from what the policy already knows: the running
#   requests' survival by the observed output lengths (as the KV peak above), the waiting queue
#   refilling the batch as it drains (up to its size now: a queue means the batch is at its limit),
#   arrivals at the recent rate per decode step; and the prefill the queue and those arrivals bring.
# A candidate must be faster by min_gain_fraction at the horizon's average, at both ends of its
# range (average ± spread: a layout that wins at one end only is a tie; the 12-or-2 flips) and on the
# window (the drain). Two exceptions, where the past is no guide: a closed batch (no arrival
# expected within the horizon: a rollout) and a falling load (the batch now and the window's both
# below the range: a drain) are priced on the window alone, which foresees them from requests
# already running. A rising load is not: it rests on arrivals going on, which a burst's don't.
# NOTE: the rule is ours. No engine switches layouts at run time (SGLang, vLLM and TensorRT-LLM fix
# the layout at launch, so their schedulers have no such rule), and the published switching system
# prices the batch of the moment. Acting only where every estimate of the load agrees is the robust
# (max-min) form of a decision under several models of the load; the window's projection is the
# certainty-equivalent step of model-predictive control (one state projected, priced once).
HORIZON_POINTS = 16  # the window's grid (midpoint rule)
PUBLISH_EVERY_STEPS = 32  # the horizon's average written this often (it moves 1.1 % of the way to the batch now in 32 steps at a 2048-step half-life)
_WEIGHTS_KEPT = 257  # HorizonLoad.weights: folds of up to 256 steps
ARRIVAL_HALF_LIFE_S = 10.0  # = the payback horizon's default: the next window's arrivals are the last window's


class HorizonLoad:
    """The serving loop's two loads for the throughput rule (the notes above): the horizon's
    average folded in at every consultation and written every PUBLISH_EVERY_STEPS steps
    (`average`, `publish`), the window's projection every PROJECTION_EVERY_STEPS decode steps and
    whenever the waiting queue empties or fills (`refresh`); each write bumps
    `PolicyState.load_version`."""

    def __init__(self, policy, t0: float, half_life_steps: float, loop_arrived: int = 0):
        self.policy = policy
        self.half_life = half_life_steps
        # the weight of a fold of k steps, 1 − 0.5^(k / half-life), for the runs' usual k (a run is at
        # most LoopConfig.max_run_steps; the weight was a power per consultation)
        self.weights = [1.0 - 0.5 ** (k / half_life_steps) for k in range(_WEIGHTS_KEPT)] if half_life_steps > 0 else []
        self.next_at = 0
        self.queued = None
        self.t = t0
        self.arrived = loop_arrived
        self.dsteps = 0
        # exponentially weighted arrivals, prompt tokens, seconds and decode steps
        self.num = self.tok = self.den = self.den_steps = 0.0
        self.at_step = 0
        self.publish_at = 0
        self.last = (0, 0.0, 0.0, 0.0)  # the batch of the last consultation, and the recent prefill share then
        self.f = self.f2 = 0.0  # weighted sums of the recent prefill share and its square
        self.b = self.b2 = self.s2 = self.s1 = self.norm = 0.0  # weighted sums (b2: of b²), and the sum of the weights
        # whether the load is open: an arrival expected within the horizon's half-life at the recent
        # rate; none (a closed batch): the horizon's average is not priced, the window's projection
        # foresees all there is
        self.arrivals_expected = True

    @staticmethod
    def for_loop(loop: "ServingLoop"):
        """One for a policy that reads the loads (`reads_horizon_load` and knobs.horizon_load), else False."""
        p = loop.policy
        k = getattr(p, "knobs", None)
        if not getattr(p, "reads_horizon_load", False) or not getattr(k, "horizon_load", False):
            return False
        # NOTE: the requests there at the start are the first batch, not a rate of arrivals
        return HorizonLoad(p, loop.t, float(k.stats_half_life_steps), loop.nxt)

    def average(self, loop: "ServingLoop", b: int, s2: float, s1: float) -> None:
        """Fold the batch of the steps since the last consultation (the batch the policy was asked
        about then) into the horizon's average, and keep this one for the next."""
        k = loop.steps - self.at_step
        if k > 0:
            self.at_step = loop.steps
            # NOTE: weights normalised by their sum, so the average starts at the first batch, not
            # biased to the zeros it starts from
            ws = self.weights
            w = ws[k] if k < len(ws) else 1.0 - 0.5 ** (k / self.half_life)
            self.norm += w * (1.0 - self.norm)
            last = self.last
            self.b += w * (last[0] - self.b)
            self.b2 += w * (last[0] * last[0] - self.b2)
            self.s2 += w * (last[1] - self.s2)
            self.s1 += w * (last[2] - self.s1)
            self.f += w * (last[3] - self.f)
            self.f2 += w * (last[3] * last[3] - self.f2)
        self.last = (b, s2, s1, loop.state.prefill_step_fraction)
        if loop.steps >= self.publish_at:
            self.publish(loop)

    def publish(self, loop: "ServingLoop") -> None:
        """Write the horizon's average to the policy's state (every PUBLISH_EVERY_STEPS steps and
        with each window), with a snapshot of the prefill statistics, and bump `load_version`."""
        self.publish_at = loop.steps + PUBLISH_EVERY_STEPS
        st = loop.state
        st.load_version += 1
        if st.horizon_prefill_step_fraction >= 0.0:
            st.load_prefill = (st.horizon_prefill_step_fraction, st.horizon_prefill_tokens_per_step,
                               st.horizon_prefill_context_tokens, st.horizon_prefill_owner_share)
        else:
            st.load_prefill = (st.prefill_step_fraction, st.prefill_tokens_per_step, st.prefill_context_tokens,
                               st.prefill_owner_share)
        if not self.arrivals_expected or not self.norm:
            st.horizon_context_requests = -1
            return
        mean = self.b / self.norm
        st.horizon_context_requests = int(mean + 0.5)
        st.horizon_group_tokens = self.policy.group_tokens(st.horizon_context_requests, self.s2 / self.norm)
        var = self.b2 / self.norm - mean * mean
        st.horizon_context_spread = math.sqrt(var) if var > 0.0 else 0.0
        f = self.f / self.norm
        var = self.f2 / self.norm - f * f
        st.horizon_prefill_spread = math.sqrt(var) / f if var > 0.0 and f > 0.0 else 0.0
        st.horizon_context_sum_tokens, st.horizon_context_capped_sum_tokens = self.s2 / self.norm, self.s1 / self.norm

    def arrivals(self, loop: "ServingLoop") -> tuple[float, float, float]:
        """(requests and prompt tokens arriving per decode step, seconds per decode step), each
        weighted by ARRIVAL_HALF_LIFE_S. NOTE: per decode step, as the projection counts, and
        measured so: the clock between decode steps (prefill steps, idle time) is in them; the
        last step's duration (the loop's estimate) undercounted a chat backlog's arrivals by half."""
        dt = loop.t - self.t
        if dt > 0:
            new = loop.nxt - self.arrived
            decay = 0.5 ** (dt / ARRIVAL_HALF_LIFE_S)
            tok = float(np.sum(loop.inp[self.arrived: loop.nxt])) if new else 0.0
            steps = loop.dec.dsteps - self.dsteps
            self.num, self.tok = self.num * decay + new, self.tok * decay + tok
            self.den, self.den_steps = self.den * decay + dt, self.den_steps * decay + steps
            self.t, self.arrived, self.dsteps = loop.t, loop.nxt, loop.dec.dsteps
        if self.den_steps <= 0:
            return 0.0, 0.0, 0.0
        return self.num / self.den_steps, self.tok / self.den_steps, self.den / self.den_steps

    def refresh(self, loop: "ServingLoop", waiting: np.ndarray) -> None:
        """The window's projection, into `PolicyState.window_*`."""
        dec, state = loop.dec, loop.state
        self.next_at = dec.dsteps + PROJECTION_EVERY_STEPS
        self.queued = waiting.shape[0] > 0
        rate, tok_rate, step_s = self.arrivals(loop)
        lens = loop.ordering.stats.sorted_lengths
        self.arrivals_expected = rate * self.half_life >= 1.0 if step_s > 0 else True
        if not lens.shape[0] or not step_s > 0:
            state.window_context_requests = -1  # nothing observed yet: the batch of the moment
            state.window_prefill_scale = 1.0
            self.publish(loop)
            return
        window = self.policy.payback_window_steps(step_s)
        ids, c0 = dec.id_contexts()
        ctx = c0 + dec.dsteps
        if loop.prefill_q:
            q = np.asarray(loop.prefill_q, dtype=np.int64)
            ids, ctx = np.concatenate([ids, q]), np.concatenate([ctx, loop.ctxf[q]])
        topk = loop.topk if loop.capped else math.inf
        waiting_tok = float(waiting.sum()) if waiting.shape[0] else 0.0
        join_prompt = waiting_tok / waiting.shape[0] if waiting.shape[0] else (tok_rate / rate if rate > 0 else 0.0)
        b, s2, s1 = horizon_batch(lens, ctx, ctx - loop.inp[ids], window, waiting.shape[0], rate, join_prompt, topk)
        state.window_context_requests = b
        state.window_group_tokens = self.policy.group_tokens(b, s2)
        state.window_context_sum_tokens, state.window_context_capped_sum_tokens = s2, s1
        # the prefill the window will see: the queue's prompts and the arrivals', against the
        # horizon statistics' rate (which a backlog may have set); never more than that rate
        h_tok = state.horizon_prefill_tokens_per_step if state.horizon_prefill_step_fraction >= 0 else 0.0
        past = h_tok * window
        state.window_prefill_scale = min(1.0, (waiting_tok + tok_rate * window) / past) if past > 0 else 1.0
        self.publish(loop)


def horizon_batch(sorted_lengths: np.ndarray, context_tokens: np.ndarray, attained_tokens: np.ndarray, window_steps: float,
                  waiting: int, arrivals_per_step: float, join_prompt_tokens: float, topk: float
                  ) -> tuple[int, float, float]:
    """(requests, Σ context, Σ min(context, top-k)) of the decode batch averaged over the next
    `window_steps` steps: each running request while it survives (observed lengths beyond its
    attained output, the Lindy tail past the longest, as `expected_kv_peak_growth`), plus the
    requests that join: arrivals at `arrivals_per_step`, each surviving from 0 by the observed
    lengths, and the `waiting` queue refilling what the running set frees, up to its size now.

    NOTE: the numbers of `horizon_batch_reference` (the formula over whole arrays), bit for bit,
    at a fraction of its cost (the serving loop refreshes it every PROJECTION_EVERY_STEPS decode
    steps; it was ~9 % of a closed batch's serve): the survival sums over the running requests in
    numpy, each branch of the survival only where it applies and Σ min(context, top-k) from Σ
    context where no context reaches top-k (elementwise the same operations, summed as numpy sums
    a row); the window's 16 points in plain floats, summed in numpy's order (`sum_as_numpy`), where
    ~15 numpy calls on 16 values cost more than their arithmetic. An empty window of lengths, or a
    window that is not a finite number of steps > 0, takes the reference."""
    n = sorted_lengths.shape[0]
    b0 = context_tokens.shape[0]
    dv = window_steps / HORIZON_POINTS
    if not n or not 0.0 < dv < math.inf:
        return horizon_batch_reference(sorted_lengths, context_tokens, attained_tokens, window_steps, waiting,
                                       arrivals_per_step, join_prompt_tokens, topk)
    s = _MIDPOINTS * dv  # [K] the window's midpoints (= (arange(K) + 0.5) * dv), increasing
    if b0:
        c = np.asarray(context_tokens, dtype=np.float64)
        a = np.asarray(attained_tokens, dtype=np.float64)
        alive0 = n - np.searchsorted(sorted_lengths, a, side="right")  # [B]
        col = s[:, None]
        alive_n = int(np.count_nonzero(alive0))
        if alive_n == b0:  # every request below the longest observed length: the observed survival
            p = (n - np.searchsorted(sorted_lengths, a[None, :] + col, side="right")) / alive0  # [K, B]
        elif not alive_n:  # every request past it: the Lindy tail
            lindy = np.maximum(a, 1.0)
            p = lindy / (lindy + col)
            p *= p  # = ** 2 (numpy squares: one product)
        else:
            pos = alive0 > 0
            p = np.empty((HORIZON_POINTS, b0))
            p[:, pos] = (n - np.searchsorted(sorted_lengths, a[pos][None, :] + col, side="right")) / alive0[pos]
            lindy = np.maximum(a[~pos], 1.0)
            tail = lindy / (lindy + col)
            tail *= tail
            p[:, ~pos] = tail
        cs = c + col  # [K, B] each context over the window
        surv = p.sum(axis=1).tolist()  # [K]
        # NOTE: fl(c + s) is monotone in both: below top-k at the largest context and the window's
        # end, min(cs, top-k) is cs everywhere; at or past it from the smallest context, top-k
        if float(c.max()) + float(s[-1]) <= topk:
            np.multiply(p, cs, out=cs)
            surv_s1 = surv_s2 = cs.sum(axis=1).tolist()
        elif float(c.min()) >= topk:
            surv_s1 = (p * topk).sum(axis=1).tolist()
            np.multiply(p, cs, out=cs)
            surv_s2 = cs.sum(axis=1).tolist()
        else:
            surv_s1 = (p * np.minimum(cs, topk)).sum(axis=1).tolist()
            np.multiply(p, cs, out=cs)
            surv_s2 = cs.sum(axis=1).tolist()
    else:
        surv = surv_s2 = surv_s1 = _ZEROS_K
    # a request joining at 0 survives v steps with S0(v) = share of observed lengths above v; the
    # arrivals by s still running: rate × ∫_0^s S0, their mean age ∫ v S0 / ∫ S0 (the reference's
    # numpy expressions point by point: cumulative sums in order, np.maximum / np.minimum as
    # spelled below, NaN passed through)
    above = np.searchsorted(sorted_lengths, s, side="right").tolist()
    wq = float(waiting)
    tot_b, tot_s2, tot_s1 = [], [], []
    run = run_s = 0.0
    k = 0
    for x, idx in zip(s.tolist(), above):
        f = (n - idx) / n
        fx = f * x
        if k:
            run += f
            run_s += fx
        else:
            run, run_s = f, fx
        cum = run * dv
        age = run_s * dv / (cum if cum > 1e-12 or cum != cum else 1e-12)
        arr = arrivals_per_step * cum
        free = b0 - surv[k] - arr
        room = free if free > 0.0 or free != free else 0.0  # = np.maximum(free, 0.0)
        joins = arr + (wq if wq <= room else room)  # = + np.minimum(wq, room)
        jctx = join_prompt_tokens + age
        tot_b.append(surv[k] + joins)
        tot_s2.append(surv_s2[k] + joins * jctx)
        tot_s1.append(surv_s1[k] + joins * (topk if jctx > topk else jctx))
        k += 1
    b = sum_as_numpy(tot_b) / HORIZON_POINTS
    s2 = sum_as_numpy(tot_s2) / HORIZON_POINTS
    s1 = sum_as_numpy(tot_s1) / HORIZON_POINTS
    return max(int(round(b)), 1), s2, s1


_MIDPOINTS = np.arange(HORIZON_POINTS) + 0.5
_ZEROS_K = [0.0] * HORIZON_POINTS


def horizon_batch_reference(sorted_lengths: np.ndarray, context_tokens: np.ndarray, attained_tokens: np.ndarray, window_steps: float,
                  waiting: int, arrivals_per_step: float, join_prompt_tokens: float, topk: float
                  ) -> tuple[int, float, float]:
    """`horizon_batch` (its docstring says what is projected) as the formula over whole arrays:
    the reference it is held equal to (tests/runtime_policy/test_horizon_batch_same.py)."""
    n = sorted_lengths.shape[0]
    b0 = context_tokens.shape[0]
    s = (np.arange(HORIZON_POINTS) + 0.5) * (window_steps / HORIZON_POINTS)  # [K] the window's midpoints
    c = np.asarray(context_tokens, dtype=np.float64)
    if b0:
        a = np.asarray(attained_tokens, dtype=np.float64)
        alive0 = n - np.searchsorted(sorted_lengths, a, side="right")  # [B]
        alive = n - np.searchsorted(sorted_lengths, a[None, :] + s[:, None], side="right")  # [K, B]
        with np.errstate(divide="ignore", invalid="ignore"):
            lindy = np.maximum(a, 1.0)
            p = np.where(alive0 > 0, alive / np.maximum(alive0, 1), (lindy / (lindy + s[:, None])) ** 2)
        cs = c[None, :] + s[:, None]
        surv = p.sum(axis=1)  # [K]
        surv_s2 = (p * cs).sum(axis=1)
        surv_s1 = (p * np.minimum(cs, topk)).sum(axis=1)
    else:
        surv = surv_s2 = surv_s1 = np.zeros(HORIZON_POINTS)
    # a request joining at 0 survives v steps with S0(v) = share of observed lengths above v; the
    # arrivals by s still running: rate × ∫_0^s S0, their mean age ∫ v S0 / ∫ S0
    dv = window_steps / HORIZON_POINTS
    s0 = (n - np.searchsorted(sorted_lengths, s, side="right")) / n  # [K]
    cum = np.cumsum(s0) * dv
    age = np.cumsum(s0 * s) * dv / np.maximum(cum, 1e-12)
    arr = arrivals_per_step * cum
    joins = arr + np.minimum(float(waiting), np.maximum(b0 - surv - arr, 0.0))
    jctx = join_prompt_tokens + age
    b = float(np.mean(surv + joins))
    s2 = float(np.mean(surv_s2 + joins * jctx))
    s1 = float(np.mean(surv_s1 + joins * np.minimum(jctx, topk)))
    return max(int(round(b)), 1), s2, s1
