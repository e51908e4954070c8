"""Admission in the serving loop: waiting requests join the prefill queue in the ordering's order
while their KV fits (head-of-line), a full batch may displace a running request for the head, and
how a run's prefill chunks split over the admitted requests and their owners. `admit` works on a
`ServingLoop`'s state (loop.py calls it); the rest are pure functions over its lists.

Does not: order requests (ordering.py) or preempt at the KV wall (preemption.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime_policy.preemption import displace_for
from runtime_policy.tables import StepTimeTable
from runtime_policy.waiting import ABORTED, DECODE, DONE, PREFILL

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop


def admit(loop: "ServingLoop") -> float:
    """Admit waiting requests while they fit; returns Σ KV tokens after admission."""
    okv, waiting = loop.okv, loop.waiting
    total = sum(okv)
    if waiting.pos >= len(waiting.ids) or loop.skip_admit:  # nobody waits (or a preemption just sent them back)
        loop.skip_admit = False
        return total
    dec, prefill_q, kv = loop.dec, loop.prefill_q, loop.kv
    layout = loop.layout
    lay_g, lay_share, lay_pool = loop.groups[layout], loop.shares[layout], loop.pools[layout] * loop.watermark
    lay_extra = kv.extra[layout]  # the layout's slack beyond the tables' (a token split's page per rank)
    t_ranks = loop.T
    bpt, slack, ctx = loop.bpt, loop.slack, loop.ctx
    # NOTE: the engine's per-request state slots cap the running set too (tables.request_caps)
    max_batch = min(loop.config.max_batch, loop.max_requests[layout])
    wids = waiting.ids
    displaced = False
    # NOTE: a move that shed KV to fit admits nothing in the old layout until its commit; any
    # other move admits only what also fits its destination (the move's memory was checked for
    # the running set at its start; what joins meanwhile must fit where it is going too)
    dst = -1
    if loop.inflight is not None:
        if loop.inflight.shed_kv_tokens > 0:
            return total
        dst = loop.inflight.layout
        dst_g, dst_pool = loop.groups[dst], loop.pools[dst] * loop.watermark
    while waiting.pos < len(wids):
        i = wids[waiting.pos]
        if dec.b + len(prefill_q) >= max_batch:
            # NOTE: only a request still owed its first token displaces (what it buys is that token)
            if not (loop.ordering.displaces and ctx[i] == loop.inp_l[i] and displace_for(loop, i)):
                break
            displaced = True
            total = sum(okv)
        c = ctx[i]
        need = c + slack
        # NOTE: the one-group and one-rank groupings inline (the common layouts); others ask the ledger
        if lay_extra:
            r = kv.place(layout)
            fits = kv.fits(layout, r, need, loop.watermark)
        elif lay_g == 1:
            r = okv.index(min(okv))
            fits = (total + need) * lay_share * bpt <= lay_pool
        elif lay_g == t_ranks:
            r = okv.index(min(okv))
            fits = (okv[r] + need) * lay_share * bpt <= lay_pool
        else:
            r = kv.place(layout)
            fits = kv.fits(layout, r, need, loop.watermark)
        if fits and dst >= 0:
            fits = kv.held_bytes(dst, need + kv.extra[dst], -1 if dst_g == 1 else r) <= dst_pool
        if not fits:
            if not dec.b and not prefill_q and loop.inflight is None and not fits_somewhere(
                    need * bpt, loop.policy, loop.tables, loop.watermark):
                waiting.pos += 1
                loop._end(i, ABORTED)
                continue
            break
        waiting.pos += 1
        loop.owner[i] = r
        kv.add(r, need)
        total += need
        loop.pre_left[i] = int(c)
        loop.status[i] = PREFILL
        prefill_q.append(i)
        loop.pq_s2 += c
        if loop.capped:
            loop.pq_s1 += min(c, loop.topk)
    loop.skip_admit = False
    if displaced:
        dec.first_to_finish()
    return total


def prefill_chunks(loop: "ServingLoop", k: int, pre_total: int) -> tuple[list, list, tuple, tuple]:
    """A run's prefill: each of its k steps' chunk (the queue's prompt tokens, `prefill_chunk_tokens`
    a step, `pre_total` in all), the cached prefix each attends to, the chunk owner (rank, tokens,
    prefix) of each step, and the run's statistics (prompt tokens done, their token-weighted
    prefix, the chunk owners' tokens, steps with a chunk)."""
    prefill_q, pre_left, chunk = loop.prefill_q, loop.pre_left, loop.config.prefill_chunk_tokens
    full = pre_total // chunk  # = [min(max(pre_total − chunk · j, 0), chunk) for j < k]
    if full >= k:
        pref = [float(chunk)] * k
    else:
        pref = [float(chunk)] * full + [float(pre_total - chunk * full)] + [0.0] * (k - full - 1)
    run_tok = sum(pref)
    i = prefill_q[0]
    if pre_left[i] >= run_tok:  # = chunk_plan(...)'s common case: every chunk from the first request
        done = loop.ctx[i] - pre_left[i]
        pfx = []
        for x in pref:
            pfx.append(done)
            done += x
        chunk_owner = ([loop.owner[i]] * k, pref, pfx)
        run_own = run_tok
    else:
        pfx, own_rank, own_tok, own_pfx = chunk_plan(pref, prefill_q, pre_left, loop.ctx, loop.owner)
        chunk_owner = (own_rank, own_tok, own_pfx)
        run_own = sum(own_tok)
    run_tok_pfx = sum([a * c for a, c in zip(pref, pfx)])
    run_chunks = float(min(k, -(-pre_total // chunk)))  # the steps whose chunk is not empty
    return pref, pfx, chunk_owner, (int(run_tok), run_tok_pfx, run_own, run_chunks)


def prefill_progress(loop: "ServingLoop", done_tokens: int) -> None:
    """Credit a run's prompt tokens to the prefill queue in order; a request whose prefill is
    done gets its first token and decodes (or is done, if that was all it asked for)."""
    prefill_q, pre_left, ctx, inp_l = loop.prefill_q, loop.pre_left, loop.ctx, loop.inp_l
    while prefill_q and done_tokens > 0:
        i = prefill_q[0]
        take = min(pre_left[i], done_tokens)
        pre_left[i] -= take
        done_tokens -= take
        if pre_left[i] > 0:
            break
        prefill_q.pop(0)
        c = ctx[i]
        loop.pq_s2 -= c
        if loop.capped:
            loop.pq_s1 -= min(c, loop.topk)
        if c == inp_l[i]:  # the first token
            c += 1.0
            ctx[i] = c
            loop.okv[loop.owner[i]] += 1.0
            loop.first[i] = loop.t
        if c - inp_l[i] >= loop.out_l[i]:
            loop.kv.remove(loop.owner[i], c + loop.slack)
            loop._end(i, DONE)
        else:
            loop.status[i] = DECODE
            loop._join(i, c)


def chunk_plan(chunk_tokens: list[float], prefill_q: list[int], pre_left: list[int], ctx: list[float],
                owner: list[int]) -> tuple[list[float], list[int], list[float], list[float]]:  # [k] each
    """Per step of a run: the cached prefix its chunk attends to, and the owner rank running the
    most of the chunk with its tokens and their prefix. A step's tokens come from the queue's
    requests in order; from several requests, the prefix is their token-weighted mean (NOTE: exact
    for the chunk × prefix attention, linear in both; it over-reads the prefix KV of a request
    that only adds a few tokens)."""
    qi = 0
    left = pre_left[prefill_q[0]]
    done = ctx[prefill_q[0]] - left
    if left >= sum(chunk_tokens):  # the common case: every token of the run is the first request's
        prefix = []
        for need in chunk_tokens:
            prefix.append(done)
            done += need
        return prefix, [owner[prefill_q[0]]] * len(chunk_tokens), list(chunk_tokens), prefix
    prefix, own_rank, own_tokens, own_prefix = [], [], [], []
    nq = len(prefill_q)
    # NOTE: per step, the ranks its chunk runs on in order of first appearance, with their tokens
    # and token-weighted prefix (small lists: a chunk spans a few requests); the busiest is the
    # first with the most tokens, and min/max of two are spelled out (as the builtins choose)
    for need in chunk_tokens:
        acc = 0.0
        got = need
        ranks: list[int] = []
        toks: list[float] = []
        wpfx: list[float] = []
        while need > 0 and qi < nq:
            take = left if left < need else need  # = min(need, left)
            tw = take * done
            acc += tw
            r = owner[prefill_q[qi]]
            if r in ranks:
                j = ranks.index(r)
                toks[j] += take
                wpfx[j] += tw
            else:
                ranks.append(r)
                toks.append(0.0 + take)
                wpfx.append(0.0 + tw)
            need -= take
            left -= take
            done += take
            if left <= 0:
                qi += 1
                if qi < nq:
                    left = pre_left[prefill_q[qi]]
                    done = ctx[prefill_q[qi]] - left
        prefix.append(acc / got if got > 0 else 0.0)
        if ranks:
            j = 0
            for m in range(1, len(ranks)):
                if toks[m] > toks[j]:
                    j = m
            tok = toks[j]
            own_rank.append(ranks[j])
            own_tokens.append(tok)
            own_prefix.append(wpfx[j] / tok if tok > 0 else 0.0)
        else:
            own_rank.append(0)
            own_tokens.append(0.0)
            own_prefix.append(0.0)
    return prefix, own_rank, own_tokens, own_prefix


def fits_somewhere(need_bytes: float, policy, tables: StepTimeTable, watermark: float) -> bool:
    """Whether an empty deployment could hold one request in a layout the policy may use."""
    info = tables.info
    for i in policy.usable_layouts():
        per_rank = need_bytes * float(info.group_share[i])
        if per_rank <= float(info.kv_pool_bytes[i]) * watermark:
            return True
    return False
