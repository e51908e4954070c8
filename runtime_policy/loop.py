"""The serving loop: admission, chunked prefill, decode steps, preemption and layout switches,
driven against an `Executor`.

Requests move pending → waiting → prefill → decode → done (or → waiting again when preempted —
because KV runs short, or displaced by a waiting request when the batch is full and the ordering
says so — keeping their generated tokens, which are recomputed by the next prefill; or → aborted
when one request alone can never fit). Every request ends done or aborted exactly once; `ServeResult`
carries the per-request record.

The loop runs in *runs* of steps with constant membership: it asks the policy, admits, then hands
the executor up to `max_run_steps` steps, cut short at the next decode completion, prefill
completion, KV wall, expected arrival or switch hand-off. The policy is therefore consulted at
every membership change and at least every `max_run_steps` steps (NOTE: between those points its
answer can only drift with context growth, which the run length bounds).

For the dynamic policy the loop also projects the running set's KV growth (projection.py) every
`PROJECTION_EVERY_STEPS` decode steps; a switch that sheds KV (`Decision.shed_kv_tokens`) preempts
the ordering's victims until that much is free and admits nothing until its commit.

KV is counted in tokens, per owner rank, with one page of slack per request (page rounding);
every request has an owner rank (the least-loaded at admission) in every layout, so a switch to
an owner layout knows where each request lives. Admission keeps `admit_watermark_fraction` of the
pool free.

Does not: price steps (the executor), choose layouts (the policy) or order requests (ordering.py).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from planner.errors import SpecError
from runtime_policy.admission import chunk_plan, fits_somewhere
from runtime_policy.executor import Executor, StepBatch
from runtime_policy.ordering import Ordering
from runtime_policy.policy import Decision, PolicyState
from runtime_policy.projection import expected_kv_peak_growth
from runtime_policy.tables import LAYOUTS, NO_TOPK, StepTimeTable

PENDING, WAITING, PREFILL, DECODE, DONE, ABORTED = range(6)
SEQ_BITS = 40  # heap entries: a step count above, a join sequence number in the low bits
SEQ_MASK = (1 << SEQ_BITS) - 1
PREFILL_STATS_HALF_LIFE_STEPS = 256.0  # NOTE: the policy's cooldown scale; the prefill rate it sees forgets over it
PROJECTION_EVERY_STEPS = 256  # NOTE: the same scale: the KV growth projection is refreshed this often (decode steps)


@dataclass(frozen=True)
class LoopConfig:
    max_batch: int = 4096  # requests holding KV at once
    prefill_chunk_tokens: int = 8192  # prompt tokens per step (chunked prefill)
    max_run_steps: int = 64  # the policy is consulted at least this often
    admit_watermark_fraction: float = 0.01  # KV pool share admission leaves free

    def check(self, tables: StepTimeTable) -> None:
        if not 1 <= self.max_batch <= tables.max_tokens - tables.max_prefill_tokens:
            raise SpecError(f"max_batch={self.max_batch} must be in [1, {tables.max_tokens - tables.max_prefill_tokens}]")
        if not 1 <= self.prefill_chunk_tokens <= tables.max_prefill_tokens:
            raise SpecError(f"prefill_chunk_tokens={self.prefill_chunk_tokens} must be in [1, {tables.max_prefill_tokens}]")
        if self.max_run_steps < 1:
            raise SpecError(f"max_run_steps={self.max_run_steps} must be ≥ 1")


@dataclass(frozen=True)
class SwitchRecord:
    from_layout: str
    to_layout: str
    started_s: float
    at_s: float  # commit time
    link_s: float
    cost_s: float  # interference + commit stall
    reason: str


@dataclass
class ServeResult:
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    status: np.ndarray
    preemptions: np.ndarray
    switches: list[SwitchRecord] = field(default_factory=list)
    steps: int = 0
    decode_steps: int = 0
    layout_time_s: dict[str, float] = field(default_factory=dict)
    timeline: dict[str, list] = field(default_factory=dict)  # t_s, layout, batch, kv_used_fraction


class _Waiting:
    """The waiting queue: `ids[pos:]` in admission order with their KV needs, re-sorted by the
    ordering's keys when it changed."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.needs = np.zeros(0)  # [len(ids)] context tokens each needs
        self.pos = 0
        self.new: list[int] = []
        self.dirty = False

    def __len__(self) -> int:
        return len(self.ids) - self.pos + len(self.new)

    def push(self, i: int) -> None:
        self.new.append(i)
        self.dirty = True

    def resort(self, keyfn, ctx: list[float], ctxf: np.ndarray, keys_are_arrival: bool) -> None:
        """`ctx` and `ctxf`: every request's context, as a list and an array (equal for waiting ones);
        `keys_are_arrival`: keyfn's keys are the arrival times (requests are numbered in arrival order)."""
        if self.pos >= len(self.ids) and len(self.new) == 1:
            self.ids = self.new  # one request: nothing to sort (the common case)
            self.needs = np.array([ctx[self.ids[0]]])
        else:
            ids = self.ids[self.pos:] + self.new
            if keys_are_arrival and ids == sorted(ids):
                # NOTE: in request order, so in arrival order: the stable sort by arrival leaves them
                # as they are (the new ones are arrivals after the queue's last, unless preempted)
                self.ids = ids
                self.needs = ctxf[ids]
            else:
                ids = np.array(ids, dtype=np.int64)
                ids = ids[np.argsort(keyfn(ids), kind="stable")]
                self.ids = ids.tolist()
                self.needs = ctxf[ids]
        self.pos, self.new, self.dirty = 0, [], False


def sum_as_numpy(x: list[float]) -> float:
    """`np.add.reduce` of a list of floats in numpy's order (pairwise: blocks of ≤ 128 summed in 8
    lanes), bit for bit, without building an array (NOTE: a run's step times are summed once per
    run; the array round trip costs more than the sum)."""
    n = len(x)
    if n < 8:
        res = -0.0
        for v in x:
            res += v
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = x[:8]
        m = n - n % 8
        for i in range(8, m, 8):
            r0 += x[i]
            r1 += x[i + 1]
            r2 += x[i + 2]
            r3 += x[i + 3]
            r4 += x[i + 4]
            r5 += x[i + 5]
            r6 += x[i + 6]
            r7 += x[i + 7]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(m, n):
            res += x[i]
        return res
    half = n // 2
    half -= half % 8
    return sum_as_numpy(x[:half]) + sum_as_numpy(x[half:])


def serve(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, tables: StepTimeTable,
          policy, ordering: Ordering, executor: Executor, config: LoopConfig = LoopConfig(),
          progress: Callable[[int, int], None] | None = None) -> ServeResult:
    """Serve the requests (sorted by arrival) to completion; see the module docstring.

    NOTE: written for speed, because the simulator's runs are often 2–4 steps long (cut by
    arrivals), so per-run overhead bounds simulated steps per second; per-request work is done once
    per event (arrival, admission, join, completion, preemption), and a run without events costs a
    fixed number of operations whatever the batch size:
    - the decoding set lives in slots [0, B) of fixed arrays (ids, owners, and context − decode
      steps run, so contexts grow without being written); a leaving request's slot takes the last
      one. The order of joining, which completions and victim choice follow, is kept as a join
      sequence number;
    - a heap of the decode step at which each decoder is done gives the run's cut and its
      completions; a heap of the step at which each context reaches top-k keeps Σ min(L, top-k);
    - per-request state is in Python lists, and KV and context sums are whole token counts (exact
      in any order), so results equal the straightforward version's
      (tests/runtime_policy/test_loop_golden.py)."""
    config.check(tables)
    n = arrival_s.size
    arr = np.asarray(arrival_s, dtype=np.float64)
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    if n == 0:
        raise SpecError("the workload has no requests")
    if np.any(np.diff(arr) < 0):
        raise SpecError("requests must be sorted by arrival_s")
    T, page, bpt = tables.ranks, float(tables.page_tokens), tables.kv_bytes_per_token
    topk = tables.topk
    capped = topk < NO_TOPK
    cap_at = float(math.ceil(topk)) if capped else 0.0  # the first whole context at which min(L, top-k) = top-k
    pools_l = tables.info.kv_pool_bytes.tolist()
    share_l = tables.info.kv_total_share.tolist()
    is_owner_l = [bool(x) for x in tables.info.is_owner]
    arr_l, inp_l, out_l = arr.tolist(), inp.tolist(), out.tolist()
    ctxf = inp.astype(np.float64)  # [n] context = input + generated, for keys (decoders' written on preemption)
    ctx_l = ctxf.tolist()  # the same as Python floats (decoders': see c0_l)
    end_l = (inp + out).astype(np.float64).tolist()  # the context at which a request is done
    status_l = [PENDING] * n
    first_l = [math.nan] * n
    finish_l = [math.nan] * n
    preempt_l = [0] * n
    queued = arr.copy()  # [n] when each request last joined the waiting queue (arrival, or preemption)
    owner_l = [0] * n
    pre_left = [0] * n
    okv = [0.0] * T  # KV tokens each rank owns (whole numbers, so sums are exact in any order)
    waiting = _Waiting()
    prefill_q: list[int] = []
    pq_s2 = pq_s1 = 0.0  # Σ context and Σ min(context, top-k) over prefill_q
    max_batch, max_run, chunk = config.max_batch, config.max_run_steps, config.prefill_chunk_tokens
    # the decoding set: slots [0, b)
    b = 0
    dsteps = 0  # decode steps run so far
    d_ids = np.zeros(max_batch, dtype=np.int64)  # [max_batch] request of each slot
    d_c0 = np.zeros(max_batch)  # [max_batch] its context − dsteps (the context is d_c0 + dsteps)
    d_own = np.zeros(max_batch, dtype=np.int64)  # [max_batch] its owner rank
    slot_id = [0] * max_batch  # = d_ids
    slot_l = [-1] * n  # each request's slot (−1: not decoding)
    c0_l = [0.0] * n  # = d_c0 by request
    jseq_l = [0] * n  # when each last joined the decoding set (a sequence number)
    jseq = 0
    seq_req = [-1]  # the request of each join sequence number
    # NOTE: heap entries are ints, step << SEQ_BITS | join seq (one int compares faster than a tuple);
    # the entries of requests that left are skipped when they surface
    fin_heap: list[int] = []  # the decode step at which each decoder is done
    unc_heap: list[int] = []  # the decode step at which each decoder's context reaches top-k
    unc_l = [False] * n  # decoding with context below top-k
    unc_cnt, unc_c0 = 0, 0.0  # how many, and Σ c0_l over them
    dec_cnt = [0] * T  # decoders per owner
    own_c0 = [0.0] * T  # Σ c0_l of each owner's decoders (their Σ context is own_c0 + dec_cnt × dsteps)
    fin_min = 0  # the decode step at which the first decoder is done (the top of fin_heap)
    s2_dec = 0.0  # Σ decoders' contexts
    no_ids, no_ctx = np.zeros(0, dtype=np.int64), np.zeros(0)
    view_b = 0  # batch holds views of slots [0, view_b)
    batch = StepBatch(0, no_ctx, no_ids, no_ids)
    switches: list[SwitchRecord] = []
    tl_t, tl_layout, tl_batch, tl_kv = [], [], [], []
    # seconds per prompt token of a full chunk in each layout (the owner layouts run it on one owner)
    prefill_price = [float(tables.step_s(i, 0, np.array([chunk]), np.zeros(1), np.zeros(1))[0]) / chunk
                     for i in range(len(LAYOUTS))]

    def keyfn(ids):
        tok = ctxf[ids].astype(np.int64)
        return ordering.keys(arr[ids], tok, tok - inp[ids], out[ids], queued[ids])

    layout = int(policy.initial_layout(inp[arr <= arr[0]].astype(np.float64)))
    ordering.prefill_s_per_token = prefill_price[layout]  # NOTE: the layout's own: DP/DOP chunks run 2–3× slower than TP's
    state = PolicyState(no_ctx, okv, [0.0] * T, np.zeros(0), layout)
    wt_needs, wt_pos = None, -1  # the queue state.waiting_tokens was cut from
    t = arr_l[0]
    nxt = 0
    ended = 0
    est_step_s = 0.0
    stats_version = -1
    inflight: Decision | None = None
    ready_s = started_s = 0.0
    wm = 1.0 - config.admit_watermark_fraction
    skip_admit = False
    project = bool(getattr(policy, "reads_kv_growth", False))  # only the dynamic policy reads the projection
    proj_at = 0  # the decode step at which the projection is next refreshed
    # running prefill statistics for the policy (exponentially weighted over steps)
    ema_steps = ema_tok = ema_tok_pfx = ema_own = 0.0
    ema_w = [1.0 - 0.5 ** (k / PREFILL_STATS_HALF_LIFE_STEPS) for k in range(max_run + 1)]  # weight of a k-step run
    zeros_l = [[0.0] * k for k in range(max_run + 1)]
    dyn_keys, lstats, displaces = ordering.dynamic_keys, ordering.stats, ordering.displaces
    arrival_keys = bool(getattr(ordering, "keys_are_arrival", False))
    steps = decode_steps = 0
    layout_s = [0.0] * len(LAYOUTS)
    # per layout: KV tokens one rank can hold (owner layouts), or all ranks together (the others)
    cap_l = [pools_l[i] / bpt if is_owner_l[i] else pools_l[i] / (bpt * share_l[i]) if share_l[i] > 0 else 0.0
             for i in range(len(LAYOUTS))]

    def kv_steps(layout: int, owner_count: list[int], owner_kv: list[float], total: float) -> int:
        """Decode steps the decoders can take before KV runs out (owner layouts: at most max_run,
        all a run takes)."""
        if is_owner_l[layout]:
            cap = cap_l[layout]
            if cap - max(owner_kv) >= max_run * max(owner_count):
                return max_run  # NOTE: every owner has room for a whole run; the exact count needs T divisions
            room = [math.floor((cap - kv) / c) for kv, c in zip(owner_kv, owner_count) if c > 0]
            return int(min(room)) if room else 1 << 30
        return int(math.floor((cap_l[layout] - total) / sum(owner_count)))

    def release(i: int, ctx: float) -> None:
        okv[owner_l[i]] -= ctx + page

    observe, stats_add = policy.observe_completion, ordering.stats.add

    def end(i: int, how: int) -> None:
        nonlocal ended
        status_l[i] = how
        finish_l[i] = t
        ended += 1
        if how == DONE:
            observe(float(out_l[i]))
            stats_add(float(out_l[i]))

    def join(i: int, c: float) -> None:
        """Put request i, at context c, in the decoding set."""
        nonlocal b, jseq, unc_cnt, unc_c0, s2_dec, fin_min
        s, r = b, owner_l[i]
        b += 1
        c0 = c - dsteps
        fin = int(end_l[i] - c) + dsteps  # whole numbers
        if s == 0 or fin < fin_min:
            fin_min = fin
        d_ids[s], d_c0[s], d_own[s] = i, c0, r
        slot_id[s] = i
        slot_l[i] = s
        c0_l[i] = c0
        jseq += 1
        jseq_l[i] = jseq
        seq_req.append(i)
        heapq.heappush(fin_heap, fin << SEQ_BITS | jseq)
        if capped and c < cap_at:
            heapq.heappush(unc_heap, int(cap_at - c0) << SEQ_BITS | jseq)
            unc_l[i] = True
            unc_cnt += 1
            unc_c0 += c0
        dec_cnt[r] += 1
        own_c0[r] += c0
        s2_dec += c

    def leave(i: int) -> None:
        """Take request i out of the decoding set (its slot takes the last one) and release its KV."""
        nonlocal b, unc_cnt, unc_c0, s2_dec
        s = slot_l[i]
        b -= 1
        if s != b:
            j = slot_id[b]
            d_ids[s], d_c0[s], d_own[s] = j, c0_l[j], owner_l[j]
            slot_id[s] = j
            slot_l[j] = s
        slot_l[i] = -1
        c0 = c0_l[i]
        if unc_l[i]:
            unc_l[i] = False
            unc_cnt -= 1
            unc_c0 -= c0
        c = c0 + dsteps
        r = owner_l[i]
        dec_cnt[r] -= 1
        own_c0[r] -= c0
        s2_dec -= c
        okv[r] -= c + page

    def preempt(v: int) -> None:
        """Send running request v back to the waiting queue: its KV is freed, its generated tokens
        kept (the next prefill recomputes them)."""
        nonlocal pq_s2, pq_s1
        if slot_l[v] >= 0:
            c = ctx_l[v] = c0_l[v] + dsteps
            ctxf[v] = c
            leave(v)
        else:
            prefill_q.remove(v)
            pq_s2 -= ctx_l[v]
            if capped:
                pq_s1 -= min(ctx_l[v], topk)
            release(v, ctx_l[v])
        status_l[v] = WAITING
        queued[v] = t
        preempt_l[v] += 1
        waiting.push(v)

    def shed(tokens: float) -> None:
        """Preempt running requests (the ordering's victims) until `tokens` of KV are freed, keeping
        at least one: a switch whose memory fits only with less KV (`Decision.shed_kv_tokens`)."""
        decoding = sorted(slot_id[:b], key=jseq_l.__getitem__)
        for i in decoding:  # write back: the victims' contexts are read below
            ctx_l[i] = c0_l[i] + dsteps
        ctxf[decoding] = [ctx_l[i] for i in decoding]
        freed = 0.0
        while freed < tokens and len(decoding) + len(prefill_q) > 1:
            cand = decoding + prefill_q
            cids = np.asarray(cand, dtype=np.int64)
            tok = ctxf[cids]
            v = cand[ordering.victim(arr[cids], tok, tok.astype(np.int64) - inp[cids], out[cids])]
            if slot_l[v] >= 0:
                decoding.remove(v)
                freed += c0_l[v] + dsteps + page
            else:
                freed += ctx_l[v] + page
            preempt(v)

    def kv_growth() -> tuple[float, float]:
        """The running set's expected KV peak over its KV now (projection.py), all and busiest owner."""
        ids = d_ids[:b]
        ctx = d_c0[:b] + dsteps
        own = d_own[:b]
        if prefill_q:
            q = np.asarray(prefill_q, dtype=np.int64)
            q_own = np.array([owner_l[i] for i in prefill_q], dtype=np.int64)
            ids, ctx, own = np.concatenate([ids, q]), np.concatenate([ctx, ctxf[q]]), np.concatenate([own, q_own])
        # NOTE: through `ordering` and `tables` (closure cells already): naming `lstats` or `T` here
        # would make them cells, slower to read in the loop body on every run
        return expected_kv_peak_growth(ordering.stats.sorted_lengths, ctx, ctx - inp[ids], own, tables.ranks)

    def displace_for(i: int) -> bool:
        """The batch is full and request i heads the queue: preempt the running request the
        ordering says i should replace, if any."""
        cand = sorted(slot_id[:b], key=jseq_l.__getitem__) + prefill_q  # in the order they joined
        if not cand:
            return False
        cids = np.asarray(cand, dtype=np.int64)
        tok = np.array([c0_l[j] + dsteps if slot_l[j] >= 0 else ctx_l[j] for j in cand])
        v = ordering.displace(float(keyfn(np.array([i]))[0]), arr_l[i], arr[cids], tok, tok.astype(np.int64) - inp[cids])
        if v < 0:
            return False
        preempt(cand[v])
        return True

    def first_to_finish() -> int:
        """fin_min after decoders left: the top of fin_heap, past the entries of those that left."""
        while fin_heap:
            e = fin_heap[0]
            s = e & SEQ_MASK
            i = seq_req[s]
            if slot_l[i] >= 0 and jseq_l[i] == s:
                return e >> SEQ_BITS
            heapq.heappop(fin_heap)
        return 0

    def capped_sum(at: int) -> float:
        """Σ min(context, top-k) over the decoders at decode step `at` (never less than the last call's)."""
        nonlocal unc_cnt, unc_c0
        last = (at + 1) << SEQ_BITS  # entries below: the context reaches top-k at step ≤ at
        while unc_heap and unc_heap[0] < last:
            s = heapq.heappop(unc_heap) & SEQ_MASK
            i = seq_req[s]
            if unc_l[i] and jseq_l[i] == s:
                unc_l[i] = False
                unc_cnt -= 1
                unc_c0 -= c0_l[i]
        return unc_c0 + unc_cnt * at + topk * (b - unc_cnt)

    while ended < n:
        while nxt < n and arr_l[nxt] <= t:
            status_l[nxt] = WAITING
            waiting.push(nxt)
            nxt += 1
        if inflight is not None and t >= ready_s:
            plan = inflight.plan
            t += executor.commit_switch(plan)
            switches.append(SwitchRecord(LAYOUTS[layout], LAYOUTS[inflight.layout], started_s, t, plan.link_s,
                                         plan.cost_s, inflight.reason.name.lower()))
            layout = inflight.layout
            inflight = None
            state.steps_since_switch = 0
            state.capacity_reprice_at_step = -1
            state.layout, state.switch_in_flight = layout, False
            ordering.prefill_s_per_token = prefill_price[layout]
        if not b and not prefill_q and waiting.pos >= len(waiting.ids) and not waiting.new:
            if inflight is not None:
                t = max(t, ready_s)
            elif nxt < n:
                t = max(t, arr_l[nxt])
            continue
        if dyn_keys and lstats.version != stats_version:
            stats_version = lstats.version
            waiting.dirty = waiting.dirty or waiting.pos < len(waiting.ids) or len(waiting.new) > 0
        if waiting.dirty:
            waiting.resort(keyfn, ctx_l, ctxf, arrival_keys)
        # ---- admission (in priority order, head-of-line) ------------------------------------
        total = sum(okv)
        lay_owner, lay_share, lay_pool = is_owner_l[layout], share_l[layout], pools_l[layout] * wm
        wids = waiting.ids
        displaced = False
        # NOTE: a move that shed KV to fit admits nothing in the old layout until its commit
        hold = inflight is not None and inflight.shed_kv_tokens > 0
        while not skip_admit and not hold and waiting.pos < len(wids):
            i = wids[waiting.pos]
            if b + len(prefill_q) >= max_batch:
                # NOTE: only a request still owed its first token displaces (what it buys is that token)
                if not (displaces and ctx_l[i] == inp_l[i] and displace_for(i)):
                    break
                displaced = True
                total = sum(okv)
            c = ctx_l[i]
            need = c + page
            r = okv.index(min(okv))
            if lay_owner:
                fits = (okv[r] + need) * bpt <= lay_pool
            else:
                fits = (total + need) * lay_share * bpt <= lay_pool
            if not fits:
                if not b and not prefill_q and inflight is None and not fits_somewhere(need * bpt, policy, tables,
                                                                                        wm):
                    waiting.pos += 1
                    end(i, ABORTED)
                    continue
                break
            waiting.pos += 1
            owner_l[i] = r
            okv[r] += need
            total += need
            pre_left[i] = int(c)
            status_l[i] = PREFILL
            prefill_q.append(i)
            pq_s2 += c
            if capped:
                pq_s1 += min(c, topk)
        skip_admit = False
        if displaced:
            fin_min = first_to_finish()
        # ---- policy -------------------------------------------------------------------------
        s2 = s2_dec
        if not b:
            s1 = 0.0
        elif not capped:
            s1 = s2
        elif unc_heap and unc_heap[0] < (dsteps + 1) << SEQ_BITS:
            s1 = capped_sum(dsteps)
        else:  # = capped_sum(dsteps): no context reached top-k since the last call
            s1 = unc_c0 + unc_cnt * dsteps + topk * (b - unc_cnt)
        if prefill_q:
            # NOTE: prefilling requests count as the batch they are about to join
            state.context_sum_tokens = s2 + pq_s2
            state.context_capped_sum_tokens = s1 + pq_s1 if capped else state.context_sum_tokens
        else:
            state.context_sum_tokens = s2
            state.context_capped_sum_tokens = s1
        state.context_requests = state.running = b + len(prefill_q)
        if waiting.needs is not wt_needs or waiting.pos != wt_pos:  # the queue changed
            wt_needs, wt_pos = waiting.needs, waiting.pos
            state.waiting_tokens = wt_needs[wt_pos:]
        state.prefill_step_fraction = ema_steps
        state.prefill_tokens_per_step = ema_tok
        state.prefill_context_tokens = ema_tok_pfx / ema_tok if ema_tok > 0 else 0.0
        state.prefill_owner_share = ema_own / ema_tok if ema_tok > 0 else 1.0
        state.owner_kv_tokens = okv
        if wt_pos < len(wt_needs):  # NOTE: only the queue's head reads it (PolicyState): stale while none waits
            cap = pools_l[layout] / bpt
            if lay_owner:
                state.free_kv_bytes = [(cap - x) * bpt for x in okv]
            else:
                state.free_kv_bytes = [(cap / lay_share - total) * (bpt * lay_share)] * T
        if project and b and dsteps >= proj_at:
            proj_at = dsteps + PROJECTION_EVERY_STEPS
            lens = lstats.sorted_lengths
            # NOTE: no request's expected KV grows by more than the longest observed length
            # (projection.py), so below this bound the running set can't outgrow the layout it
            # runs in, and the projection (~10 µs per 100 requests) is skipped: none is reported
            longest = float(lens[-1]) if lens.shape[0] else 0.0
            if lay_owner:
                bound = max(okv) + (max(dec_cnt) + len(prefill_q)) * longest
            else:
                bound = total + (b + len(prefill_q)) * longest
            if lens.shape[0] and bound > cap_l[layout]:
                state.kv_growth_tokens, state.owner_kv_growth_tokens = kv_growth()
            else:
                state.kv_growth_tokens = state.owner_kv_growth_tokens = 0.0
        state.step_index = steps
        d = policy.decide(state)
        if d.capacity_stands_steps:
            state.capacity_reprice_at_step = steps + d.capacity_stands_steps
        if d.switch and inflight is None and d.layout != layout and d.plan is not None:
            inflight, started_s = d, t
            state.switch_in_flight = True
            if d.shed_kv_tokens > 0:
                shed(d.shed_kv_tokens)
            ready_s = t + executor.start_switch(d.plan)
            if ready_s <= t or d.shed_kv_tokens > 0:
                skip_admit = d.shed_kv_tokens > 0
                continue  # re-decide (in flight) with the new membership
        if not b and not prefill_q:
            # nothing admitted: wait for the switch, or (fixed layouts) the queue is stuck on KV
            if inflight is not None:
                t = max(t, ready_s)
                continue
            if waiting.pos >= len(waiting.ids):
                continue  # the queue emptied by aborts; the top of the loop idles or ends
            # the policy chose not to move to a layout with room: the head can't be served here
            i = waiting.ids[waiting.pos]
            waiting.pos += 1
            end(i, ABORTED)
            continue
        # ---- KV wall: preempt until the decoders can take one more step ---------------------
        if b:
            # = kv_steps(...); the spread layouts' inline (their decoders: b)
            k_kv = kv_steps(layout, dec_cnt, okv, total) if lay_owner else math.floor((cap_l[layout] - total) / b)
            if k_kv < 1:
                decoding = sorted(slot_id[:b], key=jseq_l.__getitem__)  # in the order they joined
                for i in decoding:  # write back: the victims' contexts are read below
                    ctx_l[i] = c0_l[i] + dsteps
                ctxf[decoding] = [ctx_l[i] for i in decoding]
                while b and k_kv < 1:
                    cand = decoding + prefill_q
                    if len(cand) == 1:
                        v = cand[0]
                        decoding.remove(v)
                        leave(v)
                        end(v, ABORTED)
                    else:
                        if lay_owner:
                            # NOTE: an owner layout's wall is one owner's pool: only a request held
                            # there frees room on it (a DP-attention rank preempts its own requests);
                            # a victim from another owner is a re-prefill that frees nothing where it
                            # binds (it was: DS-V3.2 heavy tail, DOP 925 preemptions, 228 this way)
                            # NOTE: `layout` stays out of the comprehensions (it would become a
                            # closure cell, slower to read on every run)
                            lim = cap_l[layout]
                            short = [c > 0 and lim - x < c for x, c in zip(okv, dec_cnt)]
                            cand = [i for i in cand if short[owner_l[i]]] or cand
                        cids = np.asarray(cand, dtype=np.int64)
                        tok = ctxf[cids]
                        v = cand[ordering.victim(arr[cids], tok, tok.astype(np.int64) - inp[cids], out[cids])]
                        if slot_l[v] >= 0:
                            decoding.remove(v)
                        preempt(v)
                    total = sum(okv)
                    k_kv = kv_steps(layout, dec_cnt, okv, total) if b else 1 << 30
                fin_min = first_to_finish()
                if waiting.dirty:
                    skip_admit = True  # NOTE: re-admitting the victim at once would undo the preemption
                    continue  # re-sort and re-decide with the new membership
                if b:
                    s2 = s2_dec
                    s1 = capped_sum(dsteps) if capped else s2
        else:
            k_kv = 1 << 30
        # ---- the run --------------------------------------------------------------------------
        # the run's length: the least of these cuts, at least 1 (whole numbers; min/max spelled out)
        k = max_run
        if b:
            left = fin_min - dsteps  # steps until the first decoder is done
            if left < k:
                k = left
            if k_kv < k:
                k = k_kv
        if prefill_q:
            pre_total = sum([pre_left[i] for i in prefill_q])
            cut = math.ceil(pre_left[prefill_q[0]] / chunk)
            if cut < k:
                k = cut
        else:
            pre_total = 0
        if est_step_s > 0:
            if nxt < n:
                cut = math.ceil((arr_l[nxt] - t) / est_step_s)  # the next arrival
                if cut < k:
                    k = cut if cut > 1 else 1
            if inflight is not None:
                cut = math.ceil((ready_s - t) / est_step_s)  # the switch's hand-off
                if cut < k:
                    k = cut if cut > 1 else 1
        if k < 1:
            k = 1
        # NOTE: one StepBatch, refilled each run, holding views of the slots (the executor protocol:
        # read it during the call, keep nothing)
        batch.layout = layout
        if view_b != b:
            view_b = b
            batch.context_base_tokens, batch.owners, batch.request_ids = d_c0[:b], d_own[:b], d_ids[:b]
        batch.context_sum_tokens, batch.context_capped_sum_tokens = s2, s1
        if b and lay_owner:  # per owner Σ context only where the executor reads it
            batch.owner_context_tokens = [x + c * dsteps for x, c in zip(own_c0, dec_cnt)]
            batch.owner_requests = dec_cnt
        else:
            batch.owner_context_tokens = batch.owner_requests = None
        if b and capped and k > 1:
            at = dsteps + k - 1
            if unc_heap and unc_heap[0] < (at + 1) << SEQ_BITS:
                batch.context_capped_sum_last_tokens = capped_sum(at)
            else:  # = capped_sum(at): no context reaches top-k by then
                batch.context_capped_sum_last_tokens = unc_c0 + unc_cnt * at + topk * (b - unc_cnt)
        else:
            batch.context_capped_sum_last_tokens = -1.0
        batch.context_offset_tokens = float(dsteps)
        if pre_total:
            full = pre_total // chunk  # = [min(max(pre_total − chunk · j, 0), chunk) for j < k]
            if full >= k:
                pref_l = [float(chunk)] * k
            else:
                pref_l = [float(chunk)] * full + [float(pre_total - chunk * full)] + [0.0] * (k - full - 1)
            run_tok = sum(pref_l)
            done_tokens = int(run_tok)
            i = prefill_q[0]
            if pre_left[i] >= run_tok:  # = chunk_plan(...)'s common case: every chunk from the first request
                done = ctx_l[i] - pre_left[i]
                pfx = []
                for x in pref_l:
                    pfx.append(done)
                    done += x
                dur = executor.run_steps(batch, pref_l, pfx, ([owner_l[i]] * k, pref_l, pfx))
                run_own = run_tok
            else:
                pfx, own_rank, own_tok, own_pfx = chunk_plan(pref_l, prefill_q, pre_left, ctx_l, owner_l)
                dur = executor.run_steps(batch, pref_l, pfx, (own_rank, own_tok, own_pfx))
                run_own = sum(own_tok)
            run_tok_pfx = sum([a * c for a, c in zip(pref_l, pfx)])
            run_chunks = float(min(k, -(-pre_total // chunk)))  # the steps whose chunk is not empty
        else:
            done_tokens = 0
            dur = executor.run_steps(batch, zeros_l[k] if k <= max_run else [0.0] * k)
            run_tok = run_tok_pfx = run_own = run_chunks = 0.0
        if type(dur) is not list:
            dur = dur.tolist()
        if run_tok or ema_tok:
            w = ema_w[k] if k <= max_run else 1.0 - 0.5 ** (k / PREFILL_STATS_HALF_LIFE_STEPS)
            ema_steps += w * (run_chunks / k - ema_steps)
            ema_tok += w * (run_tok / k - ema_tok)
            ema_tok_pfx += w * (run_tok_pfx / k - ema_tok_pfx)
            ema_own += w * (run_own / k - ema_own)
            if ema_tok < 1e-3:
                ema_steps = ema_tok = ema_tok_pfx = ema_own = 0.0
        if k < 8:
            run_s = -0.0  # = sum_as_numpy(dur)
            for x in dur:
                run_s += x
        else:
            run_s = sum_as_numpy(dur)
        t += run_s
        est_step_s = dur[-1]
        ordering.tpot_s = est_step_s
        steps += k
        if b:
            decode_steps += k
        layout_s[layout] += run_s
        state.steps_since_switch += k
        if b:
            fk = float(k)
            okv = [x + c * fk for x, c in zip(okv, dec_cnt)]
            s2_dec += b * fk
            dsteps += k
            if left <= k:
                due = []
                last = (dsteps + 1) << SEQ_BITS
                while fin_heap and fin_heap[0] < last:
                    s = heapq.heappop(fin_heap) & SEQ_MASK
                    i = seq_req[s]
                    if slot_l[i] >= 0 and jseq_l[i] == s:
                        due.append(s)
                due.sort()  # in the order they joined
                for s in due:
                    i = seq_req[s]
                    leave(i)
                    status_l[i] = DONE  # = end(i, DONE)
                    finish_l[i] = t
                    ended += 1
                    observe(float(out_l[i]))
                    stats_add(float(out_l[i]))
                fin_min = first_to_finish()
        while prefill_q and done_tokens > 0:
            i = prefill_q[0]
            take = min(pre_left[i], done_tokens)
            pre_left[i] -= take
            done_tokens -= take
            if pre_left[i] > 0:
                break
            prefill_q.pop(0)
            c = ctx_l[i]
            pq_s2 -= c
            if capped:
                pq_s1 -= min(c, topk)
            if c == inp_l[i]:  # the first token
                c += 1.0
                ctx_l[i] = c
                okv[owner_l[i]] += 1.0
                first_l[i] = t
            if c - inp_l[i] >= out_l[i]:
                release(i, c)
                end(i, DONE)
            else:
                status_l[i] = DECODE
                join(i, c)
        tl_t.append(t)
        tl_layout.append(layout)
        tl_batch.append(b)
        used = max(okv) * bpt if is_owner_l[layout] else sum(okv) * share_l[layout] * bpt
        tl_kv.append(used / pools_l[layout] if pools_l[layout] > 0 else 1.0)
        if progress is not None:
            progress(ended, n)
    res = ServeResult(arr, inp, out, np.array(first_l), np.array(finish_l), np.array(status_l, dtype=np.int8),
                      np.array(preempt_l, dtype=np.int64), switches, steps, decode_steps,
                      {name: layout_s[i] for i, name in enumerate(LAYOUTS)},
                      {"t_s": tl_t, "layout": tl_layout, "batch": tl_batch, "kv_used_fraction": tl_kv})
    return res
