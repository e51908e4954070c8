"""The serving loop: admission, chunked prefill, decode steps, preemption and layout switches,
driven against an `Executor` (runtime_policy/executor.py: the simulator or the torch executor).

Requests move pending → waiting → prefill → decode → done (or → waiting again when preempted —
because KV runs short, or displaced by a waiting request when the batch is full and the ordering
says so — keeping their generated tokens, which are recomputed by the next prefill; or → aborted
when one request alone can never fit). Every request ends done or aborted exactly once; `ServeResult`
carries the per-request record.

A small state machine over a decode set (decode_set.py), a prefill queue, the waiting queue
(waiting.py), per-owner KV and the switch in flight; each turn is one run of steps with constant
membership, a short function per phase (`_turn`): arrive → settle the switch (commit at this
boundary when ready; an abort keeps the old layout: switching.py) → admit (admission.py) → consult
the policy (switching.py) → preempt at the KV wall (preemption.py) → the run's length → run it →
advance. The executor holds the KV of what decodes: admitted when its prefill is done, retired
when it ends or is preempted.

A run lasts up to `max_run_steps` steps, cut short at the next decode completion, prefill
completion, KV wall, expected arrival or switch hand-off. The policy is therefore consulted at
every membership change and at least every `max_run_steps` steps (NOTE: between those points its
answer can only drift with context growth, which the run length bounds). The policy's capacity
memo lives here (`PolicyState.capacity_reprice_at_step`), so `decide` is a function of its state.

For the dynamic policy the loop also projects the running set's KV growth (projection.py) every
`PROJECTION_EVERY_STEPS` decode steps; a switch that sheds KV (`Decision.shed_kv_tokens`) preempts
the ordering's victims until that much is free and admits nothing until its commit.

KV is counted in tokens by the ledger (kv_ledger.py `KvLedger`), per owner rank, with the tables'
slack per request (its page rounding, windows and shared states in tokens), and read per owner
group of whichever layout asks; every request has an owner rank (the least-loaded rank of the
least-loaded group at admission) in every layout, so a switch to a layout of several owner groups
knows where each request lives. Admission keeps `admit_watermark_fraction` of the
pool free.

NOTE: the simulator's runs are often 1–4 steps (cut by arrivals), so per-run work bounds its rate:
work per request is done once per event (decode_set.py), per-request state is in Python lists
(numpy scalar reads cost ~100 ns), and token sums are whole numbers, exact in any order
(tests/runtime_policy/test_loop_golden.py pins the results).

Does not: price steps (the executor), choose layouts (the policy) or order requests (ordering.py).
"""

from __future__ import annotations

import gc
import math
from typing import Callable

import numpy as np

from planner.errors import SpecError
from runtime_policy.admission import admit, prefill_progress, route_at_arrival
from runtime_policy.group_prefill import credit, group_queues, plan_run, steps_to_first_completion
from runtime_policy.group_prefill import pieces as prefill_pieces
from runtime_policy.decision import Decision, PolicyState
from runtime_policy.decode_set import DecodeSet
from runtime_policy.executor import Executor, StepBatch
from runtime_policy.kv_ledger import KvLedger
from runtime_policy.ordering import Ordering
from runtime_policy.preemption import kv_wall
from runtime_policy.tables import NO_TOPK, StepTimeTable
from runtime_policy.serving_types import LoopConfig, ServeResult, SwitchRecord
from runtime_policy.switching import consult_policy, settle_switch
from runtime_policy.waiting import ABORTED, DONE, PENDING, WAITING, WaitingQueue, sum_as_numpy

PREFILL_STATS_HALF_LIFE_STEPS = 256.0  # the prefill rate a policy without its own half-life sees forgets over this
_NEVER = 1 << 30
_NO_PREFILL = (0, 0.0, 0.0, 0.0)  # a run's (prompt tokens done, their prefix, the owners' tokens, steps with a chunk)
_NO_DONE: dict = {}  # a run's prompt tokens done per owner group, when it ran no prefill


def serve(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, tables: StepTimeTable,
          policy, ordering: Ordering, executor: Executor, config: LoopConfig = LoopConfig(),
          progress: Callable[[int, int], None] | None = None) -> ServeResult:
    """Serve the requests (sorted by arrival) to completion; see the module docstring."""
    return make_loop(arrival_s, input_tokens, output_tokens, tables, policy, ordering, executor, config,
                     progress).run()


def make_loop(arrival_s, input_tokens, output_tokens, tables: StepTimeTable, policy, ordering: Ordering,
              executor: Executor, config: LoopConfig, progress: Callable[[int, int], None] | None = None
              ) -> "ServingLoop":
    """The loop `serve` runs, its inputs checked (SpecError: no requests, or arrivals not sorted)."""
    config.check(tables)
    arr = np.asarray(arrival_s, dtype=np.float64)
    if arr.size == 0:
        raise SpecError("the workload has no requests")
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) < 0):
        raise SpecError("requests must be sorted by arrival_s (finite times)")
    return ServingLoop(arr, np.asarray(input_tokens, dtype=np.int64), np.asarray(output_tokens, dtype=np.int64),
                       tables, policy, ordering, executor, config, progress)


class ServingLoop:
    """One serve() call's state (module docstring); `run()` turns until every request has ended."""

    # NOTE: slots: the loop's ~100 fields are read in every phase of every run, and an instance
    # dict that large is slower to read than a slot (~25 % on attribute-bound code, CPython 3.11);
    # __dict__ keeps any other attribute settable (tests replace a method on an instance)
    __slots__ = ("n", "arr", "inp", "out", "tables", "policy", "ordering", "executor", "config", "tracks_kv",
                 "wants_pieces", "progress", "T", "slack", "bpt", "capped", "topk", "kv", "pools", "max_requests",
                 "shares", "groups", "cap", "arr_l", "inp_l", "out_l", "ctxf", "ctx", "end_at", "status", "first",
                 "finish", "preempted", "admitted", "queued", "owner", "pre_left", "okv", "waiting", "prefill_q",
                 "pq_s2", "pq_s1", "pq_groups", "pq_for", "pq_seq", "pq_next", "group_chunk", "cap_group",
                 "separate", "routing", "preemption", "reserve_output", "bound", "bound_wait", "rr", "layout", "dec",
                 "reads_arrays", "batch", "idle_batch", "view_version", "prefill_price", "state", "wt_version",
                 "wt_pos", "t", "nxt", "ended", "est_step_s", "stats_version", "inflight", "ready_s", "started_s",
                 "hand_off_s", "watermark", "skip_admit", "s1_now", "project", "proj_at", "ema_steps", "ema_tok",
                 "ema_tok_pfx", "ema_own", "max_run", "ema_w", "hz_half_life", "hz_w", "hz_steps", "hz_tok",
                 "hz_tok_pfx", "hz_own", "zeros", "arrival_keys", "dyn_keys", "steps", "decode_steps", "layout_s",
                 "switches", "aborted", "moves", "cant_decide", "timeline", "horizon_load", "__dict__")

    def __init__(self, arr: np.ndarray, inp: np.ndarray, out: np.ndarray, tables: StepTimeTable, policy,
                 ordering: Ordering, executor: Executor, config: LoopConfig, progress) -> None:
        n = arr.size
        self.n, self.arr, self.inp, self.out = n, arr, inp, out
        self.tables, self.policy, self.ordering, self.executor, self.config = tables, policy, ordering, executor, config
        # NOTE: an executor that holds no KV (the simulator) says so, and is not told of each join and leave
        self.tracks_kv = bool(getattr(executor, "tracks_kv", True))
        self.wants_pieces = bool(getattr(executor, "wants_prefill_pieces", False))  # real prefill: each chunk's requests
        self.progress = progress
        self.T, self.slack, self.bpt = tables.ranks, float(tables.request_slack_tokens), tables.kv_bytes_per_token
        self.capped = tables.topk < NO_TOPK
        self.topk = tables.topk
        info = tables.info
        # the KV ledger (kv_ledger.py): per-rank tokens, read per owner group of any layout
        self.kv = KvLedger(tables)
        self.pools = self.kv.pool
        self.max_requests = info.max_requests.tolist() if info.max_requests.size else [float("inf")] * len(self.pools)
        self.shares = self.kv.share
        self.groups = self.kv.groups  # per layout: owner groups G (1: one group of every rank)
        # per layout: KV tokens one owner group can hold (all ranks together for a one-group layout)
        self.cap = self.kv.cap_tokens
        # per-request state, as Python lists (NOTE: numpy scalar reads and writes cost ~100 ns)
        self.arr_l, self.inp_l, self.out_l = arr.tolist(), inp.tolist(), out.tolist()
        self.ctxf = inp.astype(np.float64)  # [n] context = input + generated, for keys (decoders' written on preemption)
        self.ctx = self.ctxf.tolist()  # the same as Python floats (decoders': see DecodeSet.context)
        self.end_at = (inp + out).astype(np.float64).tolist()  # the context at which a request is done
        self.status = [PENDING] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.preempted = [0] * n
        self.admitted = [math.nan] * n  # when each request was first admitted (its KV allocated)
        self.queued = arr.copy()  # [n] when each request last joined the waiting queue
        self.owner = [0] * n
        self.pre_left = [0] * n  # prompt tokens still to prefill
        self.okv = self.kv.tokens  # KV tokens each rank owns (whole numbers: sums exact in any order)
        self.waiting = WaitingQueue(self.ctxf)
        self.prefill_q: list[int] = []
        self.pq_s2 = self.pq_s1 = 0.0  # Σ context and Σ min(context, top-k) over prefill_q
        # prefill_q split by owner group, for `pq_for` groups (0: not built; `prefill_groups`), and
        # each request's place in admission order (NOTE: group_prefill.py read the whole queue each run
        # to find each group's head, ~75 requests a run for a 400-request queue over DOP's 8 groups)
        self.pq_groups: list[list[int]] = []
        self.pq_for = 0
        self.pq_seq = [0] * n
        self.pq_next = 0
        # the engine's schedulers (planner.engines.scheduling, per layout in the tables): one per
        # owner group, each with its chunk per step and its running cap; separate or mixed prefill;
        # how requests are routed to groups and which one is preempted
        scheds = [x for x in info.schedulers if x is not None]
        if not scheds:
            raise SpecError("the tables carry no engine scheduler for any layout")
        eng = scheds[0]
        self.group_chunk = config.group_chunks(tables)  # [L] prompt tokens per owner group per step
        self.cap_group = [x.running_cap_per_group if x is not None else 0.0 for x in info.schedulers]
        # NOTE: an executor that can't let some decoders sit a step out (the torch executor decodes
        # every request it holds each step) runs the engine's steps mixed
        self.separate = ((config.prefill_mode or eng.prefill_mode) == "separate"
                         and bool(getattr(executor, "separate_prefill", False)))
        self.routing, self.preemption, self.reserve_output = eng.routing, eng.preemption, eng.reserve_output_tokens
        self.bound = [-1] * n  # the first rank of the owner group each waiting request was routed to (−1: none)
        self.bound_wait = [0] * self.T  # waiting requests routed to each (group's first) rank
        self.rr = 0  # the round-robin router's next group
        self.layout = int(policy.initial_layout(inp[arr <= arr[0]].astype(np.float64)))
        self.dec = DecodeSet(config.max_batch, n, self.T, self.topk if self.capped else None, self.groups[self.layout])
        # NOTE: an executor that prices a run from the batch's sums alone (the simulator) says so, and
        # the decode set's per-request arrays are not built for it
        self.reads_arrays = bool(getattr(executor, "reads_batch_arrays", True))
        self.batch = StepBatch(0, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self.idle_batch = StepBatch(0, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                    0.0, 0.0)  # a prefill-only step: no decodes
        self.view_version = -1  # the decode set's version the batch's arrays were built at
        # seconds per prompt token of every group's full chunk in each layout
        self.prefill_price = [self._prefill_price(i) for i in range(len(tables.layouts))]
        ordering.prefill_s_per_token = self.prefill_price[self.layout]  # NOTE: DP/DOP chunks run 2–3× slower than TP's
        self.state = PolicyState(np.zeros(0), self.okv, [0.0] * self.T, np.zeros(0), self.layout,
                                 seconds_since_switch=math.inf)  # no switch yet
        self.wt_version, self.wt_pos = -1, -1  # the queue state.waiting_tokens was cut from
        self.t = self.arr_l[0]
        self.nxt = 0  # the next request to arrive
        self.ended = 0
        self.est_step_s = 0.0
        self.stats_version = -1
        self.inflight: Decision | None = None
        self.ready_s = self.started_s = 0.0
        self.hand_off_s = 0.0  # the switch's next batch boundary: its next group lands (switching.py), else ready_s
        self.watermark = 1.0 - config.admit_watermark_fraction
        self.skip_admit = False
        self.s1_now = 0.0  # Σ min(context, top-k) of the decoders now (set when the policy is consulted)
        self.project = bool(getattr(policy, "reads_kv_growth", False))  # only the dynamic policy reads it
        self.proj_at = 0  # the decode step at which the projection is next refreshed
        # running prefill statistics for the policy (exponentially weighted over steps)
        self.ema_steps = self.ema_tok = self.ema_tok_pfx = self.ema_own = 0.0
        max_run = self.max_run = config.max_run_steps
        self.ema_w = [1.0 - 0.5 ** (k / PREFILL_STATS_HALF_LIFE_STEPS) for k in range(max_run + 1)]  # weight of a k-step run
        # the same statistics over the horizon a policy compares layouts on, for its throughput rule
        # (PolicyKnobs.stats_half_life_steps; PolicyState.horizon_prefill_*): only where it states one
        hl = getattr(getattr(policy, "knobs", None), "stats_half_life_steps", None)
        self.hz_half_life = float(hl) if hl else 0.0
        self.hz_w = [1.0 - 0.5 ** (k / self.hz_half_life) for k in range(max_run + 1)] if hl else []
        self.hz_steps = self.hz_tok = self.hz_tok_pfx = self.hz_own = 0.0
        self.zeros = [[0.0] * k for k in range(max(max_run, self.T) + 1)]
        self.arrival_keys = bool(getattr(ordering, "keys_are_arrival", False))
        self.dyn_keys = bool(ordering.dynamic_keys)  # keys change with the length statistics (boost)
        self.steps = self.decode_steps = 0
        self.layout_s = [0.0] * len(tables.layouts)
        self.switches: list[SwitchRecord] = []
        self.aborted: list[SwitchRecord] = []
        # incremental moves (switching.py): per switch started, the plan's peak KV per rank, the
        # ledger's at the start and the most it held at a batch boundary while the groups landed
        self.moves: list[dict] = []
        self.cant_decide = 0
        self.timeline: tuple[list, list, list, list] = ([], [], [], [])

    def _prefill_price(self, i: int) -> float:
        """Seconds per prompt token of a step in which every owner group runs its full chunk in
        layout i (inf for a layout the model can't run)."""
        t = self.tables
        c = self.group_chunk[i]
        if c <= 0 or not np.isfinite(t.base_s[0, i]).all():
            return float("inf")
        g = self.groups[i]
        zero = np.zeros(1)
        co = (np.array([float(c)]), zero, zero, zero) if g > 1 else None
        return float(t.step_s(i, 0, np.array([float(c * g)]), zero, zero, chunk_owner=co)[0]) / (c * g)

    # ---- the machine ---------------------------------------------------------------------------
    def run(self) -> ServeResult:
        # NOTE: the objects alive before the serve (the tables' row lists, the policy, modules) sit
        # in Python's permanent generation while it runs, so a collection walks only what serving
        # made: a full collection that lands inside a serve walked the whole heap (on the
        # simulator's chat load, up to a third of the serve's instructions). The engines do the same
        # after their warm-up (vLLM `freeze_gc_heap`, SGLang `freeze_gc`; executor/torch_executor/
        # serve.py `frozen_gc`), there with a collection first, skipped here (a full collection of
        # a loaded process costs more than a short serve); unfrozen at the end, and left alone where
        # the caller froze the heap already
        freeze = gc.isenabled() and not gc.get_freeze_count()
        if freeze:
            gc.freeze()
        try:
            self._serve()
        finally:
            if freeze:
                gc.unfreeze()
        return self._result()

    def _serve(self) -> None:
        n = self.n
        while self.ended < n:
            self._turn()
        if self.inflight is not None:  # everything ended with a move under way: drop it
            self.executor.abort_switch(self.inflight.plan)
            self.inflight = None

    def _turn(self) -> None:
        """One run of steps (module docstring); returns early to start a new turn when the
        membership changed under a phase (a switch that sheds, a preemption, an idle wait)."""
        if self.nxt < self.n and self.arr_l[self.nxt] <= self.t:
            self._arrive()
        if self.inflight is not None:
            settle_switch(self)
        dec, waiting = self.dec, self.waiting
        if not dec.b and not self.prefill_q and waiting.pos >= len(waiting.ids) and not waiting.new:
            self._idle()
            return
        if waiting.dirty or self.dyn_keys:
            self._resort()
        if waiting.pos < len(waiting.ids) or self.skip_admit:
            total = admit(self)
        else:  # nobody waits: = admit(self)
            total = self.kv.total
        if consult_policy(self, total):
            return  # a switch started that sheds KV or is ready at once: decide again
        if not dec.b and not self.prefill_q:
            self._nothing_admitted()
            return
        k_kv = _NEVER
        if dec.b:  # = kv_wall(self, total) where nothing is preempted (the common cases, inline)
            layout = self.layout
            x = self.kv.extra[layout]
            if self.inflight is not None or (x and dec.groups > 1):
                k_kv = kv_wall(self, total)
            elif dec.groups == 1:  # (= preemption.kv_steps with the layout's extra slack per request)
                k_kv = int(math.floor((self.cap[layout] - (total + x * self.kv.count if x else total)) / dec.b))
                if k_kv < 1:
                    k_kv = kv_wall(self, total)
            else:  # every owner group has room for a whole run (the decode set's groups are the layout's)
                k_kv = self.max_run
                if self.cap[layout] - max(self.okv if dec.groups == self.T else self.kv.group_tok[layout]) < \
                        k_kv * max(dec.gcount):
                    k_kv = kv_wall(self, total)
        if k_kv < 0:
            return  # preempted, with victims to re-sort: decide again
        # the run's length: the least of the cuts (module docstring), at least 1 (NOTE: whole numbers,
        # compared, not min()/max() calls: the run's cuts are per-run work)
        k = self.max_run
        if dec.b:
            x = dec.fin_min - dec.dsteps  # the first decoder done
            if x < k:
                k = x
            if k_kv < k:  # the KV wall
                k = k_kv
        queues = None
        if self.prefill_q:
            queues = group_queues(self)  # each owner group's prefill (group_prefill.py)
            x = steps_to_first_completion(self, queues)
            if x < k:
                k = x
        est = self.est_step_s
        if est > 0:
            if self.nxt < self.n:
                x = math.ceil((self.arr_l[self.nxt] - self.t) / est)  # the next arrival
                if x < k:
                    k = x if x > 1 else 1
            if self.inflight is not None:
                x = math.ceil((self.hand_off_s - self.t) / est)  # the switch's (next group's) hand-off
                if x < k:
                    k = x if x > 1 else 1
        elif queues is None and self.nxt < self.n:
            # NOTE: no step priced yet and no prefill to cut the run: only a disaggregated decode pool's
            # first hand-off (runtime_policy/disagg.py) decodes before any prefill; one step prices it
            k = 1
        if k < 1:
            k = 1
        dur, chunk_stats, sat_out, done_by = self._run(k, queues)
        self._advance(k, dur, chunk_stats, sat_out, done_by)

    def _arrive(self) -> None:
        arr_l, n, status, waiting, t = self.arr_l, self.n, self.status, self.waiting, self.t
        g_count = self.groups[self.layout]
        route = g_count > 1 and self.routing != "fewest_prompt_tokens"
        rr = route and self.routing == "round_robin"  # = route_at_arrival's round robin, inline
        r_per = self.T // g_count
        i = self.nxt
        while i < n and arr_l[i] <= t:
            status[i] = WAITING
            waiting.push(i)
            if rr:
                b = self.rr % g_count * r_per
                self.rr += 1
                self.bound[i] = b
                self.bound_wait[b] += 1
            elif route:
                route_at_arrival(self, i)
            i += 1
            self.nxt = i

    def _idle(self) -> None:
        """Nothing to run: wait for the switch in flight or the next arrival."""
        if self.inflight is not None:  # NOTE: an executor moves what it must on `poll_switch` when nothing runs
            self.t = max(self.t, self.ready_s)
        elif self.nxt < self.n:
            self.t = max(self.t, self.arr_l[self.nxt])

    def _resort(self) -> None:
        ordering, waiting = self.ordering, self.waiting
        if self.dyn_keys and ordering.stats.version != self.stats_version:
            self.stats_version = ordering.stats.version
            waiting.dirty = waiting.dirty or waiting.pos < len(waiting.ids) or len(waiting.new) > 0
        if waiting.dirty:
            waiting.resort(self._keys, self.arrival_keys)

    def _keys(self, ids: np.ndarray) -> np.ndarray:
        tok = self.ctxf[ids].astype(np.int64)
        return self.ordering.keys(self.arr[ids], tok, tok - self.inp[ids], self.out[ids], self.queued[ids])

    def _nothing_admitted(self) -> None:
        """Nothing runs: wait for the switch, or (fixed layouts) the queue is stuck on KV."""
        waiting = self.waiting
        if self.inflight is not None:
            self.t = max(self.t, self.ready_s)
            return
        if waiting.pos >= len(waiting.ids):
            return  # the queue emptied by aborts; the next turn idles or ends
        # the policy chose not to move to a layout with room: the head can't be served here
        i = waiting.ids[waiting.pos]
        waiting.pos += 1
        self._end(i, ABORTED)

    # ---- the run -------------------------------------------------------------------------------
    def _run(self, k: int, queues) -> tuple[list[float], tuple, tuple, dict]:
        """Run k steps on the executor: the decoders (the run's StepBatch: its sums, and for an
        executor that reads them the decode set's per-request arrays; the executor protocol: read it
        during the call, keep nothing; NOTE: one object, refilled each run), and each owner group's
        next chunks (`queues`: group_prefill.py; None: no prefill). With separate prefill (SGLang) a
        group with a chunk runs no decodes: its decoders sit the run out. Returns the step
        durations, (prompt tokens done, their token-weighted prefix, the busiest groups' tokens,
        steps with a chunk), the groups that sat out and each group's prompt tokens done."""
        dec, batch, layout = self.dec, self.batch, self.layout
        b = dec.b
        sat_out = ()
        if queues is not None and self.separate and b:
            sat_out = tuple([q.group for q in queues])
            waits = 0
            for g in sat_out:
                waits += dec.gcount[g]
            if waits == b:
                batch = self.idle_batch  # every decoder waits: a prefill-only step
                batch.layout = layout
                b = 0
        if self.reads_arrays and batch is self.batch and self.view_version != dec.version:
            self.view_version = dec.version
            batch.request_ids, batch.context_base_tokens, batch.owners = dec.arrays()
        if b:
            batch.layout = layout
            if sat_out:
                self._fill_active(batch, k, sat_out)
            else:
                s2 = dec.s2
                batch.context_sum_tokens = s2
                batch.active_decoders = b
                g = dec.groups  # = the layout's (regrouped at each commit)
                if g > 1:  # per owner group Σ context only where the executor reads it
                    if g == self.T:
                        batch.owner_context_tokens = dec.owner_contexts()
                        batch.owner_requests = dec.per_owner
                    else:  # the decode set's own groups: O(G)
                        batch.owner_context_tokens = dec.group_contexts()
                        batch.owner_requests = dec.gcount
                else:
                    batch.owner_context_tokens = batch.owner_requests = None
                if self.capped:
                    batch.context_capped_sum_tokens = self.s1_now
                    batch.context_capped_sum_last_tokens = dec.capped_sum(dec.dsteps + k - 1) if k > 1 else -1.0
                else:
                    batch.context_capped_sum_tokens, batch.context_capped_sum_last_tokens = s2, -1.0
            batch.context_offset_tokens = float(dec.dsteps)
        elif batch is self.batch:
            batch.layout = layout
            batch.context_sum_tokens = batch.context_capped_sum_tokens = 0.0
            batch.owner_context_tokens = batch.owner_requests = None
            batch.context_capped_sum_last_tokens, batch.active_decoders = -1.0, 0
        if queues is None:
            dur = self.executor.run_steps(batch, self.zeros[k] if k <= self.config.max_run_steps else [0.0] * k)
            return (dur if type(dur) is list else dur.tolist()), _NO_PREFILL, sat_out, _NO_DONE
        pref, pfx, chunk_owner, stats, done_by = plan_run(self, queues, k)
        if self.wants_pieces:
            dur = self.executor.run_steps(batch, pref, pfx, chunk_owner, prefill_pieces(self, queues, k))
        else:
            dur = self.executor.run_steps(batch, pref, pfx, chunk_owner)
        return (dur if type(dur) is list else dur.tolist()), stats, sat_out, done_by

    def _fill_active(self, batch: StepBatch, k: int, sat_out: tuple) -> None:
        """The batch's sums over the groups that decode this run (the others prefill: SGLang)."""
        dec = self.dec
        gsum = dec.group_contexts()  # the decode set's groups are the layout's (regrouped at each commit)
        gcnt = list(dec.gcount)
        for x in sat_out:
            gsum[x], gcnt[x] = 0.0, 0
        s2 = sum(gsum)
        batch.context_sum_tokens = s2
        if self.capped:
            batch.context_capped_sum_tokens = dec.capped_sum(dec.dsteps, sat_out, active_only=True)
            batch.context_capped_sum_last_tokens = (dec.capped_sum(dec.dsteps + k - 1, sat_out, active_only=True)
                                                    if k > 1 else -1.0)
        else:
            batch.context_capped_sum_tokens, batch.context_capped_sum_last_tokens = s2, -1.0
        batch.owner_context_tokens, batch.owner_requests = gsum, gcnt
        batch.active_decoders = sum(gcnt)

    # ---- after the run -------------------------------------------------------------------------
    def _advance(self, k: int, dur: list[float], chunk_stats: tuple, sat_out: tuple = (), done_by=None) -> None:
        """The clock, the prefill statistics, completions and prefill progress after a run
        (`sat_out`: the owner groups whose decoders waited while they prefilled)."""
        done_tokens, run_tok_pfx, run_own, run_chunks = chunk_stats
        tok = self.ema_tok
        if done_tokens or tok:  # the running prefill statistics the policy reads (weighted over steps)
            w = self.ema_w[k] if k <= self.config.max_run_steps else 1.0 - 0.5 ** (k / PREFILL_STATS_HALF_LIFE_STEPS)
            steps, tok_pfx, own = self.ema_steps, self.ema_tok_pfx, self.ema_own
            steps += w * (run_chunks / k - steps)
            tok += w * (done_tokens / k - tok)
            tok_pfx += w * (run_tok_pfx / k - tok_pfx)
            own += w * (run_own / k - own)
            if tok < 1e-3:
                steps = tok = tok_pfx = own = 0.0
            self.ema_steps, self.ema_tok, self.ema_tok_pfx, self.ema_own = steps, tok, tok_pfx, own
        hl = self.hz_half_life
        if hl and (done_tokens or self.hz_tok):
            # the same statistics over the policy's horizon, written to its state. NOTE: the half-life
            # grows with the run from the fast one's, so a run does not start biased to the zeros the
            # average starts from
            if self.steps < hl:
                w = 1.0 - 0.5 ** (k / max(float(self.steps), PREFILL_STATS_HALF_LIFE_STEPS))
            else:
                w = self.hz_w[k] if k < len(self.hz_w) else 1.0 - 0.5 ** (k / hl)
            steps, tok, tok_pfx, own = self.hz_steps, self.hz_tok, self.hz_tok_pfx, self.hz_own
            steps += w * (run_chunks / k - steps)
            tok += w * (done_tokens / k - tok)
            tok_pfx += w * (run_tok_pfx / k - tok_pfx)
            own += w * (run_own / k - own)
            if tok < 1e-3:
                steps = tok = tok_pfx = own = 0.0
            self.hz_steps, self.hz_tok, self.hz_tok_pfx, self.hz_own = steps, tok, tok_pfx, own
            st = self.state
            st.horizon_prefill_step_fraction, st.horizon_prefill_tokens_per_step = steps, tok
            st.horizon_prefill_context_tokens = tok_pfx / tok if tok > 0 else 0.0
            st.horizon_prefill_owner_share = own / tok if tok > 0 else 1.0
        if k < 8:  # = sum_as_numpy(dur), its short case inline (most runs are a few steps)
            run_s = -0.0
            for x in dur:
                run_s += x
        else:
            run_s = sum_as_numpy(dur)
        t = self.t = self.t + run_s
        self.est_step_s = self.ordering.tpot_s = dur[-1]
        dec, layout = self.dec, self.layout
        b = dec.b
        self.steps += k
        self.layout_s[layout] += run_s
        st = self.state
        # the switch-rate bound's clock (reset with steps_since_switch, runtime_policy/switching.py)
        st.seconds_since_switch = st.seconds_since_switch + run_s if st.steps_since_switch else run_s
        st.steps_since_switch += k
        if b and not sat_out:
            self.decode_steps += k
            left = dec.fin_min - dec.dsteps
            fk = float(k)
            self.okv = self.kv.grow(dec.per_owner, fk, b)
            dec.s2 += b * fk
            dec.dsteps += k  # = dec.advance(k) with no group sitting out
            if left <= k:
                self._finish_done()
        elif b:  # some groups prefilled: their decoders kept their contexts (SGLang)
            moved = dec.advance(k, sat_out)
            if moved:
                self.decode_steps += k
                fk = float(k)
                r = self.T // dec.groups
                per_rank = list(dec.per_owner)  # the decoders that moved, per rank
                for g in sat_out:
                    per_rank[g * r:(g + 1) * r] = self.zeros[r]
                self.okv = self.kv.grow(per_rank, fk, moved)
                dec.s2 += moved * fk
            if dec.first_to_finish() <= dec.dsteps and dec.b:
                self._finish_done()
        if done_tokens:
            prefill_progress(self, credit(self, done_by))
        # the timeline: time, layout, decode batch, KV used
        tl_t, tl_layout, tl_batch, tl_kv = self.timeline
        tl_t.append(t)
        tl_layout.append(layout)
        tl_batch.append(dec.b)
        tl_kv.append(self.kv.used_fraction(layout))
        if self.progress is not None:
            self.progress(self.ended, self.n)

    # ---- events --------------------------------------------------------------------------------
    def _finish_done(self) -> None:
        """The decoders done by now, in the order they joined: each `_leave`s and `_end`s DONE (their
        steps inline: a completion is a per-request event of every run that a decoder ends)."""
        dec, kv, owner, slack, inp_l, end_at, out_l = self.dec, self.kv, self.owner, self.slack, self.inp_l, \
            self.end_at, self.out_l
        status, finish, t = self.status, self.finish, self.t
        observe, count = self.policy.observe_completion, self.ordering.stats.add
        retire = self.executor.retire if self.tracks_kv else None
        leave, remove = dec.leave, kv.remove
        for i in dec.done_by(dec.dsteps):
            r = owner[i]
            c = leave(i, r)
            remove(r, c + slack, inp_l[i], end_at[i] + slack)
            if retire is not None:
                retire(i, False)
            status[i] = DONE
            finish[i] = t
            self.ended += 1
            x = float(out_l[i])
            observe(x)
            count(x)
        # (dec.done_by set dec.fin_min: = dec.first_to_finish() after the leaves)

    def _join(self, i: int, c: float) -> None:
        """Request i, its prefill done at context c, decodes (its KV is the executor's from now)."""
        r = self.owner[i]
        self.dec.join(i, c, r, self.end_at[i])
        if self.tracks_kv:
            self.executor.admit(i, int(c), r)

    def prefill_groups(self, groups: int) -> list[list[int]]:
        """[G] each owner group's prefilling requests in admission order (prefill_q's order) for a
        layout of `groups` owner groups: kept as requests join and leave the queue (`pq_add`,
        `pq_remove`), rebuilt when the group count changes (a switch's commit)."""
        if self.pq_for != groups:
            r = self.T // groups
            by: list[list[int]] = [[] for _ in range(groups)]
            owner = self.owner
            for i in self.prefill_q:
                by[owner[i] // r].append(i)
            self.pq_groups, self.pq_for = by, groups
        return self.pq_groups

    def pq_add(self, i: int) -> None:
        """Request i (its owner set) joins the end of the prefill queue."""
        self.prefill_q.append(i)
        self.pq_seq[i] = self.pq_next
        self.pq_next += 1
        if self.pq_for:
            self.pq_groups[self.owner[i] * self.pq_for // self.T].append(i)

    def pq_remove(self, i: int) -> None:
        """Request i leaves the prefill queue."""
        self.prefill_q.remove(i)
        if self.pq_for:
            self.pq_groups[self.owner[i] * self.pq_for // self.T].remove(i)

    def _leave(self, i: int, preempted: bool = False) -> None:
        """Request i stops decoding: its KV is released (the executor's and the ledger's)."""
        r = self.owner[i]
        c = self.dec.leave(i, r)
        self.kv.remove(r, c + self.slack, self.inp_l[i], self.end_at[i] + self.slack)
        if self.tracks_kv:
            self.executor.retire(i, preempted)

    def _end(self, i: int, how: int) -> None:
        self.status[i] = how
        self.finish[i] = self.t
        self.ended += 1
        if how == DONE:
            self.policy.observe_completion(float(self.out_l[i]))
            self.ordering.stats.add(float(self.out_l[i]))

    def _result(self) -> ServeResult:
        tl_t, tl_layout, tl_batch, tl_kv = self.timeline
        return ServeResult(self.arr, self.inp, self.out, np.array(self.first), np.array(self.finish),
                           np.array(self.status, dtype=np.int8), np.array(self.preempted, dtype=np.int64),
                           self.switches, self.steps, self.decode_steps,
                           {name: self.layout_s[i] for i, name in enumerate(self.tables.layouts)},
                           {"t_s": tl_t, "layout": tl_layout, "batch": tl_batch, "kv_used_fraction": tl_kv},
                           self.aborted, self.cant_decide)
