"""The typed documents of the served workloads: `SimulateResult` (`floorfirst simulate`),
`SimulateDisaggResult` (`floorfirst simulate --disagg xPyD`) and `ServeResult` (`floorfirst serve`: the
simulate metrics with the stack that ran and what the torch executor measured), with the switches,
pools and TTFT parts they hold. Built like floorfirst/results.py's documents (its module docstring: units in the key names,
None for an undefined number, a field's docstring is its schema key's description); their schemas are
written from them by schemas/generate.py. The disaggregated document repeats the colocated one's
metrics: both are what executor.sim / runtime_policy.disagg summarize, and each schema describes its
own keys (the disaggregated `layout_time_s` is the decode instances').

Does not: compute (floorfirst.serving, floorfirst.disagg_serving) or validate documents (tests/agent).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from floorfirst.results import (Amount, AttnName, Count, Document, Free, KvDtype, MaybeAmount, MoeName, Number,
                                Tally, _kw, _Part)

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


class _ServedMetrics(_Part):
    """The served-load metrics every served document (simulate, simulate --disagg, serve) carries, in their order
    (runtime_policy/metrics.py `summarize`; the disaggregated run's are of its merged per-request record); the
    step-time model, the policy's misses and the load verdict follow in their own parts, whose order differs
    between simulate (the step-time model first) and serve (last, after what the torch executor measured)."""

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


class _StepModel(_Part):
    """Which model priced the steps (simulate and simulate --disagg carry it after the metrics; serve last)."""

    step_time_model: str
    """Which step-time model priced the steps (datasheet midpoint or a calibration)."""


class _PolicyMisses(_Part):
    """Where the policy's wish was not carried out: aborted switches, and the states it could not decide."""

    aborted_switches: list[AbortedSwitch]
    """Switches the executor aborted (a fault, or the destination's KV filled while the move ran); the old
    layout kept serving."""
    cant_decide: Tally
    """Times the policy answered CANT_DECIDE (a state it refused or an internal error; it stayed put)."""


class _LoadVerdict(_Part):
    """Offered against served load, the queue, and the overload verdict (runtime_policy/metrics.py)."""

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


class _SimulateHeader(_Part):
    """What `floorfirst simulate` served: the deployment, the workload and the policy."""

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


class SimulateResult(_LoadVerdict, _PolicyMisses, _StepModel, _ServedMetrics, _SimulateHeader, Document):
    """`floorfirst simulate`: a workload served with the simulated executor under a fixed layout or the
    dynamic policy: throughput, latency percentiles and the layout switches made."""

    command: ClassVar[str] = "simulate"
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


class _DisaggHeader(_Part):
    """What `floorfirst simulate --disagg` served: the split's GPUs, the workload and the pools' layouts."""

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


class SimulateDisaggResult(_LoadVerdict, _PolicyMisses, _StepModel, _ServedMetrics, _DisaggHeader, Document):
    """`floorfirst simulate --disagg xPyD`: a workload served by x prefill and y decode instances
    (runtime_policy/disagg.py): the colocated simulate's metrics of the merged per-request record (TTFT from
    arrival to the first token the decode instance streams, TPOT and finish from the decode instance), the
    two pools, and the KV hand-off between them: its transfer, the part the prefill does not hide, its NIC
    queue and the queue for decode KV room."""

    command: ClassVar[str] = "simulate_disagg"
    layout_time_s: SecondsByLayout
    """Time the decode instances spent in each attention layout, seconds (summed over instances)."""
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
    per_request: Free | None = Field(None, exclude=True)
    """One column per key (request, arrival_s, first_token_s, finish_s, input_tokens, output_tokens,
    status, preemptions), one row per request of the merged record: what --requests-csv writes (not in
    the JSON document)."""
    timeline: Free | None = Field(None, exclude=True)
    """The decode pool's run over time: what --plot draws (not in the JSON document)."""


# ---- serve ---------------------------------------------------------------------------------------

class ServeStack(_Part):
    """The decode stack the executor ran."""

    layers: Count
    """Layers of the stack."""
    heads: Count
    """Attention heads."""
    hidden_size: Count
    """Residual width."""
    latent_dim: Count
    """Cached latent width per token (kv_lora + rope)."""
    page_tokens: Count
    """Tokens per KV page."""
    kv_pages_per_rank: Annotated[int, _kw(minimum=2)]
    """KV page slots per rank the policy's tables count."""
    device: Literal["cpu", "cuda"]
    """Where the ranks ran."""
    clock: Literal["measured", "table"]
    """The durations the loop read: measured, or the tables' prices."""


class StepRows(_Part):
    """With step logging: one row per step (decode batch, Σ context, chunk tokens, its cached prefix, seconds)."""

    columns: list[str]
    """The columns' names, units in them."""
    rows: list[list[Number]]
    """One row per step, in `columns` order."""


class Measured(_Part):
    """What the torch executor measured (executor/torch_executor/serve.py measured_summary), in its order."""

    steps: Tally
    """Steps run."""
    step_p50_s: MaybeAmount
    """Median step time (slowest rank), seconds."""
    step_p99_s: MaybeAmount
    """99th-percentile step time (slowest rank), seconds."""
    switch_stalls_s: list[Amount]
    """Each commit's measured stall (slowest rank), seconds."""
    kv_identical_across_commits: list[bool]
    """Per commit, when checked: every request's KV identical before and after."""
    graphs_captured_count: Tally | None = None
    """Decode CUDA graphs captured, one per (layout, batch bucket, block-table width): at start-up and on a
    bucket's first use (0 on CPU)."""
    prefill: Literal["real", "synthetic"] | None = None
    """Prompts prefilled on the real layers, or written as synthetic history at admission."""
    prefill_step: Literal["mixed", "separate"] | None = None
    """A prefill chunk in the decodes' step, or in a step of its own."""
    step_rows: StepRows | None = None
    """With step logging: one row per step (decode batch, Σ context, chunk tokens, its cached prefix, seconds)."""
    step_host_s: list[Amount] | None = None
    """With step logging on CUDA: the host's time in each step, seconds, beside step_rows."""
    graphs_at_start_count: Tally | None = None
    """Of those, captured before serving (every batch bucket up to max_batch)."""


class _ServeRun(_Part):
    """What ran the steps of `floorfirst serve`."""

    executor: Literal["torch", "sim"]
    """Which executor ran the steps."""
    stack: ServeStack
    """The decode stack the executor ran."""


class ServeResult(_LoadVerdict, _PolicyMisses, _ServedMetrics, _ServeRun, _SimulateHeader, Document):
    """`floorfirst serve`: a workload served through the serving loop with the dynamic policy or a fixed layout, on
    the torch executor (real MLA decode layers, one process per rank) or the simulator over the same tables: the
    simulate metrics, the stack that ran, and what the torch executor measured."""

    command: ClassVar[str] = "serve"
    kv_dtype: Literal["float32", "bfloat16"]
    """Element type of the stack's weights and KV (float32 on CPU, bfloat16 on CUDA)."""
    measured: Measured | None = None
    """What the torch executor measured (absent on the simulator)."""
    step_time_model: str
    """Which step-time model priced the steps (datasheet midpoint or a calibration)."""
