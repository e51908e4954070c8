"""Prefill as the engines schedule it: one scheduler per owner group, each taking its own chunk of its
own requests' prompts in the same step (planner.engines.scheduling).

For the current layout's G owner groups (the planner's Placement: groups of consecutive ranks), a
run's prefill is planned per group: a group's prefilling requests (the loop's prefill queue, in
admission order, whose owner rank is in the group) give up to its chunk per step — the whole chunk
when its prefill runs as a batch of its own (SGLang), what the group's decodes leave of the token
budget when they share a step (vLLM, TRT-LLM) — packing one request's last tokens with the next
one's first, as SGLang's PrefillAdder and vLLM's token budget do. The run is cut where the first
group's head request completes. Per step, the step's prompt tokens are every group's together (the
MLP side sees them all), and the group running the most of them prices the chunk (its tokens,
their prefix, the rank that runs them: runtime_policy/tables.py `step_s` with `chunk_owner`).

With one group this is the loop's one chunk per step; with DP-attention's T groups, eight owners
prefill at once (SGLang: chunked_prefill_size // 8 each), where one chunk on one owner at a time
left seven idle.

Does not: admit requests (admission.py) or price a step (the executor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime_policy.admission import chunk_plan

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop


@dataclass(slots=True)
class GroupQueue:
    """One owner group's prefilling requests and its chunk per step."""

    group: int
    ids: list[int]  # prefilling requests in admission order
    chunk: int  # prompt tokens the group takes per step
    tokens_left: int  # Σ prompt tokens its requests still need


def group_queues(loop: "ServingLoop") -> list[GroupQueue]:
    """The current layout's groups with prefill work, each with its chunk per step (module docstring).
    NOTE: a group's `tokens_left` and `ids` stop at the group's cap, `_run_cap` (a run is no longer
    than its first group's head takes, `steps_to_first_completion`, so no more of the queue is read):
    summing the whole queue every run was the simulator's largest per-run cost at 400-550 requests
    prefilling (bursty). NOTE: several groups read their own queues (`group_lists`), not the whole
    queue until every group has its head (all of it while a group has none: ~75 requests a run of a
    400-request queue over DOP's 8 groups, chat)."""
    layout = loop.layout
    g_count = loop.groups[layout]
    chunk = loop.group_chunk[layout]
    pre_left, owner, ids = loop.pre_left, loop.owner, loop.prefill_q
    if g_count == 1:
        c = chunk if loop.separate else max(chunk - loop.dec.b, 1)
        cap = _run_cap(pre_left[ids[0]], c)
        tokens = 0
        for i in ids:
            tokens += pre_left[i]
            if tokens >= cap:
                break
        return [GroupQueue(0, ids, c, tokens)]
    counts = loop.dec.gcount  # the decode set's groups are the layout's (regrouped at each commit)
    separate = loop.separate
    if len(ids) == 1:  # one request prefills (the common case)
        g = owner[ids[0]] // (loop.T // g_count)
        return [GroupQueue(g, ids, chunk if separate else max(chunk - counts[g], 1), pre_left[ids[0]])]
    out = []
    for g, gids in enumerate(group_lists(loop, g_count)):
        if not gids:
            continue
        c = chunk if separate else max(chunk - counts[g], 1)
        tokens = pre_left[gids[0]]
        cap = -(-tokens // c)  # = _run_cap(tokens, c), inline (a call per group per run)
        cap = (cap if cap > 1 else 1) * c
        n = 1
        while tokens < cap and n < len(gids):
            tokens += pre_left[gids[n]]
            n += 1
        out.append(GroupQueue(g, gids[:n], c, tokens))
    return out


def group_lists(loop: "ServingLoop", g_count: int) -> list[list[int]]:
    """[G] each owner group's prefilling requests in admission order: the loop's own, kept as
    requests join and leave the queue (`ServingLoop.prefill_groups`), else split from the queue."""
    keep = getattr(loop, "prefill_groups", None)
    if keep is not None:
        return keep(g_count)
    r = loop.T // g_count
    by: list[list[int]] = [[] for _ in range(g_count)]
    for i in loop.prefill_q:
        by[loop.owner[i] // r].append(i)
    return by


def _run_cap(head_left: int, chunk: int) -> int:
    """The prompt tokens a group's queue must show for any run it can be in: the steps its head
    request takes (at least one) × its chunk. `_chunks(q, k)` for k up to those steps, and
    `_plan_step`, answer the same for any `tokens_left` at or past it."""
    steps = -(-head_left // chunk)
    return (steps if steps > 1 else 1) * chunk


def steps_to_first_completion(loop: "ServingLoop", queues: list[GroupQueue]) -> int:
    """Steps until the first group's head request has all its prompt (the run's cut)."""
    pre_left = loop.pre_left
    k = -(-pre_left[queues[0].ids[0]] // queues[0].chunk)  # ⌈left / chunk⌉ of whole numbers
    for q in queues[1:]:
        x = -(-pre_left[q.ids[0]] // q.chunk)
        if x < k:
            k = x
    return k


def plan_run(loop: "ServingLoop", queues: list[GroupQueue], k: int) -> tuple[list, list, tuple, tuple, dict]:
    """A run of k steps' prefill over the groups `queues`: per step the prompt tokens of every group
    together, the prefix the busiest group's chunk attends to, that group's (rank, tokens, prefix),
    the run's statistics (prompt tokens, their token-weighted prefix, the busiest groups' tokens,
    steps with a chunk) and each group's prompt tokens done in the run {group: tokens}."""
    pre_left, ctx, owner = loop.pre_left, loop.ctx, loop.owner
    if k == 1:
        return _plan_step(queues, pre_left, ctx, owner)
    if len(queues) == 1:
        q = queues[0]
        pref = _chunks(q, k)
        if pre_left[q.ids[0]] >= sum(pref):  # every token from the head request (the common case)
            done = ctx[q.ids[0]] - pre_left[q.ids[0]]
            pfx = []
            for x in pref:
                pfx.append(done)
                done += x
            co = ([owner[q.ids[0]]] * k, pref, pfx)
        else:
            pfx, own_rank, _, _ = chunk_plan(pref, q.ids, pre_left, ctx, owner, False)
            co = (own_rank, pref, pfx)
        run_tok = sum(pref)
        stats = (int(run_tok), sum([a * c for a, c in zip(pref, pfx)]), run_tok,
                 float(sum(1 for x in pref if x > 0)))
        return pref, pfx, co, stats, {q.group: int(run_tok)}
    per = []
    done_by: dict[int, int] = {}
    for q in queues:
        pref = _chunks(q, k)
        pfx, own_rank, _, _ = chunk_plan(pref, q.ids, pre_left, ctx, owner, False)
        per.append((pref, pfx, own_rank))
        done_by[q.group] = int(sum(pref))
    total, prefix, ranks, own_tok, own_pfx = [], [], [], [], []
    run_pfx = run_own = 0.0
    for j in range(k):
        tj, best, bg = 0.0, -1.0, 0
        for gi, (pref, pfx, _) in enumerate(per):
            x = pref[j]
            tj += x
            run_pfx += x * pfx[j]
            if x > best:
                best, bg = x, gi
        pref, pfx, own_rank = per[bg]
        total.append(tj)
        prefix.append(pfx[j])
        ranks.append(own_rank[j])
        own_tok.append(pref[j])
        own_pfx.append(pfx[j])
        run_own += best
    run_tok = sum(total)
    stats = (int(run_tok), run_pfx, run_own, float(sum(1 for x in total if x > 0)))
    return total, prefix, (ranks, own_tok, own_pfx), stats, done_by


def _plan_step(queues: list[GroupQueue], pre_left: list[int], ctx: list[float],
               owner: list[int]) -> tuple[list, list, tuple, tuple, dict]:
    """`plan_run` of a one-step run (most runs, when arrivals cut them), its arithmetic as `plan_run`
    does it for k = 1: each group's chunk, the tokens and prefix of the group running the most."""
    tj = run_pfx = 0.0
    best = -1.0
    done_by: dict[int, int] = {}
    for q in queues:
        x = float(q.chunk) if q.tokens_left >= q.chunk else float(q.tokens_left)  # = _chunks(q, 1)
        head = q.ids[0]
        left = pre_left[head]
        if left >= x:  # every token from the head request (= chunk_plan's common case)
            pfx, rank = ctx[head] - left, owner[head]
        else:
            p, r, _, _ = chunk_plan([x], q.ids, pre_left, ctx, owner, False)
            pfx, rank = p[0], r[0]
        tj += x
        run_pfx += x * pfx
        if x > best:
            best, b_pfx, b_rank = x, pfx, rank
        done_by[q.group] = int(x)
    if len(queues) == 1:  # = plan_run's one-group arithmetic
        stats = (int(tj), 0 + best * b_pfx, tj, 1.0 if tj > 0 else 0.0)
    else:
        stats = (int(tj), run_pfx, best, 1.0 if tj > 0 else 0.0)
    return [tj], [b_pfx], ([b_rank], [best], [b_pfx]), stats, done_by


def _chunks(q: GroupQueue, k: int) -> list[float]:
    """[k] the group's prompt tokens per step: its chunk, the last step what is left."""
    full = q.tokens_left // q.chunk
    if full >= k:
        return [float(q.chunk)] * k
    return [float(q.chunk)] * full + [float(q.tokens_left - q.chunk * full)] + [0.0] * (k - full - 1)


def pieces(loop: "ServingLoop", queues: list[GroupQueue], k: int) -> list[list[tuple[int, int]]]:
    """[k] each step's chunk as (request, tokens) pieces, every group's requests in its order (for an
    executor that runs real prefill: the torch executor)."""
    pre_left = loop.pre_left
    out: list[list[tuple[int, int]]] = [[] for _ in range(k)]
    for q in queues:
        qi, left = 0, pre_left[q.ids[0]]
        for j, need in enumerate(_chunks(q, k)):
            need = int(need)
            while need > 0 and qi < len(q.ids):
                take = left if left < need else need
                out[j].append((q.ids[qi], take))
                need -= take
                left -= take
                if left <= 0:
                    qi += 1
                    left = pre_left[q.ids[qi]] if qi < len(q.ids) else 0
    return out


def credit(loop: "ServingLoop", done_by: dict[int, int]) -> list[int]:
    """Credit each group's prompt tokens to its own requests in admission order (`done_by` is used
    up); returns the requests whose prefill is done, in admission order (admission.prefill_progress
    finishes them). The pass stops once every group's tokens are credited."""
    g_count = loop.groups[loop.layout]
    pre_left, owner = loop.pre_left, loop.owner
    finished = []
    if g_count > 1:  # each group's own requests, from its head (`group_lists`), then in admission order
        by = group_lists(loop, g_count)
        groups = 0
        for g, d in done_by.items():
            if d <= 0:
                continue
            groups += 1
            for i in by[g]:
                left = pre_left[i]
                take = left if left < d else d
                pre_left[i] = left - take
                d -= take
                if take == left:
                    finished.append(i)
                if d <= 0:
                    break
            done_by[g] = d
        if groups > 1 and len(finished) > 1:
            seq = getattr(loop, "pq_seq", None)
            finished.sort(key=seq.__getitem__ if seq is not None else loop.prefill_q.index)
        return finished
    r = loop.T // g_count
    todo = len(done_by)  # groups whose tokens are not all credited yet
    for i in loop.prefill_q:
        g = owner[i] // r
        d = done_by.get(g, 0)
        if d <= 0:
            continue
        left = pre_left[i]
        take = left if left < d else d
        pre_left[i] = left - take
        d -= take
        done_by[g] = d
        if take == left:
            finished.append(i)
        if d <= 0:
            todo -= 1
            if not todo:
                break
    return finished
