"""The layout policy for a server that embeds it: `Policy.from_launch("<launch line>",
hardware=...)` compiles runtime_policy's LayoutPolicy for the deployment the line runs (its
default step model: the shipped (GPU, engine) prior, runtime_policy.tables.default_step_model),
and `decide(BatchState) -> Decision` answers every step in layout names.

What it adds to runtime_policy.LayoutPolicy is names and units, nothing else: a `BatchState` whose
fields say their unit (`context_tokens`, `kv_tokens_per_rank`, `free_kv_bytes_per_rank`,
`waiting_prompt_tokens`, `layout: str`), and a `Decision` whose `layout` is a name — the layout to
run (the current one unless `switch`), or None when the state was refused (`reason`
"cant_decide", `refused` naming the field): a refusal never names a layout the server may not be
running. Names map to indices through the compiled tables' `layouts`.

The hot path copies the state's fields into one preallocated runtime_policy.PolicyState and maps
the answer back; stay answers are built once (benchmarks/api_decide_latency.py measures what the
wrapper adds). Like LayoutPolicy.decide, `decide` never raises into the server.

Does not: move state or run steps (a server's executor, or floorfirst's: executor/), keep the
server's batch (the caller fills the BatchState), or log.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import numpy as np

from floorfirst.knobs import DeploymentSpec, resolve
from planner.errors import SpecError


@dataclass(slots=True)
class BatchState:
    """The batch the server runs, as the policy reads it; kept up to date in place by the server.
    T is the group's ranks (GPUs of one replica), B the decoding requests, W the waiting ones."""

    layout: str
    """The attention layout the server runs now (one of `Policy.layouts`)."""
    context_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """[B] each decoding request's context (prompt + tokens generated), tokens; a float or int array."""
    kv_tokens_per_rank: Sequence[float] = ()
    """[T] KV tokens of the requests each rank owns, a list (or array) of floats: each running request
    counted once, on its owner rank (the rank an owner layout such as DP-attention would keep it on),
    as its context + `Policy.request_slack_tokens`. A one-group layout (TP, CP) reads only the sum."""
    free_kv_bytes_per_rank: Sequence[float] = ()
    """[T] free KV pool bytes per rank in the current layout (read only while a request waits)."""
    waiting_prompt_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """[W] the context each waiting request must hold when admitted (its prompt; a preempted
    request's prompt and output so far), tokens, in admission order."""
    running_requests: int = 0
    """Requests holding KV: decoding + prefilling."""
    switch_in_flight: bool = False
    """A layout switch the policy decided is still moving state."""
    steps_since_switch: int = 1 << 30
    """Steps since the last switch committed (the throughput rule's cooldown)."""
    context_sum_tokens: float = -1.0
    """Σ context_tokens, if the server keeps it (< 0: decide sums the array)."""
    context_capped_sum_tokens: float = -1.0
    """Σ min(context, the model's top-k), if kept with context_sum_tokens (< 0: decide computes it)."""
    context_requests: int = -1
    """B, when the server keeps both sums and leaves context_tokens empty (< 0: len(context_tokens))."""
    prefill_step_fraction: float = 0.0
    """Share of steps that run a prefill chunk (a running statistic; 0: no prefill)."""
    prefill_tokens_per_step: float = 0.0
    """Prompt tokens a step prefills, on average over the steps that run a chunk."""
    prefill_context_tokens: float = 0.0
    """The cached prefix those chunks attend to, token-weighted mean, tokens."""
    prefill_owner_fraction: float = 1.0
    """Share of a chunk's tokens on the rank running most of it (1: one request per chunk; 1/T: spread)."""
    kv_growth_tokens: float = 0.0
    """The running set's expected KV peak over its current KV, all ranks, tokens (0: none projected)."""
    busiest_rank_kv_growth_tokens: float = 0.0
    """The same on the busiest owner rank, tokens."""
    layout_kv_growth_tokens: dict[str, float] | None = None
    """{layout: growth of its busiest owner group, tokens}, where the server projects it per layout."""
    step_index: int = -1
    """The server's step counter (< 0: none kept; capacity is then priced on every call)."""
    capacity_reprice_at_step: int = -1
    """The server's memo of the last capacity pricing: step_index + Decision.capacity_stands_steps
    when that is > 0 (reset it to −1 when the layout changes)."""
    requests_per_rank: Sequence[int] | None = None
    """[T] requests holding KV on each rank (None: running_requests spread evenly over the owner groups)."""
    seconds_since_switch: float = -1.0
    """Seconds since the last switch committed, by the server's clock (the switch-rate bound; < 0:
    not kept, estimated as steps_since_switch × the current step)."""
    horizon_prefill_step_fraction: float = -1.0
    """The prefill statistics above averaged over the policy's horizon (its knob
    stats_half_life_steps), which the throughput rule compares layouts on (< 0: none kept; the
    recent ones serve)."""
    horizon_prefill_tokens_per_step: float = 0.0
    """See horizon_prefill_step_fraction."""
    horizon_prefill_context_tokens: float = 0.0
    """See horizon_prefill_step_fraction."""
    horizon_prefill_owner_fraction: float = 1.0
    """See horizon_prefill_step_fraction."""
    horizon_context_requests: int = -1
    """The decode batch averaged over the policy's horizon, which the throughput rule prices instead
    of the batch of the moment (< 0: none kept; the server's loop keeps it as
    runtime_policy.projection.HorizonLoad does; docs/runtime-policy.md, "The load it prices")."""
    horizon_context_sum_tokens: float = 0.0
    """Σ context of that batch, tokens."""
    horizon_context_capped_sum_tokens: float = 0.0
    """Σ min(context, top-k) of that batch, tokens."""
    horizon_context_spread: float = 0.0
    """The batch's standard deviation over the horizon, requests."""
    horizon_prefill_spread: float = 0.0
    """The recent prefill share's standard deviation over the horizon, as a share of its mean."""
    window_context_requests: int = -1
    """The decode batch projected over the payback window (< 0: none kept)."""
    window_context_sum_tokens: float = 0.0
    """Σ context of that batch, tokens."""
    window_context_capped_sum_tokens: float = 0.0
    """Σ min(context, top-k) of that batch, tokens."""
    window_prefill_scale: float = 1.0
    """The share of the horizon's prefill rate the window will see."""
    load_prefill: tuple | None = None
    """The horizon's prefill statistics when the loads above were written (None: as they are)."""
    load_version: int = -1
    """Bumped whenever the loads above are written (< 0: not kept; equal versions, equal loads)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer for one step."""

    layout: str | None
    """The layout to run: the current one, or the switch's target; None when the state was refused."""
    switch: bool
    """Start a switch to `layout` (its state moves in the background; commit at a batch boundary)."""
    reason: str
    """Why, as runtime_policy's Reason names it, lower case: stay_best, stay_small_gain, stay_not_worth,
    stay_cooldown, stay_in_flight, stay_no_memory, stay_idle, stay_kv_wait, stay_rate_limit, switch_throughput,
    switch_capacity, switch_projected, cant_decide."""
    gain_s: float = 0.0
    """Predicted serving time the switch saves over the expected dwell, seconds."""
    cost_s: float = 0.0
    """Predicted cost of the switch (interference + commit stall, and the recompute of shed KV), seconds."""
    shed_kv_tokens: float = 0.0
    """KV tokens (one copy) to free by preemption before the move starts (0: none)."""
    capacity_stands_steps: int = 0
    """> 0: this answer stands for that many steps (set BatchState.capacity_reprice_at_step)."""
    refused: str = ""
    """With reason cant_decide: the state field refused ('internal error' for a policy fault)."""
    plan: Any = None
    """The switch's runtime_policy.transitions.TransitionPlan (what moves, bytes per rank), or None."""


# BatchState field → runtime_policy.PolicyState field, where the names differ
_RAW_NAMES = {"kv_tokens_per_rank": "owner_kv_tokens", "free_kv_bytes_per_rank": "free_kv_bytes",
              "waiting_prompt_tokens": "waiting_tokens", "running_requests": "running",
              "prefill_owner_fraction": "prefill_owner_share", "busiest_rank_kv_growth_tokens": "owner_kv_growth_tokens",
              "requests_per_rank": "owner_requests", "horizon_prefill_owner_fraction": "horizon_prefill_owner_share"}

_BATCH_NAMES = {raw: name for name, raw in _RAW_NAMES.items()}


class Policy:
    """runtime_policy.LayoutPolicy in layout names and units. Build it with `from_launch` or
    `from_deployment`; `Policy(layout_policy)` wraps one already compiled."""

    def __init__(self, layout_policy, spec: DeploymentSpec | None = None):
        from runtime_policy.decision import PolicyState, Reason

        self.raw = layout_policy
        self.spec = spec
        t = layout_policy.tables
        self.layouts: tuple[str, ...] = tuple(t.layouts)
        """Every layout the tables hold, in index order."""
        self.ranks: int = int(t.ranks)
        """T: the ranks of one group (GPUs of one replica)."""
        self.step_model: str = t.model_label
        """Which step model the tables were compiled from."""
        self.request_slack_tokens: float = float(t.request_slack_tokens)
        """Tokens a request holds beyond its context (its page rounding and fixed bytes)."""
        self.kv_bytes_per_token: float = float(t.kv_bytes_per_token)
        """KV bytes of one token, one copy, all layers."""
        self.kv_pool_bytes_per_gpu: dict[str, float] = {n: float(x) for n, x in zip(t.layouts, t.info.kv_pool_bytes)}
        """{layout: the KV pool of one GPU, bytes} (−1: the model can't run the layout)."""
        self._index = {n: i for i, n in enumerate(self.layouts)}
        self._names = self.layouts
        self._reasons = tuple(r.name.lower() for r in Reason)
        self._cant = Reason.CANT_DECIDE
        n = len(self.layouts)
        self._stays = [[Decision(self.layouts[i], False, self._reasons[r]) for r in range(len(self._reasons))]
                       for i in range(n)]
        self._memo: dict[tuple, Decision] = {}
        self._ps = PolicyState(np.zeros(0), [0.0] * self.ranks, [0.0] * self.ranks, np.zeros(0))
        self._decide = layout_policy.decide
        self._internal = layout_policy.internal_errors
        self.wrapper_refusals = 0
        """States refused here, before the policy read them (a layout name that isn't one)."""

    # ---- construction (slow, validated) -------------------------------------------------------
    @classmethod
    def from_launch(cls, launch: str, *, hardware: str, calibration: str | None = None,
                    policy_knobs: dict | Any | None = None, max_prefill_tokens: int | None = None,
                    **knobs: Any) -> "Policy":
        """The policy of the deployment an SGLang (`python -m sglang.launch_server …`) or vLLM (`vllm
        serve …`) launch line runs on `hardware` GPUs; `knobs` (DeploymentSpec fields) for what the
        line doesn't say. `policy_knobs`: runtime_policy.PolicyKnobs or its fields as a dict
        (margin, cooldown_steps, allowed layouts, max_batch, …). `calibration`: an artifact path
        (default: the shipped prior of the (GPU, engine), else the datasheet midpoint).
        `max_prefill_tokens`: the chunk the tables cover (default: the engine's chunked prefill)."""
        if not isinstance(hardware, str) or not hardware:
            raise SpecError("hardware= is required: a launch line doesn't say which GPU it runs on")
        spec, _ = resolve(launch=launch, hardware=hardware, **knobs)
        return cls.from_deployment(spec, calibration=calibration, policy_knobs=policy_knobs,
                                   max_prefill_tokens=max_prefill_tokens)

    @classmethod
    def from_deployment(cls, spec: DeploymentSpec | None = None, *, calibration: str | None = None,
                        policy_knobs: dict | Any | None = None, max_prefill_tokens: int | None = None,
                        **knobs: Any) -> "Policy":
        """The policy of a deployment given as a spec or knobs (`attn`: the layout it starts in,
        default tp; the tables cover every layout the model can run)."""
        from executor.sim import engine_chunk_tokens
        from floorfirst.planning import make
        from floorfirst.points import load_specs
        from runtime_policy.loop import LoopConfig
        from runtime_policy.policy import LayoutPolicy
        from runtime_policy.tables import calibrated_model, default_step_model

        spec, _ = resolve(spec, None, **knobs)
        m, hw = load_specs(spec.model, spec.hardware)
        dep = make(spec, m, hw, spec.attn or "tp")
        pk = _policy_knobs(policy_knobs)
        model = calibrated_model(calibration) if calibration else default_step_model(dep)
        if max_prefill_tokens is None:
            max_prefill_tokens = engine_chunk_tokens(dep, LoopConfig())
        elif isinstance(max_prefill_tokens, bool) or not isinstance(max_prefill_tokens, int) or max_prefill_tokens < 1:
            raise SpecError(f"max_prefill_tokens={max_prefill_tokens!r} must be a whole number ≥ 1")
        return cls(LayoutPolicy.compile(dep, model, pk, max_prefill_tokens=max_prefill_tokens), spec)

    # ---- the hot path -------------------------------------------------------------------------
    def decide(self, state: BatchState) -> Decision:
        """Stay or switch, in layout names. Never raises: a state the policy can't read is a
        Decision with layout None, reason "cant_decide" and the field in `refused`."""
        ps = self._ps
        try:
            ps.layout = self._index[state.layout]
            ctx = state.context_tokens
            if type(ctx) is not np.ndarray:
                ctx = np.asarray(ctx, dtype=np.float64)
            wt = state.waiting_prompt_tokens
            if type(wt) is not np.ndarray:
                wt = np.asarray(wt, dtype=np.float64)
            ps.context_tokens = ctx
            ps.waiting_tokens = wt
            ps.owner_kv_tokens = state.kv_tokens_per_rank
            ps.free_kv_bytes = state.free_kv_bytes_per_rank
            ps.running = state.running_requests
            ps.switch_in_flight = state.switch_in_flight
            ps.steps_since_switch = state.steps_since_switch
            ps.context_sum_tokens = state.context_sum_tokens
            ps.context_capped_sum_tokens = state.context_capped_sum_tokens
            ps.context_requests = state.context_requests
            ps.prefill_step_fraction = state.prefill_step_fraction
            ps.prefill_tokens_per_step = state.prefill_tokens_per_step
            ps.prefill_context_tokens = state.prefill_context_tokens
            ps.prefill_owner_share = state.prefill_owner_fraction
            ps.kv_growth_tokens = state.kv_growth_tokens
            ps.owner_kv_growth_tokens = state.busiest_rank_kv_growth_tokens
            lg = state.layout_kv_growth_tokens
            ps.layout_kv_growth_tokens = None if lg is None else [float(lg.get(n, 0.0)) for n in self._names]
            ps.step_index = state.step_index
            ps.capacity_reprice_at_step = state.capacity_reprice_at_step
            ps.owner_requests = state.requests_per_rank
            ps.seconds_since_switch = state.seconds_since_switch
            ps.horizon_prefill_step_fraction = state.horizon_prefill_step_fraction
            ps.horizon_prefill_tokens_per_step = state.horizon_prefill_tokens_per_step
            ps.horizon_prefill_context_tokens = state.horizon_prefill_context_tokens
            ps.horizon_prefill_owner_share = state.horizon_prefill_owner_fraction
            ps.horizon_context_requests = state.horizon_context_requests
            ps.horizon_context_sum_tokens = state.horizon_context_sum_tokens
            ps.horizon_context_capped_sum_tokens = state.horizon_context_capped_sum_tokens
            ps.horizon_context_spread = state.horizon_context_spread
            ps.horizon_prefill_spread = state.horizon_prefill_spread
            ps.window_context_requests = state.window_context_requests
            ps.window_context_sum_tokens = state.window_context_sum_tokens
            ps.window_context_capped_sum_tokens = state.window_context_capped_sum_tokens
            ps.window_prefill_scale = state.window_prefill_scale
            ps.load_prefill = state.load_prefill
            ps.load_version = state.load_version
        except Exception:  # NOTE: a state the wrapper can't read (unknown layout, wrong type): refused
            return self._refuse(state)
        d = self._decide(ps)
        r = d.reason
        if r is self._cant:
            return self._cant_decide()
        if d.switch or d.plan is not None or d.gain_s or d.cost_s or d.shed_kv_tokens:
            return Decision(self._names[d.layout], d.switch, self._reasons[r], d.gain_s, d.cost_s, d.shed_kv_tokens,
                            d.capacity_stands_steps, "", d.plan)
        c = d.capacity_stands_steps
        if not c:
            return self._stays[d.layout][r]
        # NOTE: a stay that stands for c steps (a capacity pricing found no move, or the cooldown has
        # c steps left) is memoized too: building a frozen Decision costs more than the rest of the wrapper
        key = (d.layout, r, c)
        x = self._memo.get(key)
        if x is None:
            if len(self._memo) >= 4096:
                self._memo.clear()
            x = self._memo[key] = Decision(self._names[d.layout], False, self._reasons[r], capacity_stands_steps=c)
        return x

    def _refuse(self, state) -> Decision:
        self.wrapper_refusals += 1
        layout = getattr(state, "layout", None)
        if not isinstance(state, BatchState):
            what = f"state: a {type(state).__name__}, not a floorfirst.BatchState"
        elif layout not in self._index:
            what = f"layout {layout!r} is not one of {', '.join(self.layouts)}"
        else:
            what = "state: a field of the wrong type"
        return Decision(None, False, "cant_decide", refused=what)

    def _cant_decide(self) -> Decision:
        raw = self.raw
        if raw.internal_errors != self._internal:
            self._internal = raw.internal_errors
            return Decision(None, False, "cant_decide", refused="internal error")
        what = raw.last_refusal or "state"
        return Decision(None, False, "cant_decide", refused=_BATCH_NAMES.get(what, what))

    # ---- the rest of what a server asks ---------------------------------------------------------
    @property
    def usable_layouts(self) -> tuple[str, ...]:
        """The layouts the policy may pick: allowed by its knobs, with a KV pool."""
        return tuple(self.layouts[i] for i in self.raw.usable_layouts())

    @property
    def refused_states(self) -> int:
        """States answered cant_decide so far (refused here or by the policy, or a policy fault)."""
        return self.wrapper_refusals + self.raw.cant_decide

    def initial_layout(self, waiting_prompt_tokens: Sequence[float]) -> str:
        """The layout to start in for this queue (no switch cost yet)."""
        return self.layouts[self.raw.initial_layout(np.asarray(waiting_prompt_tokens, dtype=np.float64))]

    def observe_completion(self, output_tokens: float) -> None:
        """Feed one finished request's output length, tokens (the expected dwell learns from it)."""
        self.raw.observe_completion(output_tokens)

    def step_times_s(self, state: BatchState) -> dict[str, float]:
        """{layout: predicted step seconds of the state's batch} (the state is not checked)."""
        from runtime_policy.decision import PolicyState

        raw_state = PolicyState(np.asarray(state.context_tokens, dtype=np.float64), list(state.kv_tokens_per_rank),
                                list(state.free_kv_bytes_per_rank),
                                np.asarray(state.waiting_prompt_tokens, dtype=np.float64), self._index[state.layout])
        for f in fields(BatchState):
            if f.name not in ("layout", "context_tokens", "kv_tokens_per_rank", "free_kv_bytes_per_rank",
                              "waiting_prompt_tokens", "layout_kv_growth_tokens"):
                setattr(raw_state, _RAW_NAMES.get(f.name, f.name), getattr(state, f.name))
        return dict(zip(self.layouts, self.raw.step_times_s(raw_state)))

    def new_state(self, layout: str | None = None) -> BatchState:
        """An empty BatchState of this deployment (T ranks, nothing running or waiting), in `layout`
        (default: the spec's, else the first usable)."""
        if layout is None:
            layout = (self.spec.attn if self.spec is not None and self.spec.attn else None) or self.usable_layouts[0]
        if layout not in self._index:
            raise SpecError(f"layout {layout!r} is not one of {', '.join(self.layouts)}")
        return BatchState(layout, kv_tokens_per_rank=[0.0] * self.ranks, free_kv_bytes_per_rank=[0.0] * self.ranks)

    def __repr__(self) -> str:
        what = f"{self.spec.model} on {self.spec.gpus} × {self.spec.hardware}, {self.spec.engine}" if self.spec else "compiled"
        return f"Policy({what}; layouts {', '.join(self.usable_layouts)}; {self.step_model})"


def _policy_knobs(knobs):
    from runtime_policy.decision import PolicyKnobs

    if knobs is None:
        return PolicyKnobs()
    if isinstance(knobs, PolicyKnobs):
        return knobs
    if not isinstance(knobs, dict):
        raise SpecError(f"policy_knobs={type(knobs).__name__} is not a runtime_policy.PolicyKnobs or a dict of its fields")
    names = {f.name for f in fields(PolicyKnobs)}
    bad = sorted(set(knobs) - names)
    if bad:
        raise SpecError(f"policy_knobs: {bad[0]!r} is not a policy knob; the knobs are {', '.join(sorted(names))}")
    if knobs.get("allowed") is not None:
        knobs = {**knobs, "allowed": tuple(knobs["allowed"])}
    return PolicyKnobs(**knobs)


def from_policy_state(state, layouts: Sequence[str]) -> BatchState:
    """The BatchState of a runtime_policy.PolicyState (its layout index read in `layouts`, the
    tables' order): for servers that filled PolicyState before, and for the benchmarks and tests
    that replay states the serving loop recorded."""
    out = BatchState(layouts[state.layout])
    for f in fields(BatchState):
        if f.name == "layout":
            continue
        value = getattr(state, _RAW_NAMES.get(f.name, f.name))
        if f.name == "layout_kv_growth_tokens" and value is not None:
            value = dict(zip(layouts, value))
        setattr(out, f.name, value)
    return out
