"""The typed documents floorfirst's functions return: `PlanResult` (floor), `CompareResult`,
`CapacityResult`, `SimulateResult`. Their fields are the keys of the command's `--json` document
(docs/json-contracts.md), units in the names (`_s` seconds, `_bytes`, `_tokens`, `_per_s`,
`_fraction`, `_gib` GiB; a key without a unit is a count, a name or an enum); `document()` gives
back that JSON document, `schema` key first.

A number the contract lets be undefined (a tokens/s of a step that can't run) is None, never NaN
or infinity. Free-form parts (an engine's memory plan, per-component byte counts) are dicts.

NOTE: the models allow keys they don't declare (`model_extra`), so a key a command adds reaches
the caller instead of failing the call; tests/floorfirst fail until it is declared here.

Does not: compute (floorfirst.planning, floorfirst.serving), or generate the JSON Schemas in
schemas/ (they are still written by hand).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from floorfirst.contracts import schema_name


def _finite_or_none(x):
    """An undefined number (NaN, ±inf) as None: the contract's null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


Maybe = Annotated[float | None, BeforeValidator(_finite_or_none)]


def _plain(x):
    """numpy scalars and arrays in a free-form part as Python values."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return _plain(x.tolist())
    return x


Free = Annotated[dict[str, Any], BeforeValidator(_plain)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True, populate_by_name=True)


class Document(_Part):
    """A command's document."""

    command: ClassVar[str] = ""

    def document(self) -> dict[str, Any]:
        """The JSON document `floorfirst <command> --json` prints for the same arguments."""
        return {"schema": schema_name(self.command), **self.model_dump(mode="json", by_alias=True, exclude_unset=True)}


# ---- floor and compare: one priced operating point ---------------------------------------------

class TimedBytes(_Part):
    bytes: float
    """Bytes the busiest rank moves in one step."""
    time_s: float
    """Their time at the pricing's rate, seconds."""


class Compute(_Part):
    flops: float
    """Floating-point operations on the busiest rank in one step."""
    flops_by_dtype: dict[str, float]
    """The same by the dtype they run in."""
    time_s: float
    """Their time at the pricing's peak per dtype, seconds."""


class NetworkBytes(TimedBytes):
    bytes_by_tier: dict[str, float]
    """Network bytes by tier (scaleup: NVLink inside a node; scaleout: the NIC between nodes)."""


class NetworkMessages(_Part):
    count: float
    """Collective launches × latency steps on the busiest rank in one step."""
    time_s: float
    """Their time at the per-message latency, seconds."""
    count_by_tier: dict[str, float]
    """The same by tier."""


class KvCapacity(_Part):
    resident_bytes: float
    """KV bytes the busiest rank must hold."""
    pool_bytes: float
    """The engine's KV pool per GPU, bytes."""
    fits: bool
    used_fraction: Maybe
    """resident / pool (None: no pool)."""


class Resources(_Part):
    hbm: TimedBytes
    compute: Compute
    network_bytes: NetworkBytes
    network_messages: NetworkMessages
    host_link: TimedBytes
    kv_capacity: KvCapacity


class PricedLayout(_Part):
    """One layout priced at one operating point (floor's document, each of compare's `layouts`)."""

    attn: str
    """Attention layout."""
    moe: str
    """MoE split."""
    gpus: int
    replicas: int
    ranks_per_group: int
    nodes: int
    nodes_per_group: int
    engine: str
    weight_dtype: str
    kv_dtype: str
    page_tokens: int
    pricing: str
    """datasheet or achieved: the rates the floors are priced at."""
    batch: int
    """Concurrent decode requests, whole deployment."""
    context_mean_tokens: float
    prefill_tokens: float
    """Prefill chunk tokens per group in the step."""
    prefill_context_tokens: float
    """Tokens the prefilling request already has cached, which its chunk attends to."""
    resources: Resources
    """The five resources of one step on the busiest rank (and the host link)."""
    weights_resident_bytes_per_gpu: float
    weights_fit: bool
    kv_pool_gib_per_gpu: float
    feasible: bool
    """The weights fit and the step's KV fits the pool."""
    infeasible_reason: str | None
    """Why not, in words (None when feasible)."""
    memory: Free
    """The engine's memory plan: its fraction, reserve terms, pool and defaults."""
    floor_max_s: float
    """Optimistic floor: the slowest resource (perfect overlap), seconds."""
    floor_sum_s: float
    """Pessimistic floor: every resource in turn (no overlap), seconds."""
    binding: str
    """The resource of floor_max_s."""
    decode_tokens_per_s_at_max: Maybe
    decode_tokens_per_s_at_sum: Maybe
    components: dict[str, dict[str, float]]
    """Each resource's amount by component (hbm_bytes, flops, network_bytes, network_messages, latency_s)."""
    engine_effects_s: dict[str, float]
    """What the engine's kernels add, seconds at the pricing's rates (each overlaps the rest of its step)."""
    decode_kernel: str
    host_tier: Free | None = None
    """The host KV tier's traffic and walls (with a host tier)."""
    predicted_s: float
    """The step time the step model predicts, seconds."""
    step_model: str
    """Which step model: a calibration, the shipped (GPU, engine) prior, or the datasheet midpoint."""
    decode_tokens_per_s: Maybe
    """batch / predicted_s (None when the step can't run)."""
    engine_kernels: Free | None = None
    """The engine's kernel choices (MoE dispatch, CUDA graphs, attention backends, per-step overhead)."""
    engine_terms: dict[str, dict[str, float]] | None = None
    """The engine's terms by resource and component."""


class PlanResult(PricedLayout, Document):
    """`floorfirst floor`: one operating point on one layout (the fastest that fits unless given)."""

    command: ClassVar[str] = "floor"
    model: str
    hardware: str
    layout_choice: str
    """Why this layout: given, or the fastest by floor_max of those that fit."""


class LayoutRef(_Part):
    attn: str
    moe: str


class Skipped(LayoutRef):
    reason: str
    """Why this layout can't run here (one line)."""


class CompareResult(Document):
    """`floorfirst compare`: every layout at one operating point, those that fit first, fastest first."""

    command: ClassVar[str] = "compare"
    model: str
    hardware: str
    gpus: int
    nodes: int
    engine: str
    batch: int
    context_mean_tokens: float
    prefill_tokens: float
    prefill_context_tokens: float
    layouts: list[PricedLayout]
    skipped: list[Skipped]
    """Layouts the model can't run on this deployment."""
    step_model: str
    out: list[Skipped]
    """Layouts priced that can't hold the load, with the reason."""
    best_by_max: LayoutRef | None
    """Fastest by floor_max_s among the layouts whose KV fits (None: none fits)."""
    best_by_sum: LayoutRef | None
    """Fastest by floor_sum_s among the layouts whose KV fits."""

    def best(self) -> PricedLayout | None:
        """The priced layout of best_by_max."""
        b = self.best_by_max
        return None if b is None else next(x for x in self.layouts if (x.attn, x.moe) == (b.attn, b.moe))


# ---- capacity ------------------------------------------------------------------------------------

class CapacityLayout(_Part):
    attn: str
    moe: str
    gpus: int
    replicas: int
    nodes_per_group: int
    kv_dtype: str
    weight_dtype: str
    page_tokens: int
    weights_gib_per_gpu: float
    weights_fit: bool
    feasible: bool
    infeasible_reason: str | None
    mem_fraction: float
    """The engine's memory fraction as its formula gives it (may be < 0 where the plan is infeasible)."""
    reserve_gib_per_gpu: float
    kv_pool_gib_per_gpu: float
    kv_pool_tokens_per_gpu: float
    kv_bytes_per_token: float
    kv_replication: float
    """Copies of each token's KV across the group."""
    distinct_tokens: float
    """Tokens of KV the group holds, each counted once."""
    context_tokens: float
    max_concurrency: int
    """Requests of the context (or mix) that fit at once."""
    state_bytes_per_request: float
    binding_memory: str
    """Which memory binds: kv_pages or state slots."""
    memory: Free
    host_tier: Free | None = None


class ContextShare(_Part):
    context_tokens: float
    requests: int


class CapacityResult(Document):
    """`floorfirst capacity`: every layout's KV pool per GPU (as the engine sizes it), distinct tokens
    and concurrency at a context."""

    command: ClassVar[str] = "capacity"
    model: str
    hardware: str
    gpus: int
    nodes: int
    engine: str
    mem_fraction: float | None
    """The memory fraction given (None: each layout's engine default)."""
    swa_full_tokens_ratio: float | None
    page_tokens: int
    datasheet_hbm_bytes_per_gpu: float
    usable_hbm_bytes_per_gpu: float
    context_tokens: float
    """The mean context, tokens."""
    layouts: list[CapacityLayout]
    skipped: list[Skipped]
    context_mix: list[ContextShare] | None = None
    """The context mix, when more than one length was given."""

    def layout(self, attn: str, moe: str | None = None) -> CapacityLayout:
        """The row of attn (and moe, when the model runs several)."""
        for x in self.layouts:
            if x.attn == attn and (moe is None or x.moe == moe):
                return x
        raise KeyError(f"{attn}/{moe or '*'}")


# ---- simulate ------------------------------------------------------------------------------------

class Switch(_Part):
    from_layout: str = Field(alias="from")
    """Layout switched from."""
    to: str
    """Layout switched to."""
    started_s: float
    """When the background move started, seconds."""
    at_s: float
    """Commit time (a batch boundary), seconds."""
    link_s: float
    cost_s: float
    """Predicted cost (interference + commit stall), seconds."""
    reason: str
    stall_s: float


class AbortedSwitch(_Part):
    from_layout: str = Field(alias="from")
    to: str
    started_s: float
    at_s: float
    reason: str
    why: str


class SimulateResult(Document):
    """`floorfirst simulate`: a workload served by the simulated executor under a fixed layout or the
    dynamic policy. `per_request` and `timeline` are not part of the JSON document."""

    command: ClassVar[str] = "simulate"
    model: str
    hardware: str
    gpus: int
    replicas: int
    moe: str
    kv_dtype: str
    workload: str
    workload_params: Free
    seed: int
    policy: str
    order: str
    requests: int
    completed: int
    aborted: int
    output_tokens: int
    makespan_s: float
    throughput_tokens_per_s: Maybe
    requests_per_s: Maybe
    ttft_p50_s: Maybe
    ttft_p90_s: Maybe
    ttft_p99_s: Maybe
    tpot_p50_s: Maybe
    tpot_p90_s: Maybe
    tpot_p99_s: Maybe
    ttlt_p50_s: Maybe
    ttlt_p90_s: Maybe
    ttlt_p99_s: Maybe
    ttlt_mean_s: Maybe
    preemptions: int
    steps: int
    decode_steps: int
    layout_time_s: dict[str, float]
    switches: list[Switch]
    switch_cost_total_s: float
    aborted_switches: list[AbortedSwitch]
    cant_decide: int
    """Times the policy answered CANT_DECIDE (it stayed put)."""
    offered_requests_per_s: Maybe
    served_requests_per_s: float
    offered_input_tokens_per_s: Maybe
    served_input_tokens_per_s: float
    offered_output_tokens_per_s: Maybe
    served_output_tokens_per_s: float
    arrival_span_s: float
    queue_p50_requests: float
    queue_p90_requests: float
    queue_p99_requests: float
    queue_max_requests: int
    queue_at_last_arrival_requests: int
    ttft_p50_by_arrival_quarter_s: list[Maybe]
    kv_full_time_fraction: Maybe
    overloaded: bool | None
    """The queue grows without bound (None: not judged)."""
    verdict: str
    step_time_model: str
    per_request: Free | None = Field(None, exclude=True)
    """One column per key (request, arrival_s, first_token_s, finish_s, input_tokens, output_tokens,
    status, preemptions), one row per request: what --requests-csv writes."""
    timeline: Free | None = Field(None, exclude=True)
    """The run over time (t_s, layout index, batch, kv_used_fraction): what --plot draws."""
