"""Switch plans: what a live layout switch moves, per rank, and when it commits (pure, host-only).

What it does: `plan_page_moves` lists, identically on every rank, what moves for any ordered pair of
layouts the executor runs, read off their placements (placement_kind.ExecLayout), never their names
— each KV page to each rank that must newly hold it (a destination holder the source lacks: the
source's and destination's groups of holders compared, e.g. DP's owner -> the R ranks of its DPTP
group), with the valid token prefix at plan time, and head weights kept (the same slice per rank),
sliced (replicated -> split) or gathered (split -> replicated, or re-split: TP's T ways <-> DPTP's R
ways, all-gathered then sliced) — chunked so no rank receives more than `bytes_per_step` a step, with bytes and memory
per rank and the commit step fixed in the plan; `switch_growth_pages` counts the pages a rank
needs for both layouts' new tokens over the next steps (what a switch reserves before it begins).
Incremental moves (Issue 27; runtime_policy/transitions.py): `move_groups` splits the requests into
n groups in the order the plan says, `group_page_profile` counts the pages each rank holds while
each group is in flight — the rest of the source + the landed groups in the destination + the group
in flight in both — whose maximum is the move's peak (`IncrementalMove.peak_pages`); each group is
then one `plan_page_moves` over its requests alone, planned when it starts (`move_weights`: only the
first gathers or slices the head weights).
What it does not do: move anything (transfer.py) or track a switch's state (transitions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from runtime_policy.transitions import move_members

from .config import MLADims
from .kv_pages import balance_owners, pages_for
from .layouts import weight_slots_needed
from .placement_kind import ExecLayout, exec_layout


@dataclass(frozen=True)
class PageMovePlan:
    """What a switch moves, per rank, and when it commits. One row per (page, new holder)."""

    src_kind: str
    dst_kind: str
    world_size: int
    start_step: int
    commit_step: int
    bytes_per_step: int
    num_chunks: int
    dst_owners: dict[int, int]
    move_req: np.ndarray  # [M] request id
    move_lp: np.ndarray  # [M] logical page
    move_src: np.ndarray  # [M] sending rank
    move_dst: np.ndarray  # [M] receiving rank
    move_tokens: np.ndarray  # [M] valid tokens of the page at plan time (the copied prefix)
    move_chunk: np.ndarray  # [M] chunk (step after start_step) that moves it
    weight_chunk: tuple[int, ...]  # per layer: chunk that gathers its heads, -1 if none
    weights: str  # "keep" | "gather" | "slice"
    send_bytes: tuple[int, ...]  # per rank, KV + weights
    recv_bytes: tuple[int, ...]
    dest_pages: tuple[int, ...]  # pages each rank allocates before copying
    freed_pages: tuple[int, ...]  # pages each rank frees at commit
    weight_slots_before: int  # per rank, slots taken by replicated weights
    weight_slots_after: int
    src_layout: ExecLayout | None = None  # the layouts as the executor runs them (src_kind, dst_kind: their names)
    dst_layout: ExecLayout | None = None

    def memory_needed_pages(self, rank: int) -> int:
        """Free page slots rank needs before copying starts (destination pages + weight slots)."""
        extra_w = self.weight_slots_after if self.weights == "gather" else 0
        return self.dest_pages[rank] + extra_w

    def summary(self) -> dict[str, Any]:
        return {
            "src": self.src_kind, "dst": self.dst_kind, "world_size": self.world_size,
            "num_chunks": self.num_chunks, "commit_after_steps": self.commit_step - self.start_step,
            "pages_moved": int(len(self.move_req)), "weights": self.weights,
            "send_bytes_per_rank": list(self.send_bytes), "recv_bytes_per_rank": list(self.recv_bytes),
            "dest_pages_per_rank": list(self.dest_pages), "freed_pages_per_rank": list(self.freed_pages),
            "weight_slots_before": self.weight_slots_before, "weight_slots_after": self.weight_slots_after,
            "bytes_per_step": self.bytes_per_step,
        }


def weight_move(src: ExecLayout, dst: ExecLayout) -> str:
    """How a switch moves the head weights: "keep" (each rank keeps the same slice: the same ways),
    "slice" (replicated -> split: each rank cuts its slice), "gather" (split -> replicated or split
    another way: every rank's slice all-gathered, then cut to the destination's)."""
    if src.weight_split == dst.weight_split:
        return "keep"
    return "slice" if src.weight_split == 1 else "gather"


def plan_page_moves(src, dst, world_size: int, seq_lens: dict[int, int], src_owners: dict[int, int],
                    dims: MLADims, element_bytes: int, head_bytes_full: int, start_step: int,
                    bytes_per_step: int, dst_owners: dict[int, int] | None = None,
                    move_weights: bool = True) -> PageMovePlan:
    """Plan a switch src -> dst at the boundary before `start_step` (pure; same on every rank).
    src, dst: ExecLayouts, or registered names on `world_size` ranks (placement_kind.exec_layout).
    `dst_owners`: each request's owner rank under a destination with owner groups (None: kept from a
    source with owner groups, else balanced by KV bytes; a serving loop passes the owners it keeps
    for every layout). `move_weights` False: a later group of an incremental
    move, the head weights already moved by the first (`plan_incremental`)."""
    src, dst = exec_layout(src, world_size), exec_layout(dst, world_size)
    if src == dst:
        raise ValueError(f"switch from {src.name} to itself")
    if bytes_per_step <= 0:
        raise ValueError(f"bytes_per_step={bytes_per_step} must be positive")
    t, page, layers = world_size, dims.page_size, dims.num_layers
    if dst.owned:
        if src.owned:
            dst_owners = dict(src_owners)
        elif dst_owners is None:
            dst_owners = balance_owners(seq_lens, t, dst.groups)
        else:
            dst_owners = {q: dst_owners[q] for q in seq_lens}
    else:
        dst_owners = {}
    token_bytes = layers * dims.latent_dim * element_bytes
    rows, freed, dest = [], [0] * t, [0] * t
    for req in sorted(seq_lens):
        n = seq_lens[req]
        for lp in range(pages_for(n, page)):
            old = src.holders(req, lp, src_owners)
            new = dst.holders(req, lp, dst_owners)
            for k in old:
                if k not in new:
                    freed[k] += 1
            for d in new:
                if d not in old:
                    rows.append((req, lp, old[(d + lp) % len(old)], d, min(page, n - lp * page)))
                    dest[d] += 1
    moves = np.array(rows, dtype=np.int64).reshape(-1, 5)
    weights = weight_move(src, dst) if move_weights else "keep"  # a later group of an incremental move
    # a gather receives every other rank's slice (1/weight_split of the heads each): T-1 of them
    ws = src.weight_split
    got = head_bytes_full - head_bytes_full // t if ws == t else (t - 1) * (head_bytes_full // ws)
    layer_gather = got // layers if weights == "gather" else 0
    # Chunking: items in order (weights first), a new chunk when a receiving rank would pass the limit.
    chunk, recv = 0, [0] * t
    send_tot, recv_tot = [0] * t, [0] * t
    any_item = False

    def place(per_rank: list[int]) -> int:
        nonlocal chunk, recv, any_item
        if any(recv[k] and recv[k] + per_rank[k] > bytes_per_step for k in range(t) if per_rank[k]):
            chunk, recv = chunk + 1, [0] * t
        for k in range(t):
            recv[k] += per_rank[k]
        any_item = True
        return chunk

    weight_chunk = []
    for _ in range(layers):
        if weights == "gather":
            weight_chunk.append(place([layer_gather] * t))
            for k in range(t):
                recv_tot[k] += layer_gather
                send_tot[k] += layer_gather  # its shard to each of the T-1 others
        else:
            weight_chunk.append(-1)
    move_chunk = np.zeros(len(moves), dtype=np.int64)
    for i, (_, _, s, d, ntok) in enumerate(moves):
        b = int(ntok) * token_bytes
        per = [0] * t
        per[d] = b
        move_chunk[i] = place(per)
        send_tot[s] += b
        recv_tot[d] += b
    num_chunks = chunk + 1 if any_item else 0
    page_bytes = dims.kv_bytes_per_page(element_bytes)
    return PageMovePlan(
        src.name, dst.name, t, start_step, start_step + num_chunks + 1, bytes_per_step, num_chunks, dst_owners,
        moves[:, 0].copy(), moves[:, 1].copy(), moves[:, 2].copy(), moves[:, 3].copy(), moves[:, 4].copy(),
        move_chunk, tuple(weight_chunk), weights, tuple(send_tot), tuple(recv_tot), tuple(dest), tuple(freed),
        weight_slots_needed(src, head_bytes_full, t, page_bytes), weight_slots_needed(dst, head_bytes_full, t, page_bytes),
        src, dst,
    )



def switch_growth_pages(plan: "PageMovePlan", rank: int, seq_lens: Mapping[int, int], src_owners: Mapping[int, int],
                        page_size: int, steps: int) -> tuple[int, int]:
    """Pages `rank` allocates for the new tokens of the next `steps` steps while both layouts of
    `plan` are written: (the source's, the destination's alone). Every request gains one token a
    step (positions n .. n+steps-1 of a request of n tokens); a new page both layouts hold on the
    rank shares one slot (RankRunner writes it once), so it counts as the source's."""
    t, src_n, dst_n = plan.world_size, 0, 0
    src = exec_layout(plan.src_layout or plan.src_kind, t)
    dst = exec_layout(plan.dst_layout or plan.dst_kind, t)
    for req, n in seq_lens.items():
        for lp in range(pages_for(n, page_size), (n + steps - 1) // page_size + 1):
            in_src = rank in src.holders(req, lp, src_owners)
            if in_src:
                src_n += 1
            elif rank in dst.holders(req, lp, plan.dst_owners):
                dst_n += 1
    return src_n, dst_n


def move_groups(seq_lens: Mapping[int, int], groups: int, order: str = "longest") -> list[list[int]]:
    """The requests of an incremental move in `groups` groups: runtime_policy/transitions.py
    `move_members` (the serving loop's account of the move reads the same rule)."""
    return move_members(seq_lens, groups, order)


def group_page_profile(src, dst, world_size: int, seq_lens: Mapping[int, int], src_owners: Mapping[int, int],
                       dst_owners: Mapping[int, int], page_size: int, groups: list[list[int]]) -> list[list[int]]:
    """[n][T] KV pages each rank holds while group k is in flight: the source's pages of the groups
    after it, the destination's of the groups before it (landed: their source pages freed), and group
    k's in both (a page both layouts put on the rank is one slot). The move's peak on a rank is the
    largest of its column (runtime_policy/kv_ledger.py `move_held_bytes`, in pages)."""
    src, dst = exec_layout(src, world_size), exec_layout(dst, world_size)
    t = world_size
    pages = {}  # req -> ([T] source pages, [T] destination pages, [T] pages of both held at once)
    for q in (q for g in groups for q in g):
        n = seq_lens[q]
        a, b, u = [0] * t, [0] * t, [0] * t
        for lp in range(pages_for(n, page_size)):
            old = src.holders(q, lp, src_owners)
            new = dst.holders(q, lp, dst_owners)
            for k in range(t):
                i, j = k in old, k in new
                a[k] += i
                b[k] += j
                u[k] += i or j
        pages[q] = (a, b, u)
    out = []
    for k in range(len(groups)):
        held = [0] * t
        for i, g in enumerate(groups):
            part = 2 if i == k else (1 if i < k else 0)  # in flight: both; landed: destination; after: source
            for q in g:
                row = pages[q][part]
                for r in range(t):
                    held[r] += row[r]
        out.append(held)
    return out


@dataclass(frozen=True)
class IncrementalMove:
    """An incremental switch's groups and memory, fixed at its start (the same on every rank)."""

    groups: tuple[tuple[int, ...], ...]  # request ids, in the order they move
    dst_owners: dict[int, int]
    profile: tuple[tuple[int, ...], ...]  # [n][T] pages held while group k is in flight (at start lengths)
    start_lens: dict[int, int]

    @property
    def peak_pages(self) -> tuple[int, ...]:
        """[T] the most KV pages each rank holds during the move (at the lengths of its start)."""
        return tuple(max(col) for col in zip(*self.profile)) if self.profile else ()


def plan_incremental(src, dst, world_size: int, seq_lens: Mapping[int, int], src_owners: Mapping[int, int],
                     page_size: int, groups: int, order: str = "longest",
                     dst_owners: Mapping[int, int] | None = None) -> IncrementalMove:
    """The groups of a switch src -> dst of the requests `seq_lens` (`move_groups`) and the pages each
    rank holds while each is in flight (`group_page_profile`); destination owners as plan_page_moves
    takes them."""
    s, d = exec_layout(src, world_size), exec_layout(dst, world_size)
    if d.owned:
        if s.owned:
            owners = dict(src_owners)
        elif dst_owners is None:
            owners = balance_owners(dict(seq_lens), world_size, d.groups)
        else:
            owners = {q: dst_owners[q] for q in seq_lens}
    else:
        owners = {}
    gs = move_groups(seq_lens, groups, order)
    prof = group_page_profile(s, d, world_size, seq_lens, src_owners, owners, page_size, gs)
    return IncrementalMove(tuple(tuple(g) for g in gs), owners, tuple(tuple(x) for x in prof), dict(seq_lens))
