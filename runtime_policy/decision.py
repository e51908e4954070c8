"""What the layout policy reads and answers: the batch state the serving loop keeps, the small
frozen decision with its enum reason, and the policy's knobs. Types only; the rules that turn
one into the other are in policy.py (and capacity_rule.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from runtime_policy.transitions import TransitionPlan


class Reason(enum.IntEnum):
    """Why a decision is what it is: every answer, stay or switch, carries one (`REASON_TEXT` says
    each in a line; `Decision.candidate` names the layout a stay weighed and turned down)."""

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
    STAY_RATE_LIMIT = 13  # a better layout, held by the switch-rate bound (PolicyKnobs.max_switches_per_minute)


REASON_TEXT: dict[Reason, str] = {
    Reason.STAY_BEST: "no usable layout is faster for this batch",
    Reason.STAY_SMALL_GAIN: "the candidate is faster by less than min_gain_fraction",
    Reason.STAY_NOT_WORTH: "the switch would not repay its priced cost (link + interference + commit stall) "
                           "within the payback horizon or the expected dwell",
    Reason.STAY_COOLDOWN: "the last switch is fewer than cooldown_steps old",
    Reason.STAY_IN_FLIGHT: "a switch is under way",
    Reason.STAY_NO_MEMORY: "the move's memory does not fit now",
    Reason.STAY_IDLE: "nothing runs or waits",
    Reason.STAY_FIXED: "a fixed layout",
    Reason.SWITCH_THROUGHPUT: "the candidate is faster and repays the switch within the horizon",
    Reason.SWITCH_CAPACITY: "the queue's head or the running set needs a layout with room",
    Reason.CANT_DECIDE: "the state was refused at the boundary, or the rules failed",
    Reason.STAY_KV_WAIT: "admission is blocked, and no layout with room serves more requests per second",
    Reason.SWITCH_PROJECTED: "the running set's expected KV peak outgrows the layout; another sustains more",
    Reason.STAY_RATE_LIMIT: "a better layout, held by the switch-rate bound (max_switches_per_minute)",
}


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
    # the layout the rules weighed: the switch's destination, or the one a stay turned down (−1: none)
    candidate: int = -1
    # seconds from the decision until the switch has repaid (1 + margin) × its priced cost (its link
    # time, then the cost over the step time saved per second); 0 where not priced
    payback_s: float = 0.0


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
    # (last, so positional callers are unchanged) seconds since the last switch (or abort) by the server's clock, for the switch-rate bound
    # (negative: not kept; the policy estimates it as steps_since_switch × the current step)
    seconds_since_switch: float = -1.0
    # the prefill statistics above averaged over the policy's horizon (PolicyKnobs.stats_half_life_steps;
    # negative fraction: none kept): the throughput rule compares layouts on them, the capacity
    # rule on the recent ones
    horizon_prefill_step_fraction: float = -1.0
    horizon_prefill_tokens_per_step: float = 0.0
    horizon_prefill_context_tokens: float = 0.0
    horizon_prefill_owner_share: float = 1.0
    # the decode batch (requests, Σ context, Σ min(context, top-k)) averaged over the policy's horizon,
    # as the prefill statistics above (negative requests: none kept; the caller keeps it,
    # runtime_policy/projection.py `HorizonLoad`)
    horizon_context_requests: int = -1
    horizon_context_sum_tokens: float = 0.0
    horizon_context_capped_sum_tokens: float = 0.0
    # the batch's standard deviation over the horizon (requests): the throughput rule wants its gain
    # at the average ± this too (a layout that wins only at one end of the load's range is a tie)
    horizon_context_spread: float = 0.0
    # and the recent prefill share's, over the horizon, as a share of its mean: the range's ends
    # take the batch and the prefill together (both rise with a burst of arrivals)
    horizon_prefill_spread: float = 0.0
    # [L] each layout's owner-group KV tokens at the horizon's batch (LayoutPolicy.group_tokens;
    # None: decide computes them)
    horizon_group_tokens: list[float] | None = None
    # the same projected over the window a throughput switch must repay in
    # (LayoutPolicy.payback_window_steps): the running requests' survival, the queue refilling the
    # batch, arrivals at the recent rate; and the share of the horizon's prefill rate the queue's and
    # the arrivals' prompts bring in that window (1: as the horizon's statistics say)
    window_context_requests: int = -1
    window_context_sum_tokens: float = 0.0
    window_context_capped_sum_tokens: float = 0.0
    window_prefill_scale: float = 1.0
    window_group_tokens: list[float] | None = None  # the same at the window's batch
    # the horizon's prefill statistics (fraction, tokens, context, owner share) as they were when
    # the loads above were written (None: the throughput rule reads horizon_prefill_* as they are)
    load_prefill: tuple[float, float, float, float] | None = None
    # bumped by the caller whenever it writes any of the loads above (or load_prefill); −1: not kept.
    # The policy caches its pricings of one version's loads: equal versions must carry equal loads
    load_version: int = -1


@dataclass(frozen=True)
class PolicyKnobs:
    """The policy's knobs (validated at compile)."""

    margin: float = 0.5  # the dwell gain must exceed (1 + margin) × switch cost
    min_gain_fraction: float = 0.05  # hysteresis: ignore layouts less than 5 % faster
    cooldown_steps: int = 256  # no throughput switch sooner than this after the last one
    # A throughput (or projected) switch must repay (1 + margin) × its priced cost — the transition's
    # link time, then its interference and commit stall over the step time it saves — within this
    # many seconds (and within the expected dwell). NOTE: 10 s = 60 / max_switches_per_minute, the
    # least time the rate bound leaves between two such switches: each repays before the next may
    # start, so a run of switches at the bound can't lose more than it gains.
    payback_horizon_s: float = 10.0
    # At most this many throughput or projected switches a minute: one waits until the last switch
    # is 60 / this seconds old (a capacity move the queue's head or the running set needs is exempt:
    # it answers a wall, not a gain estimate). NOTE: a safety net, not the hysteresis itself (the
    # prefill statistics' half-life below is): 6 a minute bounds a policy fooled by noise to ~1 % of
    # serving time lost (a switch between the MLA layouts prices at 1–30 ms of link and a few ms of
    # stall, DS-V3.2 and GLM-5 on 8 GPUs), and leaves the short golden loads' switches 10 s apart.
    max_switches_per_minute: float = 6.0
    # The half-life of the prefill statistics the throughput rule compares layouts on (steps; the
    # serving loop keeps them next to the recent ones the capacity rule reads, PolicyState.horizon_*):
    # the load over about a minute (2048 steps ≈ 30–80 s at 15–40 ms a step), not the last few
    # seconds' prompts. NOTE: at 256 steps (≈ 5 s, ~5 arrivals of the
    # longprompt load) the chunk share swung across the TP/CP break-even and GLM-5 flipped 58 times
    # for 0.1 %; at 2048 the share's Poisson noise is ~2.8× smaller.
    stats_half_life_steps: float = 2048.0
    kv_headroom_fraction: float = 0.1  # a throughput target must leave this share of its KV pool free
    dwell_fraction: float = 0.5  # expected dwell = this × mean completed output length (steps)
    min_dwell_steps: float = 64.0
    max_dwell_steps: float = 8192.0
    initial_dwell_steps: float = 256.0
    max_batch: int = 4096
    allowed: tuple[str, ...] | None = None  # layouts the policy may use (None: every one the model can run)
    # The throughput rule switches only on a gain under both loads the caller keeps: the batch
    # averaged over the horizon (the past, as the prefill statistics) and the batch projected over
    # the payback window (the running requests' survival, the queue, the arrivals); PolicyState
    # horizon_context_* and window_context_*, runtime_policy/projection.py. NOTE: priced on the
    # batch of the moment, DS-V3.2 chat switched DOP -> DPTP as its backlog emptied (0.962x fixed
    # DOP) and GLM-5 longprompt TP <-> CP as 12 or 2 requests decoded.
    horizon_load: bool = True
    # The load the operator plans for (0: none stated; the start is then priced on the queue at the
    # first arrival, as before): requests a second, and the mean prompt and output tokens of a request
    # (0: the queue's prompts; the mean observed output, else `initial_dwell_steps`). With a rate the
    # first layout is the one that serves it: each layout priced at the steady batch the rate gives by
    # Little's law with that layout's own step times and prefill (LayoutPolicy.planned_start), as an
    # operator launches a fixed layout for the load they expect. NOTE: the queue at t = 0 of a chat
    # load is one request: priced on it the policy started in TP, whose pool the 20/s load fills at
    # ~41 s, and the capacity rule moved to DOP behind a backlog fixed DOP never builds (DS-V3.2,
    # 8 x H200: 0.977x fixed DOP).
    planned_rate_per_s: float = 0.0
    planned_input_tokens: float = 0.0
    planned_output_tokens: float = 0.0
