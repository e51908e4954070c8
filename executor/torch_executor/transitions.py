"""Live switches between attention layouts: reservation, background movement, group-wide agreement,
commit, probation, abort and rollback.

What it does: `Transition` carries a plan (move_plan.py) out on one rank through explicit states
planned -> copying (-> ready) -> committed | aborted:
- begin: reserve everything the switch will take before it starts — destination pages, weight
  slots, and a spare of pages for the destination's new tokens over the copy steps and the step
  after the commit — with the source's own growth over those steps still free, or refuse in one
  line (an agreed abort: every rank reports the first failing rank's reason); build the
  destination's step executables (buckets.ExecCache: on CUDA the current batch's bucket is captured
  as a CUDA graph after the agreement, its neighbouring buckets one per copy step); from here the
  new tokens of every step (decode and prefill chunks) are written to both layouts' pages;
- every step, after the step's host bookkeeping and before its device work, one agreement on the
  control group (`agree`: the shared abort flag). Any failure on any rank since the last one — an
  allocation, a chunk's preparation or transfer, a checksum mismatch, any exception in the
  guarded host work — aborts the switch on every rank there, before any collective of the step
  is entered, and the step's bookkeeping is redone on the agreed state;
- after the step's device work: one chunk on a side stream over the side group (transfer.py:
  checksummed, faults never leave a peer waiting past the side group's short timeout);
- commit at a batch boundary once every chunk has moved, been verified and agreed on (`ready`): at
  the plan's commit step (`auto_commit`, scripted switches), or when the serving loop says
  (`RankRunner.commit_switch`): the main stream waits for the side stream and two references are
  swapped (layout state, step executable); nothing is allocated, freed or synchronized there;
- the step after the commit is on probation: the old layout stays complete as a fallback (its
  pages are still written); its host work is agreed on as above, and a failure anywhere rolls the
  group back to the old layout (`after_commit="rollback"`), or drops the fallback and retries the
  step once in the committed layout (`"forward"`: for a caller already serving the new layout,
  the serving loop); a retry that fails too raises the same error on every rank. Once that step's
  device work is issued, the fallback's pages and weight slots and the unused spare are freed;
- requests admitted or finished while the switch is in flight (or on probation) are written to
  (freed from) both layouts' pages, and a finished request's remaining moves are skipped;
- the layout that serves draws pages from the free list, then the spare; when both are empty the
  switch gives its memory back at once (`surrender`) and fails, so a switch never starves the
  layout that serves. The other layout draws from the spare, then from the free list while one
  page per running request stays for the serving layout's next step; else the switch fails;
- abort: destination pages, weights and the spare are dropped (the side group rebuilt if a
  transfer broke it); the old layout was never written to except by its own steps, so every
  request's KV stays bit-identical.
NOTE: the commit moves no data. A page's prefix that existed at plan time is immutable and is
copied in the background; every token after it is written by its new holder itself, since
every rank computes every request's latent (kv_a and the residual are replicated). So the
"small delta" of the hand-off is empty and the commit stall is a stream wait and a swap.
- a fault the agreement can't see — a rank raising inside a step's device work (between two of
  the step's main-group collectives), or a rank that dies — is agreed by recovery.py within
  seconds: while a switch is guarded, every collective's wait on a peer is bounded
  (dist.bounded_waits); the group then rolls back (or aborts) and runs the step again, or, a
  peer gone, each survivor drops the switch on its own and raises dist.GroupLost.
- incremental (Issue 27; `inc`, move_plan.plan_incremental): the requests move in groups, one
  `plan_page_moves` each, planned when the group starts (the first also moves the head weights).
  `begin` reserves the first group's destination pages only; once a group's chunks have moved, been
  verified and agreed on, the next boundary lands it (`before_step`: every rank alike): its requests
  serve in the destination from that step (runner.py runs the step's landed rows with the
  destination's executable and the rest with the source's: decode rows are independent, so a step
  of two sub-batches is the step of one) and their source pages are freed, then the next group's
  destination pages are taken. The rank's memory is then the rest of the source + the landed groups
  in the destination + the group in flight in both (`IncrementalMove.peak_pages`, the ledger's
  `move_held_bytes` in pages). Requests being prefilled at the start, and those admitted during the
  move, are written to both layouts throughout and hand over at the commit with the last group.
  A fault before the first group lands aborts as above (the source untouched). After it, requests
  already moved stay in the destination and are served there: the group in flight is dropped (its
  destination pages freed, its source pages never were) and moved again from the next boundary,
  planned afresh at its lengths then (`MAX_GROUP_RETRIES`; an injected fault fires once). So at
  every boundary each request's KV is whole in exactly one serving layout. The commit's fallback is
  the old layout only while no group has landed (else a failure after it moves forward). A move
  that must end early after a group landed (the serving loop's destination pool filled:
  runtime_policy/switching.py `finish_move`) is not aborted: the caller retires the requests not
  yet landed (their pages in both layouts freed) and `finish` commits what has landed.
What it does not do: choose when to switch (runtime_policy); admit a request the serving layout
has no room for even with the switch's memory given back (the caller's accounting: it raises on
that rank, as without a switch); or bring a dead rank back.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

import torch

from .dist import agree_any, agree_flags, bounded_waits, first_reason, rebuild_side
from .kv_pages import OutOfPages, PageTable, pages_for
from .layers import HeadWeights
from .layouts import LayoutState
from .move_plan import IncrementalMove, PageMovePlan, plan_page_moves, switch_growth_pages
from .recovery import AgreedFailure
from .transfer import run_chunk

__all__ = ["AFTER_COMMIT", "Faults", "PageMovePlan", "SwitchState", "Transition", "plan_page_moves"]

AFTER_COMMIT = ("rollback", "forward")
MAX_GROUP_RETRIES = 3  # an incremental move's group that fails this many times in a row ends serving (AgreedFailure)


def _only_in(a: list[int], b: list[int]) -> list[int]:
    """Weight slots of `a` that `b` doesn't share (a layout's own, to free when it goes: a slice
    hands some of the source's slots to the destination, "keep" all of them)."""
    if a is b:
        return []
    shared = set(b)
    return [s for s in a if s not in shared]


class SwitchState(str, Enum):
    PLANNED = "planned"
    COPYING = "copying"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class Faults:
    """Injected faults for tests, each on one rank (`fail_transfer_rank` for the transfer faults)."""

    fail_transfer_chunk: int | None = None  # that chunk's pages arrive as garbage, and the rank says so
    fail_transfer_rank: int = 0
    deny_pages_rank: int | None = None  # no memory for the destination on that rank
    transfer_error_chunk: int | None = None  # the rank's transport raises before it posts that chunk
    corrupt_chunk: int | None = None  # one bit of the first message the rank receives from that chunk on flips
    fail_after_commit_rank: int | None = None  # that rank's host work raises in the step after the commit
    starve_rank: int | None = None  # once the switch begins, it holds all of that rank's free pages (not the spare)
    fail_device_after_commit_rank: int | None = None  # that rank raises inside the device work of the step after the commit
    kill_rank: int | None = None  # that rank's process ends (os._exit) at `kill_at`: a dead rank
    kill_at: str = "copying"  # "copying": the first copy step's host work; "probation": the step after the commit
    fail_group: int | None = None  # an incremental move: the transfer faults fire in that group only (None: any)


@dataclass
class Transition:
    """One rank's side of a switch (see module docstring for the states)."""

    plan: PageMovePlan
    faults: Faults | None = None
    auto_commit: bool = True  # commit at plan.commit_step (scripted); False: the caller commits once `ready`
    after_commit: str = "rollback"  # a failure in the step after the commit: "rollback" | "forward"
    state: SwitchState = SwitchState.PLANNED
    reason: str | None = None
    new: LayoutState | None = None
    new_exec: Any = None  # buckets.ExecCache of the destination: its current bucket captured at begin,
    # the neighbouring buckets one per copy step, the rest on first use
    probation: bool = False  # committed, the next step not run yet: the old layout is the fallback
    after_commit_failure: str | None = None  # "forward": the failure the committed layout survived
    side_broken: bool = False  # a transfer raised on this rank: the side group is rebuilt at the abort
    spare: list[int] = field(default_factory=list)  # reserved pages for the non-serving layout's growth
    mismatch: Any = None  # [] int64 on the device: moved messages whose checksum differed (transfer.py)
    _failed: str | None = None
    _failed_at: float = 0.0
    _chunks_done: int = 0
    _agreed_chunks: int = -1
    _verified: bool = False
    _old: LayoutState | None = None  # the source layout until its pages are released
    _old_exec: Any = None
    _fallback: bool = False  # on probation, the old layout still holds every token
    corrupted: bool = False  # a `corrupt_chunk` fault has flipped its bit
    ballast: list[int] = field(default_factory=list)  # the free pages a `starve_rank` fault holds for the switch
    # slots of requests finished while copying: freed at the commit or abort (NOTE: not at once: a
    # chunk on the side stream may still be reading or writing them)
    deferred_free: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    inc: IncrementalMove | None = None  # an incremental move's groups (module docstring); None: all at once
    group_i: int = 0  # the group in flight
    landed: set = field(default_factory=set)  # requests served in the destination (their source pages freed)
    held_back: set = field(default_factory=set)  # written to both layouts until the commit (prefilling, admitted)
    _mirrored: set = field(default_factory=set)  # requests whose destination pages exist (written to both)
    group_retries: int = 0  # consecutive failures of the group in flight
    group_failures: list = field(default_factory=list)  # the reasons, in order
    group_pages: list = field(default_factory=list)  # `move_pages` as each group starts (a retry: again)

    def __post_init__(self) -> None:
        if self.after_commit not in AFTER_COMMIT:
            raise ValueError(f"after_commit={self.after_commit!r} is not one of {AFTER_COMMIT}")

    @property
    def in_flight(self) -> bool:
        return self.state in (SwitchState.PLANNED, SwitchState.COPYING)

    @property
    def guarding(self) -> bool:
        """Steps whose host work is agreed on before their device work (the same on every rank)."""
        return self.state == SwitchState.COPYING or self.probation

    @property
    def mirroring(self) -> bool:
        return self.state == SwitchState.COPYING and self._failed is None

    def mirror_table(self) -> PageTable | None:
        """The table written besides the serving layout's: the destination's while copying, the
        fallback's on probation."""
        if self.mirroring:
            return self.new.table
        if self.probation and self._fallback:
            return self._old.table
        return None

    @property
    def group_moved(self) -> bool:
        """The plan in flight (an incremental move: its group's) moved, verified and agreed on."""
        return (self.state == SwitchState.COPYING and self._failed is None and self._verified
                and self._agreed_chunks >= self.plan.num_chunks)

    @property
    def ready(self) -> bool:
        """Every chunk moved, verified and agreed on (an incremental move: its last group's): the
        switch can commit at the next boundary."""
        return self.group_moved and (self.inc is None or self.group_i >= len(self.inc.groups) - 1)

    @property
    def chunk_faults(self) -> Faults | None:
        """The faults a chunk's transfer injects (transfer.py): an incremental move's only in `fail_group`."""
        f = self.faults
        if f is not None and self.inc is not None and f.fail_group is not None and f.fail_group != self.group_i:
            return None
        return f

    def writes_new(self, req: int) -> bool:
        """Whether `req`'s new tokens go to the destination's pages (every request unless incremental)."""
        return self.inc is None or req in self._mirrored

    def serves_new(self, req: int) -> bool:
        """Whether `req` runs in the destination before the commit (a landed group's)."""
        return req in self.landed

    def admitted(self, req: int) -> None:
        """`req` joined while the switch is in flight: written to both layouts until the commit."""
        if self.inc is not None:
            self.held_back.add(req)
            self._mirrored.add(req)

    def fail(self, reason: str) -> None:
        """Record a local failure; all ranks act on it at the next agreement."""
        if self._failed is None:
            self._failed, self._failed_at = reason, time.time()

    # ---- pages ---------------------------------------------------------------------------------
    def take_page(self, runner, mirror: bool) -> int:
        """One page slot for the serving layout (`mirror` False) or the other one (module docstring)."""
        alloc, r = runner.alloc, runner.g.rank
        if mirror:
            if self.spare:
                return self.spare.pop()
            if alloc.num_free > len(runner.order):
                return alloc.alloc(1)[0]
            raise OutOfPages(f"rank {r}: the spare is used up and the {alloc.num_free} free page slots stay "
                             f"for the serving layout")
        if alloc.num_free:
            return alloc.alloc(1)[0]
        if self.spare:
            return self.spare.pop()
        self.surrender(runner, f"rank {r}: the serving layout {runner.state.kind} needed a page and none was free")
        return alloc.alloc(1)[0]

    def surrender(self, runner, reason: str) -> None:
        """Give back this rank's switch memory at once (the serving layout needs it): the
        destination's own pages, weight slots and the spare while copying (the switch fails), the
        fallback's own pages on probation (no rollback any more)."""
        if runner.side_stream is not None:
            runner.side_stream.synchronize()  # a chunk may still write the pages given back
        if self.state == SwitchState.COPYING and self.new is not None and self.landed:
            self.fail(reason)  # the group in flight is dropped at the agreement (`_retry_group`)
        elif self.state == SwitchState.COPYING and self.new is not None:
            old, new = runner.state, self.new
            keep = set(old.table.slots())
            for q in list(new.table.pages):
                runner.alloc.release([s for s in new.table.remove_request(q) if s not in keep])
            if new.weight_slots is not old.weight_slots:
                runner.alloc.unreserve(_only_in(new.weight_slots, old.weight_slots))
                new.weight_slots = []
            self.fail(reason)
        elif self.probation and self._old is not None:
            self._fallback = False
            self._release_old(runner)
        self._give_back_spare(runner)

    def _give_back_spare(self, runner) -> None:
        runner.alloc.release(self.spare + self.ballast)
        self.spare, self.ballast = [], []

    # ---- begin ---------------------------------------------------------------------------------
    def begin(self, runner) -> None:
        plan, r = self.plan, runner.g.rank
        old, page = runner.state, runner.dims.page_size
        bounded_waits(runner.g, True)  # NOTE: until the switch ends, no collective waits long on a peer
        self.mismatch = torch.zeros((), dtype=torch.int64, device=runner.g.device)
        dst = plan.dst_layout or runner.resolve_layout(plan.dst_kind)
        new_table = PageTable(dst, dict(self.inc.dst_owners if self.inc is not None else plan.dst_owners))
        if self.inc is not None:  # the first group, and what is being prefilled (both until the commit)
            self.held_back = set(runner.prefilled)
            self._mirrored = set(self.inc.groups[0]) | self.held_back
        self.new = LayoutState(dst, new_table, old.heads, old.weight_slots)
        try:
            if self.faults is not None and self.faults.deny_pages_rank == r:
                raise OutOfPages(f"injected: no memory for {plan.dest_pages[r]} destination pages on rank {r}")
            steps = plan.num_chunks + 2  # the copy steps, the one that agrees the last chunk, the probation step
            lens = runner.seq_lens if self.inc is None else {q: n for q, n in runner.seq_lens.items()
                                                             if q in self._mirrored}
            src_growth, dst_growth = switch_growth_pages(plan, r, lens, old.table.owners, page, steps)
            need = plan.memory_needed_pages(r) + src_growth + dst_growth
            if need > runner.alloc.num_free:
                raise OutOfPages(
                    f"rank {r} needs {need} free page slots to switch {plan.src_kind} -> {plan.dst_kind} "
                    f"({plan.dest_pages[r]} destination pages, {plan.memory_needed_pages(r) - plan.dest_pages[r]} "
                    f"weight slots, {src_growth} + {dst_growth} pages for both layouts' new tokens over {steps} "
                    f"steps), has {runner.alloc.num_free}")
            self._take_dest_pages(runner, new_table, sorted(q for q in runner.seq_lens if self.writes_new(q)))
            h0, hs = dst.head_range(r, runner.dims.num_heads)  # the destination's slice on this rank
            if plan.weights == "gather":  # every rank's slice all-gathered (transfer.py), then cut to [h0, h0 + hs)
                self.new.weight_slots = runner.alloc.reserve(plan.weight_slots_after)
                with self._side(runner):
                    self.new.heads = [HeadWeights(h0, *(torch.empty((hs,) + tuple(x.shape[1:]), dtype=x.dtype,
                                                                    device=x.device)
                                                        for x in h.tensors())) for h in old.heads]
            elif plan.weights == "slice":
                # NOTE: the destination keeps the first of the source's weight slots its slice still
                # takes beyond the T-way shard (DPTP's 1/R − 1/T; none for TP and DOP); the rest are
                # freed with the source's at the commit
                self.new.weight_slots = old.weight_slots[:plan.weight_slots_after]
                with self._side(runner):
                    self.new.heads = [h.slice_heads(h0, hs) for h in old.heads]
            self.spare = runner.alloc.alloc(dst_growth)
            # Tokens grow by one per step until the commit: room for them (and headroom) in the inputs.
            n = len(self.inc.groups) if self.inc is not None else 1
            self.new_exec = runner.build_exec(self.new, extra_pages=pages_for((plan.num_chunks + 3) * n, page),
                                              prepare=False)
        except Exception as e:  # noqa: BLE001 - any failure here is agreed on, never raised on one rank
            self.fail(str(e) if isinstance(e, OutOfPages) else f"rank {r}: {type(e).__name__}: {e}")
        if agree_any(self._failed is not None, runner.g):
            self.abort(runner, first_reason(self._failed, runner.g, self._failed_at))
            return
        if runner.side_stream is not None and self.new.heads is not old.heads:
            main = torch.cuda.current_stream(runner.g.device)
            for h in self.new.heads:  # made on the side stream, read by the main stream after commit
                for x in h.tensors():
                    x.record_stream(main)
        runner.reap_retired()  # execs replaced before this switch whose last replays are done
        self.state = SwitchState.COPYING
        if self.inc is not None:
            self._note_pages(runner)
        cur = runner.prepare_current(self.new_exec)  # the bucket the commit steps into
        if cur is not None:
            self.new_exec.queue_neighbours(self.new_exec.key(runner.order, runner.seq_lens)[0])
        if self.faults is not None and self.faults.starve_rank == r:
            self.ballast = runner.alloc.alloc(runner.alloc.num_free)

    def _take_dest_pages(self, runner, table: PageTable, reqs) -> None:
        """Destination pages of `reqs` on this rank: the source's slot where both layouts put a
        page here (one slot), else a free one."""
        r, page, old = runner.g.rank, runner.dims.page_size, runner.state.table
        for req in reqs:
            for lp in range(pages_for(runner.seq_lens[req], page)):
                if lp not in table.pages.get(req, {}) and r in table.layout.holders(req, lp, table.owners):
                    slot = old.pages.get(req, {}).get(lp)
                    table.add(req, lp, slot if slot is not None else runner.alloc.alloc(1)[0])

    def move_pages(self, runner) -> int:
        """Page slots this rank holds, in either layout's table (a slot both hold counts once), for the
        pages the move started with (the requests and pages of `inc.start_lens`; new tokens' pages
        are the spare's): what `IncrementalMove.profile` counts."""
        page, lens = runner.dims.page_size, self.inc.start_lens
        tables = [runner.state.table] + ([self.new.table] if self.new is not None and self.in_flight else [])
        slots = set()
        for table in tables:
            for q, per in table.pages.items():
                if q in lens:
                    n = pages_for(lens[q], page)
                    slots.update(x for lp, x in per.items() if lp < n)
        return len(slots)

    # ---- incremental moves ---------------------------------------------------------------------
    def _land(self, runner) -> None:
        """The group in flight has moved (agreed): its requests serve in the destination from this
        step, their source pages freed; then the next group starts (module docstring)."""
        old, new = runner.state.table, self.new.table
        for q in self.inc.groups[self.group_i]:
            if q in self.held_back or q not in runner.seq_lens:
                continue  # hands over at the commit / finished (both tables' pages freed then)
            keep = set(new.pages.get(q, {}).values())
            runner.alloc.release([x for x in old.remove_request(q) if x not in keep])
            self.landed.add(q)
        self.group_i += 1
        self.group_retries = 0
        self._start_group(runner)

    def _start_group(self, runner) -> None:
        """Plan the group `group_i` at its lengths now and take its destination pages."""
        old = runner.state.table
        reqs = {q: runner.seq_lens[q] for q in self.inc.groups[self.group_i]
                if q in runner.seq_lens and q not in self.held_back}
        p = self.plan
        self.plan = plan_page_moves(p.src_layout, p.dst_layout, p.world_size, reqs,
                                    {q: old.owners[q] for q in reqs if q in old.owners}, runner.dims,
                                    runner.pool.element_size(), runner.head_bytes_full, runner.step_index,
                                    p.bytes_per_step, dict(self.inc.dst_owners), move_weights=False)
        self._mirrored.update(reqs)
        self._take_dest_pages(runner, self.new.table, sorted(reqs))
        self._chunks_done, self._agreed_chunks, self._verified = 0, -1, False
        self._note_pages(runner)

    def _retry_group(self, runner, reason: str) -> None:
        """A fault after a group landed: the landed ones stay (served in the destination), the group
        in flight is dropped — its destination pages freed, its source pages untouched — and moved
        again from this boundary (module docstring)."""
        if runner.side_stream is not None:
            runner.side_stream.synchronize()
        self.group_failures.append(reason)
        self.group_retries += 1
        if self.group_retries > MAX_GROUP_RETRIES:
            raise AgreedFailure(f"group {self.group_i} of the move to {self.plan.dst_kind} failed "
                                f"{self.group_retries} times: {reason}")
        old, new = runner.state.table, self.new.table
        keep = set(old.slots())
        for q in self.inc.groups[self.group_i]:
            if q in self.held_back or q in self.landed:
                continue
            runner.alloc.release([x for x in new.remove_request(q) if x not in keep])
            self._mirrored.discard(q)
        self._failed = None
        self.faults = None  # NOTE: an injected fault fires once (a transient fault); the retry is clean
        self._start_group(runner)

    def _note_pages(self, runner) -> None:
        self.group_pages.append(self.move_pages(runner))

    def _side(self, runner):
        if runner.side_stream is None:
            return contextlib.nullcontext()
        runner.side_stream.wait_stream(torch.cuda.current_stream(runner.g.device))
        return torch.cuda.stream(runner.side_stream)

    # ---- per step ------------------------------------------------------------------------------
    def before_step(self, runner) -> None:
        if self.inc is not None and self.group_moved and not self.ready:
            self._land(runner)  # agreed at the last step: the same boundary on every rank
        if self.auto_commit and self.ready and runner.step_index >= self.plan.commit_step:
            self.commit(runner)

    def guard(self, runner, work: Callable[[], Any]) -> Any:
        """The step's host work, then the agreement, before any collective of the step: returns
        work()'s result on the agreed state (redone there if the switch was dropped)."""
        r = runner.g.rank
        ok, out = True, None
        f = self.faults
        if f is not None and f.kill_rank == r and (self.probation if f.kill_at == "probation" else self.in_flight):
            import os
            import sys

            sys.stdout.flush()
            os._exit(17)  # NOTE: injected: this rank dies here, mid-switch (tests/executor: a dead rank)
        try:
            if self.probation and f is not None and f.fail_after_commit_rank == r:
                raise RuntimeError(f"injected: the first step after the commit failed on rank {r}")
            out = work()
        except Exception as e:  # noqa: BLE001 - agreed on below, on every rank
            self.fail(str(e) if isinstance(e, OutOfPages) else f"rank {r}: {type(e).__name__}: {e}")
            ok = False
        if not self.agree(runner) and ok:
            return out
        err = None
        try:
            out = work()
        except Exception as e:  # noqa: BLE001
            err = f"rank {r}: {type(e).__name__}: {e}"
        if agree_any(err is not None, runner.g):
            raise AgreedFailure(f"{first_reason(err, runner.g)} (a step's host work, after the switch was dropped)")
        return out

    def agree(self, runner) -> bool:
        """The shared abort flag: one all-reduce of [failed, side group broken, fallback lost] on the
        control group. True when the switch failed on some rank; it is then aborted, rolled back or
        moved forward on every rank, with the same reason. Reads the checksum counter once, when
        the last chunk has moved (on CUDA a wait for the side stream, at the step after it)."""
        if self.state == SwitchState.COPYING and self._failed is None and not self._verified \
                and self._chunks_done >= self.plan.num_chunks:
            if runner.side_stream is not None:
                runner.side_stream.synchronize()
            bad = int(self.mismatch.item())
            if bad:
                self.fail(f"rank {runner.g.rank}: {bad} moved message(s) failed their checksum (a corrupted transfer)")
            else:
                self._verified = True
        failed, broken, lost = agree_flags([int(self._failed is not None), int(self.side_broken),
                                            int(self.probation and not self._fallback)], runner.g)
        if not failed:
            if self.state == SwitchState.COPYING:
                self._agreed_chunks = self._chunks_done
            return False
        reason = first_reason(self._failed, runner.g, self._failed_at)
        if broken:
            rebuild_side(runner.g)
            self.side_broken = False
        if self.in_flight and self.landed:
            self._retry_group(runner, reason)
        elif self.in_flight:
            self.abort(runner, reason)
        elif self.after_commit == "rollback" and not lost:
            self._rollback(runner, reason)
        else:
            self._forward(runner, reason)
        return True

    def after_step(self, runner) -> None:
        if self.probation:
            self._end_probation(runner)
        if self.state != SwitchState.COPYING:
            return
        self.new_exec.prepare_next()  # one more of the destination's buckets per copy step
        k = runner.step_index - self.plan.start_step
        if 0 <= k < self.plan.num_chunks:
            with self._side(runner):
                run_chunk(self, runner, k)
            self._chunks_done = k + 1


    # ---- commit / probation / abort ------------------------------------------------------------
    def commit(self, runner) -> None:
        """The hand-off: a stream wait and two reference swaps (everything else was done before)."""
        if self.state != SwitchState.COPYING:
            raise RuntimeError(f"commit in state {self.state.value}")
        if runner.side_stream is not None:
            torch.cuda.current_stream(runner.g.device).wait_stream(runner.side_stream)
        self._old, self._old_exec = runner.state, runner.exec
        if runner.exec is not None:
            runner.retire(runner.exec)
        runner.state, runner.exec = self.new, self.new_exec
        self.state = SwitchState.COMMITTED
        self.probation = True
        self._fallback = not self.landed  # NOTE: landed groups' source pages are gone: no rollback then
        runner.alloc.release(self.deferred_free)
        self.deferred_free = []

    def _end_probation(self, runner) -> None:
        """The step after the commit has been issued: free the fallback and the unused spare."""
        if self._old is not None:
            self._release_old(runner)
        self._give_back_spare(runner)
        self.probation = self._fallback = False
        bounded_waits(runner.g, False)

    def _release_old(self, runner) -> None:
        """Free the source layout's pages and weight slots (host bookkeeping after the commit step)."""
        old, new = self._old, runner.state
        keep = set(new.table.slots())
        runner.alloc.release([s for s in old.table.slots() if s not in keep])
        runner.alloc.unreserve(_only_in(old.weight_slots, new.weight_slots))
        runner.retire(old)  # its tensors may still be read by the last source replay
        self._old = self._old_exec = None

    def _rollback(self, runner, reason: str) -> None:
        """Back to the fallback: the old layout holds every token (it was written on probation)."""
        old, new = self._old, runner.state
        keep = set(old.table.slots())
        runner.alloc.release([s for s in new.table.slots() if s not in keep])
        runner.alloc.unreserve(_only_in(new.weight_slots, old.weight_slots))
        if runner.exec is not None:
            runner.retire(runner.exec)
        runner.retire(new)
        runner.state, runner.exec = old, self._old_exec
        self._give_back_spare(runner)
        self._old = self._old_exec = None
        self.probation = self._fallback = False
        self.state = SwitchState.ABORTED
        self.reason = f"the first step after the commit failed ({reason}); rolled back to {old.kind}"
        bounded_waits(runner.g, False)

    def _forward(self, runner, reason: str) -> None:
        """Keep the committed layout, drop the fallback (its pages may be what the step lacked)."""
        old_kind = self._old.kind if self._old is not None else self.plan.src_kind
        self._end_probation(runner)
        self.after_commit_failure = reason
        self.reason = (f"the first step after the commit failed ({reason}); dropped the {old_kind} fallback "
                       f"and retried in {runner.state.kind}")

    def finish(self, runner) -> None:
        """Commit an incremental move with the groups landed so far (module docstring): every
        running request is landed or written to both layouts (prefilling at the start, or joined
        during the move), the others having been retired by the caller — the group in flight's
        destination pages went with them (`RankRunner.finish_request`). Same agreement as `commit`:
        the serving loop calls it at the same boundary on every rank."""
        if self.inc is None or self.state != SwitchState.COPYING or not self.landed:
            raise RuntimeError(f"finish: no incremental move with landed groups in flight (state {self.state.value})")
        lacking = sorted(q for q in runner.seq_lens if q not in self.landed and q not in self.held_back)
        if lacking:
            raise RuntimeError(f"finish: requests {lacking} are not in {self.plan.dst_kind} yet: retire them first")
        if runner.side_stream is not None:
            runner.side_stream.synchronize()  # the group in flight's last chunk may still be writing
        self.commit(runner)

    def abort(self, runner, reason: str) -> None:
        if not self.in_flight:
            raise RuntimeError(f"abort in state {self.state.value}")
        if any(q in runner.seq_lens for q in self.landed):
            raise RuntimeError(f"an incremental move with requests served in {self.plan.dst_kind} can't be aborted "
                               f"(their source pages are freed): a fault retries its group, a full destination "
                               f"finishes it (finish): {reason}")
        if runner.side_stream is not None:
            runner.side_stream.synchronize()
        old, new = runner.state, self.new
        if new is not None:
            keep = set(old.table.slots())
            runner.alloc.release([s for s in new.table.slots() if s not in keep])
            runner.alloc.unreserve(_only_in(new.weight_slots, old.weight_slots))
        self.new = None
        if self.new_exec is not None:
            runner.retire(self.new_exec)
            self.new_exec = None
        runner.alloc.release(self.deferred_free)
        self.deferred_free = []
        self._give_back_spare(runner)
        self.state = SwitchState.ABORTED
        self.reason = reason
        bounded_waits(runner.g, False)
