"""The `Executor` protocol the serving loop drives, and the batch it hands over.

An executor holds the KV of the requests the loop admits (`admit` when a request's prefill is done
and it starts decoding, `retire` when it is done or preempted), runs `steps` consecutive steps of
one batch in one layout — every decoding request gains one token per step, and step j also runs
`prefill_tokens[j]` prompt tokens — and returns each step's duration. A layout switch the policy
decides is started in the background (`start_switch`, returning when it should be ready), polled
at every batch boundary (`poll_switch`: still moving, ready, or aborted by a fault), committed at a
batch boundary once ready (`commit_switch`, returning the stall), or aborted (`abort_switch`: the
old layout stays, untouched). `executor.sim` prices steps from the compiled tables;
`executor.torch_executor.serving` runs them on T ranks.

Does not: choose anything — admission, ordering and layout are the loop's and the policy's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from runtime_policy.transitions import TransitionPlan


class SwitchStatus(enum.IntEnum):
    IN_FLIGHT = 0  # state is still moving
    READY = 1  # moved: the switch can commit at the next batch boundary
    ABORTED = 2  # failed (a transfer fault, no memory): the old layout is intact and keeps serving


@dataclass(slots=True)
class StepBatch:
    """The decoding requests of a run of steps (constant membership over the run). Executors read
    it and neither modify it nor keep its arrays past the call: the loop hands views of storage it
    reuses (copy what you keep). NOTE: not frozen: a frozen dataclass costs ~1 µs more to build,
    once per run."""

    layout: int  # index into the tables' `layouts`
    # [B] context length of each decoding request at the first step, less context_offset_tokens
    # (NOTE: every context grows by one per step, so a loop keeps one base array and a step count
    # instead of writing B numbers per run; read `context_tokens`)
    context_base_tokens: np.ndarray
    owners: np.ndarray  # [B] owner rank of each request (used by owner layouts)
    request_ids: np.ndarray  # [B]
    # Σ context_tokens and Σ min(context, top-k) at the first step when the caller already has them
    # (negative: the executor sums context_tokens itself)
    context_sum_tokens: float = -1.0
    context_capped_sum_tokens: float = -1.0
    # per owner group of the batch's layout [G] (groups of consecutive ranks, planner Placement; G = T
    # for DP-attention and DOP): Σ context and count of its decoding requests, when the caller keeps them
    owner_context_tokens: Sequence[float] | None = None
    owner_requests: Sequence[int] | None = None
    # Σ min(context + k − 1, top-k): the capped sum at the run's last step (k steps), when the
    # caller keeps it (negative: the executor computes it)
    context_capped_sum_last_tokens: float = -1.0
    context_offset_tokens: float = 0.0  # added to every context_base_tokens
    # decoders that run in these steps (when some owner groups prefill instead, SGLang runs a group's
    # prefill batch or its decodes: the sums and owner sums above are then of the active ones only,
    # the sitting-out groups' zero); −1: every decoder of the batch's arrays. NOTE: an executor that
    # declares `reads_batch_arrays = False` (it prices a run from the sums above) is handed empty
    # arrays, and this count
    active_decoders: int = -1

    @property
    def context_tokens(self) -> np.ndarray:
        """[B] context length of each decoding request at the first step (built when read)."""
        off = self.context_offset_tokens
        return self.context_base_tokens + off if off else self.context_base_tokens


class Executor(Protocol):
    def admit(self, request_id: int, context_tokens: int, owner: int) -> None:
        """Request `request_id` starts decoding with `context_tokens` of KV (its prompt, the first
        token, and for a preempted request what it had generated: the prefill recomputed them);
        `owner` is its rank under owner layouts (every request has one, in every layout)."""
        ...

    def retire(self, request_id: int, preempted: bool = False) -> None:
        """Free the request's KV: it is done, or preempted (it will be admitted again later with the
        same context)."""
        ...

    def run_steps(self, batch: StepBatch, prefill_tokens: Sequence[float],
                  prefill_context_tokens: Sequence[float] | None = None,
                  chunk_owner: tuple[Sequence[int], Sequence[float], Sequence[float]] | None = None
                  ) -> Sequence[float]:
        """Run len(prefill_tokens) steps of the admitted decoding requests (`batch` says which, in
        which layout); return their durations in seconds [k] (a list or an array).
        `prefill_tokens[j]` is every owner group's chunk of step j together (each group's scheduler
        takes its own: runtime_policy/group_prefill.py). `prefill_context_tokens` [k]: the cached
        prefix the busiest group's chunk attends to (token-weighted over its requests; None: 0).
        `chunk_owner` = (rank, tokens, prefix), arrays [k]: a rank of the owner group that runs the
        most of step j's chunk, those tokens and their prefix (None: unknown). Sequences: lists or
        arrays. An executor that declares `wants_prefill_pieces = True` is also passed
        `prefill_pieces`: [k] lists of (request, tokens), each step's chunks by request."""
        ...

    def start_switch(self, plan: TransitionPlan) -> float:
        """Begin moving state to `plan.dst` in the background; seconds until it should be ready."""
        ...

    def poll_switch(self) -> SwitchStatus:
        """Where the switch in flight stands (called at batch boundaries)."""
        ...

    def commit_switch(self, plan: TransitionPlan) -> float:
        """Hand off at this batch boundary (the switch is READY); the stall in seconds."""
        ...

    def abort_switch(self, plan: TransitionPlan) -> None:
        """Drop the switch in flight; the old layout keeps serving, its KV untouched. Called only
        while nothing of an incremental move has landed (see `unmoved_requests`)."""
        ...

    # Optional, for executors that land an incremental move's groups on their own schedule (the torch
    # executor); without them the loop keeps the account itself (runtime_policy/switching.py):
    #   unmoved_requests() -> list[int] | None: the running requests the destination of the move in
    #     flight lacks once a group has landed (None: nothing landed, the switch can still abort);
    #   finish_switch(plan) -> float: commit the move with what has landed, every request it
    #     lacks already retired (switching.finish_move); the stall in seconds.
