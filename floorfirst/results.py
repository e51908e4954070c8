"""The typed documents floorfirst's functions return: `PlanResult` (floor), `CompareResult`,
`CapacityResult`, `TriageResult`, `ExplainLaunchResult`, `HardwareResult`, `ModelsResult`, `RegimesResult`, `TriageProfileResult`, `ThresholdsResult`, `WallsResult`, `ValidateResult` (and, in floorfirst/served.py, `SimulateResult` and `SimulateDisaggResult`), and the
parts they are built of. Their fields are the keys of the command's `--json` document
(docs/json-contracts.md), units in the names (`_s` seconds, `_bytes`, `_tokens`, `_per_s`,
`_fraction`, `_gib` GiB; a key without a unit is a count, a name or an enum); `document()` gives
back that JSON document, `schema` key first.

A number the contract lets be undefined (a tokens/s of a step that can't run) is None, never NaN
or infinity. Free-form parts (an engine's memory plan, per-component byte counts) are dicts.

NOTE: the models allow keys they don't declare (`model_extra`), so a key a command adds reaches
the caller instead of failing the call; tests/floorfirst fail until it is declared here.

Every command's schema is written from its document's model: these, floorfirst/served.py's (simulate, simulate
--disagg, serve), calibration_results.py's, follow_result.py's, disagg_result.py's and error_result.py's
(schemas/generate.py, through schemas/from_models.py): a field's
docstring is its key's description and `_kw(...)` its schema keywords (minimum, enum, a registry's
names, or `part(...)`: the hand-written key-by-key contract of a free-form dict in schemas/parts/).
A field without a docstring can't be written; a field with `exclude=True` (per_request, timeline)
is carried by the result but is no key of the document.

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
Number = int | float  # a JSON number as the command computed it: an integer stays one (a step row's batch)
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


# ---- triage: one measured step against its floors -------------------------------------------------

# NOTE: the timed resources' names as the planner lists them (planner.resources), never typed here
def _timed_resources() -> list[str]:
    from planner.resources import TIMED_RESOURCES

    return list(TIMED_RESOURCES)


ResourceName = Annotated[str, _kw(enum=_timed_resources())]


class TriageTimes(_Part):
    """The timed resources (planner.TIMED_RESOURCES), seconds."""

    hbm: Amount
    """hbm time, seconds."""
    compute: Amount
    """compute time, seconds."""
    network_bytes: Amount
    """network_bytes time, seconds."""
    network_messages: Amount
    """network_messages time, seconds."""
    host_link: Amount | None = None
    """host_link time (a host KV tier's fetches), seconds."""


class TriageCalibrated(_Part):
    """The measurement read against a calibrated prediction (only with --calibration); then profile/profile_resource
    follow it."""

    calibration: str
    """The calibration artifact's path."""
    predicted_s: Amount
    """Calibrated prediction, seconds."""
    residual_fraction: float
    """(measured − predicted) / predicted."""
    verdict: Annotated[str, _kw(enum=["below_prediction", "as_predicted", "above_prediction"])]
    """Against the prediction, within ± threshold."""
    explanation: str
    """One sentence."""


class TriageResult(Document):
    """A measured step placed against its floors: overlap quality, a violated floor, or a residual over the sum and
    the resource to profile."""

    command: ClassVar[str] = "triage"

    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    batch: Tally
    """Decode requests, whole deployment."""
    context_mean_tokens: Amount
    """Mean context, tokens."""
    pricing: Annotated[str, _kw(enum=["datasheet", "achieved"])]
    """Floor pricing."""
    prefill_tokens: Amount
    """Prefill chunk tokens run in the same step (one request's), per group."""
    prefill_context_tokens: Amount
    """Tokens the prefilling request already has cached (the prefix its chunk attends to); 0 without prefill."""
    measured_s: Annotated[float, _kw(exclusiveMinimum=0)]
    """The measured step, seconds."""
    floor_max_s: Amount
    """Optimistic floor, seconds."""
    floor_sum_s: Amount
    """Pessimistic floor, seconds."""
    times_s: TriageTimes
    """The timed resources (planner.TIMED_RESOURCES), seconds."""
    verdict: Annotated[str, _kw(enum=["below_floor", "inside", "above_sum"])]
    """below_floor (faster than the optimistic floor: a spec or the model is wrong), inside [max, sum], or above_sum."""
    overlap_quality: Maybe
    """Inside: (sum − measured) ÷ (sum − max), 1 = perfect overlap; null otherwise."""
    residual_fraction: Maybe
    """Above sum: (measured − sum) ÷ sum; null otherwise."""
    violated_resources: list[Annotated[ResourceName, _kw(description="Resource.")]]
    """Below floor: timed resources that alone take longer than the measurement."""
    threshold_fraction: Amount
    """Residual over floor_sum that calls for a profiler (default 0.15)."""
    profile: bool
    """Whether to open a profiler: above_sum and residual_fraction > threshold_fraction."""
    profile_resource: Annotated[str | None, _kw(enum=[*_timed_resources(), None])]
    """Resource to profile (the largest term) when profile is true; null otherwise."""
    explanation: str
    """The verdict in one sentence."""
    calibrated: TriageCalibrated | None = None
    """The measurement read against a calibrated prediction (only with --calibration); then profile/profile_resource
    follow it."""


# ---- explain-launch: a launch command read as a deployment -----------------------------------------

EngineName = Annotated[str, _kw(**{"x-registry": "engines"})]


class LaunchOptions(_Part):
    """The floorfirst options the command stands for (python names: model, gpus, replicas, attn, moe, nodes,
    mem_fraction, kv_dtype, page_tokens, weight_dtype, engine)."""

    model: str | None = None
    """What --model gets: a built-in card, a config.json path, or a Hugging Face repo id (read from the local cache,
    or a built-in card with the weights of its quantization suffix: planner/models/repo_ids.py)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    replicas: Count
    """Replicas of the group."""
    attn: AttnName
    """Attention layout."""
    moe: MoeName
    """MoE split."""
    nodes: Count | None = None
    """Nodes the deployment spans."""
    mem_fraction: Annotated[float, _kw(exclusiveMinimum=0)] | None = None
    """The engine's memory fraction (SGLang mem_fraction_static, vLLM gpu_memory_utilization, TensorRT-LLM
    free_gpu_memory_fraction)."""
    kv_dtype: str | None = None
    """KV cache dtype as the engine spells it."""
    page_tokens: Count | None = None
    """KV page size, tokens."""
    weight_dtype: WeightDtype | None = None
    """Weight dtype read from the quantization flag."""
    engine: EngineName
    """Whose memory model sizes the pool."""


class LaunchReading(_Part):
    """One flag."""

    flag: str
    """The flag as written (an alias or abbreviation is followed by its canonical reading)."""
    value: str
    """Its value as written (true for a switch)."""
    meaning: str
    """What floorfirst made of it."""


class ExplainLaunchResult(Document):
    """An SGLang, vLLM or TensorRT-LLM launch command read as a floorfirst deployment: the options it stands for, how
    each flag was read, what the engine would do that floorfirst does not model."""

    command: ClassVar[str] = "explain_launch"

    engine: EngineName
    """The engine the command launches."""
    model_given: str | None
    """The model as the command names it (repo id, folder or path); null when it names none."""
    options: LaunchOptions
    """The floorfirst options the command stands for (python names: model, gpus, replicas, attn, moe, nodes,
    mem_fraction, kv_dtype, page_tokens, weight_dtype, engine)."""
    readings: list[LaunchReading]
    """Each flag that sets part of the deployment, in the order read."""
    not_modelled: list[Annotated[str, _kw(description="One effect.")]]
    """What the engine would do that floorfirst does not model, one sentence each."""
    ignored: list[Annotated[str, _kw(description="A flag.")]]
    """Flags with no effect on the deployment (host, port, logging, …)."""
    max_context_tokens: Annotated[int | None, _kw(minimum=1)]
    """The context window the command sets (vLLM --max-model-len, SGLang --context-length), tokens; null when it sets
    none."""
    floorfirst_options: list[Annotated[str, _kw(description="One argument.")]]
    """The same deployment as floorfirst command-line options."""


# ---- hardware: the built-in GPUs -----------------------------------------------------------------

class DtypeRates(_Part):
    bf16: Amount
    """bf16."""
    fp8: Amount | None = None
    """fp8 (absent where the GPU has none)."""
    fp4: Amount | None = None
    """fp4 (absent where the GPU has none)."""


class EfficiencyDefaults(_Part):
    hbm: Amount
    """Achieved fraction of HBM bandwidth."""
    flops: Amount
    """Achieved fraction of peak FLOP/s."""
    network: Amount
    """Achieved fraction of link bandwidth."""
    scaleout: Amount
    """Achieved fraction of NIC bandwidth (scale-out tier)."""
    host_link: Amount | None = None
    """Achieved fraction of the host-link peak (contiguous copy)."""


Positive = Annotated[float, _kw(exclusiveMinimum=0)]


class GpuEntry(_Part):
    """One GPU."""

    name: str
    """GPU name (built-in or from the hardware YAML)."""
    description: str
    """Human name of the part."""
    vendor: Annotated[str, _kw(enum=["nvidia", "amd"])]
    """Runtime family (CUDA or ROCm)."""
    arch: str
    """GPU generation (hopper, blackwell, cdna3, …)."""
    compute_capability: list[Annotated[int, _kw(description="major, then minor.")]] | None
    """(major, minor) as torch reports it; engine defaults key on the major."""
    hbm_bytes: Positive
    """HBM capacity per GPU, bytes."""
    usable_hbm_bytes: Amount
    """HBM per GPU as torch reports it (total_memory), bytes; the datasheet figure when not declared."""
    usable_hbm_declared: bool
    """Whether the YAML declares usable_hbm_bytes (false: the datasheet figure stands in)."""
    smi_total_mib: Amount
    """nvidia-smi memory.total, MiB (SGLang's default fraction reads it)."""
    cuda_context_bytes: Amount
    """Taken by the CUDA context before the first allocation, bytes."""
    hbm_bandwidth_bytes_per_s: Positive
    """Datasheet HBM bandwidth, bytes/s."""
    flops_per_s: DtypeRates
    """Dense datasheet peak FLOP/s by dtype."""
    ridge_flops_per_byte: DtypeRates
    """Ridge point (peak FLOP/s ÷ HBM bytes/s) by dtype, FLOP/byte."""
    scaleup_bandwidth_bytes_per_s_per_direction: Positive
    """Scale-up link (NVLink/xGMI) bandwidth per GPU per direction, bytes/s."""
    scaleup_domain_gpus: Count
    """GPUs in one scale-up domain."""
    collective_latency_s: Amount
    """Per-collective launch/latency step, seconds."""
    host_link_bandwidth_bytes_per_s: Amount
    """Host link (PCIe/C2C) bandwidth, bytes/s."""
    scaleout_bandwidth_bytes_per_s_per_direction: Amount
    """NIC bandwidth per GPU, one direction, bytes/s (the tier between nodes)."""
    scaleout_collective_latency_s: Amount
    """Latency of a small collective that crosses nodes, seconds."""
    efficiency: EfficiencyDefaults
    """Achieved-efficiency defaults (used by --pricing achieved); fractions in (0, 1]."""
    sources: dict[str, Annotated[str, _kw(description="Where a figure comes from.")]]
    """Source of each group of figures."""


class HardwareResult(Document):
    """Built-in GPUs (or one YAML): datasheet peaks kept apart from achieved-efficiency defaults."""

    command: ClassVar[str] = "hardware"

    hardware: Annotated[list[GpuEntry], _kw(minItems=1)]
    """One entry per GPU."""


# ---- models: the built-in model cards -------------------------------------------------------------

class ModelEntry(_Part):
    """One model card."""

    name: str
    """Model name (built-in card name or the config.json's model name)."""
    architecture: str
    """Hugging Face architecture class."""
    attention: Annotated[str, _kw(**{"x-registry": "attention_variants"})]
    """Attention variant kind: a name in the planner's attention variant registry."""
    mlp: Annotated[str, _kw(**{"x-registry": "mlp_variants"})]
    """The primary MLP kind: the MoE variant with the most layers, else dense (registry name)."""
    attention_layers: str
    """Mixer kinds with their layer counts, most layers first ('gdn×45+gqa×15'; one kind alone for a uniform
    stack)."""
    mlp_layers: str
    """MLP kinds with their layer counts ('moe×58+dense×3')."""
    layers: Count
    """Transformer layers."""
    layer_stack: list[Annotated[str, _kw(description="One layer group.")]]
    """The groups of identical layers: 'count × mixer + mlp' ('-' for none)."""
    hidden_size: Count
    """Model width."""
    num_heads: Count
    """Query heads per layer."""
    kv_splittable_heads: Count
    """KV heads TP can split the cache by (1 for MLA: every TP rank keeps every token)."""
    total_params_b: Amount
    """All parameters, billions."""
    active_params_per_token_b: Amount
    """Parameters a token touches (routed top-k experts only), billions."""
    params_b: Annotated[dict[str, Annotated[Amount, _kw(description="Billions of parameters.")]],
                        _kw(required=["attention", "embedding"])]
    """Parameters by part, billions: attention, embedding, and where present dense_mlp, shared_experts, routed_experts,
    indexer."""
    kv_dtype_for_bytes: str | None = None
    """The KV dtype the byte figures below use (bf16 unless the model's attention supports only another)."""
    kv_bytes_per_token: Amount
    """Bytes one cached token occupies over all layers with per-token pages, below every window (one full copy)."""
    token_bytes_per_token_beyond_windows: Amount | None = None
    """Bytes each further context token adds once every window is full (the layers whose cache grows without
    bound)."""
    state_bytes_per_request: Amount
    """Fixed bytes per request over all layers (recurrent states, compressor rings)."""
    default_weight_dtype: WeightDtype
    """The checkpoint's weight dtype."""


class ModelsResult(Document):
    """Built-in model cards (or one config.json) and their parameter split."""

    command: ClassVar[str] = "models"

    models: Annotated[list[ModelEntry], _kw(minItems=1)]
    """One entry per model."""


# ---- regimes: the best layout over a batch × context grid ------------------------------------------

_LAYOUT_PATTERN = {"x-pattern-template": "^({attention_layouts})/({moe_splits})$"}
LayoutLabel = Annotated[str, _kw(description="A layout as attn/moe.", **_LAYOUT_PATTERN)]
BestLabel = Annotated[str, _kw(description="attn/moe of the best layout, or infeasible.",
                              **{"x-pattern-template": "^(({attention_layouts})/({moe_splits})|infeasible)$"})]
CellSeconds = Annotated[MaybeAmount, _kw(description="Seconds; null where KV doesn't fit.")]
LayoutGrid = dict[str, Annotated[list[Annotated[list[CellSeconds], _kw(description="Per context.")]],
                                 _kw(description="Rows per batch.")]]


class RegimesResult(Document):
    """The best layout over a batch × context grid; capacity-infeasible cells marked."""

    command: ClassVar[str] = "regimes"

    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    nodes: Count
    """Scale-up domains the deployment spans."""
    engine: str
    """Engine memory model that sized the pools."""
    floor: Annotated[str, _kw(enum=["max", "sum"])]
    """Which floor ranks layouts."""
    batch: Annotated[list[Annotated[int, _kw(description="Requests.", minimum=0)]], _kw(minItems=1)]
    """Grid rows: batch sizes."""
    context_tokens: Annotated[list[Annotated[float, _kw(description="Tokens.", minimum=0)]], _kw(minItems=1)]
    """Grid columns: context lengths."""
    layouts: Annotated[list[LayoutLabel], _kw(minItems=1)]
    """Layouts compared."""
    best: list[Annotated[list[BestLabel], _kw(description="Per context.")]]
    """Best layout per cell, rows batch × columns context."""
    tie_margin_fraction: Annotated[float, _kw(minimum=0, maximum=1)]
    """Layouts whose step time is within this fraction of the best tie (0.01 = 1 %; --tie-margin)."""
    tied: list[Annotated[list[Annotated[list[LayoutLabel], _kw(description="Layouts of one cell.")]],
                         _kw(description="Per context.")]]
    """Per cell, rows batch × columns context: the layouts within tie_margin_fraction of the best, the best (as in
    `best`) first, then by time. One layout: a clear winner; two or more: a tie the floors can't break; empty:
    nothing fits."""
    runner_up_margin_fraction: list[Annotated[list[Annotated[MaybeAmount, _kw(
        description="A fraction; null where at most one layout fits.")]], _kw(description="Per context.")]]
    """Per cell, rows batch × columns context: the second-fastest layout's step time over the fastest's, minus 1
    (0.12: 12 % slower; below tie_margin_fraction: a tie)."""
    step_time_s: LayoutGrid
    """Per layout (attn/moe): floor time per cell, seconds."""
    predicted_s: LayoutGrid | None = None
    """Per layout: calibrated time per cell, seconds (only with --calibration)."""
    plot: str | None = None
    """PNG written (only with --plot)."""


# ---- triage --profile: every row of a profile file --------------------------------------------------

class ProfileCounts(_Part):
    """Verdict counts."""

    rows: Tally
    """Rows triaged."""
    inside: Tally
    """Rows inside [max, sum]."""
    above_sum: Tally
    """Rows above the sum floor."""
    below_floor: Tally
    """Rows faster than floor_max (a spec or model error)."""
    profile: Tally
    """Rows whose residual calls for a profiler."""
    rejected: Tally
    """Rows that couldn't be priced (see issues)."""
    below_prediction: Tally | None = None
    """Rows more than the threshold faster than the calibrated prediction. Only with --calibration."""
    as_predicted: Tally | None = None
    """Rows within the threshold of the calibrated prediction. Only with --calibration."""
    above_prediction: Tally | None = None
    """Rows more than the threshold slower than the calibrated prediction (profile). Only with --calibration."""


class ProfileRowCalibrated(_Part):
    """The measurement read against a calibrated prediction (only with --calibration); then profile/profile_resource
    follow it."""

    predicted_s: Amount
    """Calibrated prediction, seconds."""
    residual_fraction: float
    """(measured − predicted) / predicted."""
    verdict: Annotated[str, _kw(enum=["below_prediction", "as_predicted", "above_prediction"])]
    """Against the prediction, within ± threshold."""
    explanation: str
    """One sentence."""


class ProfileRow(_Part):
    """One triaged row."""

    source: str
    """Profile file."""
    line: Tally
    """Line (or row) in the file."""
    deployment: str
    """model hardware attn/moe T=ranks."""
    batch: Amount
    """Decode requests."""
    context_tokens: Amount
    """Context per request, tokens."""
    prefill_tokens: Amount
    """Prefill tokens."""
    serving: bool
    """A serving row: measured is its TPOT, floors the weighted sum of its engine's steps per output token."""
    measured_s: Annotated[float, _kw(exclusiveMinimum=0)]
    """Measured step, seconds."""
    floor_max_s: Amount
    """Optimistic floor, seconds."""
    floor_sum_s: Amount
    """Pessimistic floor, seconds."""
    verdict: Annotated[str, _kw(enum=["below_floor", "inside", "above_sum"])]
    """below_floor (faster than the optimistic floor: a spec or the model is wrong), inside [max, sum], or above_sum."""
    overlap_quality: Maybe
    """Inside: (sum − measured) ÷ (sum − max), 1 = perfect overlap; null otherwise."""
    residual_fraction: Maybe
    """Above sum: (measured − sum) ÷ sum; null otherwise."""
    violated_resources: list[Annotated[ResourceName, _kw(description="Resource.")]]
    """Below floor: timed resources that alone take longer than the measurement."""
    profile: bool
    """Whether to open a profiler: above_sum and residual_fraction > threshold_fraction."""
    profile_resource: Annotated[str | None, _kw(enum=[*_timed_resources(), None])]
    """Resource to profile (the largest term) when profile is true; null otherwise."""
    explanation: str
    """The verdict in one sentence."""
    calibrated: ProfileRowCalibrated | None = None
    """The measurement read against a calibrated prediction (only with --calibration); then profile/profile_resource
    follow it."""


class TriageProfileResult(Document):
    """Every row of a profile triaged against its datasheet floors (calibration.triage)."""

    command: ClassVar[str] = "triage_profile"

    threshold_fraction: Amount
    """Residual over floor_sum that calls for a profiler."""
    calibration: str | None
    """The calibration artifact the rows were read against (--calibration), or null."""
    counts: ProfileCounts
    """Verdict counts."""
    rows: list[ProfileRow]
    """Rows in file order."""
    issues: list[Annotated[str, _kw(description="A rejected row and why.")]]
    """Rows that couldn't be loaded or priced."""
    notes: list[Annotated[str, _kw(description="A note.")]]
    """Loader notes (ignored columns, defaults applied)."""


# ---- thresholds: SGLang's runtime TP/CP/DCP switching crossovers ------------------------------------

class Crossover(_Part):
    """One crossover."""

    name: Annotated[str, _kw(enum=["prefill_cp", "decode_dcp"])]
    """prefill_cp (prefill tokens above which CP beats TP) or decode_dcp (decode context above which DCP beats TP)."""
    flag: str
    """SGLang's server flag that takes the value (sglang PR #36191)."""
    below_layout: Annotated[str, _kw(enum=["tp"])]
    """The layout that is faster below the crossover."""
    above_layout: Annotated[str, _kw(enum=["cp", "dcp"])]
    """The layout that is faster from the crossover on."""
    status: Annotated[str, _kw(enum=["crossover", "always", "never"])]
    """crossover: a value inside the range; always: the other layout wins from the range's start (tokens is the
    start); never: TP still wins at the range's end (tokens null)."""
    tokens: MaybeAmount
    """The crossover: the smallest whole number of tokens from which the other layout is faster everywhere in range
    (prefill tokens in the batch, or every decode request's context); null when never."""
    batch: Count | None
    """Decode requests in the step the decode crossover is read at (null for the prefill crossover)."""
    prefix_tokens: Amount
    """Tokens each prefill batch had cached (--prefix); 0 for the decode crossover."""
    margin_below_fraction: Maybe
    """(t_other − t_tp)/t_tp at half the crossover: how far TP is ahead below it (null: none below the range's
    start, or never)."""
    margin_above_fraction: Maybe
    """(t_tp − t_other)/t_other at twice the crossover (capped at the range's end): how far the other layout is
    ahead above it (null when never)."""
    band_tokens: Annotated[list[Annotated[float, _kw(description="Tokens.", minimum=0)]] | None,
                           _kw(minItems=2, maxItems=2)]
    """[LO, HI] tokens around the crossover where the two layouts are within 2 % of each other (null when never)."""
    notes: list[Annotated[str, _kw(description="One line.")]]
    """How SGLang applies the threshold, and what bounds it (TP's KV wall, the prefill chunk)."""


class DecodeAtBatch(_Part):
    """One batch size."""

    batch: Count
    """Decode requests."""
    status: Annotated[str, _kw(enum=["crossover", "always", "never"])]
    """As crossovers[].status."""
    tokens: MaybeAmount
    """As crossovers[].tokens."""


class ThresholdsResult(Document):
    """The crossovers SGLang's runtime TP/CP/DCP switching reads (sgl-project/sglang PR #36191), from the
    (calibrated) step model of the launch line's deployment, as the flags that switching takes."""

    command: ClassVar[str] = "thresholds"

    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs of one group (the layouts compared run on it)."""
    engine: Annotated[str, _kw(enum=["sglang"])]
    """The launch line's engine (always sglang)."""
    moe: str
    """MoE split of the group, from the launch line."""
    deployment: str
    """The deployment the launch line runs, in words."""
    engine_args: str
    """The launch line as given."""
    ranking: Annotated[str, _kw(enum=["max", "sum", "calibrated"])]
    """What ranks the layouts: the datasheet floor_max or floor_sum (as regimes --floor), or a calibration's
    prediction."""
    calibration: str | None
    """The calibration file (null without one)."""
    source: str
    """Where the flags and the switching rule come from."""
    flags: list[Annotated[str, _kw(description="A flag or its value.")]]
    """The flags to add to the launch line, flag and value alternating (a crossover that never happens in range adds
    none)."""
    crossovers: Annotated[list[Crossover], _kw(minItems=2, maxItems=2)]
    """The prefill crossover, then the decode crossover at --batch."""
    decode_by_batch: list[DecodeAtBatch]
    """The decode crossover at other batch sizes (SGLang's threshold is one number for all)."""
    plot: str | None = None
    """Picture written (only with --plot)."""


# ---- walls: where each resource starts to bind as load grows ---------------------------------------

def _wall_resources() -> list[str]:
    from planner.resources import RESOURCES

    return list(RESOURCES)


WallResource = Annotated[str, _kw(description="Resource.", enum=_wall_resources())]
Seconds = Annotated[MaybeAmount, _kw(description="Seconds (null where not finite).")]
Load = Annotated[float, _kw(description="Load.", minimum=0)]


def _walls_of(unit: str, what: str) -> type:
    """The per-resource walls of one axis (`walls_requests`, `walls_tokens`): each key always there, null if never."""
    names = {"hbm": "hbm", "compute": "compute", "network_bytes": "network_bytes", "network_messages": "network_messages"}
    fields: dict[str, Any] = {}
    for key in names:
        fields[key] = (MaybeAmount, Field(description=f"{what} where {key} becomes binding; null if never in range."))
    fields["kv_capacity"] = (MaybeAmount, Field(description=f"{what} where kv_capacity becomes binding (KV runs out); "
                                                            "null if never in range."))
    fields["host_link"] = (MaybeAmount, Field(description="Where host_link (a host KV tier's fetches) becomes binding; "
                                                          "null if never in range."))
    from pydantic import create_model

    return create_model(f"Walls{unit.title()}", __base__=_Part, **fields)


WallsRequests = _walls_of("requests", "Requests")
WallsTokens = _walls_of("tokens", "Tokens")


class Wall(_Part):
    """A wall."""

    resource: WallResource
    """Resource."""
    at_requests: Amount | None = None
    """Requests where it binds (when along = batch)."""
    at_tokens: Amount | None = None
    """Tokens where it binds (when along = context)."""


class FirstWall(Wall):
    """The first wall hit past the start of the range; null if none."""


class LayoutWalls(_Part):
    """One layout's walls."""

    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    host_tier: bool | None = None
    """This row is the layout with --host-tier's host KV tier."""
    walls_requests: WallsRequests | None = None
    """Each resource's wall, requests (when along = batch): where it becomes binding; null if never in range."""
    walls_tokens: WallsTokens | None = None
    """Each resource's wall, tokens (when along = context): where it becomes binding; null if never in range."""
    order: list[Wall]
    """Walls hit, by load."""
    first_wall: FirstWall | None
    """The first wall hit past the start of the range; null if none."""
    binding_at_start: Annotated[str, _kw(enum=_wall_resources())]
    """What binds at the start of the range."""
    kv_wall_requests: Annotated[MaybeAmount, _kw(**{"x-keep-null": True})] = None
    """Requests where KV runs out (when along = batch); null if not in range."""
    kv_wall_tokens: Annotated[MaybeAmount, _kw(**{"x-keep-null": True})] = None
    """Tokens where KV runs out (when along = context); null if not in range."""
    feasible: bool
    """The engine's pool exists (false: the KV wall is at the start of the range)."""
    infeasible_reason: str | None
    """Why there is no pool; null when feasible."""
    kv_pool_gib_per_gpu: Amount
    """KV pool per GPU, GiB."""
    nodes_per_group: Count
    """Nodes one group spans."""
    loads_requests: list[Load] | None = None
    """Grid of loads, requests (along = batch; only with --calibration)."""
    loads_tokens: list[Load] | None = None
    """Grid of loads, tokens (along = context; only with --calibration)."""
    predicted_s: list[Seconds] | None = None
    """Calibrated step time per load, seconds (only with --calibration)."""
    floor_max_s: list[Seconds] | None = None
    """floor_max per load, seconds (only with --calibration)."""
    floor_sum_s: list[Seconds] | None = None
    """floor_sum per load, seconds (only with --calibration)."""


class FirstWallOf(_Part):
    """A layout's first wall."""

    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    host_tier: bool | None = None
    """The row is a layout with the host tier."""
    resource: WallResource
    """Resource."""
    at_requests: Amount | None = None
    """Requests where it binds (when along = batch)."""
    at_tokens: Amount | None = None
    """Tokens where it binds (when along = context)."""


class WallsResult(Document):
    """As load grows (batch at fixed context, or context at fixed batch): where each resource starts to bind and
    where KV runs out, per layout, in order."""

    command: ClassVar[str] = "walls"
    # the fixed load's key follows the growing axis
    model_config = ConfigDict(json_schema_extra={"if": {"properties": {"along": {"const": "batch"}}},
                                                 "then": {"required": ["context_tokens"]},
                                                 "else": {"required": ["batch"]}})

    model: str
    """Model name (built-in card name or the config.json's model name)."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    nodes: Count
    """Scale-up domains the deployment spans."""
    engine: str
    """Engine memory model that sized the pools."""
    along: Annotated[str, _kw(enum=["batch", "context"])]
    """The growing axis."""
    context_tokens: Amount | None = None
    """Fixed context, tokens (when along = batch)."""
    batch: Count | None = None
    """Fixed batch, requests (when along = context)."""
    range_requests: Annotated[list[Load], _kw(minItems=2, maxItems=2)] | None = None
    """[LO, HI] of the growing axis, requests (when along = batch)."""
    range_tokens: Annotated[list[Load], _kw(minItems=2, maxItems=2)] | None = None
    """[LO, HI] of the growing axis, tokens (when along = context)."""
    layouts: Annotated[list[LayoutWalls], _kw(minItems=1)]
    """One entry per layout."""
    first_wall_order: list[FirstWallOf]
    """Layouts ranked by where their first wall binds, earliest first."""
    plot: str | None = None
    """PNG written (only with --plot)."""


# ---- validate: a calibration checked on a profile ---------------------------------------------------

class FloorViolation(_Part):
    """A row faster than its datasheet floor: a spec or the model is wrong."""

    source: str
    """Profile file."""
    line: Tally
    """Line."""
    measured_s: Amount
    """Measured, seconds."""
    floor_max_s: Amount
    """Optimistic floor, seconds."""
    resources: list[Annotated[ResourceName, _kw(description="Resource.")]]
    """Resources that alone take longer."""


class RowResidual(_Part):
    """One row's residual."""

    # --holdout adds the row's prediction with its group held out, one key per grouping
    model_config = ConfigDict(json_schema_extra={"patternProperties": {"^holdout_(model|gpus|layout)_predicted_s$": {
        "type": ["number", "null"], "description": "The row predicted with its group held out."}}})

    source: str
    """Profile file."""
    line: Tally
    """Line."""
    gpus: Count
    """GPUs in the deployment, all replicas."""
    attn: AttnName
    """Attention layout: tp, cp (context parallel), dp (DP-attention) or dop (decoupled ownership)."""
    moe: MoeName
    """MoE split: ep (experts spread over ranks) or tp (every expert split over ranks); tp for dense models."""
    batch: Amount
    """Decode requests."""
    context_tokens: Amount
    """Context, tokens."""
    prefill_tokens: Amount
    """Prefill tokens."""
    measured_s: Amount
    """Measured, seconds."""
    predicted_s: Amount
    """This calibration's prediction, seconds."""
    cv_predicted_s: MaybeAmount
    """Out-of-fold prediction, seconds."""
    floor_max_s: Amount
    """Optimistic floor, seconds."""
    floor_sum_s: Amount
    """Pessimistic floor, seconds."""
    error_pct: float
    """(predicted − measured) ÷ measured, percent."""
    cv_error_pct: Maybe
    """(cv_predicted − measured) ÷ measured, percent."""


class HeldOutGroup(_Part):
    """One held-out group."""

    group: str
    """The group's value (a model, a GPU count, attn/moe)."""
    rows: Tally
    """Rows in the group."""
    trained_on_rows: Tally
    """Rows the fit that predicted it used."""
    median_abs_pct_error: Amount | None = None
    """Median |error| % of the group's rows."""
    p90_abs_pct_error: Amount | None = None
    """p90 |error| % of the group's rows."""
    skipped: str | None = None
    """Why the group could not be held out."""


class Holdout(_Part):
    """One grouping."""

    by: Annotated[str, _kw(enum=["model", "gpus", "layout"])]
    """What a group is."""
    groups: list[HeldOutGroup]
    """Per group."""
    rows_predicted: Tally
    """Rows of the groups that could be held out."""
    median_abs_pct_error: Maybe
    """Median |error| % over the predicted rows."""
    p90_abs_pct_error: Maybe
    """p90 |error| % over the predicted rows."""


class ValidateResult(Document):
    """A calibration checked on a profile: per-row residuals, k-fold cross-validated error, datasheet-floor
    violations."""

    command: ClassVar[str] = "validate"

    calibration: str
    """Calibration artifact path."""
    rows: Tally
    """Rows validated."""
    folds: Annotated[int, _kw(minimum=2)]
    """k of k-fold cross-validation."""
    cv_median_abs_pct_error: MaybeAmount
    """Cross-validated median |error|, percent."""
    cv_p90_abs_pct_error: MaybeAmount
    """Cross-validated 90th percentile |error|, percent."""
    median_abs_pct_error: MaybeAmount
    """This calibration's median |error| on these rows, percent."""
    p90_abs_pct_error: MaybeAmount
    """This calibration's 90th percentile |error|, percent."""
    fraction_inside_floors: MaybeAmount
    """Share of rows inside the datasheet [floor_max, floor_sum]."""
    rows_below_floor: list[FloorViolation]
    """Floor violations."""
    residuals: list[RowResidual]
    """Per-row residuals."""
    holdout: list[Holdout]
    """Hold-out by group (--holdout): each group predicted by a fit on the others."""
    rows_rejected: list[Annotated[str, _kw(description="A rejected row and why.")]]
    """Rows left out."""
