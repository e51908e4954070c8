"""The serving loop: admission, chunked prefill, decode steps, preemption and layout switches,
driven against an `Executor`.

Requests move pending → waiting → prefill → decode → done (or → waiting again when preempted,
keeping their generated tokens, which are recomputed by the next prefill; or → aborted when one
request alone can never fit). Every request ends done or aborted exactly once; `ServeResult`
carries the per-request record.

The loop runs in *runs* of steps with constant membership: it asks the policy, admits, then hands
the executor up to `max_run_steps` steps, cut short at the next decode completion, prefill
completion, KV wall, expected arrival or switch hand-off. The policy is therefore consulted at
every membership change and at least every `max_run_steps` steps (NOTE: between those points its
answer can only drift with context growth, which the run length bounds).

KV is counted in tokens, per owner rank, with one page of slack per request (page rounding);
every request has an owner rank (the least-loaded at admission) in every layout, so a switch to
an owner layout knows where each request lives. Admission keeps `admit_watermark_fraction` of the
pool free.

Does not: price steps (the executor), choose layouts (the policy) or order requests (ordering.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from planner.errors import SpecError
from runtime_policy.admission import chunk_plan, fits_somewhere
from runtime_policy.executor import Executor, StepBatch
from runtime_policy.ordering import Ordering
from runtime_policy.policy import Decision, PolicyState
from runtime_policy.tables import LAYOUTS, NO_TOPK, StepTimeTable

PENDING, WAITING, PREFILL, DECODE, DONE, ABORTED = range(6)
PREFILL_STATS_HALF_LIFE_STEPS = 256.0  # NOTE: the policy's cooldown scale; the prefill rate it sees forgets over it


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
    """The waiting queue, sorted by the ordering's keys when it changed."""

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)
        self.needs = np.zeros(0)
        self.pos = 0
        self.new: list[int] = []
        self.dirty = False

    def __len__(self) -> int:
        return self.ids.size - self.pos + len(self.new)

    def push(self, i: int) -> None:
        self.new.append(i)
        self.dirty = True

    def resort(self, keyfn, needfn) -> None:
        if self.pos >= self.ids.size and len(self.new) == 1:
            self.ids = np.array(self.new, dtype=np.int64)  # one request: nothing to sort (the common case)
        else:
            ids = np.concatenate([self.ids[self.pos:], np.asarray(self.new, dtype=np.int64)])
            self.ids = ids[np.argsort(keyfn(ids), kind="stable")]
        self.needs = needfn(self.ids)
        self.pos, self.new, self.dirty = 0, [], False


_add = np.add.reduce  # NOTE: ndarray.sum() goes through a Python wrapper (~1 µs more per call)


def serve(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, tables: StepTimeTable,
          policy, ordering: Ordering, executor: Executor, config: LoopConfig = LoopConfig(),
          progress: Callable[[int, int], None] | None = None) -> ServeResult:
    """Serve the requests (sorted by arrival) to completion; see the module docstring.

    NOTE: written for speed, because the simulator's runs are often 2–4 steps long (cut by
    arrivals), so per-run overhead bounds simulated steps per second. The decoding set lives in
    arrays in admission order (ids, contexts, the context at which each finishes, owners; per-owner
    counts) that are filtered on completion and appended on joining, not rebuilt; a request's
    context `ctxf` is the single per-request counter (generated = ctxf − input; KV held = ctxf + one
    page), written back from the decoding arrays when it leaves them; per-request scalars are read
    from Python lists; and KV and context sums are whole token counts (exact in any order), so
    results equal the straightforward version's (tests/runtime_policy/test_loop_golden.py)."""
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
    pools_l = tables.info.kv_pool_bytes.tolist()
    share_l = tables.info.kv_total_share.tolist()
    is_owner_l = [bool(x) for x in tables.info.is_owner]
    arr_l, inp_l, out_l = arr.tolist(), inp.tolist(), out.tolist()
    ctxf = inp.astype(np.float64)  # [n] context = input + generated (stale for decoders: see dec_ctx)
    endf = (inp + out).astype(np.float64)  # [n] the context at which a request is done
    status = np.full(n, PENDING, dtype=np.int8)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    owner = np.zeros(n, dtype=np.int64)
    queued = arr.copy()  # [n] when each request last joined the waiting queue (arrival, or preemption)
    owner_l = [0] * n
    pre_left = [0] * n
    preempt = np.zeros(n, dtype=np.int64)
    okv = [0.0] * T  # KV tokens each rank owns (whole numbers, so sums are exact in any order)
    waiting = _Waiting()
    prefill_q: list[int] = []
    # the decoding set, in the order requests joined it
    dec = np.zeros(0, dtype=np.int64)  # [B] ids
    dec_ctx = np.zeros(0)  # [B] current contexts
    dec_fin = np.zeros(0)  # [B] the decode step (of `dsteps`) at which each is done
    fin_min = 0.0  # dec_fin.min(), kept while membership holds
    dsteps = 0  # decode steps run so far
    dec_own = np.zeros(0, dtype=np.int64)  # [B] owner ranks
    dec_cnt = [0] * T  # decoders per owner
    dec_own_ctx = [0.0] * T  # Σ context of each owner's decoders
    s2_dec = 0.0  # Σ dec_ctx, kept incrementally (exact: whole numbers)
    res = ServeResult(arr, inp, out, first, finish, status, preempt,
                      layout_time_s={name: 0.0 for name in LAYOUTS},
                      timeline={"t_s": [], "layout": [], "batch": [], "kv_used_fraction": []})
    tl_t, tl_layout, tl_batch, tl_kv = (res.timeline[k] for k in ("t_s", "layout", "batch", "kv_used_fraction"))
    ordering.prefill_s_per_token = float(tables.step_s(0, 0, np.array([config.prefill_chunk_tokens]), np.zeros(1),
                                                       np.zeros(1))[0]) / config.prefill_chunk_tokens

    def keyfn(ids):
        tok = ctxf[ids].astype(np.int64)
        return ordering.keys(arr[ids], tok, tok - inp[ids], out[ids], queued[ids])

    needfn = ctxf.__getitem__
    layout = int(policy.initial_layout(inp[arr <= arr[0]].astype(np.float64)))
    state = PolicyState(np.zeros(0), np.zeros(T), np.zeros(T), np.zeros(0), layout)
    t = arr_l[0]
    nxt = 0
    ended = 0
    est_step_s = 0.0
    stats_version = -1
    inflight: Decision | None = None
    ready_s = started_s = 0.0
    wm = 1.0 - config.admit_watermark_fraction
    skip_admit = False
    max_batch, max_run, chunk = config.max_batch, config.max_run_steps, config.prefill_chunk_tokens
    # running prefill statistics for the policy (exponentially weighted over steps)
    ema_steps = ema_tok = ema_tok_pfx = ema_own = 0.0
    zeros_run = np.zeros(max_run)
    zeros_run.setflags(write=False)
    dyn_keys, lstats = ordering.dynamic_keys, ordering.stats
    steps = decode_steps = 0
    layout_s = [0.0] * len(LAYOUTS)
    # per layout: KV tokens one rank can hold (owner layouts), or all ranks together (the others)
    cap_l = [pools_l[i] / bpt if is_owner_l[i] else pools_l[i] / (bpt * share_l[i]) if share_l[i] > 0 else 0.0
             for i in range(len(LAYOUTS))]

    def kv_steps(layout: int, owner_count: list[int], owner_kv: list[float], total: float) -> int:
        # = _kv_steps(...) with the per-layout capacity precomputed (the same float operations)
        if is_owner_l[layout]:
            cap = cap_l[layout]
            room = [math.floor((cap - kv) / c) for kv, c in zip(owner_kv, owner_count) if c > 0]
            return int(min(room)) if room else 1 << 30
        return int(math.floor((cap_l[layout] - total) / sum(owner_count)))

    def release(i: int, ctx: float) -> None:
        okv[owner_l[i]] -= ctx + page

    def end(i: int, how: int) -> None:
        nonlocal ended
        status[i] = how
        finish[i] = t
        ended += 1
        if how == DONE:
            policy.observe_completion(float(out_l[i]))
            ordering.stats.add(float(out_l[i]))

    while ended < n:
        while nxt < n and arr_l[nxt] <= t:
            status[nxt] = WAITING
            waiting.push(nxt)
            nxt += 1
        if inflight is not None and t >= ready_s:
            plan = inflight.plan
            t += executor.commit_switch(plan)
            res.switches.append(SwitchRecord(LAYOUTS[layout], LAYOUTS[inflight.layout], started_s, t, plan.link_s,
                                             plan.cost_s, inflight.reason.name.lower()))
            layout = inflight.layout
            inflight = None
            state.steps_since_switch = 0
        b = dec.size
        if not b and not prefill_q and waiting.pos >= waiting.ids.size and not waiting.new:
            if inflight is not None:
                t = max(t, ready_s)
            elif nxt < n:
                t = max(t, arr_l[nxt])
            continue
        if dyn_keys and lstats.version != stats_version:
            stats_version = lstats.version
            waiting.dirty = waiting.dirty or waiting.pos < waiting.ids.size or len(waiting.new) > 0
        if waiting.dirty:
            waiting.resort(keyfn, needfn)
        # ---- admission (in priority order, head-of-line) ------------------------------------
        total = sum(okv)
        lay_owner, lay_share, lay_pool = is_owner_l[layout], share_l[layout], pools_l[layout] * wm
        while (not skip_admit and waiting.pos < waiting.ids.size
               and b + len(prefill_q) < max_batch):
            i = int(waiting.ids[waiting.pos])
            c = float(ctxf[i])
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
            owner[i] = r
            owner_l[i] = r
            okv[r] += need
            total += need
            pre_left[i] = int(c)
            status[i] = PREFILL
            prefill_q.append(i)
        skip_admit = False
        # ---- policy -------------------------------------------------------------------------
        s2 = s2_dec
        s1 = (float(_add(np.minimum(dec_ctx, topk))) if capped else s2) if b else 0.0
        if prefill_q:
            # NOTE: prefilling requests count as the batch they are about to join
            pc = ctxf[prefill_q]
            state.context_tokens = np.concatenate([dec_ctx, pc])
            pcl = pc.tolist()
            state.context_sum_tokens = s2 + sum(pcl)
            state.context_capped_sum_tokens = s1 + sum([min(x, topk) for x in pcl]) if capped else \
                state.context_sum_tokens
        else:
            state.context_tokens = dec_ctx
            state.context_sum_tokens = s2
            state.context_capped_sum_tokens = s1
        state.waiting_tokens = waiting.needs[waiting.pos:]
        state.prefill_step_fraction = ema_steps
        state.prefill_tokens_per_step = ema_tok
        state.prefill_context_tokens = ema_tok_pfx / ema_tok if ema_tok > 0 else 0.0
        state.prefill_owner_share = ema_own / ema_tok if ema_tok > 0 else 1.0
        state.layout = layout
        state.switch_in_flight = inflight is not None
        state.running = b + len(prefill_q)
        state.owner_kv_tokens = np.array(okv)
        cap = pools_l[layout] / bpt
        if lay_owner:
            state.free_kv_bytes = np.array([(cap - x) * bpt for x in okv])
        else:
            state.free_kv_bytes = np.array([(cap / lay_share - total) * (bpt * lay_share)] * T)
        d = policy.decide(state)
        if d.switch and inflight is None and d.layout != layout and d.plan is not None:
            inflight, started_s = d, t
            ready_s = t + executor.start_switch(d.plan)
            if ready_s <= t:
                continue
        if not b and not prefill_q:
            # nothing admitted: wait for the switch, or (fixed layouts) the queue is stuck on KV
            if inflight is not None:
                t = max(t, ready_s)
                continue
            if waiting.pos >= waiting.ids.size:
                continue  # the queue emptied by aborts; the top of the loop idles or ends
            # the policy chose not to move to a layout with room: the head can't be served here
            i = int(waiting.ids[waiting.pos])
            waiting.pos += 1
            end(i, ABORTED)
            continue
        # ---- KV wall: preempt until the decoders can take one more step ---------------------
        if b:
            k_kv = kv_steps(layout, dec_cnt, okv, total)
            if k_kv < 1:
                ctxf[dec] = dec_ctx  # write back: the victims' contexts are read below
                decoding = dec.tolist()
                while b and k_kv < 1:
                    cand = decoding + prefill_q
                    cids = np.asarray(cand, dtype=np.int64)
                    if len(cand) == 1:
                        v = cand[0]
                        decoding.remove(v)
                        release(v, float(ctxf[v]))
                        end(v, ABORTED)
                    else:
                        tok = ctxf[cids]
                        v = cand[ordering.victim(arr[cids], tok, tok.astype(np.int64) - inp[cids], out[cids])]
                        (decoding if status[v] == DECODE else prefill_q).remove(v)
                        release(v, float(ctxf[v]))
                        status[v] = WAITING
                        queued[v] = t
                        preempt[v] += 1
                        waiting.push(v)
                    b = len(decoding)
                    dec_cnt = np.bincount(owner[decoding], minlength=T).tolist() if b else dec_cnt
                    total = sum(okv)
                    k_kv = kv_steps(layout, dec_cnt, okv, total) if b else 1 << 30
                dec = np.array(decoding, dtype=np.int64)
                dec_ctx, dec_own = ctxf[dec], owner[dec]
                dec_fin = endf[dec] - dec_ctx + dsteps
                fin_min = float(dec_fin.min()) if b else 0.0
                dec_cnt = np.bincount(dec_own, minlength=T).tolist()
                dec_own_ctx = np.bincount(dec_own, weights=dec_ctx, minlength=T).tolist()
                s2_dec = float(_add(dec_ctx)) if b else 0.0
                if waiting.dirty:
                    skip_admit = True  # NOTE: re-admitting the victim at once would undo the preemption
                    continue  # re-sort and re-decide with the new membership
                if b:
                    s2 = s2_dec
                    s1 = float(_add(np.minimum(dec_ctx, topk))) if capped else s2
        else:
            k_kv = 1 << 30
        # ---- the run --------------------------------------------------------------------------
        k = max_run
        if b:
            left = int(fin_min) - dsteps  # steps until the first decoder is done
            k = min(k, left, k_kv)
        if prefill_q:
            pre_total = sum([pre_left[i] for i in prefill_q])
            k = min(k, math.ceil(pre_left[prefill_q[0]] / chunk))
        else:
            pre_total = 0
        if est_step_s > 0:
            if nxt < n:
                k = min(k, max(1, math.ceil((arr_l[nxt] - t) / est_step_s)))
            if inflight is not None:
                k = min(k, max(1, math.ceil((ready_s - t) / est_step_s)))
        k = max(int(k), 1)
        if pre_total:
            pref_l = [float(min(max(pre_total - chunk * j, 0), chunk)) for j in range(k)]
            pref = np.array(pref_l)
            done_tokens = int(sum(pref_l))
            pfx, own_rank, own_tok, own_pfx = chunk_plan(pref_l, prefill_q, pre_left, ctxf, owner_l)
            dur = executor.run_steps(StepBatch(layout, dec_ctx, dec_own, dec, s2, s1, dec_own_ctx, dec_cnt), pref, pfx,
                                     (own_rank, own_tok, own_pfx))
            run_tok, run_tok_pfx, run_own = sum(pref_l), sum([a * c for a, c in zip(pref_l, pfx)]), sum(own_tok)
            run_chunks = float(sum([1 for x in pref_l if x > 0]))
        else:
            pref = zeros_run[:k] if k <= max_run else np.zeros(k)
            done_tokens = 0
            dur = executor.run_steps(StepBatch(layout, dec_ctx, dec_own, dec, s2, s1, dec_own_ctx, dec_cnt), pref)
            run_tok = run_tok_pfx = run_own = run_chunks = 0.0
        if run_tok or ema_tok:
            w = 1.0 - 0.5 ** (k / PREFILL_STATS_HALF_LIFE_STEPS)
            ema_steps += w * (run_chunks / k - ema_steps)
            ema_tok += w * (run_tok / k - ema_tok)
            ema_tok_pfx += w * (run_tok_pfx / k - ema_tok_pfx)
            ema_own += w * (run_own / k - ema_own)
            if ema_tok < 1e-3:
                ema_steps = ema_tok = ema_tok_pfx = ema_own = 0.0
        run_s = float(_add(dur))
        t += run_s
        est_step_s = float(dur[-1])
        ordering.tpot_s = est_step_s
        steps += k
        if b:
            decode_steps += k
        layout_s[layout] += run_s
        state.steps_since_switch += k
        if b:
            fk = float(k)
            for r in range(T):
                grow = dec_cnt[r] * fk
                okv[r] += grow
                dec_own_ctx[r] += grow
            s2_dec += b * fk
            dec_ctx = dec_ctx + k  # NOTE: a new array: the executor may keep the one it was handed
            dsteps += k
            if left <= k:
                done = dec_fin <= dsteps
                for i, c in zip(dec[done].tolist(), dec_ctx[done].tolist()):
                    release(i, c)
                    end(i, DONE)
                    dec_cnt[owner_l[i]] -= 1
                    dec_own_ctx[owner_l[i]] -= c
                    s2_dec -= c
                keep = ~done
                dec, dec_ctx, dec_fin, dec_own = dec[keep], dec_ctx[keep], dec_fin[keep], dec_own[keep]
                fin_min = float(dec_fin.min()) if dec.size else 0.0
        joined = []
        while prefill_q and done_tokens > 0:
            i = prefill_q[0]
            take = min(pre_left[i], done_tokens)
            pre_left[i] -= take
            done_tokens -= take
            if pre_left[i] > 0:
                break
            prefill_q.pop(0)
            c = float(ctxf[i])
            if c == inp_l[i]:  # the first token
                c += 1.0
                ctxf[i] = c
                okv[owner_l[i]] += 1.0
                first[i] = t
            if c - inp_l[i] >= out_l[i]:
                release(i, c)
                end(i, DONE)
            else:
                status[i] = DECODE
                joined.append(i)
                dec_cnt[owner_l[i]] += 1
                dec_own_ctx[owner_l[i]] += c
        if joined:
            jd = np.array(joined, dtype=np.int64)
            jc = ctxf[jd]
            s2_dec += sum(jc.tolist())
            jf = endf[jd] - jc + dsteps
            fin_min = min(fin_min, float(jf.min())) if dec.size else float(jf.min())
            dec = np.concatenate([dec, jd])
            dec_ctx = np.concatenate([dec_ctx, jc])
            dec_fin = np.concatenate([dec_fin, jf])
            dec_own = np.concatenate([dec_own, owner[jd]])
        tl_t.append(t)
        tl_layout.append(layout)
        tl_batch.append(dec.size)
        used = max(okv) * bpt if is_owner_l[layout] else sum(okv) * share_l[layout] * bpt
        tl_kv.append(float(used / pools_l[layout]) if pools_l[layout] > 0 else 1.0)
        if progress is not None:
            progress(ended, n)
    res.steps, res.decode_steps = steps, decode_steps
    for i, name in enumerate(LAYOUTS):
        res.layout_time_s[name] += layout_s[i]
    return res
