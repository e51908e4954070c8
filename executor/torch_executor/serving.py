"""The torch executor as runtime_policy's `Executor`: real MLA layers on T ranks, driven by the
same serving loop and policy as the simulator.

What it does: every rank runs the serving loop (runtime_policy/loop.py) itself, the same requests
in the same order (SPMD: no driver process, no command queue); `TorchExecutor` is that loop's
executor on one rank, over a `RankRunner`:
- prefill runs on the real layers (`prefill="real"`, the default): each step's chunk of prompt
  tokens is split over the loop's prefill queue in its order (the loop's own rule, admission.py
  `chunk_plan`) and run in the same step as the decodes (`prefill_step="mixed"`, vLLM's and
  TensorRT-LLM's schedule) or as a step of its own before them ("separate", SGLang's default);
  `admit` then moves the prefilled request to decoding, so the KV its prefill wrote is the KV its
  decode reads; `retire` frees it (a preempted request is prefilled again from scratch when the
  loop re-admits it, as an engine recomputes it). `prefill="synthetic"` instead writes a prompt's KV
  as synthetic history at `admit` and keeps a preempted request's KV on the host;
- `run_steps` runs the steps, timed by CUDA events recorded between them on the main stream and
  read once per run (no per-step synchronize; CPU: the host clock), and takes the slowest rank's
  times (one small all-reduce per run on the control group, T > 1 only), so every rank's loop
  sees the same durations and decides the same;
- a switch the policy decides is begun in the background (`RankRunner.switch_to`, pages moved in
  rate-limited chunks on the side group, new tokens written to both layouts), polled at every
  batch boundary, and committed there once every chunk has moved and been verified; a fault
  anywhere (no memory, a transport error, a corrupted page) aborts it on every rank and the loop
  keeps serving in the old layout; a failure in the step after the commit keeps the committed
  layout (the loop already serves it) and retries the step there. The commit stall is measured
  (the slowest rank).
The executor learns which requests a step's chunk belongs to from the loop's prefill queue, bound
by `serve.serve_loop` (`bind_prefill_queue`); the Executor protocol passes only the chunk's size.
The step durations the loop's clock reads are the measured ones (`clock="measured"`), or the
step-time tables' (`clock="table"`: the simulator's prices, while the real steps still run and
are timed), which is how a test runs the same loop on the simulator and on real layers and gets
the same decisions. `executor_tables` gives the policy the executor's own capacity facts (pages,
replicated-weight slots, page size), and `with_step_times` puts measured step times into a table.

What it does not do: sampling, or layouts it has no attention for: which it runs is read off each
layout's placement (placement_kind.py: tp, cp, dp, dop and dptp today); any other is refused in one
line saying what the executor lacks (`check_runnable`), and gets no pool in its tables.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.distributed as dist

from planner.errors import SpecError
from runtime_policy.executor import StepBatch, SwitchStatus
from runtime_policy.tables import StepTimeTable
from runtime_policy.transitions import TransitionPlan

from .checks import collect_logical_kv, kv_checksum
from .config import MLADims
from .layouts import weight_slots_needed
from .placement_kind import exec_layout, primitive_or_reason, refusal, registry_placement
from .runner import RankRunner
from .transitions import Faults, SwitchState

CLOCKS = ("measured", "table")
PREFILLS = ("real", "synthetic")
PREFILL_STEPS = ("mixed", "separate")


def runnable_names(ranks: int, placements: dict | None = None) -> tuple[str, ...]:
    """The registered layouts the executor runs on `ranks` ranks (`placements`: {name: Placement},
    e.g. a table's; default the registry's placements), in the registry's order."""
    from runtime_policy.tables import layout_names

    out = []
    for name in layout_names():
        try:
            p = placements[name] if placements and name in placements else registry_placement(name, ranks)
        except SpecError:
            continue
        if p is not None and primitive_or_reason(p)[0] is not None:
            out.append(name)
    return tuple(out)


def check_runnable(layout: str, ranks: int = 2, placement=None) -> str:
    """`layout` if the torch executor has attention for its placement (`placement`, else the
    registry's on `ranks` ranks; a name alone is judged on 2); else a one-line SpecError saying why."""
    try:
        p = placement if placement is not None else registry_placement(layout, ranks)
    except SpecError as e:
        raise SpecError(f"the torch executor cannot run layout {layout!r}: {e}") from None
    why = refusal(p, layout)
    if why:
        raise SpecError(f"the torch executor cannot run layout {layout!r}: {why}; it runs "
                        f"{', '.join(runnable_names(ranks))} (placement_kind.py)")
    return layout


@dataclass(frozen=True)
class TorchServeOptions:
    """How the torch executor serves (the same on every rank)."""

    bytes_per_step: int = 1 << 20  # a switch moves at most this much per rank and step (chunking)
    clock: str = "measured"  # the durations the loop reads: "measured" or "table" (see module docstring)
    record_outputs: bool = False  # keep every request's final residual at every position (tests)
    check_kv: bool = False  # checksum every request's KV before and after each commit (tests; slow)
    faults: dict[int, Faults] = field(default_factory=dict)  # injected into the n-th switch started (0-based)
    prefill: str = "real"  # prompts on the real layers, or "synthetic" history written at admission
    prefill_step: str = "mixed"  # a chunk in the decodes' step, or "separate": a prefill step of its own first
    buckets: str = "sglang"  # the decode batch sizes graphs are captured for (buckets.BUCKETS)
    capture_at_start: bool = True  # capture every bucket up to the loop's max_batch before serving (CUDA)
    log_steps: bool = False  # keep one row per step: decode batch, Σ context, chunk tokens, prefix, seconds
    freeze_gc: bool = True  # freeze the objects alive after warm-up out of Python's collector while serving (serve.py)

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise SpecError(f"clock={self.clock!r} is not one of {', '.join(CLOCKS)}")
        if self.prefill not in PREFILLS:
            raise SpecError(f"prefill={self.prefill!r} is not one of {', '.join(PREFILLS)}")
        if self.prefill_step not in PREFILL_STEPS:
            raise SpecError(f"prefill_step={self.prefill_step!r} is not one of {', '.join(PREFILL_STEPS)}")
        if self.bytes_per_step <= 0:
            raise SpecError(f"bytes_per_step={self.bytes_per_step} must be positive")


class TorchExecutor:
    """runtime_policy.Executor over one rank's RankRunner (module docstring)."""

    def __init__(self, runner: RankRunner, tables: StepTimeTable, options: TorchServeOptions = TorchServeOptions()):
        from executor.sim import SimExecutor

        self.runner, self.tables, self.options = runner, tables, options
        if tables.info.has_twins:
            raise SpecError("the torch executor does not run host-tier twin layouts (tables compiled with tier_choice)")
        check_runnable(runner.layout, runner.g.world_size, runner.state.layout.placement)
        self.sim = SimExecutor(tables) if options.clock == "table" else None
        self.switches_started = 0
        self.abort_reason = ""
        self.measured_steps_s: list[float] = []  # every step's slowest-rank duration
        self.measured_stalls_s: list[float] = []  # every commit's slowest-rank stall
        self.kv_identical: list[bool] = []  # per commit, when check_kv: logical KV equal before and after
        self.transitions: list = []  # every switch started (transitions.Transition), in order
        self.outputs: dict[int, dict[int, np.ndarray]] = {}  # request -> position -> final residual [D]
        self._last_step_s = 0.0
        self._reported_abort = True
        self._queue = None  # () -> [(request, prompt tokens left, its context, owner)]: the loop's prefill queue
        self.step_rows: list[tuple[int, float, float, float, float]] = []  # log_steps: (B, Σ ctx, chunk, prefix, s)
        self.step_host_s: list[float] = []  # log_steps: each step's host time (its launches; CUDA: the device runs behind)

    def bind_prefill_queue(self, source) -> None:
        """`source()` lists the loop's prefill queue in its order: (request id, prompt tokens still
        to prefill, the context its prefill ends at, its owner rank); read at each run's start."""
        self._queue = source

    # ---- the KV of what decodes ------------------------------------------------------------------
    def admit(self, request_id: int, context_tokens: int, owner: int) -> None:
        q = int(request_id)
        if q in self.runner.prefilled:  # its prompt's KV is written: it decodes from there
            self.runner.finish_prefill(q)
        else:
            self.runner.add_requests({q: int(context_tokens)}, {q: int(owner)})

    def retire(self, request_id: int, preempted: bool = False) -> None:
        if preempted and self.options.prefill == "synthetic":
            self.runner.save_request(int(request_id))
        else:  # real prefill: a preempted request is prefilled again when the loop re-admits it
            self.runner.finish_request(int(request_id))

    # ---- prefill ---------------------------------------------------------------------------------
    def _chunks(self, prefill_tokens, prefill_pieces=None) -> list[list[tuple[int, int]]]:
        """Each step's chunk as (request, tokens) pieces: the loop's own (`prefill_pieces`: every
        owner group's chunk of its requests, runtime_policy/group_prefill.py), else split over the
        loop's prefill queue in its order (one chunk a step); registers the requests it starts
        prefilling and frees the ones the loop no longer queues without having admitted them (done
        at their first token, or aborted)."""
        k = len(prefill_tokens)
        if self.options.prefill != "real":
            return [[]] * k
        runner = self.runner
        if self._queue is None:
            if any(prefill_tokens):
                raise RuntimeError("the torch executor prefills on its layers: serve through "
                                   "executor.torch_executor.serve.serve_loop (it binds the loop's prefill queue), "
                                   "or use TorchServeOptions(prefill='synthetic')")
            return [[]] * k
        queue = self._queue()
        queued = {q for q, *_ in queue}
        for q in [q for q in runner.prefilled if q not in queued]:
            runner.finish_request(q)
        if prefill_pieces is not None:
            info = {int(q): (int(left), int(ctx), int(owner)) for q, left, ctx, owner in queue}
            out = []
            for pieces in prefill_pieces:
                step = []
                for q, take in pieces:
                    q, take = int(q), int(take)
                    if q not in runner.prefilled:
                        left, ctx, owner = info[q]
                        runner.begin_prefill(q, owner, expected_tokens=ctx)
                    step.append((q, take))
                out.append(step)
            return out
        out: list[list[tuple[int, int]]] = []
        qi, left = 0, (int(queue[0][1]) if queue else 0)
        for tok in prefill_tokens:
            need, pieces = int(round(tok)), []
            while need > 0 and qi < len(queue):
                q, q_left, ctx, owner = (int(x) for x in queue[qi])
                if left == q_left:  # first touch of this request in the run
                    done = runner.prefilled.get(q)
                    if done is None:
                        runner.begin_prefill(q, owner, expected_tokens=ctx)
                        done = 0
                    if done != ctx - q_left:
                        raise RuntimeError(f"request {q}: the loop has prefilled {ctx - q_left} tokens, the executor "
                                           f"{done}")
                take = min(need, left)
                pieces.append((q, take))
                need -= take
                left -= take
                if left == 0:
                    qi += 1
                    left = int(queue[qi][1]) if qi < len(queue) else 0
            out.append(pieces)
        return out

    # ---- steps -----------------------------------------------------------------------------------
    wants_prefill_pieces = True  # the loop hands each step's chunk as (request, tokens) pieces

    def run_steps(self, batch: StepBatch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None,
                  prefill_pieces=None):
        runner = self.runner
        if self.tables.layouts[batch.layout] != runner.layout:
            raise RuntimeError(f"the loop runs layout {self.tables.layouts[batch.layout]}, "
                               f"the executor holds {runner.layout}")
        if len(batch.request_ids) != len(runner.order):
            raise RuntimeError(f"the loop decodes {len(batch.request_ids)} requests, the executor holds "
                               f"{len(runner.order)}")
        k = len(prefill_tokens)
        chunks = self._chunks(prefill_tokens, prefill_pieces)
        separate = self.options.prefill_step == "separate"
        cuda = runner.g.is_cuda
        # NOTE: CUDA events between steps on the main stream, read once at the run's end: the host
        # never waits inside a run (it must at its end: the loop's clock needs the durations)
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(k + 1)] if cuda else None
        took = [0.0] * k
        if cuda:
            evs[0].record()
        t0 = time.perf_counter()
        host = self.step_host_s if self.options.log_steps and cuda else None
        for j in range(k):
            h0 = time.perf_counter() if host is not None else 0.0
            pieces = chunks[j]
            if separate and pieces and runner.order:
                runner.step(pieces, decode=False)  # SGLang's default: the prefill batch runs alone
                x = runner.step()
            elif runner.order or pieces:
                x = runner.step(pieces)
            else:
                runner.idle_step()
                x = None
            if self.options.record_outputs and runner.order and x is not None and x.shape[0]:
                self._record(x)
            if cuda:
                evs[j + 1].record()
                if host is not None:
                    host.append(time.perf_counter() - h0)
            else:
                t1 = time.perf_counter()
                took[j], t0 = t1 - t0, t1
        if cuda:
            evs[k].synchronize()
            took = [evs[j].elapsed_time(evs[j + 1]) * 1e-3 for j in range(k)]
        if runner.g.world_size > 1:
            t = torch.tensor(took, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=runner.g.ctrl)  # the slowest rank's steps
            took = t.tolist()
        measured = took
        if self.options.log_steps:
            self._log(batch, prefill_tokens, prefill_context_tokens, measured)
        self.measured_steps_s.extend(measured)
        self._last_step_s = measured[-1] if measured else self._last_step_s
        if self.sim is not None:
            return self.sim.run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner)
        return measured

    def _log(self, batch: StepBatch, prefill_tokens, prefix, measured: list[float]) -> None:
        b = len(batch.request_ids)
        base = float(np.sum(batch.context_tokens)) if b else 0.0
        for j, s in enumerate(measured):
            pfx = float(prefix[j]) if prefix is not None else 0.0
            self.step_rows.append((b, base + b * j, float(prefill_tokens[j]), pfx, s))

    def _record(self, x: torch.Tensor) -> None:
        """Each request's final residual [D] at the position this step computed."""
        rows = x.detach().cpu().numpy()
        for i, q in enumerate(self.runner.order):
            self.outputs.setdefault(q, {})[self.runner.seq_lens[q] - 1] = rows[i].copy()

    # ---- switches --------------------------------------------------------------------------------
    def start_switch(self, plan: TransitionPlan) -> float:
        t = self.runner.g.world_size
        kind = check_runnable(plan.dst, t, self.runner.placements.get(plan.dst))
        faults = self.options.faults.get(self.switches_started)
        self.switches_started += 1
        # NOTE: "forward": once the loop has committed it serves the new layout (its capacity, its
        # admissions), so a failure in the step after the commit keeps that layout and retries
        # the step there (transitions.py); only a switch in flight is rolled back, by aborting it
        # NOTE: the plan's groups (runtime_policy/transitions.py: the fewest whose peak fits) move one
        # after another, each served in the destination once it lands (transitions.py, Issue 27)
        sw = self.runner.switch_to(kind, self.options.bytes_per_step, faults, auto_commit=False, after_commit="forward",
                                   groups=plan.move_groups, order=plan.move_order)
        self.transitions.append(sw)
        self._reported_abort = False
        if self.sim is not None:
            return self.sim.start_switch(plan)
        # NOTE: a chunk moves per step; the loop commits at the first boundary past this estimate at
        # which the switch is ready, so a low estimate costs a few 1-step runs, not a wrong commit
        groups = len(sw.inc.groups) if sw.inc is not None else 1
        return (sw.plan.num_chunks + (2 if groups > 1 else 0)) * groups * self._last_step_s

    def poll_switch(self) -> SwitchStatus:
        """Agreed by every rank (the switch's agreement, one small all-reduce): a failure anywhere
        aborts everywhere, and the switch is ready only when it is ready on every rank. NOTE: a
        rank can fail locally between agreements (no room for an admitted request's destination
        pages); without this, ranks could commit at different boundaries and their collectives
        would no longer match."""
        sw = self.runner.switch
        if sw is None or sw.state == SwitchState.COMMITTED:
            return SwitchStatus.READY
        if sw.state == SwitchState.ABORTED:
            self.abort_reason = sw.reason or "aborted"
            return SwitchStatus.ABORTED
        if sw.agree(self.runner):
            return self.poll_switch()
        if sw.ready:
            return SwitchStatus.READY
        if not self.runner.order:  # nothing decodes to carry the chunks: move the next one now
            self.runner.idle_step()
            return self.poll_switch()
        return SwitchStatus.IN_FLIGHT

    def commit_switch(self, plan: TransitionPlan) -> float:
        return self._hand_off(plan, self.runner.commit_switch)

    def unmoved_requests(self) -> list[int] | None:
        """The decoding requests the destination of the incremental move in flight lacks, once a
        group has landed and one of its requests still runs (None: the switch can still abort, the
        source whole). Requests being prefilled, or that joined during the move, are written to
        both layouts (transitions.py) and are not listed. The same on every rank (groups land at
        agreed boundaries)."""
        sw, runner = self.runner.switch, self.runner
        if sw is None or sw.inc is None or not sw.in_flight or not any(q in runner.seq_lens for q in sw.landed):
            return None
        return [q for q in runner.order if q not in sw.landed and q not in sw.held_back]

    def finish_switch(self, plan: TransitionPlan) -> float:
        """Commit the incremental move in flight with what has landed, the requests it lacked
        already retired by the loop (runtime_policy/switching.py `finish_move`); the stall."""
        return self._hand_off(plan, self.runner.finish_switch)

    def _hand_off(self, plan: TransitionPlan, commit) -> float:
        runner = self.runner
        before = kv_checksum(collect_logical_kv(runner)) if self.options.check_kv else None
        t0 = time.perf_counter()
        commit()
        if runner.g.is_cuda:
            torch.cuda.synchronize(runner.g.device)
        stall = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(stall, op=dist.ReduceOp.MAX, group=runner.g.ctrl)
        self.measured_stalls_s.append(float(stall.item()))
        if before is not None:
            self.kv_identical.append(before == kv_checksum(collect_logical_kv(runner)))
        return self.sim.commit_switch(plan) if self.sim is not None else float(stall.item())

    def abort_switch(self, plan: TransitionPlan) -> None:
        """Drop the switch in flight (nothing of it landed: the loop finishes a move that has,
        `finish_switch`)."""
        self.runner.abort_switch("aborted by the serving loop")


# ---- the policy's view of the executor -------------------------------------------------------------
def executor_tables(tables: StepTimeTable, dims: MLADims, num_slots: int, element_bytes: int) -> StepTimeTable:
    """`tables` with the executor's capacity in place of the planner's: per rank, `num_slots` page
    slots less the one that takes padded writes, less the slots a layout's head weights claim
    beyond the T-way shard (layouts.weight_slots_needed, from the tables' placement of each
    layout); the memory budget is every slot; layouts the executor can't run (`table_refusals`
    says why) get no pool (the policy never picks them). Units stay the table's (its KV bytes per
    token), so the loop's token accounting is the runner's page accounting: a rank of an owner
    group stores the latent of every request of its group (MLA's one latent head: the tables'
    `group_share` is 1 for TP, DP, DOP and DPTP, 1/T for CP)."""
    if dims.page_size != tables.page_tokens:
        raise SpecError(f"page_tokens={tables.page_tokens} of the tables must be the executor's page_size="
                        f"{dims.page_size}")
    t = tables.ranks
    page_bytes = tables.page_tokens * tables.kv_bytes_per_token  # one page, in the table's units
    head_bytes = dims.head_params() * dims.num_layers * element_bytes
    runner_page_bytes = dims.kv_bytes_per_page(element_bytes)
    pools, weights = [], []
    for name, p in zip(tables.layouts, tables.info.placements):
        if refusal(p, name):
            pools.append(-1.0)
            weights.append(0.0)
            continue
        ws = weight_slots_needed(exec_layout(p), head_bytes, t, runner_page_bytes)
        pools.append((num_slots - 1 - ws) * page_bytes)
        weights.append(ws * page_bytes)
    pools_a, weights_a = np.array(pools), np.array(weights)
    for a in (pools_a, weights_a):
        a.setflags(write=False)
    info = replace(tables.info, kv_pool_bytes=pools_a, weights_bytes=weights_a, attn_weights_bytes=weights_a)
    return replace(tables, info=info, memory_budget_bytes=(num_slots - 1) * page_bytes)


def table_refusals(tables: StepTimeTable) -> dict[str, str]:
    """{layout: the one-line reason the executor can't run it} over the tables' layouts (their
    placements); a layout not listed runs."""
    return {n: refusal(p, n) for n, p in zip(tables.layouts, tables.info.placements) if refusal(p, n)}


def with_step_times(tables: StepTimeTable, fits: dict[str, tuple[float, float, float]]) -> StepTimeTable:
    """`tables` whose step time in each fitted layout is a measured fit, t = a + b·tokens + c·S
    (`fits[name] = (a, b, c)`: seconds, per decode token, per context token the busiest rank reads),
    put in the first timed resource (the others 0, so max = sum and α plays no part; no overhead);
    chunks add their prefill tokens as decode tokens (a fit of decode steps: tests that need the
    loop's decisions, not prefill prices).
    Layouts without a fit keep the table's times."""
    base, c1, chunk = tables.base_s.copy(), tables.c1_s.copy(), tables.chunk_rows_s.copy()
    c2 = tables.c2_s.copy()
    n = np.arange(base.shape[0], dtype=np.float64)
    for name, (a, b, c) in fits.items():
        i = tables.layouts.index(name)
        base[:, i] = 0.0
        base[:, i, 0] = a + b * n
        c1[i], c2[i] = 0.0, 0.0
        c1[i, 0] = c
        chunk[:, i] = 0.0
    r = base.shape[2]
    for x in (base, c1, c2, chunk):
        x.setflags(write=False)
    return replace(tables, base_s=base, base_rows_py=base[: len(tables.base_rows_py)].tolist(), c1_s=c1, c2_s=c2,
                   chunk_rows_s=chunk, prefill_s=chunk[..., :r], prefix_lo_s=chunk[..., r:2 * r],
                   prefix_hi_s=chunk[..., 2 * r:], overhead_s=0.0, prefill_overhead_s=0.0, mixed_overhead_s=0.0,
                   model_label=f"measured on the torch executor ({', '.join(sorted(fits))}); {tables.model_label}")
