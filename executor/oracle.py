"""An upper bound on what layout switching can gain: the same steps, each in the best layout for
its own batch, with free and instant switches.

`RecordingExecutor` wraps an executor and keeps every run the serving loop hands it (the decoding
requests' contexts and owners, each step's prefill chunk, its cached prefix and owner). `per_step_best`
reprices each recorded step in every layout with the simulated executor (the same step-time tables)
and takes, per step, the fastest layout whose KV pool holds the batch at the run's first step:

    oracle busy time  = Σ_steps min_{l : KV fits in l} t_l(step)
    oracle makespan   = max(makespan − Σ_steps t_actual(step) − Σ commit stalls + oracle busy time,
                            last arrival − first arrival)
    oracle throughput = output tokens / oracle makespan

i.e. the recorded trajectory (which requests run together, in what order) is kept and only the
time each step takes changes. Given the arrivals (`arrival_s`, by request id) the makespan is the
repriced trajectory replayed in time instead, each step starting no earlier than the arrival of
every request it prefills (`RecordingExecutor.release_s`):

    end_j = max(end_{j−1}, release_j) + min_{l : KV fits in l} t_l(step j),   makespan = end_N − first arrival

NOTE: without the arrivals the bound served requests before they arrived: the recorded idle time
is kept, but a slower layout's trajectory (a backlog of queued arrivals run in large batches)
repriced in a faster layout moves every step earlier, arrivals included. On DeepSeek-V3.2's 20/s
chat (8 x H200, the shipped prior) the free oracle over fixed DCP's trajectory was 1.137x fixed
DOP, the row's largest bound; replayed against the arrivals the row's largest is 1.025x (the
priced oracle over DCP's trajectory 1.097x -> 0.999x). With the arrivals the bound holds: the same
batches, in the same order, each step no earlier than its requests exist (holding requests back is
a schedule a scheduler can choose). Throughput on an open workload stays capped by the offered load, so latency is the
measure that matters there.

NOTE: it is a bound for *that* trajectory: a different layout admits differently (owner layouts
hold ~T× more KV than TP for MLA), which is why the bound is computed over several recorded
trajectories (each fixed layout's and the dynamic policy's) and the largest reported. KV
feasibility counts the decoding requests only (context + one page each; the request being
prefilled is left out), which can only admit more layouts, keeping it a bound.

Does not: schedule, or import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from executor.sim import SimExecutor
from runtime_policy.executor import StepBatch
from runtime_policy.tables import StepTimeTable


_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_TOKENS = np.zeros(0, dtype=np.float64)


@dataclass
class RecordedRun:
    layout: int
    context_tokens: np.ndarray  # [B]
    owners: np.ndarray  # [B]
    prefill_tokens: np.ndarray  # [k]
    prefill_context_tokens: np.ndarray | None  # [k]
    chunk_owner: tuple | None  # (rank, tokens, prefix) arrays [k]
    durations_s: np.ndarray  # [k] as the wrapped executor returned them (interference included)
    request_ids: np.ndarray | None = None  # [B] (None: not recorded)
    # [k] each step's prefilled requests and their tokens (the loop's prefill pieces; None: not recorded)
    prefill_request_ids: list[np.ndarray] | None = None
    prefill_request_tokens: list[np.ndarray] | None = None
    # [G] decoders per owner group of the run's layout when some groups sat out to prefill (SGLang:
    # a group runs its prefill batch or its decodes; theirs 0); None: every decoder ran
    group_requests: np.ndarray | None = None

    def decoding(self, ranks: int) -> tuple[np.ndarray, np.ndarray]:
        """(contexts, owners) of the decoders that ran in these steps: all of them, less those of
        the owner groups that sat out (`group_requests`), of `ranks` ranks."""
        gr = self.group_requests
        if gr is None or not self.owners.size:
            return self.context_tokens, self.owners
        keep = gr[self.owners * gr.size // ranks] > 0
        return self.context_tokens[keep], self.owners[keep]


@dataclass
class RecordingExecutor:
    """An `Executor` that forwards to `inner` and records every run and commit stall. It serves
    exactly as `inner` does: every capability the loop reads off an executor (`separate_prefill`,
    `wants_prefill_pieces`, `unmoved_requests`, `finish_switch`, `abort_reason`, …) is `inner`'s,
    except `reads_batch_arrays` and `wants_prefill_pieces`: the recording keeps each run's
    per-request arrays and each step's prefilled requests (so the bounds can hold a step to its
    requests' arrivals: `release_s`), so the loop builds them (they don't change what it
    schedules); the pieces reach `inner` only if it asks for them.
    NOTE: it forwarded none of them before, so the loop served SGLang's deployments with mixed
    prefill steps under the recorder (SGLang's default runs a prefill batch of its own:
    `separate_prefill`), and every recorded run (the workload sweeps' rows and oracles) was that
    schedule, not the bare simulator's."""

    inner: object
    runs: list[RecordedRun] = field(default_factory=list)
    commit_stall_s: float = 0.0
    reads_batch_arrays = True
    wants_prefill_pieces = True

    def __getattr__(self, name: str):
        # NOTE: only for names this class doesn't define; a dataclass field being set up isn't one
        if name in ("inner", "runs", "commit_stall_s") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def run_steps(self, batch: StepBatch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None,
                  prefill_pieces=None):
        if prefill_pieces is not None and getattr(self.inner, "wants_prefill_pieces", False):
            dur = self.inner.run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner, prefill_pieces)
        else:
            dur = self.inner.run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner)
        self.runs.append(RecordedRun(batch.layout, np.array(batch.context_tokens), np.array(batch.owners),
                                     np.array(prefill_tokens),
                                     None if prefill_context_tokens is None else np.array(prefill_context_tokens),
                                     None if chunk_owner is None else
                                     (np.array(chunk_owner[0], dtype=np.int64), np.array(chunk_owner[1], dtype=np.float64),
                                      np.array(chunk_owner[2], dtype=np.float64)),
                                     np.array(dur), np.array(batch.request_ids, dtype=np.int64),
                                     *self._prefilled(prefill_tokens, prefill_pieces),
                                     np.array(batch.owner_requests, dtype=np.int64)
                                     if 0 <= batch.active_decoders < batch.owners.shape[0]
                                     and batch.owner_requests is not None else None))
        return dur

    @staticmethod
    def _prefilled(prefill_tokens, prefill_pieces) -> tuple[list | None, list | None]:
        """([k] each step's prefilled request ids, [k] their tokens) (a run with no prefill passes
        no pieces: none)."""
        if prefill_pieces is not None:
            return ([np.array([q for q, _ in step], dtype=np.int64) for step in prefill_pieces],
                    [np.array([x for _, x in step], dtype=np.float64) for step in prefill_pieces])
        if not any(prefill_tokens):
            return [_NO_IDS] * len(prefill_tokens), [_NO_TOKENS] * len(prefill_tokens)
        return None, None

    def release_s(self, arrival_s) -> np.ndarray | None:
        """[steps] the earliest each recorded step can start: the latest arrival of the requests it
        prefills (−inf where it prefills none), from `arrival_s` [requests] by request id; None
        where a run was recorded without its prefill pieces."""
        arr = np.asarray(arrival_s, dtype=np.float64)
        out = []
        for r in self.runs:
            if r.prefill_request_ids is None:
                return None
            out.extend(float(arr[ids].max()) if ids.size else -np.inf for ids in r.prefill_request_ids)
        return np.array(out, dtype=np.float64)

    def admit(self, request_id: int, context_tokens: int, owner: int) -> None:
        self.inner.admit(request_id, context_tokens, owner)

    def retire(self, request_id: int, preempted: bool = False) -> None:
        self.inner.retire(request_id, preempted)

    def start_switch(self, plan) -> float:
        return self.inner.start_switch(plan)

    def poll_switch(self):
        return self.inner.poll_switch()

    def commit_switch(self, plan) -> float:
        stall = self.inner.commit_switch(plan)
        self.commit_stall_s += stall
        return stall

    def abort_switch(self, plan) -> None:
        self.inner.abort_switch(plan)


@dataclass(frozen=True)
class OracleBound:
    steps: int
    busy_actual_s: float  # Σ recorded step durations
    busy_oracle_s: float  # Σ per-step best feasible layout
    commit_stall_s: float
    best_layout_steps: dict[str, int]  # steps on which each layout was the oracle's choice
    # the repriced steps replayed against the arrivals (module docstring); None: not given
    released_makespan_s: float | None = None

    def makespan_s(self, makespan_actual_s: float, arrival_span_s: float = 0.0) -> float:
        """The recorded makespan with every step at its best layout's time and no commit stalls
        (replayed against the arrivals where they were given), and never below the arrival span
        (the last request arrives then, whatever the layout)."""
        if self.released_makespan_s is not None:
            return max(self.released_makespan_s, arrival_span_s)
        return max(makespan_actual_s - self.busy_actual_s - self.commit_stall_s + self.busy_oracle_s, arrival_span_s)


def released_end_s(step_s: np.ndarray, release_s: np.ndarray, start_s: float) -> float:
    """The end of steps `step_s` [N] run back to back from `start_s`, step j starting no earlier
    than `release_s[j]` (−inf: any time)."""
    end = start_s
    for t, r in zip(step_s.tolist(), release_s.tolist()):
        end = (end if end >= r else r) + t
    return end


def per_step_best(tables: StepTimeTable, rec: RecordingExecutor, arrival_s=None) -> OracleBound:
    """Reprice every recorded step in every layout; see the module docstring (`arrival_s` [requests]
    by request id: the makespan replayed against them)."""
    info, bpt, page = tables.info, tables.kv_bytes_per_token, float(tables.page_tokens)
    sim = SimExecutor(tables)
    names = tables.layouts
    usable = [i for i in range(len(names)) if info.kv_pool_bytes[i] > 0]
    busy_actual = busy_oracle = 0.0
    steps = 0
    chosen = np.zeros(len(names), dtype=np.int64)
    best_steps = []
    for r in rec.runs:
        k = r.prefill_tokens.shape[0]
        need = r.context_tokens + page  # [B] KV tokens each decoder holds
        per_owner = np.bincount(r.owners, weights=need, minlength=tables.ranks) if need.size else np.zeros(tables.ranks)
        total = float(need.sum())
        best = np.full(k, np.inf)
        arg = np.full(k, r.layout)
        # NOTE: the decoders that ran, priced in every layout: the groups that sat out to prefill
        # (SGLang) did no decode work in the run (priced with them, fixed DOP's own steps on its 20/s
        # chat trajectory, DS-V3.2 8 x H200, summed to 231.6 s against the 225.1 s it ran)
        ctx_run, own_run = r.decoding(tables.ranks)
        for lay in usable:
            pool_tokens = float(info.kv_pool_bytes[lay]) / bpt
            g = int(info.owner_groups[lay])
            held = (total if g == 1 else float(per_owner.reshape(g, -1).sum(axis=1).max())) * float(info.group_share[lay])
            if held > pool_tokens and lay != r.layout:
                continue
            t = np.asarray(sim.run_steps(StepBatch(lay, ctx_run, own_run, np.arange(own_run.size)),
                                         r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
            better = t < best
            best = np.where(better, t, best)
            arg = np.where(better, lay, arg)
        busy_actual += float(r.durations_s.sum())
        busy_oracle += float(best.sum())
        best_steps.append(best)
        steps += k
        chosen += np.bincount(arg, minlength=len(names))
    released = None
    rel = rec.release_s(arrival_s) if arrival_s is not None and len(arrival_s) else None
    if rel is not None:
        t0 = float(np.min(arrival_s))
        released = released_end_s(np.concatenate(best_steps) if best_steps else np.zeros(0), rel, t0) - t0
    return OracleBound(steps, busy_actual, busy_oracle, rec.commit_stall_s,
                       {names[i]: int(chosen[i]) for i in range(len(names))}, released)
