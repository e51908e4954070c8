"""Admission helpers of the serving loop: how a run's prefill chunks split over the waiting
requests and their owners, and whether one request can ever fit. Pure functions over the loop's
lists; loop.py drives them."""

from __future__ import annotations

from runtime_policy.tables import StepTimeTable


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
        per_rank = need_bytes * (1.0 if info.is_owner[i] else float(info.kv_total_share[i]))
        if per_rank <= float(info.kv_pool_bytes[i]) * watermark:
            return True
    return False
