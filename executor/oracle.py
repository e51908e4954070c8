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
time each step takes changes. Idle time between arrivals stays, and on an open workload the bound
is loose (an overloaded trajectory, repriced, looks as if its backlog had been served faster, though
faster steps would have changed which requests ran together); throughput there is capped by the
offered load, so latency is the measure that matters.

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


@dataclass
class RecordingExecutor:
    """An `Executor` that forwards to `inner` and records every run and commit stall. It serves
    exactly as `inner` does: every capability the loop reads off an executor (`separate_prefill`,
    `wants_prefill_pieces`, `unmoved_requests`, `finish_switch`, `abort_reason`, …) is `inner`'s,
    except `reads_batch_arrays`: the recording keeps each run's per-request arrays, so the loop
    builds them (they don't change what it schedules).
    NOTE: it forwarded none of them before, so the loop served SGLang's deployments with mixed
    prefill steps under the recorder (SGLang's default runs a prefill batch of its own:
    `separate_prefill`), and every recorded run (the workload sweeps' rows and oracles) was that
    schedule, not the bare simulator's."""

    inner: object
    runs: list[RecordedRun] = field(default_factory=list)
    commit_stall_s: float = 0.0
    reads_batch_arrays = True

    def __getattr__(self, name: str):
        # NOTE: only for names this class doesn't define; a dataclass field being set up isn't one
        if name in ("inner", "runs", "commit_stall_s") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def run_steps(self, batch: StepBatch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None):
        dur = self.inner.run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner)
        self.runs.append(RecordedRun(batch.layout, np.array(batch.context_tokens), np.array(batch.owners),
                                     np.array(prefill_tokens),
                                     None if prefill_context_tokens is None else np.array(prefill_context_tokens),
                                     None if chunk_owner is None else
                                     (np.array(chunk_owner[0], dtype=np.int64), np.array(chunk_owner[1], dtype=np.float64),
                                      np.array(chunk_owner[2], dtype=np.float64)),
                                     np.array(dur), np.array(batch.request_ids, dtype=np.int64)))
        return dur

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

    def makespan_s(self, makespan_actual_s: float, arrival_span_s: float = 0.0) -> float:
        """The recorded makespan with every step at its best layout's time and no commit stalls,
        and never below the arrival span (the last request arrives then, whatever the layout)."""
        return max(makespan_actual_s - self.busy_actual_s - self.commit_stall_s + self.busy_oracle_s, arrival_span_s)


def per_step_best(tables: StepTimeTable, rec: RecordingExecutor) -> OracleBound:
    """Reprice every recorded step in every layout; see the module docstring."""
    info, bpt, page = tables.info, tables.kv_bytes_per_token, float(tables.page_tokens)
    sim = SimExecutor(tables)
    names = tables.layouts
    usable = [i for i in range(len(names)) if info.kv_pool_bytes[i] > 0]
    busy_actual = busy_oracle = 0.0
    steps = 0
    chosen = np.zeros(len(names), dtype=np.int64)
    for r in rec.runs:
        k = r.prefill_tokens.shape[0]
        need = r.context_tokens + page  # [B] KV tokens each decoder holds
        per_owner = np.bincount(r.owners, weights=need, minlength=tables.ranks) if need.size else np.zeros(tables.ranks)
        total = float(need.sum())
        best = np.full(k, np.inf)
        arg = np.full(k, r.layout)
        for lay in usable:
            pool_tokens = float(info.kv_pool_bytes[lay]) / bpt
            g = int(info.owner_groups[lay])
            held = (total if g == 1 else float(per_owner.reshape(g, -1).sum(axis=1).max())) * float(info.group_share[lay])
            if held > pool_tokens and lay != r.layout:
                continue
            t = np.asarray(sim.run_steps(StepBatch(lay, r.context_tokens, r.owners, np.arange(r.owners.size)),
                                         r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
            better = t < best
            best = np.where(better, t, best)
            arg = np.where(better, lay, arg)
        busy_actual += float(r.durations_s.sum())
        busy_oracle += float(best.sum())
        steps += k
        chosen += np.bincount(arg, minlength=len(names))
    return OracleBound(steps, busy_actual, busy_oracle, rec.commit_stall_s,
                       {names[i]: int(chosen[i]) for i in range(len(names))})
