"""Preemption in the serving loop: the KV wall (how many steps the decoders can take, and which
requests go back to the queue when they can't take one), shedding KV for a move that fits only
with less, and displacement of a running request by the queue's head. Functions over a
`ServingLoop`'s state (loop.py calls them; they read and write its fields).

A preempted request keeps its generated tokens (the next prefill recomputes them) and rejoins the
waiting queue; the executor is told (`retire(..., preempted=True)`), and, alone and too large for
its layout, a request is aborted.

Does not: choose the victim (ordering.py does), or run anything.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from runtime_policy.kv_ledger import group_counts
from runtime_policy.waiting import ABORTED, WAITING

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop
NEVER = 1 << 30


def kv_steps(loop: "ServingLoop", total: float, layout: int = -1) -> int:
    """Decode steps the decoders can take before KV runs out in `layout` (default the current
    one; layouts of several owner groups: at most a run, all a run takes)."""
    dec = loop.dec
    layout = loop.layout if layout < 0 else layout
    cap = loop.cap[layout]
    g = loop.groups[layout]
    kv = loop.kv
    x = kv.extra[layout]
    if g == 1:
        return int(math.floor((cap - (total + x * kv.count if x else total)) / dec.b))
    okv = kv.by_group(layout)
    per_owner = dec.per_owner if g == loop.T else (dec.gcount if dec.groups == g else group_counts(dec.per_owner, g))
    max_run = loop.config.max_run_steps
    if cap - max(okv) >= max_run * max(per_owner):
        return max_run  # NOTE: every group has room for a whole run; the exact count needs G divisions
    room = [math.floor((cap - kv) / c) for kv, c in zip(okv, per_owner) if c > 0]
    return int(min(room)) if room else NEVER

def kv_wall(loop: "ServingLoop", total: float) -> int:
    """Steps the decoders can take before KV runs out; at the wall, preempt (the ordering's
    victims) until they can take one. −1: preempted with victims to re-sort (decide again)."""
    layout = loop.layout
    finished = False
    k_kv = kv_steps(loop, total) if loop.groups[layout] > 1 or loop.kv.extra[layout] else \
        int(math.floor((loop.cap[layout] - total) / loop.dec.b))
    if loop.inflight is not None:
        # NOTE: a move holds the running set in both layouts until its commit, and what decodes
        # meanwhile grows in both: the run stops where the destination is full, and a move
        # whose destination can't take one more step ends: aborted while nothing has landed, else
        # committed with what has landed, the rest preempted (switching.py `finish_move`)
        k_dst = kv_steps(loop, total, loop.inflight.layout)
        if k_dst < 1:
            # NOTE: switching imports this module (shed)
            from runtime_policy.switching import end_switch, finish_move

            why = "the destination's KV pool filled while the move ran"
            if finish_move(loop, why):  # groups had landed: committed with them, the rest preempted
                if not loop.dec.b:
                    return -1  # NOTE: no skip_admit: with nothing running the queue must be admitted
                layout = loop.layout
                k_kv = kv_steps(loop, loop.kv.total)
                finished = True
            else:
                loop.executor.abort_switch(loop.inflight.plan)
                end_switch(loop, aborted=why)
        else:
            k_kv = min(k_kv, k_dst)
    if k_kv >= 1:
        if finished:
            loop.skip_admit = True  # NOTE: re-admitting the requests it preempted at once would undo it
            return -1
        return k_kv
    dec = loop.dec
    decoding = dec.in_join_order()
    write_back_contexts(loop)
    g = loop.groups[loop.layout]
    # each request's owner group under the current layout (None: one group holds every request)
    owner_of = np.asarray(loop.owner, dtype=np.int64) * g // loop.T if g > 1 else None
    while dec.b and k_kv < 1:
        cand = decoding + loop.prefill_q
        if len(cand) == 1:
            v = cand[0]
            decoding.remove(v)
            loop._leave(v)
            loop._end(v, ABORTED)
        else:
            cids = np.asarray(cand, dtype=np.int64)
            if owner_of is not None:
                # NOTE: a layout of several owner groups hits one group's wall: only a request held
                # there frees room in it (a DP-attention rank preempts its own requests); a victim
                # from another group is a re-prefill that frees nothing where it binds (it was:
                # DS-V3.2 heavy tail, DOP 925 preemptions, 228 this way)
                lim = loop.cap[loop.layout]
                short = np.array([c > 0 and lim - x < c for x, c in
                                  zip(loop.kv.by_group(loop.layout), group_counts(dec.per_owner, g))])
                on_short = cids[short[owner_of[cids]]]
                if on_short.size:
                    cids = on_short
            v = int(cids[victim_of(loop, cids)])
            if dec.slot[v] >= 0:
                decoding.remove(v)
            preempt(loop, v)
        k_kv = kv_steps(loop, loop.kv.total) if dec.b else NEVER
    dec.first_to_finish()
    if loop.waiting.dirty:
        loop.skip_admit = True  # NOTE: re-admitting the victim at once would undo the preemption
        return -1
    loop.s1_now = dec.capped_sum(dec.dsteps) if loop.capped and dec.b else dec.s2
    return k_kv

def write_back_contexts(loop: "ServingLoop") -> None:
    """The decoders' current contexts into `loop.ctxf`, which the victim keys read (NOTE: in numpy,
    once per wall or shed: a Python pass over B each time was most of a preemption-heavy
    simulation's time; a victim's own `ctx` entry is written by `preempt`)."""
    dec = loop.dec
    ids, c0 = dec.id_contexts()
    loop.ctxf[ids] = c0 + dec.dsteps


def victim(loop: "ServingLoop", cand: list[int]) -> int:
    return victim_of(loop, np.asarray(cand, dtype=np.int64))


def victim_of(loop: "ServingLoop", cids: np.ndarray) -> int:
    """The index in `cids` (request ids) of the victim, keyed by current contexts: under FCFS the
    engine's own rule (SGLang's retract_decode: the fewest output tokens, ties the longest prompt,
    python/sglang/srt/managers/schedule_batch.py; vLLM preempts the newest running request, which
    FCFS's latest arrival is), else the ordering's."""
    tok = loop.ctxf[cids]
    gen = tok.astype(np.int64) - loop.inp[cids]
    if loop.preemption == "fewest_output_first" and loop.ordering.keys_are_arrival:
        return int(np.lexsort((-loop.inp[cids], gen))[0])
    return loop.ordering.victim(loop.arr[cids], tok, gen, loop.out[cids])



def preempt(loop: "ServingLoop", v: int) -> None:
    """Send running request v back to the waiting queue: its KV is freed, its generated tokens
    kept (the next prefill recomputes them)."""
    dec = loop.dec
    if dec.slot[v] >= 0:
        c = loop.ctx[v] = dec.context(v)
        loop.ctxf[v] = c
        loop._leave(v, preempted=True)
    else:
        loop.pq_remove(v)
        loop.pq_s2 -= loop.ctx[v]
        if loop.capped:
            loop.pq_s1 -= min(loop.ctx[v], loop.topk)
        loop.kv.remove(loop.owner[v], loop.ctx[v] + loop.slack, loop.inp_l[v], loop.end_at[v] + loop.slack)
    loop.status[v] = WAITING
    loop.queued[v] = loop.t
    loop.preempted[v] += 1
    loop.waiting.push(v)

def shed(loop: "ServingLoop", tokens: float) -> None:
    """Preempt running requests (the ordering's victims) until `tokens` of KV are freed, keeping
    at least one: a switch whose memory fits only with less KV (`Decision.shed_kv_tokens`)."""
    dec, ctx = loop.dec, loop.ctx
    decoding = dec.in_join_order()
    write_back_contexts(loop)
    freed = 0.0
    while freed < tokens and len(decoding) + len(loop.prefill_q) > 1:
        cand = decoding + loop.prefill_q
        v = cand[victim(loop, cand)]
        if dec.slot[v] >= 0:
            decoding.remove(v)
            freed += dec.context(v) + loop.slack
        else:
            freed += ctx[v] + loop.slack
        preempt(loop, v)

def displace_for(loop: "ServingLoop", i: int) -> bool:
    """The batch is full and request i heads the queue: preempt the running request the
    ordering says i should replace, if any."""
    dec = loop.dec
    cand = dec.in_join_order() + loop.prefill_q  # in the order they joined
    if not cand:
        return False
    cids = np.asarray(cand, dtype=np.int64)
    tok = np.array([dec.context(j) if dec.slot[j] >= 0 else loop.ctx[j] for j in cand])
    v = loop.ordering.displace(float(loop._keys(np.array([i]))[0]), loop.arr_l[i], loop.arr[cids], tok,
                               tok.astype(np.int64) - loop.inp[cids])
    if v < 0:
        return False
    preempt(loop, cand[v])
    return True
