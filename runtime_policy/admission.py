"""Admission in the serving loop: waiting requests join the prefill queue in the ordering's order
while their KV fits (head-of-line), a full batch may displace a running request for the head, and
how a run's prefill chunks split over the admitted requests and their owners. `admit` works on a
`ServingLoop`'s state (loop.py calls it); the rest are pure functions over its lists.

Does not: order requests (ordering.py) or preempt at the KV wall (preemption.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime_policy.kv_ledger import group_counts
from runtime_policy.preemption import displace_for
from runtime_policy.tables import StepTimeTable
from runtime_policy.waiting import ABORTED, DECODE, DONE, PREFILL

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop


def admit(loop: "ServingLoop") -> float:
    """Admit waiting requests while they fit; returns Σ KV tokens after admission."""
    okv, waiting = loop.okv, loop.waiting
    total = loop.kv.total
    if waiting.pos >= len(waiting.ids) or loop.skip_admit:  # nobody waits (or a preemption just sent them back)
        loop.skip_admit = False
        return total
    dec, prefill_q, kv = loop.dec, loop.prefill_q, loop.kv
    layout = loop.layout
    if loop.groups[layout] > 1:
        return admit_groups(loop, total)
    lay_g, lay_share, lay_pool = loop.groups[layout], loop.shares[layout], loop.pools[layout] * loop.watermark
    lay_extra = kv.extra[layout]  # the layout's slack beyond the tables' (a token split's page per rank)
    t_ranks = loop.T
    bpt, slack, ctx = loop.bpt, loop.slack, loop.ctx
    # NOTE: the engine's per-request state slots cap the running set too (tables.request_caps), and
    # its scheduler's running-request cap (planner.engines.scheduling)
    max_batch = min(loop.config.max_batch, loop.max_requests[layout], loop.cap_group[layout])
    reserve = loop.reserve_output
    wids = waiting.ids
    displaced = False
    # NOTE: a move that shed KV to fit admits nothing in the old layout until its commit; any
    # other move admits only what also fits its destination (the move's memory was checked for
    # the running set at its start; what joins meanwhile must fit where it is going too)
    gate = _move_destination(loop)
    if gate is None:
        return total
    dst, dst_g, dst_pool = gate
    while waiting.pos < len(wids):
        i = wids[waiting.pos]
        if dec.b + len(prefill_q) >= max_batch:
            # NOTE: only a request still owed its first token displaces (what it buys is that token)
            if not (loop.ordering.displaces and ctx[i] == loop.inp_l[i] and displace_for(loop, i)):
                break
            displaced = True
            total = kv.total
        c = ctx[i]
        need = c + slack
        # NOTE: the one-group and one-rank groupings inline (the common layouts); others ask the ledger
        if reserve:  # the engine admits only what fits at every running request's end (TRT-LLM)
            r = okv.index(min(okv))
            fits = kv.fits_reserved(layout, r, loop.end_at[i] + slack, loop.watermark)
        elif lay_extra:
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
        total += _start_prefill(loop, i, r, need)
    loop.skip_admit = False
    if displaced:
        dec.first_to_finish()
    return total


def _start_prefill(loop: "ServingLoop", i: int, r: int, need: float) -> float:
    """Request i, admitted on owner rank r with `need` ledger tokens, joins the prefill queue (or, its
    prompt handed off from a prefill pool, decodes at once: LoopConfig.handoff_recompute_tokens).
    Returns the ledger tokens it added."""
    c = loop.ctx[i]
    loop.owner[i] = r
    loop.kv.add(r, need, loop.inp_l[i], loop.end_at[i] + loop.slack)
    if loop.admitted[i] != loop.admitted[i]:  # NaN: its first admission
        loop.admitted[i] = loop.t
    pre = int(c)
    handed = loop.config.handoff_recompute_tokens
    if handed is not None and c == loop.inp_l[i] and handed < pre:
        pre = handed  # the prompt's KV came from the prefill pool (runtime_policy/disagg.py)
    loop.pre_left[i] = pre
    loop.status[i] = PREFILL
    loop.pq_add(i)
    loop.pq_s2 += c
    if loop.capped:
        loop.pq_s1 += min(c, loop.topk)
    if loop.bound[i] >= 0:
        loop.bound_wait[loop.bound[i]] -= 1
        loop.bound[i] = -1
    if pre == 0:  # SGLang's prebuilt batch: the first token (the prefill pool's) is out, it decodes
        before = loop.kv.total
        prefill_progress(loop, [i])
        return need + (loop.kv.total - before)
    return need


def admit_groups(loop: "ServingLoop", total: float) -> float:
    """Admission with one scheduler per owner group (planner.engines.scheduling): each waiting
    request belongs to a group (bound at arrival by the engine's routing, or here: TRT-LLM's
    fewest active prompt tokens), and each group admits its own requests in queue order while
    its KV fits and it runs fewer than its cap; a group that can't take its next request admits
    none after it (its queue's head waits) while the others go on (NOTE: the queue's requests bound
    to the groups that wait are stepped over in C, `_next_open`: a long queue behind a full group
    was most of a bursty workload's admission)."""
    waiting, kv = loop.waiting, loop.kv
    layout = loop.layout
    g_count, t = loop.groups[layout], loop.T
    r_per = t // g_count
    cap_g = min(loop.cap_group[layout], loop.max_requests[layout] / g_count)
    running = list(kv.group_requests(layout))  # a copy (G > 1: the ledger's own list)
    max_batch = loop.config.max_batch
    run_total = kv.count
    slack, ctx, okv, bound = loop.slack, loop.ctx, loop.okv, loop.bound
    reserve = loop.reserve_output
    # = kv.fits(layout, r, need, watermark), inline: the group's tokens (its requests' extra slack
    # included) + the request's need and extra slack, at the share a rank stores, against the pool
    gtok, greq, x = kv.group_tokens(layout), kv.group_requests(layout), kv.extra[layout]
    share, rate, lim = kv.share[layout], kv.rate, kv.pool[layout] * loop.watermark
    gate = _move_destination(loop)
    if gate is None:
        return total
    dst, dst_g, dst_pool = gate
    blocked: set[int] = set()
    ids, start = waiting.ids, waiting.pos
    n = len(ids)
    taken: list[int] = []
    displaced = False
    rest = None  # the queue's bound ranks from `rest_at` on (built at the first group that waits)
    rest_at = 0
    idx = start
    while idx < n:
        if len(blocked) == g_count:
            break
        i = ids[idx]
        if run_total >= max_batch:
            # NOTE: the boost ordering's displacement (floorfirst's own scheduling, not an engine's):
            # only a request still owed its first token displaces, as in the one-group path
            if not (loop.ordering.displaces and ctx[i] == loop.inp_l[i] and displace_for(loop, i)):
                break
            displaced = True
            running = list(kv.group_requests(layout))
            run_total = sum(running)
            total = kv.total
        b = bound[i]
        g = b // r_per if b >= 0 else route_at_admission(loop, layout)
        if g not in blocked:
            if running[g] >= cap_g:
                blocked.add(g)
            else:
                if r_per == 1:
                    r = g
                else:
                    part = okv[g * r_per:(g + 1) * r_per]
                    r = g * r_per + part.index(min(part))
                need = ctx[i] + slack
                if reserve:
                    fits = kv.fits_reserved(layout, r, loop.end_at[i] + slack, loop.watermark)
                else:
                    fits = ((gtok[g] + x * greq[g] if x else gtok[g]) + (need + x)) * share * rate <= lim
                if fits and dst >= 0:
                    fits = kv.held_bytes(dst, need + kv.extra[dst], -1 if dst_g == 1 else r) <= dst_pool
                if fits:
                    taken.append(idx)
                    total += _start_prefill(loop, i, r, need)
                    running[g] += 1
                    run_total += 1
                    idx += 1
                    continue
                if not loop.dec.b and not loop.prefill_q and loop.inflight is None and not fits_somewhere(
                        need * loop.bpt, loop.policy, loop.tables, loop.watermark):
                    taken.append(idx)
                    loop._end(i, ABORTED)
                    idx += 1
                    continue
                blocked.add(g)
        # request i's group waits: the next request of a group that doesn't (or not bound to one),
        # unless the batch is full (the next request then displaces or ends the pass)
        idx += 1
        if idx < n and run_total < max_batch and len(blocked) < g_count:
            b = bound[ids[idx]]
            if b >= 0 and b // r_per in blocked:  # the next one's group waits too
                if rest is None:
                    rest, rest_at = list(map(bound.__getitem__, ids[idx:])), idx
                idx = rest_at + _next_open(rest, idx - rest_at, blocked, r_per)
    loop.skip_admit = False
    if displaced:
        loop.dec.first_to_finish()
    if taken:
        if taken[-1] - start == len(taken) - 1:  # a prefix of the queue: the common case
            waiting.pos = start + len(taken)
        else:  # the queue less the taken requests
            keep = ids[start:]
            for j in reversed(taken):
                del keep[j - start]
            waiting.replace(keep)
    return total


def _next_open(rest: list[int], at: int, blocked: set[int], r_per: int) -> int:
    """The first index from `at` in `rest` (the queue's bound ranks) of a request bound to no group
    (−1) or to a rank of a group not in `blocked`; len(rest) if none. Scans in C (list.index)."""
    present = set(rest[at:]) if at else set(rest)
    best = len(rest)
    for v in present:
        if v < 0 or v // r_per not in blocked:
            j = rest.index(v, at)
            if j < best:
                best = j
    return best


def route_at_admission(loop: "ServingLoop", layout: int) -> int:
    """The owner group of a request not bound at arrival: TRT-LLM's attention-DP router gives it to
    the rank with the fewest active prompt tokens (scheduler/adp_router.py DefaultADPRouter; ties:
    fewer requests, then the lower rank)."""
    g_count = loop.groups[layout]
    prompts = group_counts(loop.kv.prompts, g_count)
    reqs = loop.kv.group_requests(layout)
    return min(range(g_count), key=lambda g: (prompts[g], reqs[g], g))


def route_at_arrival(loop: "ServingLoop", i: int) -> None:
    """Bind request i to an owner group when it arrives, as the engine's router does (SGLang's
    DataParallelController round robin; vLLM's DP client: the engine core with the least
    waiting·4 + running), by the first rank of that group (so a layout switch maps it onto the new
    groups)."""
    layout = loop.layout
    g_count = loop.groups[layout]
    if g_count == 1 or loop.routing == "fewest_prompt_tokens":
        return
    r_per = loop.T // g_count
    if loop.routing == "round_robin":
        g = loop.rr % g_count
        loop.rr += 1
    else:
        waiting = group_counts(loop.bound_wait, g_count)
        running = loop.kv.group_requests(layout)
        g = min(range(g_count), key=lambda x: (4 * waiting[x] + running[x], x))
    loop.bound[i] = g * r_per
    loop.bound_wait[g * r_per] += 1


def prefill_progress(loop: "ServingLoop", finished: list[int]) -> None:
    """The requests whose prefill a run finished (in admission order: group_prefill.py `credit`
    credits a run's prompt tokens to each owner group's prefilling requests in order): each gets its
    first token and decodes (or is done, if that was all it asked for)."""
    ctx, inp_l, owner, end_at, kv = loop.ctx, loop.inp_l, loop.owner, loop.end_at, loop.kv
    pq_remove, capped, topk = loop.pq_remove, loop.capped, loop.topk
    join, admit = loop.dec.join, (loop.executor.admit if loop.tracks_kv else None)
    for i in finished:
        pq_remove(i)
        c = ctx[i]
        loop.pq_s2 -= c
        if capped:
            loop.pq_s1 -= c if c < topk else topk  # = min(c, topk)
        if c == inp_l[i]:  # the first token
            c += 1.0
            ctx[i] = c
            kv.add_token(owner[i], 1.0)
            loop.first[i] = loop.t
        if c - inp_l[i] >= loop.out_l[i]:
            kv.remove(owner[i], c + loop.slack, inp_l[i], end_at[i] + loop.slack)
            loop._end(i, DONE)
        else:
            loop.status[i] = DECODE
            r = owner[i]  # = loop._join(i, c): it decodes, its KV the executor's from now
            join(i, c, r, end_at[i])
            if admit is not None:
                admit(i, int(c), r)


def chunk_plan(chunk_tokens: list[float], prefill_q: list[int], pre_left: list[int], ctx: list[float],
                owner: list[int], owner_pieces: bool = True) -> tuple[list[float], list[int], list[float], list[float]]:
    """Per step of a run ([k] each): the cached prefix its chunk attends to, and the owner rank running the
    most of the chunk with its tokens and their prefix (`owner_pieces` False: those two are left
    empty, the serving loop reads the prefix and the rank alone). A step's tokens come from the queue's
    requests in order; from several requests, the prefix is their token-weighted mean (NOTE: exact
    for the chunk × prefix attention, linear in both; it over-reads the prefix KV of a request
    that only adds a few tokens) less the attention the pieces don't pay to one another.

    NOTE: a chunk packed from several prompts attends causally within each prompt only: engines run
    it as one ragged batch with per-request offsets, not as one sequence (SGLang
    python/sglang/srt/layers/attention/flashinfer_mla_backend.py, extend through FlashInfer's
    `BatchPrefillWithRaggedKVCacheWrapper` with per-request qo/kv indptr; vLLM's FlashAttention
    varlen with cu_seqlens; the torch executor's ragged prefill, executor/torch_executor/prefill.py).
    Pieces n_i with prefixes c_i form Σ (n_i·c_i + n_i²/2) query-key pairs; the step tables price a
    chunk of P tokens with prefix C as one prompt, P·C + P²/2 pairs (step_time.py `chunk_r`), so the
    prefix passed is the one that gives the pieces' pairs: C = (Σ n_i·c_i − Σ_{i<j} n_i·n_j) / P,
    negative for fresh prompts packed together (priced on the slope below the knee). Measured on
    the executor (H100, benchmarks/results/executor_gpu/twin_1gpu/gpu_h100_eager/engine_rows.json):
    a 2,048-token prefill step as one prompt 26.6 ms, as 4 × 512 25.1 ms, as 8 × 256 24.6 ms."""
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
    if not owner_pieces:
        return _chunk_prefix_rank(chunk_tokens, prefill_q, pre_left, ctx, owner, left, done, prefix, own_rank)
    nq = len(prefill_q)
    # NOTE: per step, the ranks its chunk runs on in order of first appearance, with their tokens
    # and token-weighted prefix (small lists: a chunk spans a few requests); the busiest is the
    # first with the most tokens, and min/max of two are spelled out (as the builtins choose)
    for need in chunk_tokens:
        acc = 0.0
        got = need
        sq = 0.0  # Σ n_i² over the step's pieces
        ranks: list[int] = []
        toks: list[float] = []
        wpfx: list[float] = []
        sqs: list[float] = []
        while need > 0 and qi < nq:
            take = left if left < need else need  # = min(need, left)
            tw = take * done
            acc += tw
            sq += take * take
            r = owner[prefill_q[qi]]
            if r in ranks:
                j = ranks.index(r)
                toks[j] += take
                wpfx[j] += tw
                sqs[j] += take * take
            else:
                ranks.append(r)
                toks.append(0.0 + take)
                wpfx.append(0.0 + tw)
                sqs.append(take * take)
            need -= take
            left -= take
            done += take
            if left <= 0:
                qi += 1
                if qi < nq:
                    left = pre_left[prefill_q[qi]]
                    done = ctx[prefill_q[qi]] - left
        took = got - need  # the step's tokens (less than its chunk when the queue runs out)
        prefix.append((acc - 0.5 * (took * took - sq)) / got if got > 0 else 0.0)
        if ranks:
            j = 0
            for m in range(1, len(ranks)):
                if toks[m] > toks[j]:
                    j = m
            tok = toks[j]
            own_rank.append(ranks[j])
            own_tokens.append(tok)
            own_prefix.append((wpfx[j] - 0.5 * (tok * tok - sqs[j])) / tok if tok > 0 else 0.0)
        else:
            own_rank.append(0)
            own_tokens.append(0.0)
            own_prefix.append(0.0)
    return prefix, own_rank, own_tokens, own_prefix



def _chunk_prefix_rank(chunk_tokens: list[float], prefill_q: list[int], pre_left: list[int], ctx: list[float],
                       owner: list[int], left: int, done: float, prefix: list[float], own_rank: list[int]
                       ) -> tuple[list[float], list[int], list[float], list[float]]:
    """`chunk_plan` with `owner_pieces` False, from its queue's head (`left`, `done`): the same pieces,
    prefix and busiest rank (the same operations in the same order), without the busiest rank's
    token-weighted prefix (NOTE: the serving loop reads none of it; it was ~40 % of a call)."""
    qi = 0
    nq = len(prefill_q)
    for need in chunk_tokens:
        acc = 0.0
        got = need
        sq = 0.0  # Σ n_i² over the step's pieces
        ranks: list[int] = []
        toks: list[float] = []
        while need > 0 and qi < nq:
            take = left if left < need else need  # = min(need, left)
            acc += take * done
            sq += take * take
            r = owner[prefill_q[qi]]
            if r in ranks:
                toks[ranks.index(r)] += take
            else:
                ranks.append(r)
                toks.append(0.0 + take)
            need -= take
            left -= take
            done += take
            if left <= 0:
                qi += 1
                if qi < nq:
                    left = pre_left[prefill_q[qi]]
                    done = ctx[prefill_q[qi]] - left
        took = got - need
        prefix.append((acc - 0.5 * (took * took - sq)) / got if got > 0 else 0.0)
        if ranks:
            j = 0
            for m in range(1, len(ranks)):
                if toks[m] > toks[j]:
                    j = m
            own_rank.append(ranks[j])
        else:
            own_rank.append(0)
    return prefix, own_rank, [], []

def fits_somewhere(need_bytes: float, policy, tables: StepTimeTable, watermark: float) -> bool:
    """Whether an empty deployment could hold one request in a layout the policy may use."""
    info = tables.info
    for i in policy.usable_layouts():
        per_rank = need_bytes * float(info.group_share[i])
        if per_rank <= float(info.kv_pool_bytes[i]) * watermark:
            return True
    return False


_NO_MOVE = (-1, 0, 0.0)


def _move_destination(loop: "ServingLoop") -> tuple[int, int, float] | None:
    """The move in flight's destination for admission: (its layout, group count, pool at the
    watermark), `_NO_MOVE` (-1) with none, None while nothing may join. NOTE: an incremental move
    (Issue 27) was planned for the running set with one group of headroom: nothing joins until it
    lands, nor while a move that sheds KV runs (runtime_policy/switching.py)."""
    mv = loop.inflight
    if mv is None:
        return _NO_MOVE
    if mv.shed_kv_tokens > 0 or mv.plan.move_groups > 1:
        return None
    dst = mv.layout
    return dst, loop.groups[dst], loop.pools[dst] * loop.watermark
