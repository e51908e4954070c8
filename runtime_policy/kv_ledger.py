"""The serving loop's KV ledger, priced as the planner's capacity prices a request: one token rate,
one per-request slack in tokens and the pool the ledger fills, compiled into the tables from the
deployment's model and memory plan (never retyped).

The loop counts KV in tokens (loop.py, through `KvLedger`): a request of context c costs
`c + request_slack_tokens` tokens, a token `kv_bytes_per_token` bytes, against each layout's
`kv_pool_bytes`: per owner group, the group's tokens × the share of them a rank of it stores. The planner prices one request on the busiest rank as
rate · pages(c) + its fixed bytes (planner/step.py `decode_resident_bytes`, `memory_fits`), so:

- the rate is the growth past every window (`ModelSpec.token_bytes_per_token`: DeepSeek-V4-Flash
  3,850 B, its C4/C128 entries and indexer keys; gpt-oss-120b the 18 full layers' K/V). A model
  without window components keeps `ModelSpec.kv_bytes_per_token` (the same components; kept as
  the figure it was, so DSA/MLA/GQA tables are bit-identical);
- the slack is `page_tokens` (page rounding) + the request's fixed bytes / the rate, rounded up to
  a whole token (NOTE: whole tokens keep the ledger's sums exact in any order, loop.py; the page
  is the rounding's upper bound, one page more than the planner's at a page-aligned context). Fixed
  bytes: the windows at full (where they share the pool) and the per-request states where they
  share the KV pool (vLLM's hybrid pages; DeepSeek-V4's compressor rings). Flash: 3,214,336 B of
  windows + 12,206,080 B of rings = 4,006 tokens at 3,850.25 B, + SGLang's 256-token page
  = 4,262 tokens;
- the pool: with SGLang's hybrid SWA pools (`MemoryPlan.swa_pool_bytes`: planner/engines/
  sglang.py `swa_pools`, after SGLang model_runner_kv_cache_mixin.py
  `_resolve_hybrid_swa_tokens`) the full-attention layers' pool, which long requests fill: the
  windows live in the sliding pool, left out of the slack. NOTE: that sliding pool holds
  swa_full_tokens_ratio = 0.8 of the full pool's tokens, so it binds only for requests whose
  window part exceeds 0.8 of their context (gpt-oss's 128-token window: contexts below 160
  tokens); the ledger doesn't check it. With a separate state pool (SGLang's mamba pool:
  `MemoryPlan.state_pool_bytes`) states are not counted here: the loop caps the running set by
  `LayoutInfo.max_requests` instead.

NOTE: one slack in every request's entry (a request's ledger entry must be the same in every layout,
or a switch would leave the sums wrong): the deployment's own layout's, read off its busiest rank and
divided by that rank's share of a token (`request_slack_tokens`). Every other layout's own slack
(its page rounding: a page per rank where tokens are split; its share of the windows and states:
CP keeps them whole on every rank while splitting the tokens) differs from it by
`LayoutInfo.extra_slack_tokens`, which the ledger charges per request of a group wherever that
layout is read (`KvLedger`: per-rank request counts). So the compiled ledger admits what the planner
holds in every registered layout, whichever layout the tables were compiled for
(tests/runtime_policy/test_kv_ledger.py, over the layout registry): compiled for DP, DeepSeek-V4-
Flash under CP admitted 25,322 requests of 4K where the planner holds 5,789 when one slack served
every layout. Qwen3.5-397B under vLLM TP on 8 ranks splits its 45 GDN layers' states 8 ways (16
heads) and its 15 attention layers' KV 2 ways (2 KV heads): its slack, 528 (the page) + 1,563
tokens, is the states at the token share (a full copy / the rate: 6,252).
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import add, mul

import numpy as np

from planner.models.attention.base import STATE, WINDOW

FAR_TOKENS = float(1 << 24)  # a context past every window (the windows' full bytes)
FAR_PAGES = 4096  # the slack's probes: 4,096 and 8,192 pages per rank, past every window
FIXED_ROUNDING_TOKENS = 1e-6  # the probes' float noise, so an exact whole number doesn't round up by one


def ledger_rate(model, kv_dtype: str) -> float:
    """Bytes per context token the ledger counts: the growth past every window, or the bytes below
    every window for a model without windows (module docstring)."""
    below = model.kv_bytes_per_token(kv_dtype)
    past = model.token_bytes_per_token(kv_dtype)
    has_windows = any(WINDOW in v.memory_kinds() for v, _ in model.mixers if v is not None)
    return past if has_windows and past > 0 else below


def fixed_bytes(dep) -> float:
    """One request's fixed bytes in the pool the ledger fills (one full copy, all layers): its
    windows at full unless SGLang gives them a pool of their own, and its states unless they have
    one (module docstring)."""
    mem = dep.model.memory_bytes(np.array([FAR_TOKENS]), dep.kv_dtype)
    plan = dep.memory
    windows = float(mem[WINDOW][0]) if plan.swa_pool_bytes is None else 0.0
    states = float(mem[STATE][0]) if plan.state_pool_bytes is None else 0.0
    return windows + states


def rank_request_bytes(d, context) -> np.ndarray:
    """[P] the bytes one request of each context takes in the ledger's pool on the busiest rank of
    `d`'s layout, as the planner's capacity counts them (planner.step.decode_resident_bytes; with G
    owner groups the busiest group holds one of G requests)."""
    from planner.load import DecodeLoad
    from planner.step import decode_resident_bytes

    kv, state, window = decode_resident_bytes(d, DecodeLoad.equal(float(d.placement.owner_groups),
                                                                 np.asarray(context, dtype=np.float64)))
    out = kv - window if window is not None else kv
    return out + state if d.memory.state_pool_bytes is None else out


def request_slack_tokens(dep, rate: float, share: float) -> float:
    """The page rounding + the request's fixed bytes / the rate, rounded up (a whole number of
    tokens). Page rounding: one page, or one page per rank where a request's tokens are split over
    its group's ranks (CP's pages interleaved over T ranks: the busiest holds ⌈⌈L/page⌉/T⌉ pages, at
    most (L + T·page − 1)/T tokens; DCP's ⌈L/T⌉ tokens per rank, rounded to pages, the same bound).
    The fixed bytes are read off the planner on the busiest rank of `dep`'s layout (what one request
    holds past every window less its growth) and divided by that rank's share of a token (`share`:
    tables.group_share, 1 for groups of one rank), so the slack is exact for `dep`'s layout whatever
    share of the windows and states its ranks keep (TP splits a GQA model's windows and Qwen3.5's
    recurrent states by heads; MLA-like DeepSeek-V4 replicates them; CP keeps them whole on every
    rank while splitting the tokens). A model without fixed bytes keeps the page rounding."""
    rounding = float(dep.page_tokens * dep.placement.token_split)
    if fixed_bytes(dep) <= 0 or rate <= 0 or share <= 0:
        return rounding
    far = float(dep.page_tokens * dep.ranks) * np.array([FAR_PAGES, 2 * FAR_PAGES])  # page-aligned on every rank
    per = rank_request_bytes(dep, far)
    growth = (per[1] - per[0]) / (far[1] - far[0])
    fixed = float(per[0] - growth * far[0])
    return float(rounding + max(math.ceil(fixed / (rate * share) - FIXED_ROUNDING_TOKENS), 0))


def ledger_pool_bytes(d) -> float:
    """The pool one GPU's ledger fills under deployment `d`: SGLang's full-attention pool when the
    sliding layers have their own, else the KV pool (planner.step.kv_pool_bytes)."""
    plan = d.memory
    if plan.swa_pool_bytes is not None:
        return float(plan.swa_pool_bytes[0]) if plan.kv_pool_bytes > 0 else 0.0
    return float(plan.kv_pool_bytes)


def ledger_budget_bytes(d) -> float:
    """Weights + KV the engine allows per GPU, less the sliding pool the ledger doesn't fill."""
    plan = d.memory
    sliding = float(plan.swa_pool_bytes[1]) if plan.swa_pool_bytes is not None else 0.0
    return plan.static_budget_bytes - sliding


def ledger_admits(tables, layout: int, context: float) -> float:
    """Requests of `context` tokens the compiled ledger admits on an empty deployment group under
    `layout` (the loop's test, admission.py; no watermark): what one owner group's pool holds, times
    the groups, capped by the layout's request cap."""
    info = tables.info
    pool = float(info.kv_pool_bytes[layout])
    per = (context + tables.request_slack_tokens + float(info.extra_slack_tokens[layout])) * tables.kv_bytes_per_token
    n = math.floor(pool / (per * float(info.group_share[layout]))) * int(info.owner_groups[layout])
    cap = float(info.max_requests[layout]) if info.max_requests.size else math.inf
    return float(min(n, cap))


def move_held_bytes(held_src: float, held_dst: float, union: float, groups: int, done: int) -> float:
    """KV bytes a rank holds during an incremental move (runtime_policy/transitions.py's module
    docstring) once `done` of its `groups` equal groups have landed and the next is in flight:
    `held_src` before the move, `held_dst` after it, `union` with both held (received
    R = union − held_src, freed F = union − held_dst): held_src + (done+1)·R/n − done·F/n (all
    landed, done = n: held_dst)."""
    if done >= groups:
        return held_dst
    if groups <= 1:
        return union
    return held_src + (done + 1) * (union - held_src) / groups - done * (union - held_dst) / groups


def move_peak_bytes(held_src: float, held_dst: float, union: float, groups: int, done: int = 0) -> float:
    """The most `move_held_bytes` holds from `done` landed groups to the last one in flight: a line
    in the groups landed, so its peak is at one end, max(held_src + R/n, held_dst + F/n) from the
    start. One group: the union itself."""
    if groups <= 1:
        return union if done < 1 else held_dst
    last = groups - 1
    if done > last:
        return held_dst
    return max(move_held_bytes(held_src, held_dst, union, groups, done),
               move_held_bytes(held_src, held_dst, union, groups, last))


def move_groups_needed(held_src: float, held_dst: float, union: float, room: float, most: int) -> int:
    """The fewest groups (1 .. `most`) whose `move_peak_bytes` fits `room` (the budget less the
    weights); `most` + 1 when even `most` groups don't (or the destination alone doesn't fit)."""
    if union <= room:
        return 1
    if most <= 1 or held_src >= room or held_dst >= room:
        return most + 1
    n = max(math.ceil((union - held_src) / (room - held_src)), math.ceil((union - held_dst) / (room - held_dst)), 2)
    while n <= most and move_peak_bytes(held_src, held_dst, union, n) > room:  # float rounding of the ceil
        n += 1
    return n


def group_tokens(tokens: list[float], groups: int) -> list[float]:
    """[G] tokens of each owner group, from per-rank tokens [T] (groups are consecutive ranks).
    NOTE: with G = T it is `tokens` itself (no copy): read it, don't write it."""
    t = len(tokens)
    if groups == t:
        return tokens
    if groups == 1:
        return [sum(tokens)]
    r = t // groups
    return [sum(tokens[g * r:(g + 1) * r]) for g in range(groups)]


def group_counts(counts: list, groups: int) -> list:
    """[G] per-group sums of a per-rank list (decoder counts, context sums): `group_tokens`."""
    return group_tokens(counts, groups)


class KvLedger:
    """The serving loop's KV, in tokens (module docstring): each request counted on its owner rank
    (the rank admission placed it on; every request has one, in every layout), read per owner group
    of whichever compiled layout asks. Under a layout of G groups of R consecutive ranks a group
    holds the tokens of its ranks' requests and a rank of it stores `group_share` of them, so the
    group's wall is `cap_tokens` = pool / (rate · share) tokens: one group of all ranks for TP, CP
    and DCP (the total against the pool at the rank's share), T groups of one for DP-attention and
    DOP (each owner's against its pool), G groups of T/G for DP attention with attention TP inside.

    `tokens` is the per-rank list the loop changes through `add`, `remove`, `add_token` and `grow`
    (whole numbers, exact in any order); the reads below are functions of it and of the layout's
    grouping alone. NOTE: the total and, for every grouping of 1 < G < T groups, each group's tokens
    and requests are kept as they change (`total`, `count`, `group_tok`, `group_req`), so a read is
    an index, not G sums over the ranks: the serving loop reads its layout's groups several times a
    run (admission, the KV wall, the timeline, the policy's state)."""

    __slots__ = ("tokens", "requests", "prompts", "reserved", "ranks", "groups", "share", "pool", "rate", "cap_tokens",
                 "extra", "total", "count", "group_tok", "group_req", "_mid")

    def __init__(self, tables):
        info = tables.info
        self.ranks = int(tables.ranks)
        self.tokens = [0.0] * self.ranks
        # requests holding KV on each rank, and each layout's slack per request beyond the tables'
        # (`extra_slack_tokens`: a token split's page per rank, a layout's own fixed part): a group's
        # tokens under layout l are its ranks' tokens + extra[l] × its requests
        self.requests = [0] * self.ranks
        self.extra = [float(x) for x in info.extra_slack_tokens]
        # per rank: its requests' prompt tokens (TRT-LLM routes by them) and their tokens at completion
        # (an engine that reserves every request's output admits against these: TRT-LLM)
        self.prompts = [0.0] * self.ranks
        self.reserved = [0.0] * self.ranks
        self.groups = [int(g) for g in info.owner_groups]  # [L]
        self.share = [float(x) for x in info.group_share]  # [L]
        self.pool = [float(x) for x in info.kv_pool_bytes]  # [L] bytes per GPU
        self.rate = float(tables.kv_bytes_per_token)
        self.cap_tokens = [p / (self.rate * s) if s > 0 and p > 0 else 0.0 for p, s in zip(self.pool, self.share)]
        self.total = 0.0  # Σ tokens
        self.count = 0  # Σ requests
        # one pair of [G] lists (tokens, requests) per distinct G with 1 < G < T, shared by its layouts
        mids = {g: ([0.0] * g, [0] * g) for g in self.groups if 1 < g < self.ranks}
        self.group_tok = [mids[g][0] if g in mids else None for g in self.groups]  # [L] (None: G = 1 or T)
        self.group_req = [mids[g][1] if g in mids else None for g in self.groups]
        self._mid = tuple((tok, req, self.ranks // g, tuple(slice(k * (self.ranks // g), (k + 1) * (self.ranks // g))
                                                             for k in range(g))) for g, (tok, req) in mids.items())

    def group_tokens(self, layout: int) -> list[float]:
        """[G] tokens each owner group of `layout` holds, the tables' slack per request only (NOTE:
        the ledger's own list where G > 1: read it, don't write it)."""
        g = self.groups[layout]
        if g == self.ranks:
            return self.tokens
        return self.group_tok[layout] if g > 1 else [self.total]

    def group_requests(self, layout: int) -> list[int]:
        """[G] requests each owner group of `layout` holds (the ledger's own list where G > 1)."""
        g = self.groups[layout]
        if g == self.ranks:
            return self.requests
        return self.group_req[layout] if g > 1 else [self.count]

    def by_group(self, layout: int) -> list[float]:
        """[G] tokens each owner group of `layout` holds (its requests' extra slack included). NOTE:
        without extra slack, the ledger's own list where G > 1: read it, don't write it."""
        x = self.extra[layout]
        if not x:
            return self.group_tokens(layout)
        return [a + x * n for a, n in zip(self.group_tokens(layout), self.group_requests(layout))]

    def busiest(self, layout: int) -> float:
        """Tokens of `layout`'s fullest owner group (the total for a one-group layout)."""
        if self.groups[layout] == 1:
            return self.total + self.extra[layout] * self.count
        return max(self.by_group(layout))

    def group_of(self, layout: int, rank: int) -> int:
        return rank * self.groups[layout] // self.ranks

    def place(self, layout: int) -> int:
        """The owner rank a new request gets under `layout`: the least-loaded rank of its
        least-loaded owner group (the first on ties), so owners stay balanced whatever layout comes
        next."""
        tok = self.tokens
        g = self.groups[layout]
        if g == 1 or g == self.ranks:
            return tok.index(min(tok))
        sums = self.group_tok[layout]
        first = sums.index(min(sums)) * (self.ranks // g)
        part = tok[first:first + self.ranks // g]
        return first + part.index(min(part))

    def held_bytes(self, layout: int, extra_tokens: float = 0.0, rank: int = -1) -> float:
        """KV bytes the fullest rank of `layout` stores (with `extra_tokens` more in `rank`'s group;
        −1: the fullest group). NOTE: a request joining brings `extra_tokens` = its context + the
        tables' slack; its layout's extra slack is the caller's (`fits`)."""
        g = self.groups[layout]
        if g == 1:
            tok = self.total + extra_tokens
            x = self.extra[layout]
            if x:
                tok += x * self.count
        elif rank >= 0:
            tok = self.by_group(layout)[rank * g // self.ranks] + extra_tokens
        else:
            tok = max(self.by_group(layout)) + extra_tokens
        return tok * self.share[layout] * self.rate

    def fits(self, layout: int, rank: int, need_tokens: float, pool_fraction: float = 1.0) -> bool:
        """Whether a request of `need_tokens` (context + the tables' slack) more in `rank`'s owner
        group fits `layout`'s pool (× pool_fraction), its layout's extra slack included."""
        return self.held_bytes(layout, need_tokens + self.extra[layout], rank) <= self.pool[layout] * pool_fraction

    def add(self, rank: int, tokens: float, prompt: float = 0.0, end_tokens: float = 0.0) -> None:
        """A request joins `rank` with `tokens` (its context + the tables' slack), its prompt, and
        the tokens it holds when done (its prompt + output + the slack)."""
        self.tokens[rank] += tokens
        self.requests[rank] += 1
        self.prompts[rank] += prompt
        self.reserved[rank] += end_tokens
        self.total += tokens
        self.count += 1
        for tok, req, r, _ in self._mid:
            tok[rank // r] += tokens
            req[rank // r] += 1

    def remove(self, rank: int, tokens: float, prompt: float = 0.0, end_tokens: float = 0.0) -> None:
        """A request of `tokens` (its context + the tables' slack), `prompt` and `end_tokens` leaves `rank`."""
        self.tokens[rank] -= tokens
        self.requests[rank] -= 1
        self.prompts[rank] -= prompt
        self.reserved[rank] -= end_tokens
        self.total -= tokens
        self.count -= 1
        for tok, req, r, _ in self._mid:
            tok[rank // r] -= tokens
            req[rank // r] -= 1

    def add_token(self, rank: int, tokens: float) -> None:
        """`rank`'s requests hold `tokens` more (a prefill's first token)."""
        self.tokens[rank] += tokens
        self.total += tokens
        for tok, _, r, _ in self._mid:
            tok[rank // r] += tokens

    def grow(self, per_rank: list[int], tokens_each: float, moved: int) -> list[float]:
        """`moved` decoders, `per_rank` [T] of them on each rank, gained `tokens_each` tokens (a run's
        decode steps); returns the new `tokens` (a new list: the serving loop keeps an alias)."""
        # NOTE: x + c · tokens_each for every rank, in C (map over operator.add and mul: the same
        # operations as a comprehension, without its per-rank bytecode)
        tok = self.tokens = list(map(add, self.tokens, map(mul, per_rank, repeat(tokens_each, self.ranks))))
        self.total += moved * tokens_each
        for gt, _, _, parts in self._mid:
            gt[:] = map(sum, map(tok.__getitem__, parts))
        return tok

    def fits_reserved(self, layout: int, rank: int, end_tokens: float, pool_fraction: float = 1.0) -> bool:
        """Whether a request that ends at `end_tokens` fits `rank`'s group with every request in
        it at its end (an engine that reserves the output up front: TRT-LLM's GUARANTEED_NO_EVICT)."""
        g = self.groups[layout]
        if g == 1:
            tok = sum(self.reserved)
            n = self.count
        else:
            k = self.group_of(layout, rank)
            tok = group_tokens(self.reserved, g)[k]
            n = self.group_requests(layout)[k]
        tok += end_tokens + self.extra[layout] * (n + 1)
        return tok * self.share[layout] * self.rate <= self.pool[layout] * pool_fraction

    def used_fraction(self, layout: int) -> float:
        """The fullest group's share of its pool (1 where there is no pool): held_bytes(layout) / pool,
        inline (the serving loop's timeline reads it once a run)."""
        pool = self.pool[layout]
        if not pool > 0:
            return 1.0
        g, x = self.groups[layout], self.extra[layout]
        if g == 1:
            tok = self.total + 0.0
            if x:
                tok += x * self.count
        elif x:
            tok = max(self.by_group(layout)) + 0.0
        else:
            tok = max(self.tokens if g == self.ranks else self.group_tok[layout]) + 0.0
        return tok * self.share[layout] * self.rate / pool

    def held_per_rank(self, layout: int) -> list[float]:
        """[T] KV bytes each rank stores under `layout`: its owner group's tokens (with the layout's
        extra slack) at the share a rank of the group stores."""
        scale = self.share[layout] * self.rate
        g = self.groups[layout]
        r = self.ranks // g
        return [x * scale for x in self.by_group(layout) for _ in range(r)]

    def move_held_per_rank(self, src: int, dst: int, recv: list[float], groups: int, done: int,
                           peak: bool = False) -> list[float]:
        """[T] KV bytes each rank holds during an incremental move src → dst once `done` of `groups`
        have landed (`move_held_bytes`; `peak`: the most it holds from there to the last group,
        `move_peak_bytes`), at the ledger's tokens now: `recv` [T] the bytes each rank receives for
        the whole move (transitions.kv_recv_per_rank), the union capped at one copy of everything."""
        hs, hd = self.held_per_rank(src), self.held_per_rank(dst)
        one = self.total * self.rate  # one copy of all KV, as the plan's `kv_total_bytes`
        f = move_peak_bytes if peak else move_held_bytes
        return [f(a, b, min(a + c, max(one, a)), groups, done) for a, b, c in zip(hs, hd, recv)]

    def free_bytes_per_rank(self, layout: int) -> list[float]:
        """[T] bytes each rank's owner group can still take under `layout` (the policy's state)."""
        g = self.groups[layout]
        pool, scale = self.pool[layout], self.share[layout] * self.rate
        if g == self.ranks and not self.extra[layout]:
            return [pool - x * scale for x in self.tokens]
        if g == 1:
            return [pool - (self.total + self.extra[layout] * self.count) * scale] * self.ranks
        r = self.ranks // g
        out: list[float] = []
        for x in self.by_group(layout):
            out += [pool - x * scale] * r
        return out
