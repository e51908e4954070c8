"""The `Executor` protocol the serving loop drives, and the batch it hands over.

An executor runs `steps` consecutive steps of one batch in one layout — every decoding request
gains one token per step, and step j also runs `prefill_tokens[j]` prompt tokens — and returns each
step's duration. It starts a layout switch in the background (returning when it will be ready) and
commits it at a batch boundary (returning the stall). `executor.sim` prices steps from the
compiled tables; a GPU executor runs them.

Does not: choose anything — admission, ordering and layout are the loop's and the policy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from runtime_policy.transitions import TransitionPlan


@dataclass(slots=True)
class StepBatch:
    """The decoding requests of a run of steps (constant membership over the run). Executors read
    it and neither modify it nor keep its arrays past the call: the loop hands views of storage it
    reuses (copy what you keep). NOTE: not frozen: a frozen dataclass costs ~1 µs more to build,
    once per run."""

    layout: int  # index into runtime_policy.tables.LAYOUTS
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
    # per owner rank [T]: Σ context and count of its decoding requests, when the caller keeps them
    owner_context_tokens: Sequence[float] | None = None
    owner_requests: Sequence[int] | None = None
    # Σ min(context + k − 1, top-k): the capped sum at the run's last step (k steps), when the
    # caller keeps it (negative: the executor computes it)
    context_capped_sum_last_tokens: float = -1.0
    context_offset_tokens: float = 0.0  # added to every context_base_tokens

    @property
    def context_tokens(self) -> np.ndarray:
        """[B] context length of each decoding request at the first step (built when read)."""
        off = self.context_offset_tokens
        return self.context_base_tokens + off if off else self.context_base_tokens


class Executor(Protocol):
    def run_steps(self, batch: StepBatch, prefill_tokens: Sequence[float],
                  prefill_context_tokens: Sequence[float] | None = None,
                  chunk_owner: tuple[Sequence[int], Sequence[float], Sequence[float]] | None = None
                  ) -> Sequence[float]:
        """Run len(prefill_tokens) steps; return their durations in seconds [k] (a list or an array).
        `prefill_context_tokens` [k]: the cached prefix step j's chunk attends to (token-weighted
        over its requests; None: 0). `chunk_owner` = (rank, tokens, prefix), arrays [k]: the owner
        rank that runs the most of step j's chunk, those tokens and their prefix (owner layouts
        place each request's chunk on its owner; None: unknown). Sequences: lists or arrays."""
        ...

    def start_switch(self, plan: TransitionPlan) -> float:
        """Begin moving state in the background; seconds until the move is complete."""
        ...

    def commit_switch(self, plan: TransitionPlan) -> float:
        """Hand off at a batch boundary; the stall in seconds."""
        ...
