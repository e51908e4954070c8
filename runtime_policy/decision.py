"""What the layout policy reads and answers: the batch state the serving loop keeps, the small
frozen decision with its enum reason, and the policy's knobs. Types only; the rules that turn
one into the other are in policy.py (and capacity_rule.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from runtime_policy.transitions import TransitionPlan


class Reason(enum.IntEnum):
    STAY_BEST = 0
    STAY_SMALL_GAIN = 1
    STAY_NOT_WORTH = 2
    STAY_COOLDOWN = 3
    STAY_IN_FLIGHT = 4
    STAY_NO_MEMORY = 5
    STAY_IDLE = 6
    STAY_FIXED = 7
    SWITCH_THROUGHPUT = 8
    SWITCH_CAPACITY = 9
    CANT_DECIDE = 10
    STAY_KV_WAIT = 11  # admission is blocked, but the layouts with room would serve fewer requests per second
    SWITCH_PROJECTED = 12  # the running set's expected KV peak outgrows the current layout; another sustains more


@dataclass(frozen=True, slots=True)
class Decision:
    layout: int  # index into the policy's `tables.layouts`: the layout to run (== current unless switching)
    switch: bool
    reason: Reason
    gain_s: float = 0.0  # predicted serving time saved over the dwell
    cost_s: float = 0.0  # predicted transition cost (with the recompute of any KV shed for it)
    plan: TransitionPlan | None = None
    # KV tokens (one copy) the server must free by preemption before starting the move, and admit
    # nothing in the old layout until the commit: the move's memory fits only below that (0: none)
    shed_kv_tokens: float = 0.0
    # > 0: this answer came from a capacity pricing that found no move (or one held by the
    # cooldown); it stands for that many steps in this layout. A server that keeps the memo sets
    # `PolicyState.capacity_reprice_at_step` = its step + this (capacity_rule.py)
    capacity_stands_steps: int = 0


@dataclass(slots=True)
class PolicyState:
    """The batch state the serving loop keeps up to date in place. The per-rank fields are arrays
    or lists of floats (NOTE: a loop that keeps them as lists saves a conversion each way per
    call)."""

    context_tokens: np.ndarray  # [B] decoding requests' context lengths
    owner_kv_tokens: np.ndarray | list[float]  # [T] KV tokens each rank owns (the tables' request_slack_tokens per request)
    # [T] free KV bytes per rank in the current layout, for admitting the queue's head (a server
    # may leave it stale while no request waits)
    free_kv_bytes: np.ndarray | list[float]
    waiting_tokens: np.ndarray  # [W] tokens each waiting request needs, in admission order
    layout: int = 0
    switch_in_flight: bool = False
    steps_since_switch: int = 1 << 30
    running: int = 0  # requests holding KV (decoding + prefilling)
    # Σ L and Σ min(L, top-k) over context_tokens when the caller keeps them (negative: decide sums
    # context_tokens itself); a server that tracks its batch incrementally saves two passes over B.
    context_sum_tokens: float = -1.0
    context_capped_sum_tokens: float = -1.0
    # B, when the caller keeps both sums above and leaves context_tokens unfilled (negative: B is
    # len(context_tokens)); with the sums, B is all of the batch that decide reads
    context_requests: int = -1
    # running statistics of the prefill the server does (0: none): the share of steps that run a
    # chunk, prompt tokens per step, the token-weighted cached prefix they attend to, and the share
    # of a chunk on the owner running most of it (1: one request per chunk; 1/T: spread)
    prefill_step_fraction: float = 0.0
    prefill_tokens_per_step: float = 0.0
    prefill_context_tokens: float = 0.0
    prefill_owner_share: float = 1.0
    # the running set's expected KV peak over its current KV, all ranks and the busiest owner, in
    # tokens (runtime_policy/projection.py: from the observed output lengths; 0: none projected)
    kv_growth_tokens: float = 0.0
    owner_kv_growth_tokens: float = 0.0
    # [L] the growth of each layout's busiest owner group, where the caller projects it per layout
    # (None: all ranks' growth for one-group layouts, the busiest owner's for groups of one rank)
    layout_kv_growth_tokens: list[float] | None = None
    # the server's step counter (−1: none kept; the policy then prices capacity at every call)
    step_index: int = -1
    # the caller's memo of the last capacity pricing (Decision.capacity_stands_steps): below this
    # step, in this layout, the policy does not price capacity again unless it must (−1: none;
    # reset it when the layout changes). NOTE: kept by the caller, so decide is a function of its
    # inputs (a memo inside the policy answered SWITCH_CAPACITY once, then STAY_KV_WAIT for 63
    # steps, to a server that deferred the switch)
    capacity_reprice_at_step: int = -1
    # [T] requests holding KV on each rank (None: `running` spread evenly over the owner groups):
    # a layout whose ledger slack per request differs from the tables' (a token split's page per
    # rank: LayoutInfo.extra_slack_tokens) charges it per request of its busiest group
    owner_requests: list[int] | None = None


@dataclass(frozen=True)
class PolicyKnobs:
    """The policy's knobs (validated at compile)."""

    margin: float = 0.5  # the dwell gain must exceed (1 + margin) × switch cost
    min_gain_fraction: float = 0.05  # hysteresis: ignore layouts less than 5 % faster
    cooldown_steps: int = 256  # no throughput switch sooner than this after the last one
    kv_headroom_fraction: float = 0.1  # a throughput target must leave this share of its KV pool free
    dwell_fraction: float = 0.5  # expected dwell = this × mean completed output length (steps)
    min_dwell_steps: float = 64.0
    max_dwell_steps: float = 8192.0
    initial_dwell_steps: float = 256.0
    max_batch: int = 4096
    allowed: tuple[str, ...] | None = None  # layouts the policy may use (None: every one the model can run)
