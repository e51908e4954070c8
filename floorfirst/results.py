"""The typed documents floorfirst's functions return: `PlanResult` (floor), `CompareResult`,
`CapacityResult`, `SimulateResult`, `SimulateDisaggResult` (simulate --disagg). Their fields are the
keys of the command's `--json` document (docs/json-contracts.md), units in the names (`_s` seconds, `_bytes`, `_tokens`, `_per_s`,
`_fraction`, `_gib` GiB; a key without a unit is a count, a name or an enum); `document()` gives
back that JSON document, `schema` key first.

A number the contract lets be undefined (a tokens/s of a step that can't run) is None, never NaN
or infinity. Free-form parts (an engine's memory plan, per-component byte counts) are dicts.

NOTE: the models allow keys they don't declare (`model_extra`), so a key a command adds reaches
the caller instead of failing the call; tests/floorfirst fail until it is declared here.

The schemas of floor, compare, capacity, simulate and simulate --disagg (SimulateDisaggResult) are
written from these models (schemas/generate.py, through schemas/from_models.py): a field's docstring
is its key's description and `_kw(...)` its schema keywords (minimum, enum, a registry's names, or
`part(...)`: the hand-written key-by-key contract of a free-form dict in schemas/parts/). A field
without a docstring can't be written; a field with `exclude=True` (per_request, timeline) is carried
by the result but is no key of the document.

Does not: compute (floorfirst.planning, floorfirst.serving), or validate documents against the
schemas (tests/agent does).
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


def _kw(**keywords: Any):
    """JSON Schema keywords of a field (schemas/from_models.py writes them into the command's schema;
    they validate nothing here): `minimum`, `minItems`, `x-registry` (its enum is a registry's names),
    `x-part` (a free-form dict's key-by-key contract, schemas/parts/<name>.json)."""
    return Field(json_schema_extra=keywords)


Amount = Annotated[float, _kw(minimum=0)]  # a time, size, rate or count: never negative
MaybeAmount = Annotated[Maybe, _kw(minimum=0)]
Count = Annotated[int, _kw(minimum=1)]  # GPUs, nodes, replicas, page tokens
Tally = Annotated[int, _kw(minimum=0)]
AttnName = Annotated[str, _kw(**{"x-registry": "attention_layouts"})]
MoeName = Annotated[str, _kw(**{"x-registry": "moe_splits"})]
WeightDtype = Annotated[str, _kw(enum=["bf16", "fp8", "fp4"])]
KvDtype = Annotated[str, _kw(enum=["bf16", "fp8", "fp8_dsa"])]


def part(name: str):
    """A free-form dict whose key-by-key contract is schemas/parts/<name>.json."""
    return _kw(**{"x-part": name})


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, use_attribute_docstrings=True, populate_by_name=True)


class Document(_Part):
    """A command's document."""

    command: ClassVar[str] = ""

    def document(self) -> dict[str, Any]:
        """The JSON document `floorfirst <command> --json` prints for the same arguments."""
        return {"schema": schema_name(self.command), **self.model_dump(mode="json", by_alias=True, exclude_unset=True)}


# ---- floor and compare: one priced operating point ---------------------------------------------

class HbmBytes(_Part):
    bytes: Amount
    """HBM bytes read and written by the busiest rank."""
    time_s: Amount
    """bytes ÷ HBM bandwidth, seconds."""


class HostLinkBytes(_Part):
    bytes: Amount
    """Fetched bytes (the misses' rows, page-amplified), busiest rank."""
    time_s: Amount
    """host_link time: contiguous-equivalent bytes at the host-link rate, seconds."""


class Compute(_Part):
    flops: Amount
    """FLOPs on the busiest rank, all dtypes."""
    flops_by_dtype: dict[str, Amount]
    """FLOPs by dtype (bf16, fp8, fp4)."""
    time_s: Amount
    """Σ FLOPs(dtype) ÷ peak(dtype), seconds."""


class NetworkBytes(_Part):
    bytes: Amount
    """Link bytes the busiest rank sends for collectives."""
    time_s: Amount
    """Σ over tiers bytes ÷ that tier's bandwidth, seconds."""
    bytes_by_tier: Annotated[dict[str, float], part("bytes_by_tier")]
    """Link bytes by network tier."""


class NetworkMessages(_Part):
    count: Amount
    """Collective launches × latency steps."""
    time_s: Amount
    """Σ over tiers count × that tier's per-collective latency, seconds."""
    count_by_tier: Annotated[dict[str, float], part("count_by_tier")]
    """Collective launches by the tier whose latency they pay (a collective that spans nodes pays the scale-out
    latency once)."""


class KvCapacity(_Part):
    resident_bytes: Amount
    """KV bytes that must be resident on the busiest rank."""
    pool_bytes: Amount
    """KV pool per GPU as the engine sizes it, bytes; 0 when the weights or the reserve don't fit (never
    negative)."""
    fits: bool
    """resident_bytes ≤ pool_bytes: whether the step is possible at all."""
    used_fraction: MaybeAmount
    """resident_bytes ÷ pool_bytes (null without a positive pool)."""


class Resources(_Part):
    hbm: HbmBytes
    """HBM traffic."""
    compute: Compute
    """Arithmetic."""
    network_bytes: NetworkBytes
    """Collective payload."""
    network_messages: NetworkMessages
    """Collective launches."""
    host_link: HostLinkBytes
    """A host KV tier's fetches over the host link (0 without a tier)."""
    kv_capacity: KvCapacity
    """KV capacity: a wall, not a time."""


class PricedLayout(_Part):
    """One layout priced at one operating point (floor's document, each of compare's `layouts`)."""

    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    replicas: Count
    """Replicas of the whole group."""
    ranks_per_group: Count
    """GPUs in one replica group (T)."""
    nodes: Count
    """Scale-up domains (nodes) the whole deployment spans."""
    nodes_per_group: Count
    """Nodes one group spans (> 1: its collectives cross the NIC)."""
    engine: str
    """Engine memory model that sized the KV pool (sglang, vllm)."""
    weight_dtype: WeightDtype
    """Weight dtype priced."""
    kv_dtype: KvDtype
    """KV cache dtype priced."""
    page_tokens: Count
    """Tokens per KV page."""
    pricing: Annotated[str, _kw(enum=["datasheet", "achieved"])]
    """datasheet peaks or the hardware file's achieved efficiencies."""
    batch: Tally
    """Concurrent decode requests in the step, whole deployment."""
    context_mean_tokens: Amount
    """Mean context length of those requests, tokens."""
    prefill_tokens: Amount
    """Prefill tokens each group runs in the same step."""
    prefill_context_tokens: Amount
    """Tokens the prefilling request already has cached (the prefix its chunk attends to); 0 without prefill."""
    resources: Resources
    """The five resources of one step on the busiest rank."""
    weights_resident_bytes_per_gpu: Amount
    """Weight bytes resident per GPU."""
    weights_fit: bool
    """The engine's pool holds at least one page after weights and reserve."""
    kv_pool_gib_per_gpu: float
    """KV pool per GPU as the engine sizes it, GiB; 0 when the weights or the reserve don't fit (weights_fit
    false)."""
    feasible: bool
    """The step can run: the engine's pool exists and the step's KV fits in it. False: no tokens/s is given."""
    infeasible_reason: str | None
    """Why the step can't run, in words (weights or reserve don't fit, or KV exceeds the pool); null when
    feasible."""
    memory: Annotated[Free, part("memory_plan")]
    """How the engine sized this GPU's memory: which engine model, its total, fraction, reserve and the KV pool
    (per GPU of the busiest group)."""
    floor_max_s: Amount
    """Optimistic floor: max over the four timed resources (perfect overlap), seconds."""
    floor_sum_s: Amount
    """Pessimistic floor: their sum (no overlap), seconds."""
    binding: Annotated[str, _kw(enum=["hbm", "compute", "network_bytes", "network_messages", "host_link", "kv_capacity"])]
    """The resource that binds: the largest time, or kv_capacity when KV doesn't fit."""
    decode_tokens_per_s_at_max: MaybeAmount
    """batch ÷ floor_max_s: decode tokens/s at the optimistic floor. Null when feasible is false."""
    decode_tokens_per_s_at_sum: MaybeAmount
    """batch ÷ floor_sum_s: decode tokens/s at the pessimistic floor. Null when feasible is false."""
    components: Annotated[dict[str, dict[str, float]], part("components")]
    """Where each resource's amount comes from, by named component (weights, kv_read, experts, attn_allreduce,
    …)."""
    engine_effects_s: Annotated[dict[str, float], part("engine_effects")]
    """Engine effects as seconds at the pricing's rates: DSA's indexer (key reads + scoring), top-k latency,
    padded head rows of the decode kernel, attention weights a head-sharding layout can't split (each
    overlaps the rest of the step)."""
    decode_kernel: str
    """The decode attention kernel whose head tile the step pads to (planner.models.attention.kernels)."""
    host_tier: Annotated[Free | None, part("step_host_tier")] = None
    """With --host-tier: the step's host KV tier on the busiest rank (planner/host_tier.py)."""
    predicted_s: Amount
    """Step time priced by the step model (`step_model`): a --calibration, else the shipped prior of the
    deployment's (GPU, engine), else the datasheet midpoint, seconds."""
    step_model: str
    """Which model priced predicted_s and decode_tokens_per_s: 'calibration: PATH', 'prior: GPU × ENGINE (…)'
    or the datasheet midpoint."""
    decode_tokens_per_s: MaybeAmount
    """Decode tokens/s at predicted_s (batch / predicted_s); null where the step can't run."""
    launchable: bool
    """Whether the deployment's engine starts this layout with its own flags (planner.engines' launch);
    false: no flag runs it (a layout that needs a switching runtime, or one the engine's code does not
    run for this model)."""
    launch_line: str | None
    """The shell text that starts this layout on the deployment's engine: SGLang `python -m
    sglang.launch_server …`, vLLM `vllm serve …`, TensorRT-LLM `trtllm-serve …` preceded by its extra LLM
    API options YAML as a heredoc; planner.launch reads it back as this deployment (floorfirst
    explain-launch). Null when not launchable."""
    launch_reason: str | None
    """Why no flag of the engine runs this layout (one line; 'needs a switching runtime' where no engine's
    does); null when launchable."""
    launch_replicas: Count
    """Servers of launch_line to start, one per replica, behind a router: the replicas no flag of the line
    expresses (1: the line is the whole deployment)."""
    launch_notes: list[str]
    """What the line leaves to the operator: per-node ranks and addresses, a router for copies, a checkpoint
    for the weights priced."""
    engine_kernels: Annotated[Free | None, part("engine_kernels")] = None
    """What the engine's steps run here (planner/engines/kernels.py): MoE token movement for decode and prefill
    steps, the expert GEMM, CUDA-graph capture and padding, attention backends, the per-step overhead and
    its source."""
    engine_terms: dict[str, dict[str, float]] | None = None
    """The engine's terms of the step (planner.step EngineStepCost), resource -> component -> amount: hbm_bytes
    (experts_narrow_gemm: the narrow expert GEMMs' extra streaming time as bytes), flops
    (cuda_graph_padding), network_bytes and network_messages (the engine's own collectives, replacing the
    layout's ideal ones in the step model), overhead_s (step_overhead, seconds). The datasheet floors leave
    them out."""


class LayoutRef(_Part):
    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""


class Ranking(_Part):
    """How the layouts were ranked for the recommendation (compare's ★, floor's layout without attn)."""

    key: Annotated[str, _kw(enum=["predicted_s", "floor_max_s"])]
    """The time ranked by: the step model's predicted_s where a model prices the deployment (a shipped (GPU,
    engine) prior or --calibration: the tokens/s column), else floor_max_s."""
    step_model: str | None
    """The model that ranked (its label, as step_model); null when ranked by floor_max_s."""
    launchable_only: bool
    """True: only layouts the engine launches could be recommended (the default); false with --all-layouts."""


class Recommended(LayoutRef):
    """The recommended layout and how to launch it."""

    launchable: bool
    """Whether the deployment's engine starts this layout with its own flags (planner.engines' launch); false:
    no flag runs it (a layout that needs a switching runtime, or one the engine's code does not run for this
    model)."""
    launch_line: str | None
    """The shell text that starts this layout on the deployment's engine: SGLang `python -m
    sglang.launch_server …`, vLLM `vllm serve …`, TensorRT-LLM `trtllm-serve …` preceded by its extra LLM
    API options YAML as a heredoc; planner.launch reads it back as this deployment (floorfirst
    explain-launch). Null when not launchable."""
    launch_replicas: Count
    """Servers of launch_line to start, one per replica, behind a router: the replicas no flag of the line
    expresses (1: the line is the whole deployment)."""
    launch_notes: list[str]
    """What the line leaves to the operator: per-node ranks and addresses, a router for copies, a checkpoint
    for the weights priced."""


class PlanResult(PricedLayout, Document):
    """`floorfirst floor`: one operating point on one layout (the fastest that fits unless given)."""

    command: ClassVar[str] = "floor"
    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    layout_choice: str
    """How the layout was chosen: 'given by --attn', or (no --attn) the fastest feasible one, or that none is
    feasible."""
    ranked_by: Ranking | None
    """How the layouts were ranked for the recommendation (compare's ★, floor's layout without --attn); null
    for floor with --attn."""


class Skipped(LayoutRef):
    """A layout the model can't run on this deployment."""

    reason: str
    """Why this layout can't run here (one line)."""


class OutLayout(LayoutRef):
    """A layout that runs the model but can't hold this load."""

    reason: str
    """Why, in words."""


class CompareResult(Document):
    """`floorfirst compare`: every layout at one operating point, those that fit first, fastest first."""

    command: ClassVar[str] = "compare"
    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    nodes: Count
    """Scale-up domains the deployment spans."""
    engine: str
    """Engine (sglang, vllm, trtllm): its memory model, scheduler, kernels and launch lines."""
    batch: Tally
    """Concurrent decode requests, whole deployment."""
    context_mean_tokens: Amount
    """Mean context, tokens."""
    prefill_tokens: Amount
    """Prefill tokens per group in the step."""
    prefill_context_tokens: Amount
    """Tokens the prefilling request already has cached (its prefix), which the prefill chunk attends to."""
    layouts: Annotated[list[PricedLayout], _kw(minItems=1)]
    """Every layout the model can run: feasible ones first, among them the ones that may be recommended
    (launchable, or all with --all-layouts), each group fastest first by ranked_by.key."""
    skipped: list[Skipped]
    """Layouts left out, with the reason."""
    step_model: str
    """Which model priced every layout's predicted_s and decode_tokens_per_s (the first layout's; they share
    hardware and engine)."""
    out: list[OutLayout]
    """Layouts that can run the model but not this load, with why."""
    best_by_max: LayoutRef | None
    """Fastest by floor_max_s among layouts whose KV fits, launchable or not (the floors' answer; the
    recommendation is `recommended`); null if none fits."""
    best_by_sum: LayoutRef | None
    """Fastest by floor_sum_s among layouts whose KV fits, launchable or not; null if none fits."""
    ranked_by: Ranking
    """How the layouts were ranked for the recommendation (compare's ★, floor's layout without --attn); null
    for floor with --attn."""
    recommended: Recommended | None
    """The ★: the fastest layout whose KV fits by ranked_by, among those the engine launches (any with
    --all-layouts); null if none."""

    def best(self) -> PricedLayout | None:
        """The priced layout of best_by_max."""
        b = self.best_by_max
        return None if b is None else next(x for x in self.layouts if (x.attn, x.moe) == (b.attn, b.moe))


# ---- capacity ------------------------------------------------------------------------------------

class CapacityLayout(_Part):
    """One layout's capacity."""

    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    replicas: Count
    """Replicas of the group."""
    nodes_per_group: Count
    """Nodes one group spans."""
    kv_dtype: KvDtype
    """KV dtype."""
    weight_dtype: WeightDtype
    """Weight dtype."""
    page_tokens: Count
    """Tokens per KV page."""
    weights_gib_per_gpu: Amount
    """Resident weights per GPU, GiB."""
    weights_fit: bool
    """Whether the weights resident on one GPU fit its memory budget (mem_fraction × HBM − reserve); if false,
    kv_pool is ≤ 0 and no KV fits."""
    feasible: bool
    """The pool holds at least one page after weights and the reserve."""
    infeasible_reason: str | None
    """Why not, in words; null when feasible."""
    mem_fraction: float
    """The engine fraction this layout runs with (SGLang mem_fraction_static: its default depends on the GPU
    and on DP attention)."""
    reserve_gib_per_gpu: Amount
    """GiB per GPU kept out of weights + KV."""
    kv_pool_gib_per_gpu: Amount
    """KV pool per GPU, GiB (0 when the weights don't fit)."""
    kv_pool_tokens_per_gpu: Amount
    """Tokens the pool holds per GPU (whole pages)."""
    kv_bytes_per_token: Amount
    """KV bytes one token stores (all layers)."""
    kv_replication: Amount
    """Copies of each token's KV across the group (T for TP with MLA, 1 for owner layouts)."""
    distinct_tokens: Amount
    """Distinct tokens the deployment's pools hold."""
    context_tokens: Amount
    """Context per request, tokens (the mix's mean)."""
    max_concurrency: Tally
    """Requests that fit at once (the KV wall): of context_tokens, or of the mix in its proportions (N·Σ
    f_i/n_i ≤ 1, n_i the requests of length i alone)."""
    state_bytes_per_request: Amount
    """Fixed bytes per request over all layers, one full copy (recurrent states, compressor rings); 0 for a
    model without them."""
    binding_memory: Annotated[str, _kw(enum=["kv_pages", "state_slots", "shared_pool", "full_attention_pool", "sliding_window_pool", "none"])]
    """The memory one more request would overflow at this context: kv_pages (the per-token pool), state_slots
    (a separate state pool or its running-request cap), shared_pool (one pool for both), full_attention_pool
    / sliding_window_pool (SGLang's hybrid SWA pools), none (no pool)."""
    memory: Annotated[Free, part("memory_plan")]
    """How the engine sized this GPU's memory: which engine model, its total, fraction, reserve and the KV pool
    (per GPU of the busiest group)."""
    host_tier: Annotated[Free | None, part("capacity_host_tier")] = None
    """With --host-tier: requests held at the context by wall (planner/host_capacity.py)."""


class ContextShare(_Part):
    """One length of the mix."""

    context_tokens: Annotated[float, _kw(exclusiveMinimum=0)]
    """Context of these requests, tokens."""
    requests: Count
    """Requests of this length in the mix."""


class CapacityResult(Document):
    """`floorfirst capacity`: every layout's KV pool per GPU (as the engine sizes it), distinct tokens
    and concurrency at a context."""

    command: ClassVar[str] = "capacity"
    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    nodes: Count
    """Scale-up domains the deployment spans."""
    engine: str
    """Engine memory model that sized the pools (sglang, vllm)."""
    mem_fraction: float | None
    """The --mem-fraction given; null: each layout's engine default (see layouts[].mem_fraction)."""
    swa_full_tokens_ratio: float | None
    """The --swa-full-tokens-ratio given (SGLang's hybrid SWA split: sliding-pool tokens per full-pool token);
    null: the engine default (SGLang 0.8; the ratio each split layout ran with is
    layouts[].memory.defaults.swa_full_tokens_ratio)."""
    page_tokens: Count
    """Tokens per KV page (the engine's default unless --page-tokens)."""
    datasheet_hbm_bytes_per_gpu: Amount
    """The datasheet HBM per GPU, bytes."""
    usable_hbm_bytes_per_gpu: Amount
    """HBM per GPU as torch reports it (total_memory), bytes: what the pools are sized from."""
    context_tokens: Amount
    """Context per request, tokens (with a list or histogram --context, the mean of the mix)."""
    layouts: Annotated[list[CapacityLayout], _kw(minItems=1)]
    """One entry per layout."""
    skipped: list[Skipped]
    """Layouts left out, with the reason."""
    context_mix: list[ContextShare] | None = None
    """The --context mix when it is a list or a histogram: each length and its requests (absent for one
    length)."""

    def layout(self, attn: str, moe: str | None = None) -> CapacityLayout:
        """The row of attn (and moe, when the model runs several)."""
        for x in self.layouts:
            if x.attn == attn and (moe is None or x.moe == moe):
                return x
        raise KeyError(f"{attn}/{moe or '*'}")


# ---- simulate ------------------------------------------------------------------------------------

SwitchReason = Annotated[str, _kw(enum=["switch_throughput", "switch_capacity", "switch_projected"])]
Order = Annotated[str, _kw(enum=["fcfs", "srpt-oracle", "boost"])]
SecondsByLayout = Annotated[dict[str, float], _kw(**{
    "x-registry-keys": "attention_layouts",
    "x-template": {"type": "number", "description": "Seconds spent in {name}.", "minimum": 0}})]


class Switch(_Part):
    """One layout switch."""

    from_layout: AttnName = Field(alias="from")
    """Layout switched from."""
    to: AttnName
    """Layout switched to."""
    started_s: Amount
    """When the background move started, seconds."""
    at_s: Amount
    """Commit time (batch boundary), seconds."""
    link_s: Amount
    """Link time of the state moved, seconds."""
    cost_s: Amount
    """Predicted cost (interference + commit stall), seconds."""
    reason: SwitchReason
    """Why the policy switched."""
    stall_s: Amount
    """Commit stall the executor returned, seconds (the simulator: the plan's predicted stall; the torch
    executor: measured)."""


class AbortedSwitch(_Part):
    """One aborted switch."""

    from_layout: AttnName = Field(alias="from")
    """Layout that kept serving."""
    to: AttnName
    """Layout the move was going to."""
    started_s: Amount
    """When the background move started, seconds."""
    at_s: Amount
    """When it was abandoned, seconds."""
    reason: SwitchReason
    """Why the policy had asked for it."""
    why: str
    """Why it was aborted."""


class SimulateResult(Document):
    """`floorfirst simulate`: a workload served with the simulated executor under a fixed layout or the
    dynamic policy: throughput, latency percentiles and the layout switches made."""

    command: ClassVar[str] = "simulate"
    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    replicas: Count
    """Replicas."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense
    models."""
    kv_dtype: KvDtype
    """KV dtype."""
    workload: str
    """Workload name (chat, shrinking, bursty) or trace path."""
    workload_params: Free
    """The workload generator's parameters (depend on the workload)."""
    seed: int
    """Seed of the workload and the step-time noise."""
    policy: Annotated[str, _kw(**{'x-registry': 'policies'})]
    """Fixed attention layout or dynamic switching."""
    order: Order
    """Request ordering."""
    requests: Tally
    """Requests in the workload."""
    completed: Tally
    """Requests finished."""
    aborted: Tally
    """Requests aborted (could never fit)."""
    output_tokens: Tally
    """Decode tokens produced."""
    makespan_s: Amount
    """First arrival to last completion, seconds."""
    throughput_tokens_per_s: MaybeAmount
    """output_tokens ÷ makespan_s."""
    requests_per_s: MaybeAmount
    """completed ÷ makespan_s."""
    ttft_p50_s: MaybeAmount
    """p50 time to first token, seconds (null when no request completed)."""
    ttft_p90_s: MaybeAmount
    """p90 time to first token, seconds (null when no request completed)."""
    ttft_p99_s: MaybeAmount
    """p99 time to first token, seconds (null when no request completed)."""
    tpot_p50_s: MaybeAmount
    """p50 time per output token, seconds (null when no request completed)."""
    tpot_p90_s: MaybeAmount
    """p90 time per output token, seconds (null when no request completed)."""
    tpot_p99_s: MaybeAmount
    """p99 time per output token, seconds (null when no request completed)."""
    ttlt_p50_s: MaybeAmount
    """p50 time to last token, seconds (null when no request completed)."""
    ttlt_p90_s: MaybeAmount
    """p90 time to last token, seconds (null when no request completed)."""
    ttlt_p99_s: MaybeAmount
    """p99 time to last token, seconds (null when no request completed)."""
    ttlt_mean_s: MaybeAmount
    """Mean time to last token, seconds (null when no request completed)."""
    preemptions: Tally
    """Requests preempted when KV ran short."""
    steps: Tally
    """Steps run (decode and prefill)."""
    decode_steps: Tally
    """Steps with decode work."""
    layout_time_s: SecondsByLayout
    """Time spent in each attention layout, seconds."""
    switches: list[Switch]
    """Switches in time order."""
    switch_cost_total_s: Amount
    """Σ cost_s, seconds."""
    step_time_model: str
    """Which step-time model priced the steps (datasheet midpoint or a calibration)."""
    aborted_switches: list[AbortedSwitch]
    """Switches the executor aborted (a fault, or the destination's KV filled while the move ran); the old
    layout kept serving."""
    cant_decide: Tally
    """Times the policy answered CANT_DECIDE (a state it refused or an internal error; it stayed put)."""
    offered_requests_per_s: MaybeAmount
    """Requests offered per second: arrival gaps over the arrival span ((requests − 1) / arrival_span_s); null
    when every request arrives at once."""
    served_requests_per_s: Amount
    """Requests completed per second over the makespan, the drain after the last arrival included (=
    requests_per_s)."""
    offered_input_tokens_per_s: MaybeAmount
    """Prompt tokens offered per second: offered_requests_per_s × the mean prompt; null when every request
    arrives at once."""
    served_input_tokens_per_s: Amount
    """Prompt tokens of the completed requests per second of the makespan."""
    offered_output_tokens_per_s: MaybeAmount
    """Output tokens offered per second: offered_requests_per_s × the mean output; null when every request
    arrives at once."""
    served_output_tokens_per_s: Amount
    """Output tokens of the completed requests per second of the makespan (= throughput_tokens_per_s)."""
    arrival_span_s: Amount
    """Seconds from the first arrival to the last."""
    queue_p50_requests: Amount
    """Time-weighted p50 of the queue: requests arrived with no first token yet (waiting, or in their
    prefill)."""
    queue_p90_requests: Amount
    """Time-weighted p90 of the queue (requests arrived with no first token yet)."""
    queue_p99_requests: Amount
    """Time-weighted p99 of the queue (requests arrived with no first token yet)."""
    queue_max_requests: Tally
    """The longest the queue (requests arrived with no first token yet) grew."""
    queue_at_last_arrival_requests: Tally
    """Requests with no first token yet at the last arrival."""
    ttft_p50_by_arrival_quarter_s: Annotated[list[MaybeAmount], _kw(minItems=4, maxItems=4)]
    """Median wait for the first token (TTFT) of each quarter of the requests by arrival, seconds (null: no
    request of that quarter got one). Rising across the run is the overload rule's evidence."""
    kv_full_time_fraction: Annotated[MaybeAmount, _kw(maximum=1)]
    """Share of the run's time the KV pool was at least 99 % used (with replicas, the first group's); null for
    a run too short to have a timeline."""
    overloaded: bool | None
    """The load is beyond what the deployment serves: the queue grows without bound, shown as the median wait
    for the first token of the last quarter of arrivals above 2 × that of the second quarter and at least 1 s
    longer (runtime_policy/metrics.py). Null: not judged (fewer than 20 requests, or every request at
    once)."""
    verdict: str
    """The verdict in words: 'overloaded: …', 'keeps up (…)' or 'not judged: …', with the waits it rests
    on."""
    per_request: Free | None = Field(None, exclude=True)
    """One column per key (request, arrival_s, first_token_s, finish_s, input_tokens, output_tokens,
    status, preemptions), one row per request: what --requests-csv writes (not in the JSON document)."""
    timeline: Free | None = Field(None, exclude=True)
    """The run over time (t_s, layout index, batch, kv_used_fraction): what --plot draws (not in the JSON
    document)."""


# ---- simulate --disagg xPyD --------------------------------------------------------------------

class DisaggPool(_Part):
    """One pool of identical instances."""

    instances_count: Count
    """Instances in the pool."""
    gpus_per_instance: Count
    """GPUs of one instance."""
    gpus: Count
    """GPUs of the pool."""
    layout: AttnName
    """The instances' attention layout."""
    moe: MoeName
    """MoE split (tp for dense models)."""
    kv_pool_bytes_per_rank: Amount
    """KV pool of one rank, bytes, with the role's memory rule."""
    memory_rule: str
    """The engine's memory rule for the role (planner/disagg/roles.py)."""
    step_time_model: str
    """Which step-time model priced the pool's steps."""


class TtftParts(_Part):
    """TTFT's parts, means over completed requests, seconds."""

    prefill_s: Amount
    """Arrival to the prefill's end: the prefill instance's queue and the prefill."""
    handoff_exposed_s: Amount
    """The hand-off's part the prefill's chunks don't hide."""
    handoff_nic_queue_s: Amount
    """Waiting behind other hand-offs on the instances' NICs."""
    handoff_queue_s: Amount
    """Waiting for decode KV room (and the running step's end)."""
    decode_first_step_s: Amount
    """Admission to the first token: 0 for SGLang's prebuilt batch, one step for vLLM (the last prompt token
    recomputed)."""


class SimulateDisaggResult(Document):
    """`floorfirst simulate --disagg xPyD`: a workload served by x prefill and y decode instances
    (runtime_policy/disagg.py): the colocated simulate's metrics of the merged per-request record (TTFT from
    arrival to the first token the decode instance streams, TPOT and finish from the decode instance), the
    two pools, and the KV hand-off between them: its transfer, the part the prefill does not hide, its NIC
    queue and the queue for decode KV room."""

    command: ClassVar[str] = "simulate_disagg"
    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Annotated[int, _kw(minimum=2)]
    """GPUs of the split: x × prefill GPUs per instance + y × decode GPUs per instance."""
    kv_dtype: KvDtype
    """KV dtype."""
    workload: str
    """Workload name (chat, shrinking, bursty) or trace path."""
    workload_params: Free
    """The workload generator's parameters (depend on the workload)."""
    seed: int
    """Seed of the workload and the step-time noise."""
    policy: Annotated[str, _kw(pattern='^[a-z0-9_+-]+>[a-z0-9_+-]+$')]
    """The pools' fixed layouts, prefill>decode (e.g. tp>dp)."""
    order: Order
    """Request ordering."""
    requests: Tally
    """Requests in the workload."""
    completed: Tally
    """Requests finished."""
    aborted: Tally
    """Requests aborted (could never fit)."""
    output_tokens: Tally
    """Decode tokens produced."""
    makespan_s: Amount
    """First arrival to last completion, seconds."""
    throughput_tokens_per_s: MaybeAmount
    """output_tokens ÷ makespan_s."""
    requests_per_s: MaybeAmount
    """completed ÷ makespan_s."""
    ttft_p50_s: MaybeAmount
    """p50 time to first token, seconds (null when no request completed)."""
    ttft_p90_s: MaybeAmount
    """p90 time to first token, seconds (null when no request completed)."""
    ttft_p99_s: MaybeAmount
    """p99 time to first token, seconds (null when no request completed)."""
    tpot_p50_s: MaybeAmount
    """p50 time per output token, seconds (null when no request completed)."""
    tpot_p90_s: MaybeAmount
    """p90 time per output token, seconds (null when no request completed)."""
    tpot_p99_s: MaybeAmount
    """p99 time per output token, seconds (null when no request completed)."""
    ttlt_p50_s: MaybeAmount
    """p50 time to last token, seconds (null when no request completed)."""
    ttlt_p90_s: MaybeAmount
    """p90 time to last token, seconds (null when no request completed)."""
    ttlt_p99_s: MaybeAmount
    """p99 time to last token, seconds (null when no request completed)."""
    ttlt_mean_s: MaybeAmount
    """Mean time to last token, seconds (null when no request completed)."""
    preemptions: Tally
    """Requests preempted when KV ran short."""
    steps: Tally
    """Steps run (decode and prefill)."""
    decode_steps: Tally
    """Steps with decode work."""
    layout_time_s: SecondsByLayout
    """Time the decode instances spent in each attention layout, seconds (summed over instances)."""
    switches: list[Switch]
    """Switches in time order."""
    switch_cost_total_s: Amount
    """Σ cost_s, seconds."""
    step_time_model: str
    """Which step-time model priced the steps (datasheet midpoint or a calibration)."""
    aborted_switches: list[AbortedSwitch]
    """Switches the executor aborted (a fault, or the destination's KV filled while the move ran); the old
    layout kept serving."""
    cant_decide: Tally
    """Times the policy answered CANT_DECIDE (a state it refused or an internal error; it stayed put)."""
    offered_requests_per_s: MaybeAmount
    """Requests offered per second: arrival gaps over the arrival span ((requests − 1) / arrival_span_s); null
    when every request arrives at once."""
    served_requests_per_s: Amount
    """Requests completed per second over the makespan, the drain after the last arrival included (=
    requests_per_s)."""
    offered_input_tokens_per_s: MaybeAmount
    """Prompt tokens offered per second: offered_requests_per_s × the mean prompt; null when every request
    arrives at once."""
    served_input_tokens_per_s: Amount
    """Prompt tokens of the completed requests per second of the makespan."""
    offered_output_tokens_per_s: MaybeAmount
    """Output tokens offered per second: offered_requests_per_s × the mean output; null when every request
    arrives at once."""
    served_output_tokens_per_s: Amount
    """Output tokens of the completed requests per second of the makespan (= throughput_tokens_per_s)."""
    arrival_span_s: Amount
    """Seconds from the first arrival to the last."""
    queue_p50_requests: Amount
    """Time-weighted p50 of the queue: requests arrived with no first token yet (waiting, or in their
    prefill)."""
    queue_p90_requests: Amount
    """Time-weighted p90 of the queue (requests arrived with no first token yet)."""
    queue_p99_requests: Amount
    """Time-weighted p99 of the queue (requests arrived with no first token yet)."""
    queue_max_requests: Tally
    """The longest the queue (requests arrived with no first token yet) grew."""
    queue_at_last_arrival_requests: Tally
    """Requests with no first token yet at the last arrival."""
    ttft_p50_by_arrival_quarter_s: Annotated[list[MaybeAmount], _kw(minItems=4, maxItems=4)]
    """Median wait for the first token (TTFT) of each quarter of the requests by arrival, seconds (null: no
    request of that quarter got one). Rising across the run is the overload rule's evidence."""
    kv_full_time_fraction: Annotated[MaybeAmount, _kw(maximum=1)]
    """Share of the run's time the KV pool was at least 99 % used (with replicas, the first group's); null for
    a run too short to have a timeline."""
    overloaded: bool | None
    """The load is beyond what the deployment serves: the queue grows without bound, shown as the median wait
    for the first token of the last quarter of arrivals above 2 × that of the second quarter and at least 1 s
    longer (runtime_policy/metrics.py). Null: not judged (fewer than 20 requests, or every request at
    once)."""
    verdict: str
    """The verdict in words: 'overloaded: …', 'keeps up (…)' or 'not judged: …', with the waits it rests
    on."""
    disagg: Annotated[str, _kw(pattern='^[1-9][0-9]*P[1-9][0-9]*D$')]
    """The split: x prefill and y decode instances (xPyD)."""
    engine: Annotated[str, _kw(**{'x-registry': 'engines'})]
    """The engine whose memory, schedulers and KV connector both pools run."""
    handoff_backend: str
    """The engine's KV transfer backend (mooncake: SGLang; nixl: vLLM)."""
    handoff_overlap: Annotated[str, _kw(enum=['per_chunk', 'after_prefill'])]
    """per_chunk: each prefill chunk's pages leave as its forward ends (SGLang); after_prefill: the decode
    side reads after the prefill (vLLM NIXL)."""
    prefill_pool: DisaggPool
    """The prefill pool."""
    decode_pool: DisaggPool
    """The decode pool."""
    prefill_instance_requests: list[Tally]
    """Requests each prefill instance served (round robin by arrival)."""
    decode_instance_requests: list[Tally]
    """Requests each decode instance admitted (round robin by arrival, those whose prefill finished)."""
    prefill_steps: Tally
    """Steps the prefill instances ran (steps counts both pools)."""
    handoff_queue_mean_s: MaybeAmount
    """Mean wait of a ready hand-off for its decode instance's KV room (and the running step's end), seconds;
    null when no request completed."""
    ttft_parts_mean_s: TtftParts | None
    """TTFT's parts, means over completed requests, seconds; null when none completed."""
    handoff_queue_p50_s: MaybeAmount
    """p50 wait of a ready hand-off for decode KV room (and the running step's end), seconds (null when no
    request completed)."""
    handoff_queue_p90_s: MaybeAmount
    """p90 wait of a ready hand-off for decode KV room (and the running step's end), seconds (null when no
    request completed)."""
    handoff_queue_p99_s: MaybeAmount
    """p99 wait of a ready hand-off for decode KV room (and the running step's end), seconds (null when no
    request completed)."""
    handoff_transfer_p50_s: MaybeAmount
    """p50 hand-off transfer alone (busiest NIC + round trips), seconds (null when no request completed)."""
    handoff_transfer_p90_s: MaybeAmount
    """p90 hand-off transfer alone (busiest NIC + round trips), seconds (null when no request completed)."""
    handoff_transfer_p99_s: MaybeAmount
    """p99 hand-off transfer alone (busiest NIC + round trips), seconds (null when no request completed)."""
    handoff_exposed_p50_s: MaybeAmount
    """p50 hand-off part the prefill's chunks don't hide, seconds (null when no request completed)."""
    handoff_exposed_p90_s: MaybeAmount
    """p90 hand-off part the prefill's chunks don't hide, seconds (null when no request completed)."""
    handoff_exposed_p99_s: MaybeAmount
    """p99 hand-off part the prefill's chunks don't hide, seconds (null when no request completed)."""
    handoff_nic_queue_p50_s: MaybeAmount
    """p50 hand-off wait behind others on the instances' NICs, seconds (null when no request completed)."""
    handoff_nic_queue_p90_s: MaybeAmount
    """p90 hand-off wait behind others on the instances' NICs, seconds (null when no request completed)."""
    handoff_nic_queue_p99_s: MaybeAmount
    """p99 hand-off wait behind others on the instances' NICs, seconds (null when no request completed)."""
    timeline: Free | None = Field(None, exclude=True)
    """The decode pool's run over time: what --plot draws (not in the JSON document)."""
