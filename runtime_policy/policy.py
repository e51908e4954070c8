"""The layout policy: compiled once, asked "stay or switch?" every step.

`LayoutPolicy.compile(dep, ...)` validates its knobs and builds the step-time tables (slow, once).
`decide(state)` reads the batch state — per-request context lengths, per-rank KV tokens, free KV
per rank, the waiting queue, the current layout, a switch in flight — and answers with a small
frozen `Decision` carrying an enum `Reason`. It never raises (anything unexpected is a
`CANT_DECIDE` stay), logs nothing, and reuses preallocated buffers; stay decisions are built at
compile time, so the common answer allocates nothing.

Rules, in order:
1. capacity — the waiting queue's head can't be admitted (KV), the running set no longer fits, or
   its expected KV peak (`PolicyState.kv_growth_tokens`: the running requests' expected growth,
   from the observed output lengths, runtime_policy/projection.py) outgrows the current layout.
   Each layout is then priced by the decode tokens per second it sustains at the batch its KV
   would hold — the share of the running set its pool holds at that peak, or all of it plus the
   waiting requests its spare room admits — with the observed prefill scaled to that batch
   (`_sustained_rates`). Switch to the best if it beats the current layout's rate by
   `min_gain_fraction` and the time saved over the dwell (at least the backlog's turnover) exceeds
   `(1 + margin) ×` the move's cost; a move that only the projection asks for also waits out the
   cooldown (SWITCH_PROJECTED). A move between TP and CP whose memory does not fit now may shed
   KV first (`Decision.shed_kv_tokens`: the server preempts that much and admits nothing until the
   commit; its recompute is in the cost). Blocked, with no such move: wait for KV (STAY_KV_WAIT).
   If the running set no longer fits, the best-priced layout that holds it, whatever the gain.
   A pricing that found no move stands for `REPRICE_EVERY_STEPS` steps;
2. throughput — the fastest layout whose KV fits with headroom, which admits at least what the
   current one admits and holds the running set's expected peak if the current one does; switch
   only if (a) it is faster by `min_gain_fraction`, (b) the last switch is `cooldown_steps` old,
   (c) the move's memory fits, and (d) the time saved over the expected dwell, less the steps spent
   in the old layout while the move runs, exceeds `(1 + margin) × (interference + commit stall)`.
Step times per layout are those of the current decode batch, blended with a prefill chunk of the
observed mean size and prefix (on one owner for DP/DOP) in the observed share of steps that run one — without it a prefill-heavy (long-prompt) load looks like its decode batch alone, where
owner layouts win, while its chunks run several times slower on one owner.
The expected dwell is prediction-free: `dwell_fraction` × a running mean of completed requests'
output lengths (the batch turns over on that scale), clamped to [min, max] steps.

Does not: order requests, move state or run steps (ordering.py, the executor, loop.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from runtime_policy.decision import Decision, PolicyKnobs, PolicyState, Reason
from runtime_policy.tables import LAYOUTS, StepTimeModel, StepTimeTable, compile_tables
from runtime_policy.transitions import max_fitting_kv_bytes, memory_fits, plan_transition

_add = np.add.reduce  # NOTE: ndarray.sum() adds a Python wrapper (~1 µs) per call
# NOTE: a capacity pricing that found no better layout stands for this many steps in the same
# layout (when the server keeps `PolicyState.step_index`): pricing calls the step tables again at
# other batches (~10–20 µs), and the loop asks at every membership change. 64 is the loop's own
# bound on how long one answer stands (LoopConfig.max_run_steps), and far below a move's dwell.
REPRICE_EVERY_STEPS = 64
CHUNK_STEP = 1.03  # the prefill blend's chunk sizes, rounded to 3 % steps (cached rows)
LOG_CHUNK_STEP = math.log(CHUNK_STEP)


def _as_list(x) -> list:
    """A [T] or [W] state field as a list of floats (the loop hands lists; other callers arrays)."""
    return x if type(x) is list else x.tolist()


def _batch_requests(state: PolicyState) -> int:
    n = state.context_requests
    return n if n >= 0 else state.context_tokens.shape[0]


@dataclass
class LayoutPolicy:
    tables: StepTimeTable
    knobs: PolicyKnobs = field(default_factory=PolicyKnobs)
    reads_kv_growth = True  # the loop fills PolicyState.kv_growth_tokens for it (projection.py)

    # ---- compile (slow, validated) ------------------------------------------------------------
    @classmethod
    def compile(cls, dep: Deployment, model: StepTimeModel | None = None, knobs: PolicyKnobs | None = None,
                max_prefill_tokens: int = 8192) -> "LayoutPolicy":
        knobs = knobs or PolicyKnobs()
        for name in ("margin", "min_gain_fraction", "kv_headroom_fraction", "dwell_fraction"):
            v = getattr(knobs, name)
            if not math.isfinite(v) or v < 0:
                raise SpecError(f"{name}={v} must be a finite number ≥ 0")
        if knobs.kv_headroom_fraction >= 1:
            raise SpecError(f"kv_headroom_fraction={knobs.kv_headroom_fraction} must be < 1")
        if not (0 < knobs.min_dwell_steps <= knobs.max_dwell_steps):
            raise SpecError(f"min_dwell_steps={knobs.min_dwell_steps} must be in (0, max_dwell_steps]")
        bad = [a for a in knobs.allowed if a not in LAYOUTS]
        if bad or not knobs.allowed:
            raise SpecError(f"allowed layouts {knobs.allowed} must be a non-empty subset of {', '.join(LAYOUTS)}")
        tables = compile_tables(dep, model, max_batch=knobs.max_batch, max_prefill_tokens=max_prefill_tokens)
        return cls(tables, knobs)

    def __post_init__(self) -> None:
        t, k = self.tables, self.knobs
        n = len(LAYOUTS)
        self._ok = [LAYOUTS[i] in k.allowed and t.info.kv_pool_bytes[i] > 0 for i in range(n)]
        self._pool = [float(x) for x in t.info.kv_pool_bytes]
        self._share = [float(x) for x in t.info.kv_total_share]
        self._owner = [bool(x) for x in t.info.is_owner]
        self._bpt = t.kv_bytes_per_token
        self._topk = t.topk
        self._stay = [[Decision(i, False, r) for r in Reason] for i in range(n)]
        self._buf = np.empty(k.max_batch + 1)
        # decode rows of the base table as nested Python lists
        self._n_base = k.max_batch + 1
        rows = t.base_rows_py  # NOTE: compiled once per table (a per-policy copy cost ~6 ms)
        self._base_py = rows[: self._n_base] if self._n_base <= len(rows) else t.base_s[: self._n_base].tolist()
        self._c1_py = t.c1_s.tolist()
        self._c2_py = t.c2_s.tolist()
        self._alpha, self._over = float(t.alpha), float(t.overhead_s)
        self._steps = [0.0] * n
        self._net = [0.0] * n
        assert n == 4 and t.c1_s.shape[1] == 4, "step_times_s unrolls 4 layouts × 4 resources"
        self._chunk = t.max_prefill_tokens
        self._knee = float(t.prefix_knee_tokens)
        self._page = int(t.page_tokens)
        self._row_cache: dict[int, list] = {}  # base_s rows by token count past _base_py, as Python floats
        self._chunk_cache: dict[tuple[int, int], list] = {}
        self._chunk_sizes: dict[int, int] = {}  # 1.03^e tokens, capped, by e
        self._spread = [i for i in range(n) if not self._owner[i]]
        self._owned = [i for i in range(n) if self._owner[i]]
        self._n_max = t.max_tokens
        self._dwell_steps = k.initial_dwell_steps
        self._mean_output = 0.0
        self._completed = 0
        self._max_batch = k.max_batch
        self._headroom_keep = 1.0 - k.kv_headroom_fraction
        self._dwell_fraction, self._dwell_lo, self._dwell_hi = k.dwell_fraction, k.min_dwell_steps, k.max_dwell_steps
        self._ranks = t.ranks
        self._priced_layout, self._priced_step = -1, -1  # the last capacity pricing (REPRICE_EVERY_STEPS)
        self._others = [tuple(i for i in range(n) if i != c) for c in range(n)]
        self._scratch = PolicyState(np.zeros(0), [0.0] * t.ranks, [0.0] * t.ranks, np.zeros(0))
        # seconds per prompt token of a full chunk in each layout (owner layouts: on one owner), the
        # price of prefilling again the KV a move sheds
        one = np.array([float(self._chunk)])
        self._prefill_s_per_token = [float(t.step_s(i, 0, one, np.zeros(1), np.zeros(1))[0]) / self._chunk
                                     for i in range(n)]
        self._max_fit_bytes = [[max_fitting_kv_bytes(t, a, c) if a != c else -1.0 for c in range(n)] for a in range(n)]

    # ---- running statistics (prediction-free dwell) ------------------------------------------
    def observe_completion(self, output_tokens: float) -> None:
        """Feed one finished request's output length (updates the expected dwell)."""
        self._completed += 1
        self._mean_output += (float(output_tokens) - self._mean_output) / self._completed
        d = self._dwell_fraction * self._mean_output  # clamped to [min, max] dwell as min(max(d, lo), hi)
        if self._dwell_lo > d:
            d = self._dwell_lo
        if self._dwell_hi < d:
            d = self._dwell_hi
        self._dwell_steps = d

    # ---- the hot path -------------------------------------------------------------------------
    def step_times_s(self, state: PolicyState) -> list[float]:
        """Predicted step seconds of the current batch in each layout, [4] in LAYOUTS order.

        NOTE: plain Python floats over precompiled nested lists: for 4 layouts × 4 resources this
        is several times faster than numpy calls on [4, 4] arrays (each costs ~1 µs to dispatch)."""
        b = _batch_requests(state)
        okv = _as_list(state.owner_kv_tokens) if b else None
        return self._step_times(state, b, max(okv) if b else 0.0, min(okv) if b else 0.0)

    def _step_times(self, state: PolicyState, b: int, own: float, own_min: float) -> list[float]:
        """`step_times_s` for a batch of `b` requests whose busiest and lightest ranks own `own` and
        `own_min` KV tokens. Decode terms and the prefill blend in one pass over the layouts (the
        blend as `_chunk_terms` describes it). NOTE: max over the 4 resources is spelled out as
        conditionals with max()'s semantics (the first, replaced by each greater one): the builtin
        call costs ~120 ns more, 10 times per call."""
        if b:
            if state.context_sum_tokens >= 0 and state.context_capped_sum_tokens >= 0:
                s2, s1 = float(state.context_sum_tokens), float(state.context_capped_sum_tokens)
            else:
                ctx = state.context_tokens
                s2 = float(_add(ctx))
                if self._topk < 1e17:
                    buf = self._buf[:b] if b <= self._buf.shape[0] else np.empty(b)
                    s1 = float(_add(np.minimum(ctx, self._topk, out=buf)))
                else:
                    s1 = s2
            if s2 > 0:
                frac, frac_min = own / s2, own_min / s2  # each = min(·, 1.0)
                if 1.0 < frac:
                    frac = 1.0
                if 1.0 < frac_min:
                    frac_min = 1.0
            else:
                frac = frac_min = 0.0
        else:
            s1 = s2 = frac = frac_min = 0.0
        rows = self._base_py[b if b < self._n_base else self._n_base - 1]
        out = self._steps
        net = self._net
        alpha, over = self._alpha, self._over
        c1, c2, owner = self._c1_py, self._c2_py, self._owner
        f = state.prefill_step_fraction
        if not (f > 0 and state.prefill_tokens_per_step > 0):
            for i in range(4):
                if owner[i]:
                    a, c = s1 * frac, s2 * frac
                else:
                    a, c = s1, s2  # = s1 * 1.0, s2 * 1.0
                r0, r1, r2, r3 = rows[i]
                k10, k11, k12, k13 = c1[i]
                k20, k21, k22, k23 = c2[i]
                t0 = r0 + k10 * a + k20 * c
                t1 = r1 + k11 * a + k21 * c
                t2 = r2 + k12 * a + k22 * c
                t3 = r3 + k13 * a + k23 * c
                mx = t1 if t1 > t0 else t0
                mx = t2 if t2 > mx else mx
                mx = t3 if t3 > mx else mx
                out[i] = over + mx + alpha * (t0 + t1 + t2 + t3 - mx)
                net[i] = t2
            return out
        if 1.0 < f:
            f = 1.0
        rows_n, crow, lo, hi = self._chunk_terms(state, b, f)
        g = 1.0 - f
        # NOTE: a resource's decode products (k1 · a, k2 · c) are computed once and reused where the
        # blend has the same ones (the same values, so the same sums)
        for i in self._spread:  # TP, CP: the chunk over every rank, next to the whole batch
            r0, r1, r2, r3 = rows[i]
            k10, k11, k12, k13 = c1[i]
            k20, k21, k22, k23 = c2[i]
            x0, x1, x2, x3 = k10 * s1, k11 * s1, k12 * s1, k13 * s1
            y0, y1, y2, y3 = k20 * s2, k21 * s2, k22 * s2, k23 * s2
            t0 = r0 + x0 + y0
            t1 = r1 + x1 + y1
            t2 = r2 + x2 + y2
            t3 = r3 + x3 + y3
            mx = t1 if t1 > t0 else t0
            mx = t2 if t2 > mx else mx
            mx = t3 if t3 > mx else mx
            dec = over + mx + alpha * (t0 + t1 + t2 + t3 - mx)
            net[i] = t2
            # the blend: a step with the chunk, on rows for b + chunk tokens
            r0, r1, r2, r3 = rows_n[i]
            p0, p1, p2, p3, l0, l1, l2, l3, h0, h1, h2, h3 = crow[i]
            if hi:
                u0 = r0 + p0 + lo * l0 + hi * h0 + x0 + y0
                u1 = r1 + p1 + lo * l1 + hi * h1 + x1 + y1
                u2 = r2 + p2 + lo * l2 + hi * h2 + x2 + y2
                u3 = r3 + p3 + lo * l3 + hi * h3 + x3 + y3
            else:  # a prefix below the knee: + hi · h adds +0.0 to a sum ≥ 0, which leaves it as it is
                u0 = r0 + p0 + lo * l0 + x0 + y0
                u1 = r1 + p1 + lo * l1 + x1 + y1
                u2 = r2 + p2 + lo * l2 + x2 + y2
                u3 = r3 + p3 + lo * l3 + x3 + y3
            mx = u1 if u1 > u0 else u0
            mx = u2 if u2 > mx else mx
            mx = u3 if u3 > mx else mx
            out[i] = g * dec + f * (over + mx + alpha * (u0 + u1 + u2 + u3 - mx))
        a, c = s1 * frac, s2 * frac  # the decode-busiest owner
        aa, cc = s1 * frac_min, s2 * frac_min  # the chunk's owner
        for i in self._owned:  # DP, DOP
            r0, r1, r2, r3 = rows[i]
            k10, k11, k12, k13 = c1[i]
            k20, k21, k22, k23 = c2[i]
            x0, x1, x2, x3 = k10 * a, k11 * a, k12 * a, k13 * a
            y0, y1, y2, y3 = k20 * c, k21 * c, k22 * c, k23 * c
            t0 = r0 + x0 + y0
            t1 = r1 + x1 + y1
            t2 = r2 + x2 + y2
            t3 = r3 + x3 + y3
            mx = t1 if t1 > t0 else t0
            mx = t2 if t2 > mx else mx
            mx = t3 if t3 > mx else mx
            dec = over + mx + alpha * (t0 + t1 + t2 + t3 - mx)
            net[i] = t2
            r0, r1, r2, r3 = rows_n[i]
            p0, p1, p2, p3, l0, l1, l2, l3, h0, h1, h2, h3 = crow[i]
            if hi:
                u0 = r0 + p0 + lo * l0 + hi * h0 + k10 * aa + k20 * cc
                u1 = r1 + p1 + lo * l1 + hi * h1 + k11 * aa + k21 * cc
                u2 = r2 + p2 + lo * l2 + hi * h2 + k12 * aa + k22 * cc
                u3 = r3 + p3 + lo * l3 + hi * h3 + k13 * aa + k23 * cc
            else:
                u0 = r0 + p0 + lo * l0 + k10 * aa + k20 * cc
                u1 = r1 + p1 + lo * l1 + k11 * aa + k21 * cc
                u2 = r2 + p2 + lo * l2 + k12 * aa + k22 * cc
                u3 = r3 + p3 + lo * l3 + k13 * aa + k23 * cc
            mx = u1 if u1 > u0 else u0
            mx = u2 if u2 > mx else mx
            mx = u3 if u3 > mx else mx
            v0, v1, v2, v3 = r0 + x0 + y0, r1 + x1 + y1, r2 + x2 + y2, r3 + x3 + y3  # the busiest, without the chunk
            mv = v1 if v1 > v0 else v0
            mv = v2 if v2 > mv else mv
            mv = v3 if v3 > mv else mv
            if mv > mx:
                u0, u1, u2, u3, mx = v0, v1, v2, v3, mv
            out[i] = g * dec + f * (over + mx + alpha * (u0 + u1 + u2 + u3 - mx))
        return out

    def _chunk_rows(self, chunk: int, own_p: int) -> list:
        """Per layout, the (prefill, prefix slope below the knee, above it) rows of the chunk its
        busiest rank runs, flattened to 12 floats: the whole chunk for TP/CP, `own_p` tokens of it
        for DP/DOP (cached)."""
        key = (chunk, own_p)
        rows = self._chunk_cache.get(key)
        if rows is None:
            t = self.tables
            rows = []
            for i in range(4):
                p = own_p if self._owner[i] else chunk
                rows.append(tuple(t.chunk_rows_s[p, i].tolist()))  # prefill, prefix below / above the knee
            if len(self._chunk_cache) > 8192:
                self._chunk_cache.clear()
            self._chunk_cache[key] = rows
        return rows

    def _chunk_terms(self, state: PolicyState, b: int, f: float) -> tuple[list, list, float, float]:
        """The prefill blend's inputs: a fraction f of steps carry a chunk of the observed mean size
        and prefix. TP and CP spread a chunk over the ranks; the owner layouts run
        `prefill_owner_share` of it on one owner, so, as in the step model, their chunk step is the
        slower of the decode-busiest owner and that owner (taken as the lightest, where admission
        puts new requests). Returns the base rows for b + chunk tokens, the chunk's rows
        (`_chunk_rows`) and the prefix below and above the knee. NOTE: the chunk size is rounded to
        3 % steps and the owner share to 1/32 (both are running means) so their table rows can be
        cached."""
        # NOTE: min/max of two numbers spelled out (max(x, y) is x unless y > x; min(x, y) is x
        # unless y < x): a builtin call costs ~100 ns, 8 of them here
        c = float(state.prefill_context_tokens)
        if 0.0 > c:
            c = 0.0
        knee = self._knee
        lo = knee if knee < c else c
        hi = c - lo
        size = state.prefill_tokens_per_step / f
        e = round(math.log(1.0 if 1.0 > size else size) / LOG_CHUNK_STEP)
        chunk = self._chunk_sizes.get(e)
        if chunk is None:
            chunk = self._chunk_sizes[e] = min(max(int(CHUNK_STEP ** e), 1), self._chunk)
        share = state.prefill_owner_share
        if 0.0 > share:
            share = 0.0
        if 1.0 < share:
            share = 1.0
        share = round(share * 32) / 32
        own_p = int(chunk * share)
        if 1 > own_p:
            own_p = 1
        if chunk < own_p:
            own_p = chunk
        n = b + chunk
        if self._n_max < n:
            n = self._n_max
        if n < self._n_base:
            rows = self._base_py[n]
        else:
            rows = self._row_cache.get(n)
            if rows is None:
                if len(self._row_cache) > 4096:
                    self._row_cache.clear()
                rows = self._row_cache[n] = self.tables.base_s[n].tolist()
        crow = self._chunk_cache.get((chunk, own_p))
        return rows, self._chunk_rows(chunk, own_p) if crow is None else crow, lo, hi

    def decide(self, state: PolicyState) -> Decision:
        """Stay or switch; never raises (an unexpected state is a CANT_DECIDE stay)."""
        try:
            return self._decide(state)
        except Exception:  # NOTE: a policy bug must not take the server down; stay put instead.
            cur = state.layout if isinstance(state.layout, int) and 0 <= state.layout < len(LAYOUTS) else 0
            return self._stay[cur][Reason.CANT_DECIDE]

    def _kv_bytes(self, i: int, total_tokens: float, own_tokens: float) -> float:
        return (own_tokens if self._owner[i] else total_tokens * self._share[i]) * self._bpt

    def _decide(self, state: PolicyState) -> Decision:
        cur = int(state.layout)
        stay = self._stay[cur]
        if state.switch_in_flight:
            return stay[Reason.STAY_IN_FLIGHT]
        b = state.context_requests
        if b < 0:
            b = state.context_tokens.shape[0]
        w = state.waiting_tokens.shape[0]
        if b == 0 and w == 0:
            return stay[Reason.STAY_IDLE]
        okv = state.owner_kv_tokens
        if type(okv) is not list:
            okv = okv.tolist()
        total = sum(okv)
        own = max(okv)
        own_min = min(okv)
        steps = self._step_times(state, b, own, own_min)
        n = len(LAYOUTS)
        bpt = self._bpt
        # admission of the queue's head, per layout
        blocked = False
        head = 0.0
        if w and state.running < self._max_batch:
            head = float(state.waiting_tokens[0]) + self.tables.page_tokens
            fr = _as_list(state.free_kv_bytes)
            need = head * bpt
            blocked = (max(fr) < need) if self._owner[cur] else (min(fr) < need * self._share[cur])
        pool, owner, share = self._pool, self._owner, self._share
        fits_now = (own if owner[cur] else total * share[cur]) * bpt <= pool[cur]  # = self._kv_bytes(cur, ...)
        g_tot, g_own = state.kv_growth_tokens, state.owner_kv_growth_tokens
        grows = g_tot > 0.0 or g_own > 0.0  # (NaN: none projected)
        outgrown = False
        if grows:
            if not g_tot > 0.0:
                g_tot = 0.0
            if not g_own > 0.0:
                g_own = 0.0
            outgrown = ((own + g_own) if owner[cur] else (total + g_tot) * share[cur]) * bpt > pool[cur]
        if b and (blocked or not fits_now or outgrown):
            if not grows:
                g_tot = g_own = 0.0
            d = self._capacity(state, cur, b, w, total, own, own_min, steps, blocked, fits_now, outgrown, head, g_tot,
                               g_own)
            if d is not None:
                return d
        elif blocked or not fits_now:  # nothing running: the fastest layout with room for the head
            best, best_t = -1, math.inf
            for i in range(n):
                if i == cur or not self._ok[i] or steps[i] >= best_t:
                    continue
                if ((own_min + head) if owner[i] else (total + head) * share[i]) * bpt > pool[i]:
                    continue
                if memory_fits(self.tables, cur, i, total * bpt, own * bpt):
                    best, best_t = i, steps[i]
            if best >= 0:
                plan = plan_transition(self.tables, cur, best, total * bpt, own * bpt, b, steps[cur],
                                       self._net_share(cur, steps[cur]))
                return Decision(best, True, Reason.SWITCH_CAPACITY, 0.0, plan.cost_s, plan)
        if b == 0:
            return stay[Reason.STAY_IDLE]
        # throughput
        head_admits_cur = w > 0 and not blocked
        best, best_t = cur, steps[cur]
        ok, h = self._ok, self._headroom_keep
        for i in range(n):
            if i == cur or not ok[i] or steps[i] >= best_t:
                continue
            if (own if owner[i] else total * share[i]) * bpt > pool[i] * h:  # = self._kv_bytes(i, total, own)
                continue
            if head_admits_cur and ((own_min + head) if owner[i] else (total + head) * share[i]) * bpt > pool[i]:
                continue  # would stop admitting what the current layout admits
            if grows and ((own + g_own) if owner[i] else (total + g_tot) * share[i]) * bpt > pool[i] \
                    and not outgrown:
                continue  # the running set's expected peak fits here now, and would not fit there
            best, best_t = i, steps[i]
        if best == cur:
            return stay[Reason.STAY_BEST]
        t_cur = steps[cur]
        gain = t_cur - best_t
        if gain < self.knobs.min_gain_fraction * t_cur:
            return stay[Reason.STAY_SMALL_GAIN]
        if state.steps_since_switch < self.knobs.cooldown_steps:
            return stay[Reason.STAY_COOLDOWN]
        plan = plan_transition(self.tables, cur, best, total * bpt, own * bpt, b, t_cur, self._net_share(cur, t_cur))
        if not plan.feasible:
            return stay[Reason.STAY_NO_MEMORY]
        useful_steps = self._dwell_steps - plan.link_s / t_cur
        gain_s = gain * useful_steps
        if gain_s <= (1.0 + self.knobs.margin) * plan.cost_s:
            return stay[Reason.STAY_NOT_WORTH]
        return Decision(best, True, Reason.SWITCH_THROUGHPUT, gain_s, plan.cost_s, plan)

    def _outgrows(self, layout: int, head_tokens: float) -> bool:
        """Whether one request of `head_tokens` can't fit `layout` even with its pool empty."""
        return self._kv_bytes(layout, head_tokens, head_tokens) > self._pool[layout]

    def _capacity(self, state: PolicyState, cur: int, b: int, w: int, total: float, own: float, own_min: float,
                  steps: list[float], blocked: bool, fits_now: bool, outgrown: bool, head: float, g_tot: float,
                  g_own: float) -> Decision | None:
        """The capacity rule (module docstring, rule 1), for a running batch: each layout priced by
        `_sustained_rates`. None: no capacity decision (the throughput rule decides)."""
        stay = self._stay[cur]
        bpt, pool, owner, share, ok = self._bpt, self._pool, self._owner, self._share, self._ok
        t_cur = steps[cur]
        net_cur = self._net_share(cur, t_cur)
        must = not fits_now or (blocked and self._outgrows(cur, head))
        if blocked and not must and not outgrown and t_cur > 0:
            # NOTE: a bound first (`_sustained_rates` NOTE): no layout holds more than the running
            # and waiting requests, at no less than its current-batch step; if none could beat the
            # current rate (its batch is the current one) by the hysteresis, wait without pricing
            most = b + (w if w < self._max_batch - state.running else self._max_batch - state.running)
            floor = (1.0 + self.knobs.min_gain_fraction) * b / t_cur
            for i in self._others[cur]:
                if ok[i] and steps[i] > 0 and most / steps[i] > floor:
                    break
            else:
                return stay[Reason.STAY_KV_WAIT]
        step = state.step_index
        if not must and step >= 0 and self._priced_layout == cur and 0 <= step - self._priced_step < REPRICE_EVERY_STEPS:
            return stay[Reason.STAY_KV_WAIT] if blocked else None  # the last pricing stands
        h = self._headroom_keep
        steps = steps[:]  # NOTE: _step_times reuses its output list, and pricing calls it again
        rates, held_t = self._sustained_rates(state, b, w, total, own, own_min, g_tot, g_own, blocked, cur, steps,
                                              0.0 if must else 1.0 + self.knobs.min_gain_fraction)
        best, best_rate, shed = -1, 0.0, 0.0
        for i in range(len(LAYOUTS)):
            if i == cur or not ok[i] or rates[i] <= best_rate:
                continue
            held = (own if owner[i] else total * share[i]) * bpt
            if not fits_now and held > pool[i] * h:
                continue  # a forced move must hold the running set with headroom
            if blocked and ((own_min + head) if owner[i] else (total + head) * share[i]) * bpt > pool[i]:
                continue  # no room for the head there either
            cut = 0.0
            if not memory_fits(self.tables, cur, i, total * bpt, own * bpt):
                fit_tokens = self._max_fit_bytes[cur][i] / bpt
                if must or fit_tokens <= 0.0:
                    continue
                cut = total - fit_tokens  # shed this much KV first (spread layouts: the total decides)
            best, best_rate, shed = i, rates[i], cut
        r_cur = rates[cur]
        if not must:
            self._priced_layout, self._priced_step = cur, step
        if best < 0 or (not must and best_rate < (1.0 + self.knobs.min_gain_fraction) * r_cur):
            return stay[Reason.STAY_KV_WAIT] if blocked and not must else None
        if not must and not blocked and state.steps_since_switch < self.knobs.cooldown_steps:
            return stay[Reason.STAY_COOLDOWN]
        plan = plan_transition(self.tables, cur, best, (total - shed) * bpt, own * bpt, b, t_cur, net_cur)
        if shed > 0.0:
            # NOTE: the running set keeps decoding while the move runs: shed what it writes meanwhile too
            shed += b * (1.0 + plan.link_s / t_cur) if t_cur > 0 else b
            if shed >= total:
                return stay[Reason.STAY_KV_WAIT] if blocked else None
        cost_s = plan.cost_s + shed * self._prefill_s_per_token[best]  # the shed KV is prefilled again
        # NOTE: the pressure lasts at least as long as the work already here takes at the current
        # layout's sustained batch (the backlog's turnover: running + waiting requests × the mean
        # observed output / that batch), which for a queue is longer than the batch's own turnover
        dwell = self._dwell_steps
        b_cur = r_cur * held_t[cur]
        if b_cur > 0 and self._completed:
            backlog = (b + w) * self._mean_output / b_cur
            if backlog > dwell:
                dwell = backlog if backlog < self._dwell_hi else self._dwell_hi
        # the dwell's work at the current layout's sustained rate, done at the better one's
        gain_s = (dwell - plan.link_s / t_cur) * held_t[cur] * (1.0 - r_cur / best_rate) if t_cur > 0 else 0.0
        if not must and gain_s <= (1.0 + self.knobs.margin) * cost_s:
            return stay[Reason.STAY_KV_WAIT if blocked else Reason.STAY_NOT_WORTH]
        reason = Reason.SWITCH_CAPACITY if blocked or must else Reason.SWITCH_PROJECTED
        return Decision(best, True, reason, gain_s, cost_s, plan, shed)

    def _sustained_rates(self, state: PolicyState, b: int, w: int, total: float, own: float, own_min: float,
                         g_tot: float, g_own: float, blocked: bool, cur: int, steps: list[float],
                         gain: float) -> tuple[list[float], list[float]]:
        """Per layout [4]: the decode tokens per second it sustains at the batch its KV holds, and
        its step seconds at that batch (0 where not usable, or where it can't beat the current
        layout's rate × `gain`).

        The batch a layout holds: if the running set's expected KV peak (current KV + the projected
        growth, per rank as the layout stores it) exceeds its pool, the share of the running set the
        pool holds at that peak; else the running set plus the waiting requests its spare room
        admits, each needing its prompt, a page and the mean observed output (none for the current
        layout when its head is blocked). Its step: the current batch's mean context scaled to
        that batch, and the observed prefill scaled with it. NOTE: in steady state prefill tokens per
        step / decode tokens per step = mean prompt / mean output (each request needs both), so a
        batch k× larger needs k× the prefill to stay full; past a full chunk every step it is
        prefill-bound, and the batch it sustains is what a full chunk feeds. Rates are decode tokens
        per second: the prefill is a cost each layout pays in its step time, not output.
        NOTE: `steps` (the current batch's step times) serve a layout whose batch is the current one,
        and bound the others': a step is no faster for a larger batch with more prefill, so a
        layout whose batch / current-batch step can't beat the current rate × `gain` is not priced
        (each pricing is one `_step_times` call, ~4 µs)."""
        s2, s1 = self._sums(state, b)
        p = float(state.prefill_tokens_per_step)
        f = float(state.prefill_step_fraction)
        if not (p > 0.0 and f > 0.0):
            p = f = 0.0
        if f > 1.0:
            f = 1.0
        avail = w
        if self._max_batch - state.running < avail:
            avail = self._max_batch - state.running
        need = 0.0
        if avail > 0:
            need = float(_add(state.waiting_tokens[:avail])) / avail + self._page + self._mean_output
        sc = self._scratch
        sc.prefill_context_tokens, sc.prefill_owner_share = state.prefill_context_tokens, state.prefill_owner_share
        bpt, pool, owner, share, ok = self._bpt, self._pool, self._owner, self._share, self._ok
        rates, held_t = [0.0] * 4, [0.0] * 4
        by_batch: dict[int, list[float]] = {}
        floor = 0.0  # the rate a candidate must beat (the current layout's × gain)
        for i in (cur, *self._others[cur]):
            if not ok[i]:
                continue
            room = pool[i] / bpt  # tokens per rank
            if owner[i]:
                proj, spare = own + g_own, self._ranks * room - (total + g_tot)
            else:
                proj = (total + g_tot) * share[i]
                spare = (room - proj) / share[i] if share[i] > 0 else 0.0
            if proj > room:
                bb = b * room / proj
            elif avail > 0 and spare > 0.0 and not (blocked and i == cur):
                adm = spare / need
                bb = b + (adm if adm < avail else avail)
            else:
                bb = float(b)
            k = bb / b
            if p * k > self._chunk:  # prefill-bound: a full chunk every step feeds this batch
                k = self._chunk / p
                bb = b * k
            if k == 1.0:
                t = steps[i]
            elif i != cur and k > 1.0 and steps[i] > 0.0 and bb / steps[i] <= floor:
                continue  # its rate is below bb / steps[i]: it can't win
            else:
                n = int(bb + 0.5)
                if n < 1:
                    n = 1
                st = by_batch.get(n)
                if st is None:
                    sc.context_sum_tokens, sc.context_capped_sum_tokens = s2 * k, s1 * k
                    sc.prefill_tokens_per_step = p * k
                    sc.prefill_step_fraction = f * k if f * k < 1.0 else 1.0
                    st = by_batch[n] = list(self._step_times(sc, n, own * k, own_min * k))
                t = st[i]
            if t > 0.0:
                rates[i], held_t[i] = bb / t, t
                if i == cur:
                    floor = rates[i] * gain
        return rates, held_t

    def _sums(self, state: PolicyState, b: int) -> tuple[float, float]:
        """(Σ context, Σ min(context, top-k)) of the running batch."""
        if state.context_sum_tokens >= 0 and state.context_capped_sum_tokens >= 0:
            return float(state.context_sum_tokens), float(state.context_capped_sum_tokens)
        ctx = state.context_tokens
        s2 = float(_add(ctx))
        if self._topk < 1e17:
            return s2, float(_add(np.minimum(ctx, self._topk)))
        return s2, s2

    def _net_share(self, layout: int, step_s: float) -> float:
        return self._net[layout] / step_s if step_s > 0 else 0.0

    def usable_layouts(self) -> list[int]:
        return [i for i in range(len(LAYOUTS)) if self._ok[i]]

    # ---- start-up -----------------------------------------------------------------------------
    def initial_layout(self, waiting_tokens: np.ndarray) -> int:
        """The layout to start in (no switch cost yet): the best predicted throughput for the
        first batch each layout could admit from the queue."""
        t = self.tables
        best, best_rate = -1, -1.0
        lens = np.asarray(waiting_tokens, dtype=np.float64)[: self.knobs.max_batch]
        need = np.cumsum(lens + t.page_tokens)
        for i in range(len(LAYOUTS)):
            if not self._ok[i]:
                continue
            if self._owner[i]:
                cap_tokens = self._pool[i] / self._bpt * t.ranks
            else:
                cap_tokens = self._pool[i] / (self._bpt * self._share[i])
            bsz = int(np.searchsorted(need, cap_tokens, side="right"))
            if bsz == 0:
                continue
            ctx = lens[:bsz]
            s2 = float(ctx.sum())
            s1 = float(np.minimum(ctx, t.topk).sum())
            if self._owner[i]:
                s1, s2 = s1 / t.ranks, s2 / t.ranks
            step = float(t.step_s(i, bsz, np.zeros(1), np.array([s1]), np.array([s2]))[0])
            rate = bsz / step
            if rate > best_rate:
                best, best_rate = i, rate
        return best if best >= 0 else next(i for i in range(len(LAYOUTS)) if self._ok[i]) if any(self._ok) else 0


@dataclass
class FixedPolicy:
    """Always the same layout (the baselines)."""

    layout: int

    def __post_init__(self) -> None:
        self._stay = Decision(self.layout, False, Reason.STAY_FIXED)

    def decide(self, state: PolicyState) -> Decision:
        return self._stay

    def usable_layouts(self) -> list[int]:
        return [self.layout]

    def observe_completion(self, output_tokens: float) -> None:
        return None

    def initial_layout(self, waiting_tokens: np.ndarray) -> int:
        return self.layout
