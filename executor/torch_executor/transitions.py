"""Live switches between attention layouts: plans, background movement, commit and abort.

What it does: `plan_page_moves` (pure, host-only, identical on every rank) lists what moves
for any of the 12 ordered layout pairs — each KV page to each rank that must newly hold it,
with the valid token prefix at plan time, and head weights gathered (sharded -> replicated)
or sliced (replicated -> sharded) — chunked so no rank receives more than `bytes_per_step` a
step, with bytes and memory per rank and the commit step fixed in the plan.
`Transition` carries a plan out on one rank through explicit states
planned -> copying (-> ready) -> committed | aborted:
- begin: allocate destination pages and weight slots first (an agreed abort if any rank
  can't); from here the new token of every step is written to both layouts' pages;
- each step after the step's work: one chunk on a side stream over the side process group
  (pack the valid prefixes, batched send/recv, unpack), then a host agreement on failures;
- still in begin, the destination's fixed-shape step inputs are built and (on CUDA) its step
  is captured as a CUDA graph, so nothing is built at the boundary;
- commit at a batch boundary once every chunk has moved (`ready`): at the plan's commit step
  (`auto_commit`, scripted switches), or when the serving loop says (`RankRunner.commit_switch`):
  the main stream waits for the side stream and two references are swapped (layout state, step
  executable); nothing is allocated, freed or synchronized there. The old layout's pages and
  weight slots are freed after the commit step's device work has been issued;
- requests admitted or finished while the switch is in flight are written to (freed from) both
  layouts' pages, and a finished request's remaining moves are skipped (every rank knows it);
- abort: destination pages and weights are dropped; the old layout was never written to
  except by its own steps, so every request's KV stays bit-identical.
NOTE: the commit moves no data. A page's prefix that existed at plan time is immutable and is
copied in the background; every token after it is written by its new holder itself, since
every rank computes every request's latent (kv_a and the residual are replicated). So the
"small delta" of the hand-off is empty and the commit stall is a stream wait and a swap.
What it does not do: choose when to switch (runtime_policy), recover from a rank that dies
mid-transfer (a transfer error is detected and agreed on at the next step boundary).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .config import MLADims
from .dist import agree_any, all_gather_cat
from .kv_pages import OutOfPages, PageTable, balance_owners, holders, pages_for
from .layers import HeadWeights
from .layouts import LayoutState, heads_sharded, weight_slots_needed


class SwitchState(str, Enum):
    PLANNED = "planned"
    COPYING = "copying"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class Faults:
    """Injected faults for tests: a failing transfer, or no memory for destination pages."""

    fail_transfer_chunk: int | None = None
    fail_transfer_rank: int = 0
    deny_pages_rank: int | None = None


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


def plan_page_moves(src: str, dst: str, world_size: int, seq_lens: dict[int, int], src_owners: dict[int, int],
                    dims: MLADims, element_bytes: int, head_bytes_full: int, start_step: int,
                    bytes_per_step: int, dst_owners: dict[int, int] | None = None) -> PageMovePlan:
    """Plan a switch src -> dst at the boundary before `start_step` (pure; same on every rank).
    `dst_owners`: each request's owner under an owner destination (None: kept from an owner source,
    else balanced by KV bytes; a serving loop passes the owners it keeps for every layout)."""
    if src == dst:
        raise ValueError(f"switch from {src} to itself")
    if bytes_per_step <= 0:
        raise ValueError(f"bytes_per_step={bytes_per_step} must be positive")
    t, page, layers = world_size, dims.page_size, dims.num_layers
    if dst in ("dp", "dop"):
        if src in ("dp", "dop"):
            dst_owners = dict(src_owners)
        elif dst_owners is None:
            dst_owners = balance_owners(seq_lens, t)
        else:
            dst_owners = {q: dst_owners[q] for q in seq_lens}
    else:
        dst_owners = {}
    token_bytes = layers * dims.latent_dim * element_bytes
    rows, freed, dest = [], [0] * t, [0] * t
    for req in sorted(seq_lens):
        n = seq_lens[req]
        for lp in range(pages_for(n, page)):
            old = holders(src, t, req, lp, src_owners)
            new = holders(dst, t, req, lp, dst_owners)
            for k in old:
                if k not in new:
                    freed[k] += 1
            for d in new:
                if d not in old:
                    rows.append((req, lp, old[(d + lp) % len(old)], d, min(page, n - lp * page)))
                    dest[d] += 1
    moves = np.array(rows, dtype=np.int64).reshape(-1, 5)
    if heads_sharded(src) == heads_sharded(dst):
        weights = "keep"
    else:
        weights = "gather" if heads_sharded(src) else "slice"
    layer_gather = (head_bytes_full - head_bytes_full // t) // layers if weights == "gather" else 0
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
        src, dst, t, start_step, start_step + num_chunks + 1, bytes_per_step, num_chunks, dst_owners,
        moves[:, 0].copy(), moves[:, 1].copy(), moves[:, 2].copy(), moves[:, 3].copy(), moves[:, 4].copy(),
        move_chunk, tuple(weight_chunk), weights, tuple(send_tot), tuple(recv_tot), tuple(dest), tuple(freed),
        weight_slots_needed(src, head_bytes_full, t, page_bytes), weight_slots_needed(dst, head_bytes_full, t, page_bytes),
    )


def _index(slots: list[int], counts: list[int], page: int, device) -> torch.Tensor:
    """Flat token indices of the copied prefixes. -> [sum counts] int64 on device."""
    if not slots:
        return torch.zeros(0, dtype=torch.int64, device=device)
    idx = np.concatenate([np.arange(s * page, s * page + c, dtype=np.int64) for s, c in zip(slots, counts)])
    t = torch.from_numpy(idx)
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


@dataclass
class Transition:
    """One rank's side of a switch (see module docstring for the states)."""

    plan: PageMovePlan
    faults: Faults | None = None
    auto_commit: bool = True  # commit at plan.commit_step (scripted); False: the caller commits once `ready`
    state: SwitchState = SwitchState.PLANNED
    reason: str | None = None
    new: LayoutState | None = None
    new_exec: Any = None  # step_graph.StepExec of the destination, built during copying
    _failed: str | None = None
    _chunks_done: int = 0
    _old: LayoutState | None = None  # the source layout until its pages are released
    # slots of requests finished while copying: freed at the commit or abort (NOTE: not at once: a
    # chunk on the side stream may still be reading or writing them)
    deferred_free: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def in_flight(self) -> bool:
        return self.state in (SwitchState.PLANNED, SwitchState.COPYING)

    @property
    def mirroring(self) -> bool:
        return self.state == SwitchState.COPYING and self._failed is None

    @property
    def ready(self) -> bool:
        """Every chunk moved and agreed on: the switch can commit at the next batch boundary."""
        return self.state == SwitchState.COPYING and self._failed is None and self._chunks_done >= self.plan.num_chunks

    def fail(self, reason: str) -> None:
        """Record a local failure; all ranks abort at the next agreement."""
        if self._failed is None:
            self._failed = reason

    # ---- begin -------------------------------------------------------------------------------
    def begin(self, runner) -> None:
        plan, r, t = self.plan, runner.g.rank, runner.g.world_size
        old = runner.state
        new_table = PageTable(plan.dst_kind, dict(plan.dst_owners))
        self.new = LayoutState(plan.dst_kind, new_table, old.heads, old.weight_slots)
        try:
            if self.faults is not None and self.faults.deny_pages_rank == r:
                raise OutOfPages(f"injected: no memory for {plan.dest_pages[r]} destination pages on rank {r}")
            need = plan.memory_needed_pages(r)
            if need > runner.alloc.num_free:
                raise OutOfPages(f"rank {r} needs {need} free page slots for {plan.dst_kind} "
                                 f"({plan.dest_pages[r]} pages + weights), has {runner.alloc.num_free}")
            for req in sorted(runner.seq_lens):
                for lp in range(pages_for(runner.seq_lens[req], runner.dims.page_size)):
                    if r in holders(plan.dst_kind, t, req, lp, plan.dst_owners):
                        slot = old.table.pages.get(req, {}).get(lp)
                        new_table.add(req, lp, slot if slot is not None else runner.alloc.alloc(1)[0])
            if plan.weights == "gather":
                self.new.weight_slots = runner.alloc.reserve(plan.weight_slots_after)
                with self._side(runner):
                    self.new.heads = [HeadWeights(0, *(torch.empty((h.num_heads * t,) + tuple(x.shape[1:]),
                                                                   dtype=x.dtype, device=x.device)
                                                       for x in h.tensors())) for h in old.heads]
            elif plan.weights == "slice":
                self.new.weight_slots = []
                hs = runner.dims.num_heads // t
                with self._side(runner):
                    self.new.heads = [h.slice_heads(r * hs, hs) for h in old.heads]
        except OutOfPages as e:
            self.fail(str(e))
        if agree_any(self._failed is not None, runner.g):
            self.abort(runner, self._failed or "another rank could not prepare the destination")
            return
        if runner.side_stream is not None and self.new.heads is not old.heads:
            main = torch.cuda.current_stream(runner.g.device)
            for h in self.new.heads:  # made on the side stream, read by the main stream after commit
                for x in h.tensors():
                    x.record_stream(main)
        runner.retired.clear()  # execs replaced before this switch: their last replays are long done
        self.state = SwitchState.COPYING
        # Tokens grow by one per step until the commit: room for them (and headroom) in the inputs.
        self.new_exec = runner.build_exec(self.new, extra_pages=pages_for(plan.num_chunks + 2, runner.dims.page_size))

    def _side(self, runner):
        if runner.side_stream is None:
            return contextlib.nullcontext()
        runner.side_stream.wait_stream(torch.cuda.current_stream(runner.g.device))
        return torch.cuda.stream(runner.side_stream)

    # ---- per step ----------------------------------------------------------------------------
    def before_step(self, runner) -> None:
        if self.auto_commit and self.state == SwitchState.COPYING and runner.step_index >= self.plan.commit_step:
            self.commit(runner)

    def after_step(self, runner) -> None:
        if self._old is not None:
            self._release_old(runner)
        if self.state != SwitchState.COPYING:
            return
        k = runner.step_index - self.plan.start_step
        if 0 <= k < self.plan.num_chunks and self._failed is None:
            self._run_chunk(runner, k)
        if agree_any(self._failed is not None, runner.g):
            self.abort(runner, self._failed or "a transfer failed on another rank")

    def _run_chunk(self, runner, k: int) -> None:
        plan, r, g = self.plan, runner.g.rank, runner.g
        page, dev, dims = runner.dims.page_size, g.device, runner.dims
        flat = runner.pool.view(dims.num_layers, -1, dims.latent_dim)  # [L, P*page, C+R]
        old_t, new_t = runner.state.table, self.new.table
        with self._side(runner):
            for layer, c in enumerate(plan.weight_chunk):
                if c == k:
                    for out, src in zip(self.new.heads[layer].tensors(), runner.state.heads[layer].tensors()):
                        all_gather_cat(out, src, g.side)
            live = np.fromiter((int(q) in runner.seq_lens for q in plan.move_req), dtype=bool, count=len(plan.move_req))
            sel = np.nonzero((plan.move_chunk == k) & live)[0]  # moves of requests finished since: skipped
            ops, recvs = [], []
            for peer in range(plan.world_size):
                if peer == r:
                    continue
                out_rows = sel[(plan.move_src[sel] == r) & (plan.move_dst[sel] == peer)]
                if len(out_rows):
                    idx = _index([old_t.pages[int(plan.move_req[i])][int(plan.move_lp[i])] for i in out_rows],
                                 [int(plan.move_tokens[i]) for i in out_rows], page, dev)
                    ops.append(dist.P2POp(dist.isend, flat.index_select(1, idx), peer, group=g.side))
                in_rows = sel[(plan.move_dst[sel] == r) & (plan.move_src[sel] == peer)]
                if len(in_rows):
                    idx = _index([new_t.pages[int(plan.move_req[i])][int(plan.move_lp[i])] for i in in_rows],
                                 [int(plan.move_tokens[i]) for i in in_rows], page, dev)
                    buf = torch.empty((dims.num_layers, len(idx), dims.latent_dim), dtype=flat.dtype, device=dev)
                    ops.append(dist.P2POp(dist.irecv, buf, peer, group=g.side))
                    recvs.append((idx, buf))
            if ops:
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
            for idx, buf in recvs:
                flat.index_copy_(1, idx, buf)
            f = self.faults
            if f is not None and f.fail_transfer_chunk == k and f.fail_transfer_rank == r:
                for idx, _ in recvs:  # what a broken transfer leaves behind: garbage in the new pages
                    flat.index_fill_(1, idx, float("nan"))
                self.fail(f"injected: transfer of chunk {k} failed on rank {r}")
        self._chunks_done = k + 1

    # ---- commit / abort ----------------------------------------------------------------------
    def commit(self, runner) -> None:
        """The hand-off: a stream wait and two reference swaps (everything else was done before)."""
        if self.state != SwitchState.COPYING:
            raise RuntimeError(f"commit in state {self.state.value}")
        if runner.side_stream is not None:
            torch.cuda.current_stream(runner.g.device).wait_stream(runner.side_stream)
        self._old = runner.state
        if runner.exec is not None:
            runner.retired.append(runner.exec)
        runner.state, runner.exec = self.new, self.new_exec
        self.state = SwitchState.COMMITTED
        runner.alloc.release(self.deferred_free)
        self.deferred_free = []

    def _release_old(self, runner) -> None:
        """Free the source layout's pages and weight slots (host bookkeeping after the commit step)."""
        old, new = self._old, runner.state
        keep = set(new.table.slots())
        runner.alloc.release([s for s in old.table.slots() if s not in keep])
        if new.weight_slots is not old.weight_slots:
            runner.alloc.unreserve(old.weight_slots)
        runner.retired.append(old)  # its tensors may still be read by the last source replay
        self._old = None

    def abort(self, runner, reason: str) -> None:
        if not self.in_flight:
            raise RuntimeError(f"abort in state {self.state.value}")
        if runner.side_stream is not None:
            runner.side_stream.synchronize()
        old, new = runner.state, self.new
        if new is not None:
            keep = set(old.table.slots())
            runner.alloc.release([s for s in new.table.slots() if s not in keep])
            if new.weight_slots is not old.weight_slots:
                runner.alloc.unreserve(new.weight_slots)
        self.new = None
        if self.new_exec is not None:
            runner.retired.append(self.new_exec)
            self.new_exec = None
        runner.alloc.release(self.deferred_free)
        self.deferred_free = []
        self.state = SwitchState.ABORTED
        self.reason = reason
