"""Transition plans and their costs for the ordered switches between attention layouts (12 for
the four built-in ones; any pair of registered layouts).

A layout decides who holds what (DESIGN.md §1), and its placement says it (planner/layouts/
placement.py): requests are spread over G owner groups of consecutive ranks (TP, CP, DCP: one
group of every rank; DP-attention, DOP: T groups of one; DP attention with attention TP inside: G
groups of T/G), and a rank of a group stores a share s of its group's KV (tables.LayoutInfo
`group_share`, read from the planner's share: MLA under TP 1, a 1/T head slice with ≥ T KV heads,
CP's 1/T token slice, a group of one 1). A switch moves only the difference, from those alone — no
layout is named here, so a new layout (vLLM's DCP: weights sharded, KV split by tokens; SGLang's DP
attention with --dp < --tp) gets its plans:

| to \\ held            | one group, s = 1 | one group, slice s          | G groups (own group whole)        |
|----------------------|------------------|-----------------------------|-----------------------------------|
| one group, s = 1     | —                | all − s·all                 | all − all/G                       |
| one group, slice s'  | nothing (drop)   | s'·all − s'·s·all (indep.)  | (all − all/G)·s'                  |
| G' groups            | nothing (drop)   | own' − s·own'               | own' − own (groups within groups) |

(received bytes per rank; "own" = the rank's group's KV, all/G under balanced ownership; a rank
whose src group contains its dst group holds all of it; two partial slices — a head slice and a
token slice, or two token interleavings — are taken as independent, overlapping in s of s'). Weights: a move from sharded to replicated attention weights (TP/DOP →
CP/DP) all-gathers what each rank lacks (the difference of the planner's resident bytes: the
(T−1)/T attention and LM-head shards); the other way drops them. A move is
made request by request, in `move_groups` groups (incremental moves, Issue 27): a group's KV is
copied in the background while every request keeps decoding, and once it has landed the group
serves in the destination and its source pages are freed, as an engine hands a request over when
its own transfer is done (SGLang PD disaggregation: python/sglang/srt/disaggregation/decode.py
`DecodeTransferQueue.pop_transferred` passes on each request whose receiver polls `KVPoll.Success`,
to be merged into the running batch, and prefill.py `process_disagg_prefill_inflight_queue` frees a
request's KV once its own sender polls `KVPoll.Success`; vLLM's KV connectors: vllm/distributed/kv_transfer/kv_connector/v1/base.py
`request_finished` returns whether the source delays freeing a request's blocks until
`get_finished` reports that request sent — per request, never per batch). So the memory a rank
needs is, at its peak, the weights of both layouts (the larger: weights move first, once) + the
rest of the old KV + the moved part in the new + one group in flight (held in both): with the
rank's old KV `H_s`, new KV `H_d`, received `R` and freed `F = H_s + R − H_d` bytes split evenly
over n groups, after k groups with the (k+1)-th in flight it holds H_s + (k+1)·R/n − k·F/n, which
peaks at max(H_s + R/n, H_d + F/n) (`kv_ledger.move_peak_bytes`; n = 1 is the whole move at
once: the union H_s + R). The plan takes the fewest groups whose peak fits the budget (one when
the union fits, so a move that fitted before is planned and priced as it was), at most one
request a group and `MAX_MOVE_GROUPS`. A switch can thus start from a pool the source fills, as
long as the destination holds the KV and one group fits on top. Moving to TP still needs room for
every request's KV on every rank after the move; replicating weights takes room the KV pool must
give up (before the first group).

Cost of a switch, in seconds of lost serving time:
- link_s: background transfer, max(send, recv) / link bandwidth + one message per layer and kind,
  and one more KV message per layer for every group past the first (each group is its own
  transfer, as each request is in SGLang's disaggregation/mooncake/conn.py
  `MooncakeKVManager.send_kvcache`, one batch of page copies per layer; not lost time: steps continue, but the gain starts only after the last group);
- interference_s: what the overlapped steps lose — the move's HBM traffic (read at the sender,
  written at the receiver) at HBM bandwidth, plus link contention, `link_s × network share of the
  step` (the step's collectives wait while the move holds the link);
- commit_stall_s: the hand-offs at batch boundaries, one per group — a few collective latencies
  each (barrier, ownership table) — plus the KV each group's requests wrote during its own
  transfer, moved at its hand-off (with n groups a group's requests write for 1/n of the link time:
  the total written shrinks as 1/n). NOTE: the steps during the move are priced in the source
  layout (the simulator); the moved groups' share of the gain before the last hand-off is not
  counted (conservative).
Priced with the datasheet rates in the tables (NOTE: the executor benchmark's measured stall will
replace `COMMIT_COLLECTIVES` when its results exist; none were in benchmarks/results/ when this
was written).

A host KV tier (runtime_policy/host_tier_tables.py). With the tier a request's tiered KV (DSA's
latents: `LayoutInfo.host_kv_fraction` h of its KV bytes) lives in host memory, so a placement
move carries that share over the host link, not the NVLink. Twin tables add switches that turn the
tier on or off, priced on these assumptions:
- the host keeps a complete copy of the tiered KV, and each new token is backed up to it eagerly:
  SGLang HiSparse, "maintaining only a small 'hot' KV buffer on GPU while keeping complete KV data
  in CPU pinned memory", with an "eager async backup of the previous token's KV to host" after each
  step (shared/reference/frontier-models-and-engines.md §3; SGLang docs/advanced_features/
  hisparse_guide.md). So a tiered layout's host memory holds h · (its KV bytes), and its HBM the
  resident part plus the per-request buffers;
- turning the tier ON (spill) copies h · (the KV the fullest rank holds) HBM → host over the host
  link, in the background while steps continue in the old layout; HBM keeps everything until the
  commit, which frees the non-budget part: no extra HBM, and the destination's (tiered) pool must
  hold the KV after it;
- turning it OFF (fill) copies every host-only byte back, host → HBM over the host link, taken as
  h · (the KV held: the budget's b/L share already on device is not subtracted, conservative by
  b/L, 3 % at 128K with 4,096 slots); HBM must hold the whole KV after it, so the destination's
  HBM-only pool must (`memory_fits` refuses a fill that doesn't fit);
- a switch that also changes placement pays both: the placement move runs on the tiered side
  (spill first, fill last), so its host pages cross the host link, and its memory is checked
  against the tiered budgets (the smaller of the two layouts' twins); the two copies are taken as
  sequential (link_s adds), and a fill's copy and the steps' misses share the host link without a
  contention term (NOTE: each filled page is one that stops missing, so the misses shrink as it
  runs; unpriced);
- the tier copy reads (spill) or writes (fill) its bytes in HBM: they count in interference_s at
  HBM bandwidth; the tokens written while it runs follow at the commit over the host link (the
  commit stall), in the proportion the placement move's delta uses.

Does not: choose whether to switch (policy.py) or move anything (the executor does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime_policy.kv_ledger import move_groups_needed, move_peak_bytes
from runtime_policy.tables import StepTimeTable

COMMIT_COLLECTIVES = 4.0  # barrier + ownership-table broadcast + 2 slack; × the hardware's collective latency
MESSAGE_KINDS = 2.0  # KV and weights: one message per layer each
# NOTE: the most groups a move is split into (each at least one request): past it the peak gains
# little (it tends to max(H_s, H_d)) while each group adds a message per layer and a hand-off
MAX_MOVE_GROUPS = 256


@dataclass(frozen=True)
class TransitionPlan:
    """What one switch moves, needs and costs (per rank figures are the busiest rank's)."""

    src: str
    dst: str
    send_bytes_per_rank: float
    recv_bytes_per_rank: float
    kv_recv_bytes_per_rank: float
    weight_recv_bytes_per_rank: float
    memory_needed_bytes: float  # per rank, at the move's peak (weights + KV held: `kv_ledger.move_peak_bytes`)
    memory_budget_bytes: float  # per rank (mem_fraction × HBM − reserve)
    post_kv_bytes_per_rank: float  # after the commit, vs the destination's KV pool
    post_kv_pool_bytes: float
    link_s: float
    interference_s: float
    commit_stall_s: float
    spill_bytes_per_rank: float = 0.0  # the tier turned on: HBM → host (host_tier_tables.py twins)
    fill_bytes_per_rank: float = 0.0  # the tier turned off: host → HBM
    move_groups: int = 1  # groups of requests moved one after another (1: the whole move at once)
    # the fullest rank's KV before (H_s), after (H_d) and with both held (the union, H_s + R)
    kv_src_bytes_per_rank: float = 0.0
    kv_dst_bytes_per_rank: float = 0.0
    kv_union_bytes_per_rank: float = 0.0
    union_memory_bytes: float = 0.0  # per rank, the whole move at once: the larger weights + the union
    # the order the requests move in: "longest" first when the destination holds more per rank than
    # the source (the peak is at the last group: keep it small), else "shortest" (peak at the first)
    move_order: str = "longest"

    @property
    def peak_kv_bytes_per_rank(self) -> float:
        """KV the fullest rank holds at the move's peak: the rest of the old + the moved part in the
        new + one group in both (`kv_ledger.move_peak_bytes`); memory_needed_bytes less the weights."""
        return move_peak_bytes(self.kv_src_bytes_per_rank, self.kv_dst_bytes_per_rank,
                               self.kv_union_bytes_per_rank, self.move_groups)

    @property
    def feasible(self) -> bool:
        return (self.memory_needed_bytes <= self.memory_budget_bytes
                and self.post_kv_bytes_per_rank <= self.post_kv_pool_bytes)

    @property
    def cost_s(self) -> float:
        """Serving time lost to the switch (interference + commit stall)."""
        return self.interference_s + self.commit_stall_s

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(feasible=self.feasible, cost_s=self.cost_s)
        return d


def group_bytes(tables: StepTimeTable, layout: int, kv_total_bytes: float, busy) -> float:
    """KV bytes (one copy) of `layout`'s fullest owner group: the total for a one-group layout;
    `busy` per layout [L] (the caller's busiest-group bytes), or one float, the busiest owner rank's
    (a group of R ranks then holds at most R times it, and never more than the total)."""
    g = int(tables.info.owner_groups[layout])
    scalar = type(busy) is float or isinstance(busy, (int, np.floating))
    if g <= 1:
        return kv_total_bytes if scalar else float(busy[layout])  # the caller's: its extra slack included
    if scalar:
        r = tables.ranks // g
        return float(busy) if r == 1 else min(float(busy) * r, kv_total_bytes)
    return float(busy[layout])


def kv_held_bytes(tables: StepTimeTable, layout: int, kv_total_bytes: float, busy) -> float:
    """KV bytes the fullest rank holds under `layout` (one copy of all KV = `kv_total_bytes`; `busy`
    the busiest groups' bytes, `group_bytes`): its group's KV at the share a rank of it stores."""
    return group_bytes(tables, layout, kv_total_bytes, busy) * float(tables.info.group_share[layout])


def _kv_recv(tables: StepTimeTable, src: int, dst: int, total: float, busy) -> float:
    """Busiest rank's received KV bytes (see the table in the module docstring): what it needs in
    `dst` (its group's KV at dst's share) less what it holds from `src` that dst keeps, two slices
    taken as independent (overlapping in s_src of s_dst)."""
    info, t = tables.info, float(tables.ranks)
    if info.twin.size and info.twin[src] == dst:
        return 0.0  # a layout and its host-tier twin place KV alike (the tier's copy is `tier_bytes`)
    s_src, s_dst = float(info.group_share[src]), float(info.group_share[dst])
    g_src, g_dst = int(info.owner_groups[src]), int(info.owner_groups[dst])
    if g_dst > 1:
        need = group_bytes(tables, dst, total, busy)
        if g_src == 1:
            # held: share s_src of every request (TP all, GQA-TP head slice, CP token slice)
            return need * (1.0 - s_src) if s_dst >= 1.0 else need * s_dst * (1.0 - s_src)
        if g_src == g_dst:
            return need * s_dst * (1.0 - s_src) if s_src < 1.0 else 0.0  # the same owners
        if g_src > g_dst:
            # the dst group is several src groups: it holds its own src group's requests whole
            own = min(group_bytes(tables, src, total, busy), need)
            return need * s_dst - own * s_dst * s_src
        return need * s_dst * (1.0 - s_src)  # its src group holds the dst group's requests
    if g_src > 1:
        # needs share s_dst of every request; holds its own group's requests whole. NOTE: the rank
        # that receives most is the least-loaded group's; balanced ownership puts it near total/G
        held = total / float(g_src) * s_src
        if s_dst >= 1.0:
            return total - total / t if g_src == t and s_src >= 1.0 else max(total - held, 0.0)
        return max(total - total / t, 0.0) * s_dst if g_src == t and s_src >= 1.0 else max(total - held, 0.0) * s_dst
    if s_src >= 1.0:
        return 0.0  # TP with replicated KV holds everything
    if s_dst >= 1.0:
        return total - total * s_src
    # two partial slices (GQA-TP's head slice and a token slice, or two token interleavings, e.g.
    # CP's pages and DCP's tokens): taken as independent, they overlap in s_src of s_dst
    return total * s_dst - total * s_dst * s_src


def _tiered(info, i: int) -> bool:
    return bool(info.host_tier[i]) if info.host_tier.size else False


def host_fraction(tables: StepTimeTable, i: int) -> float:
    """The part of a token's KV bytes layout `i` keeps in host memory (0: no tier)."""
    hf = tables.info.host_kv_fraction
    return float(hf[i]) if hf.size else float(tables.host_kv_fraction)


def move_budget_bytes(tables: StepTimeTable, src: int, dst: int) -> float:
    """The per-rank budget the move's memory must fit (module docstring): the table's without
    per-layout budgets; else the smaller of the two layouts' budgets, taken at their tiered twins
    when either side is tiered (the placement move runs on the tiered side)."""
    info = tables.info
    b = info.memory_budget_bytes
    if not b.size:
        return tables.memory_budget_bytes
    if _tiered(info, src) or _tiered(info, dst):
        src = src if _tiered(info, src) else int(info.twin[src])
        dst = dst if _tiered(info, dst) else int(info.twin[dst])
    return min(float(b[src]), float(b[dst]))


def tier_bytes(tables: StepTimeTable, src: int, dst: int, kv_total_bytes: float, busy) -> tuple[float, float]:
    """(spill, fill) bytes of the fullest rank when the switch turns the tier on or off (module
    docstring: spill first, in the source's placement; fill last, in the destination's); (0, 0)
    when the tier stays as it is."""
    info = tables.info
    on_src, on_dst = _tiered(info, src), _tiered(info, dst)
    if on_src == on_dst:
        return 0.0, 0.0
    if on_dst:
        return kv_held_bytes(tables, src, kv_total_bytes, busy) * host_fraction(tables, dst), 0.0
    return 0.0, kv_held_bytes(tables, dst, kv_total_bytes, busy) * host_fraction(tables, src)


def most_groups(requests: float) -> int:
    """The most groups a move of `requests` running requests may take: one request a group, at most
    `MAX_MOVE_GROUPS` (requests ≤ 0: unknown, `MAX_MOVE_GROUPS`)."""
    return MAX_MOVE_GROUPS if requests <= 0 else max(1, min(int(requests), MAX_MOVE_GROUPS))


def memory_fits(tables: StepTimeTable, src: int, dst: int, kv_total_bytes: float, busy,
                requests: float = 0.0) -> bool:
    """`plan_transition(..., batch=requests).feasible` without building the plan (the policy's hot
    path asks it of every candidate): the move's peak memory fits the budget in at most
    `most_groups(requests)` groups, and the KV fits the destination."""
    info = tables.info
    total, own = float(kv_total_bytes), busy
    held_src = kv_held_bytes(tables, src, total, own)
    held_dst = kv_held_bytes(tables, dst, total, own)
    if held_dst > float(info.kv_pool_bytes[dst]):
        return False
    union = min(held_src + _kv_recv(tables, src, dst, total, own), max(total, held_src))
    room = move_budget_bytes(tables, src, dst) - max(float(info.weights_bytes[src]), float(info.weights_bytes[dst]))
    if union <= room:
        return True
    most = most_groups(requests)
    return move_groups_needed(held_src, held_dst, union, room, most) <= most


def max_fitting_kv_bytes(tables: StepTimeTable, src: int, dst: int, requests: float = 0.0) -> float:
    """The largest one-copy KV (bytes) at which `memory_fits(src → dst)` holds, for moves between
    two one-group layouts (TP, CP), whose memory need is a function of the total KV alone:
    max(weights) + p · total ≤ budget and total · s_dst ≤ the destination's pool, p the move's
    peak per byte of KV in `most_groups(requests)` groups (`kv_ledger.move_peak_bytes` of the
    shares). −1 for moves from or to a layout of several owner groups (they depend on the groups)."""
    info = tables.info
    if info.owner_groups[src] > 1 or info.owner_groups[dst] > 1 or info.kv_pool_bytes[dst] <= 0:
        return -1.0
    s_src, s_dst = float(info.group_share[src]), float(info.group_share[dst])
    u = min(s_src + _kv_recv(tables, src, dst, 1.0, 0.0), max(1.0, s_src))  # union per byte of KV
    p = move_peak_bytes(s_src, s_dst, u, most_groups(requests))
    room = move_budget_bytes(tables, src, dst) - max(float(info.weights_bytes[src]), float(info.weights_bytes[dst]))
    if room <= 0 or p <= 0 or s_dst <= 0:
        return -1.0
    return min(room / p, float(info.kv_pool_bytes[dst]) / s_dst)


def plan_transition(tables: StepTimeTable, src: int, dst: int, kv_total_bytes: float, busy,
                    batch: float = 0.0, step_s: float = 0.0, network_share: float = 0.0) -> TransitionPlan:
    """Plan switching layout `src` → `dst` (indices into `tables.layouts`) at the given KV state:
    `kv_total_bytes` one copy of all KV, `busy` each layout's busiest owner group's bytes [L] (or
    one float, the busiest owner rank's: `group_bytes`).

    `batch` (the running requests) caps the move's groups at one request each (`most_groups`: 0,
    unknown, up to `MAX_MOVE_GROUPS`), and with `step_s` sizes the KV written while it runs;
    `network_share` is the fraction of the current step spent on the link (contention)."""
    info = tables.info
    total, own = float(kv_total_bytes), busy
    w_src, w_dst = float(info.weights_bytes[src]), float(info.weights_bytes[dst])
    w_recv = max(w_dst - w_src, 0.0)
    kv_recv = _kv_recv(tables, src, dst, total, own)
    held_src = kv_held_bytes(tables, src, total, own)
    held_dst = kv_held_bytes(tables, dst, total, own)
    union = min(held_src + kv_recv, max(total, held_src))
    w_max = max(w_src, w_dst)
    budget = move_budget_bytes(tables, src, dst)
    most = most_groups(batch)
    n = move_groups_needed(held_src, held_dst, union, budget - w_max, most) if kv_recv > 0.0 else 1
    if n > most or held_dst > float(info.kv_pool_bytes[dst]):
        n = 1  # refused however it is split (`feasible`): planned and priced as the whole move
    recv = kv_recv + w_recv
    send = recv  # NOTE: ring all-gathers and balanced all-to-alls send what they receive
    moving = recv > 0.0
    # NOTE: with a host KV tier a moved request's host pages move too: that share of its KV bytes
    # crosses the host link (0 without a tier); a move that turns the tier on or off runs its
    # placement part on the tiered side (module docstring), whose fraction it takes
    host_kv = kv_recv * max(host_fraction(tables, src), host_fraction(tables, dst))
    host_bps = tables.host_link_bytes_per_s
    # each group past the first is one more KV transfer: one more message per layer
    move_s = ((recv - host_kv) / tables.link_bytes_per_s + host_kv / host_bps
              + (MESSAGE_KINDS + (n - 1)) * tables.message_latency_s * tables.num_layers if moving else 0.0)
    spill, fill = tier_bytes(tables, src, dst, total, own)
    tier = spill + fill
    link_s = move_s + tier / host_bps if tier > 0.0 else move_s  # the tier copy after the placement move
    # the steps' collectives wait while the placement move holds the link (the tier copy holds the host link)
    interference_s = (send + recv + tier) / tables.hbm_bytes_per_s + move_s * max(min(network_share, 1.0), 0.0)
    # KV written during the move must follow at the commit, in proportion to what moved.
    # NOTE: the KV bytes here are the loop's ledger at the tables' rate (runtime_policy/kv_ledger.py):
    # each request's context + slack, so a moved request's fixed part (its windows and the states
    # that share the pool: DeepSeek-V4-Flash's 15.4 MB) moves with it at its real bytes. What that
    # ignores: the host fraction applies to those bytes too (the windows and rings stay in HBM, so
    # a tiered move puts h of them on the host link: 0.80 × 15.4 MB per V4-Flash request), and the
    # tokens written during the move are a share of context + slack tokens (the slack doesn't grow)
    tokens_total = total / tables.kv_bytes_per_token if tables.kv_bytes_per_token > 0 else 0.0
    steps_during = link_s / step_s if step_s > 0 else 0.0
    # NOTE: with n groups, a group's requests (1/n of the batch) write during its own transfer (1/n of
    # the link time) and hand off at its own boundary: 1/n of the one-group figure in all
    written = min(batch * steps_during / (tokens_total * n), 1.0) if tokens_total > 0 else 0.0
    stall_s = (n * COMMIT_COLLECTIVES * tables.message_latency_s + kv_recv * written / tables.link_bytes_per_s
               + (tier * written / host_bps if tier > 0.0 else 0.0))
    return TransitionPlan(
        src=tables.layouts[src], dst=tables.layouts[dst], send_bytes_per_rank=send, recv_bytes_per_rank=recv,
        kv_recv_bytes_per_rank=kv_recv, weight_recv_bytes_per_rank=w_recv,
        memory_needed_bytes=w_max + move_peak_bytes(held_src, held_dst, union, n), memory_budget_bytes=budget,
        post_kv_bytes_per_rank=held_dst, post_kv_pool_bytes=float(info.kv_pool_bytes[dst]),
        link_s=link_s, interference_s=interference_s, commit_stall_s=stall_s, spill_bytes_per_rank=spill,
        fill_bytes_per_rank=fill, move_groups=n, kv_src_bytes_per_rank=held_src, kv_dst_bytes_per_rank=held_dst,
        kv_union_bytes_per_rank=union, union_memory_bytes=w_max + union,
        move_order="longest" if held_dst >= held_src else "shortest")


def kv_recv_per_rank(tables: StepTimeTable, ledger, src: int, dst: int) -> list[float]:
    """[T] KV bytes each rank receives moving src → dst at the loop's ledger (kv_ledger.KvLedger):
    the plan's formula (`_kv_recv`) with each rank's own groups in place of the busiest ones, so the
    ledger's move (`KvLedger.move_held_per_rank`) is the plan's, rank by rank."""
    rate, t = ledger.rate, ledger.ranks
    total = ledger.total * rate
    per = [ledger.by_group(layout) for layout in range(len(ledger.groups))]
    out = []
    for r in range(t):
        busy = [p[r * len(p) // t] * rate for p in per]
        out.append(_kv_recv(tables, src, dst, total, busy))
    return out


def ledger_move_peak_bytes(tables: StepTimeTable, ledger, src: int, dst: int, groups: int, done: int = 0) -> float:
    """The KV the fullest rank holds at the peak of the move src → dst in `groups` groups, `done`
    landed, at the ledger's tokens now: what the plan's `peak_kv_bytes_per_rank` says of the same
    state (equal where the busiest groups are the same ranks', and never above it)."""
    recv = kv_recv_per_rank(tables, ledger, src, dst)
    return max(ledger.move_held_per_rank(src, dst, recv, groups, done, peak=True))


def move_members(lengths, groups: int, order: str = "longest") -> list[list[int]]:
    """The requests of an incremental move in `groups` groups (at most one a request), `lengths`
    {request: tokens} at its start: sorted by length, longest first ("longest": the destination
    holds more per rank, so the peak is at the last group, kept small) or shortest first
    ("shortest"), ties by id, cut into consecutive slices of equal count (`TransitionPlan.move_order`).
    The one rule: the serving loop's account of a move (switching.py) and the torch executor's
    groups (executor/torch_executor/move_plan.py) read it."""
    if order not in ("longest", "shortest"):
        raise ValueError(f"order={order!r} is not longest or shortest")
    sign = -1 if order == "longest" else 1
    reqs = sorted(lengths, key=lambda q: (sign * lengths[q], q))
    n = max(1, min(int(groups), len(reqs)))
    return [reqs[i * len(reqs) // n:(i + 1) * len(reqs) // n] for i in range(n)]


def all_plans(tables: StepTimeTable, kv_total_bytes: float, busy) -> list[TransitionPlan]:
    """Every ordered switch at one KV state (12 for the four built-in layouts; layouts the model
    can't run are left out)."""
    ok = [i for i in range(len(tables.layouts)) if tables.info.kv_pool_bytes[i] >= 0]
    return [plan_transition(tables, a, b, kv_total_bytes, busy) for a in ok for b in ok if a != b]
