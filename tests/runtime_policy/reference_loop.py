"""The serving loop as first written (commit e1a4929): straightforward numpy over Python lists,
kept here only as the reference the optimized `runtime_policy.loop.serve` must match exactly
(test_loop_golden.py). Not used by the library.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from planner.errors import SpecError
from runtime_policy.executor import Executor, StepBatch
from runtime_policy.loop import ABORTED, DECODE, DONE, PENDING, PREFILL, WAITING, LoopConfig, ServeResult, SwitchRecord
from runtime_policy.ordering import Ordering
from runtime_policy.policy import Decision, PolicyState
from runtime_policy.tables import LAYOUTS, StepTimeTable


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
        ids = np.concatenate([self.ids[self.pos:], np.asarray(self.new, dtype=np.int64)])
        self.ids = ids[np.argsort(keyfn(ids), kind="stable")]
        self.needs = needfn(self.ids)
        self.pos, self.new, self.dirty = 0, [], False


def serve(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, tables: StepTimeTable,
          policy, ordering: Ordering, executor: Executor, config: LoopConfig = LoopConfig(),
          progress: Callable[[int, int], None] | None = None) -> ServeResult:
    """Serve the requests (sorted by arrival) to completion; see the module docstring."""
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
    pools, share, is_owner = tables.info.kv_pool_bytes, tables.info.kv_total_share, tables.info.is_owner
    gen = np.zeros(n, dtype=np.int64)
    status = np.full(n, PENDING, dtype=np.int8)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    owner = np.zeros(n, dtype=np.int64)
    kvtok = np.zeros(n)
    pre_left = np.zeros(n, dtype=np.int64)
    preempt = np.zeros(n, dtype=np.int64)
    owner_kv = np.zeros(T)
    waiting = _Waiting()
    prefill_q: list[int] = []
    decoding: list[int] = []
    res = ServeResult(arr, inp, out, first, finish, status, preempt,
                      layout_time_s={name: 0.0 for name in LAYOUTS},
                      timeline={"t_s": [], "layout": [], "batch": [], "kv_used_fraction": []})
    ordering.prefill_s_per_token = float(tables.step_s(0, 0, np.array([config.prefill_chunk_tokens]), np.zeros(1),
                                                       np.zeros(1))[0]) / config.prefill_chunk_tokens
    queued = arr.copy()
    keyfn = lambda ids: ordering.keys(arr[ids], inp[ids] + gen[ids], gen[ids], out[ids], queued[ids])  # noqa: E731
    needfn = lambda ids: (inp[ids] + gen[ids]).astype(np.float64)  # noqa: E731
    layout = int(policy.initial_layout(inp[arr <= arr[0]].astype(np.float64)))
    state = PolicyState(np.zeros(0), owner_kv, np.zeros(T), np.zeros(0), layout)
    t = float(arr[0])
    nxt = 0
    ended = 0
    est_step_s = 0.0
    stats_version = -1
    inflight: Decision | None = None
    ready_s = started_s = 0.0
    wm = 1.0 - config.admit_watermark_fraction
    skip_admit = False

    def free_tokens(lay: int, total: float) -> np.ndarray:
        cap = pools[lay] / bpt
        if is_owner[lay]:
            return cap - owner_kv
        return np.full(T, cap / share[lay] - total)

    def release(i: int) -> None:
        owner_kv[owner[i]] -= kvtok[i]
        kvtok[i] = 0.0

    def end(i: int, how: int) -> None:
        nonlocal ended
        status[i] = how
        finish[i] = t
        ended += 1
        if how == DONE:
            policy.observe_completion(float(out[i]))
            ordering.stats.add(float(out[i]))

    while ended < n:
        while nxt < n and arr[nxt] <= t:
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
        if not decoding and not prefill_q and not len(waiting):
            if inflight is not None:
                t = max(t, ready_s)
            elif nxt < n:
                t = max(t, float(arr[nxt]))
            continue
        if ordering.dynamic_keys and ordering.stats.version != stats_version:
            stats_version = ordering.stats.version
            waiting.dirty = waiting.dirty or len(waiting) > 0
        if waiting.dirty:
            waiting.resort(keyfn, needfn)
        # ---- admission (in priority order, head-of-line) ------------------------------------
        total = float(owner_kv.sum())
        while (not skip_admit and waiting.pos < waiting.ids.size
               and len(decoding) + len(prefill_q) < config.max_batch):
            i = int(waiting.ids[waiting.pos])
            need = float(inp[i] + gen[i]) + page
            r = int(np.argmin(owner_kv))
            if is_owner[layout]:
                fits = (owner_kv[r] + need) * bpt <= pools[layout] * wm
            else:
                fits = (total + need) * share[layout] * bpt <= pools[layout] * wm
            if not fits:
                if not decoding and not prefill_q and inflight is None and not _fits_somewhere(need * bpt, policy,
                                                                                              tables, wm):
                    waiting.pos += 1
                    end(i, ABORTED)
                    continue
                break
            waiting.pos += 1
            owner[i] = r
            kvtok[i] = need
            owner_kv[r] += need
            total += need
            pre_left[i] = inp[i] + gen[i]
            status[i] = PREFILL
            prefill_q.append(i)
        skip_admit = False
        # ---- policy -------------------------------------------------------------------------
        dec = np.asarray(decoding, dtype=np.int64)
        ctx = (inp[dec] + gen[dec]).astype(np.float64)
        # NOTE: prefilling requests count as the batch they are about to join
        state.context_tokens = (np.concatenate([ctx, (inp[prefill_q] + gen[prefill_q]).astype(np.float64)])
                                if prefill_q else ctx)
        state.waiting_tokens = waiting.needs[waiting.pos:]
        state.layout = layout
        state.switch_in_flight = inflight is not None
        state.running = len(decoding) + len(prefill_q)
        ft = free_tokens(layout, total)
        np.multiply(ft, bpt * (share[layout] if not is_owner[layout] else 1.0), out=state.free_kv_bytes)
        d = policy.decide(state)
        if d.switch and inflight is None and d.layout != layout and d.plan is not None:
            inflight, started_s = d, t
            ready_s = t + executor.start_switch(d.plan)
            if ready_s <= t:
                continue
        if not decoding and not prefill_q:
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
        b = dec.size
        if b:
            k_kv = _kv_steps(layout, dec, owner, owner_kv, total, tables, T)
            while b and k_kv < 1:
                cand = decoding + prefill_q
                cids = np.asarray(cand, dtype=np.int64)
                if len(cand) == 1:
                    v = cand[0]
                    decoding.remove(v)
                    release(v)
                    end(v, ABORTED)
                else:
                    v = cand[ordering.victim(arr[cids], (inp[cids] + gen[cids]).astype(np.float64), gen[cids],
                                             out[cids])]
                    (decoding if status[v] == DECODE else prefill_q).remove(v)
                    release(v)
                    status[v] = WAITING
                    queued[v] = t
                    preempt[v] += 1
                    waiting.push(v)
                dec = np.asarray(decoding, dtype=np.int64)
                b = dec.size
                total = float(owner_kv.sum())
                k_kv = _kv_steps(layout, dec, owner, owner_kv, total, tables, T) if b else 1 << 30
            if waiting.dirty:
                skip_admit = True  # NOTE: re-admitting the victim at once would undo the preemption
                continue  # re-sort and re-decide with the new membership
            ctx = (inp[dec] + gen[dec]).astype(np.float64)
        else:
            k_kv = 1 << 30
        # ---- the run --------------------------------------------------------------------------
        k = config.max_run_steps
        if b:
            k = min(k, int((out[dec] - gen[dec]).min()), k_kv)
        pre_total = int(pre_left[prefill_q].sum()) if prefill_q else 0
        chunk = config.prefill_chunk_tokens
        if prefill_q:
            k = min(k, math.ceil(int(pre_left[prefill_q[0]]) / chunk))
        if est_step_s > 0:
            if nxt < n:
                k = min(k, max(1, math.ceil((arr[nxt] - t) / est_step_s)))
            if inflight is not None:
                k = min(k, max(1, math.ceil((ready_s - t) / est_step_s)))
        k = max(int(k), 1)
        pref = np.clip(pre_total - chunk * np.arange(k), 0, chunk).astype(np.float64)
        dur = executor.run_steps(StepBatch(layout, ctx, owner[dec], dec), pref)
        run_s = float(dur.sum())
        t += run_s
        est_step_s = float(dur[-1])
        ordering.tpot_s = est_step_s
        res.steps += k
        res.decode_steps += k if b else 0
        res.layout_time_s[LAYOUTS[layout]] += run_s
        state.steps_since_switch += k
        if b:
            gen[dec] += k
            kvtok[dec] += k
            owner_kv += np.bincount(owner[dec], minlength=T) * float(k)
            for i in dec[gen[dec] >= out[dec]]:
                decoding.remove(int(i))
                release(int(i))
                end(int(i), DONE)
        done_tokens = int(pref.sum())
        while prefill_q and done_tokens > 0:
            i = prefill_q[0]
            take = min(int(pre_left[i]), done_tokens)
            pre_left[i] -= take
            done_tokens -= take
            if pre_left[i] > 0:
                break
            prefill_q.pop(0)
            if gen[i] == 0:
                gen[i] = 1
                kvtok[i] += 1.0
                owner_kv[owner[i]] += 1.0
                first[i] = t
            if gen[i] >= out[i]:
                release(i)
                end(i, DONE)
            else:
                status[i] = DECODE
                decoding.append(i)
        tl = res.timeline
        tl["t_s"].append(t)
        tl["layout"].append(layout)
        tl["batch"].append(len(decoding))
        used = owner_kv.max() * bpt if is_owner[layout] else owner_kv.sum() * share[layout] * bpt
        tl["kv_used_fraction"].append(float(used / pools[layout]) if pools[layout] > 0 else 1.0)
        if progress is not None:
            progress(ended, n)
    return res


def _fits_somewhere(need_bytes: float, policy, tables: StepTimeTable, watermark: float) -> bool:
    """Whether an empty deployment could hold one request in a layout the policy may use."""
    info = tables.info
    for i in policy.usable_layouts():
        per_rank = need_bytes * (1.0 if info.is_owner[i] else float(info.kv_total_share[i]))
        if per_rank <= float(info.kv_pool_bytes[i]) * watermark:
            return True
    return False


def _kv_steps(layout: int, dec: np.ndarray, owner: np.ndarray, owner_kv: np.ndarray, total: float,
              tables: StepTimeTable, ranks: int) -> int:
    """Decode steps the current decoders can take before the KV pool is full."""
    info, bpt = tables.info, tables.kv_bytes_per_token
    pool = float(info.kv_pool_bytes[layout])
    if info.is_owner[layout]:
        cnt = np.bincount(owner[dec], minlength=ranks)
        free = pool / bpt - owner_kv
        m = cnt > 0
        return int(np.floor(free[m] / cnt[m]).min()) if m.any() else 1 << 30
    free = pool / (bpt * float(info.kv_total_share[layout])) - total
    return int(math.floor(free / dec.size))
