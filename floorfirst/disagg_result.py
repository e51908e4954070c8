"""The typed document of `floorfirst disagg --json` (`DisaggResult`): a GPU budget split into prefill
and decode pools (xPyD), the KV hand-off priced between them, the best colocated deployment of the
same GPUs, and (with a sweep) how the best split moves with input and output length. Built like
floorfirst/results.py's documents (units in the key names, None for an undefined number, a field's
docstring is its schema key's description); schemas/disagg.schema.json is written from it by
schemas/generate.py.

Does not: search or price (planner.disagg.search and planner.disagg.report build the dict this model
types; cli/commands/disagg.py prints it), or validate documents (tests/agent).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from floorfirst.results import (Amount, AttnName, Count, Document, Maybe, MaybeAmount, MoeName, Tally, _kw,
                                _Part)


class _Instance(_Part):
    """One instance's group: GPUs, layout and the KV pool the engine sizes for it."""

    gpus_per_instance: Count
    """GPUs of one instance."""
    nodes: Count
    """Nodes one instance spans."""
    attn: AttnName
    """Attention layout of each instance."""
    moe: MoeName
    """MoE split of each instance."""
    owner_groups_count: Count
    """Owner groups of an instance's placement (schedulers that step together)."""
    label: str
    """The instance's layout in words."""
    kv_pool_bytes_per_gpu: Amount
    """KV pool per GPU as the engine sizes it for the role."""
    mem_fraction: Amount
    """The engine's fraction that produced the pool (SGLang mem_fraction_static, vLLM gpu_memory_utilization)."""


class ColocatedGroup(_Instance):
    """One colocated group (the engine's default memory)."""


class MemoryRule(_Part):
    """The role's memory rule."""

    role: Literal["prefill", "decode"]
    """The pool's role."""
    engine: str
    """Whose memory model sizes the pool."""
    rule: str
    """What the engine holds out of the pool for this role, in words (planner/disagg/roles.py)."""
    source: str
    """The engine code the rule is read from."""
    reserve_terms_mib: dict[str, Amount]
    """The role's reserve handed to the engine model, by term (MiB; empty: the engine's own default)."""


class PrefillInstance(_Instance):
    """One prefill instance and its walls."""

    memory: MemoryRule
    """The role's memory rule."""
    instance_count: Count
    """Prefill instances."""
    rate_requests_per_s_per_instance: Amount
    """Requests/s one prefill instance sustains, the hand-off's hold included."""
    binding: str
    """What limits a prefill instance: the binding resource of its steps, or kv_in_flight (prompts held until their
    hand-off ends)."""
    request_s: Amount
    """A request's own prefill: its packed step, or its chunks' steps."""
    step_s: list[Amount]
    """Each step of a request's prefill (one packed step, or one per chunk), s."""
    chunk_tokens_per_group: Count
    """Prompt tokens one owner group's scheduler takes per step (the engine's chunk)."""
    packed_prompts_count: Count
    """Whole prompts packed into one group's step (1 when the prompt is chunked)."""
    kv_request_bytes: Amount
    """One prompt's KV on the busiest rank of the prefill instance."""
    max_in_flight_requests: MaybeAmount
    """Prompts the instance's KV pools hold at once (null: no KV)."""
    nic_busy_fraction: Amount
    """Share of a NIC the instance's own collectives use (groups spanning nodes)."""


class DecodeInstance(_Instance):
    """One decode instance and its walls."""

    memory: MemoryRule
    """The role's memory rule."""
    instance_count: Count
    """Decode instances."""
    rate_requests_per_s_per_instance: Amount
    """Requests/s one decode instance sustains at the TPOT target."""
    binding: str
    """What caps the running batch: tpot:<resource>, kv_capacity, running_cap or none."""
    batch: Tally
    """Running requests across one decode instance."""
    step_s: MaybeAmount
    """Decode step at that batch (the TPOT; null: no batch meets the targets)."""
    context_tokens: Amount
    """Mean context of a running request (input + output/2)."""
    kv_wall_requests: Amount
    """Requests of that context the decode-role pool holds."""
    running_cap_requests: MaybeAmount
    """The engine's running-request cap across the instance (null: none)."""
    nic_busy_fraction: Amount
    """Share of a NIC the instance's own collectives use."""


class Handoff(_Part):
    """The KV hand-off of one request between the two pools (planner/disagg/handoff.py)."""

    engine: str
    """Whose KV connector."""
    backend: Literal["mooncake", "nixl"]
    """The transfer backend priced (SGLang Mooncake, vLLM NIXL)."""
    overlap: Literal["per_chunk", "after_prefill"]
    """per_chunk: each prefill chunk's pages leave when it is done (SGLang); after_prefill: the decode side reads once
    the prefill finished (vLLM)."""
    prompt_tokens: Amount
    """Prompt tokens handed off."""
    request_bytes: Amount
    """One copy of the request's KV as the decode pool stores it (the variants' records × the prompt's pages ×
    layers)."""
    wire_bytes: Amount
    """Bytes on the scale-out tier for the request: the decode group's copies × the request."""
    busiest_send_bytes: Amount
    """Bytes the busiest prefill rank sends for the request."""
    busiest_recv_bytes: Amount
    """Bytes the busiest decode rank receives for the request."""
    sender_gpus: Tally
    """Prefill ranks that send (others hold copies the engines skip)."""
    receiver_gpus: Tally
    """Decode ranks that receive."""
    rank_bytes: list[list[Amount]]
    """Bytes prefill rank i (rows) sends decode rank j (columns) inside the request's prefill group and decode
    group."""
    messages_per_layer: Amount
    """Transfer blocks per layer over every (sender, receiver) pair (one per cache buffer and page; per token for
    SGLang's head-sliced path)."""
    busiest_sender_messages_per_layer: Amount
    """Transfer blocks per layer the busiest sender posts."""
    round_trips_count: Tally
    """Serial synchronous batches on the busiest sender (SGLang: chunks × destinations; vLLM: one READ)."""
    chunks_count: Count
    """Prefill chunks the prompt runs in."""
    mapped_by_tp_ratio: bool
    """The engines' attention-TP rank mapping alone covers every decode rank (false: every prefill rank sends its
    slice)."""
    transfer_s: Amount
    """The request's transfer alone: its busiest NIC at the scale-out rate (less the pools' own collectives' share)
    plus the round trips at the scale-out latency."""
    source: str
    """The engine code the transfer rules are read from."""
    exposed_s: Amount
    """What the hand-off adds after the prefill's last chunk (SGLang: the tail; vLLM: all of it)."""
    supported: bool
    """The engine's connector can make this hand-off."""
    unsupported_reason: str | None
    """Why not, or null."""
    nic_rate_prefill_requests_per_s_per_instance: MaybeAmount
    """Requests/s a prefill instance's busiest NIC carries (null: no bytes)."""
    nic_rate_decode_requests_per_s_per_instance: MaybeAmount
    """Requests/s a decode instance's busiest NIC carries (null: no bytes)."""


class Split(_Part):
    """One xPyD split, summarized (the best of its shape: prefill instances × GPUs, decode instances × GPUs)."""

    label: str
    """The split in words: xP(prefill layout) + yD(decode layout)."""
    gpus: Annotated[int, _kw(minimum=2)]
    """GPUs the split uses."""
    prefill_gpus: Count
    """GPUs of the prefill pool."""
    decode_gpus: Count
    """GPUs of the decode pool."""
    prefill_instance_count: Count
    """Prefill instances."""
    decode_instance_count: Count
    """Decode instances."""
    prefill_label: str
    """One prefill instance's layout."""
    decode_label: str
    """One decode instance's layout."""
    rate_requests_per_s: Amount
    """Requests/s the split sustains: min of the prefill pool, the decode pool and the hand-off's NIC walls."""
    output_tokens_per_s: Amount
    """Output tokens/s at that rate."""
    output_tokens_per_s_per_gpu: Amount
    """Output tokens/s per GPU of the split."""
    ttft_s: Amount
    """A request's prefill + the hand-off's exposed tail (+ one decode step where the decode side computes the last
    prompt token: vLLM); no queueing."""
    tpot_s: MaybeAmount
    """The decode step at the decode pool's batch (null: no batch meets the targets)."""
    binding: str
    """What binds the split: prefill:<wall>, decode:<wall>, handoff:prefill nic or handoff:decode nic."""
    handoff_exposed_s: Amount
    """The hand-off's exposed tail."""
    handoff_share_of_ttft_fraction: Amount
    """The exposed tail over TTFT."""
    handoff_nic_utilization_fraction: Amount
    """The busiest hand-off NIC's load at the split's rate over its bandwidth."""
    feasible: bool
    """The split meets the targets and the engine can make its hand-off."""
    infeasible_reason: str | None
    """Why not, or null."""


class BestSplit(Split):
    """The best split with its pools and hand-off."""

    prefill: PrefillInstance
    """One prefill instance and its walls."""
    decode: DecodeInstance
    """One decode instance and its walls."""
    handoff: Handoff
    """The KV hand-off of one request between the two pools (planner/disagg/handoff.py)."""


class Colocated(_Part):
    """A colocated deployment of the same budget."""

    label: str
    """Replicas × the colocated group's layout."""
    gpus: Count
    """GPUs used."""
    replica_count: Count
    """Replicas of the group."""
    group: ColocatedGroup
    """One colocated group (the engine's default memory)."""
    rate_requests_per_s: Amount
    """Requests/s the replicas sustain: B / (OSL·t_d + B·t_pp) each."""
    output_tokens_per_s: Amount
    """Output tokens/s at that rate."""
    output_tokens_per_s_per_gpu: Amount
    """Output tokens/s per GPU."""
    ttft_s: Amount
    """A request's own prefill (no queueing)."""
    tpot_s: MaybeAmount
    """Decode step + the batch's share of prefill time per output token (null: no batch fits)."""
    batch: Tally
    """Running requests per replica."""
    decode_step_s: MaybeAmount
    """Decode step at that batch (null: no batch fits)."""
    prefill_s_per_request: Amount
    """Seconds of a replica's time one request's prefill takes (packed or chunked)."""
    binding: str
    """What caps the batch: tpot:<resource>, kv_capacity, running_cap or none."""
    feasible: bool
    """It meets the targets."""
    infeasible_reason: str | None
    """Why not, or null."""


class LaunchLines(_Part):
    """The best split's launch lines, one list per engine."""

    sglang: list[str]
    """SGLang: the prefill and decode launch lines (per instance) and the router's."""
    vllm: list[str]
    """vLLM: the prefill and decode launch lines with the NixlConnector config, and the proxy's."""


class SweepRow(_Part):
    """One point of the P:D sweep."""

    input_tokens: Amount
    """Input length of the point."""
    output_tokens: Amount
    """Output length of the point."""
    best_label: str | None
    """The best split there (null: none meets the targets)."""
    prefill_gpus: Annotated[int | None, _kw(minimum=0)]
    """Its prefill GPUs."""
    decode_gpus: Annotated[int | None, _kw(minimum=0)]
    """Its decode GPUs."""
    output_tokens_per_s_per_gpu: MaybeAmount
    """Its output tokens/s per GPU."""
    binding: str | None
    """What binds it."""
    handoff_share_of_ttft_fraction: MaybeAmount
    """Its hand-off's exposed tail over its TTFT."""
    colocated_label: str | None
    """The best colocated deployment there."""
    colocated_output_tokens_per_s_per_gpu: MaybeAmount
    """Its output tokens/s per GPU."""
    gain_over_colocated_pct: Maybe
    """Disaggregated over colocated output tokens/s, − 1, in percent (null: either has none)."""


class DisaggResult(Document):
    """Prefill and decode pools (xPyD) of a GPU budget with the KV hand-off priced between them, against the best
    colocated deployment of the same GPUs (planner/disagg)."""

    command: ClassVar[str] = "disagg"

    model: str
    """Model name."""
    hardware: str
    """GPU name."""
    gpus: Annotated[int, _kw(minimum=2)]
    """The GPU budget split between the pools."""
    engine: Annotated[str, _kw(**{"x-registry": "engines"})]
    """Whose memory model and KV connector."""
    floor: Literal["max", "sum"]
    """Steps priced at the optimistic (max) or pessimistic (sum) floor."""
    pricing: Literal["datasheet", "achieved"]
    """Rates the floors are priced at."""
    input_tokens: Amount
    """Prompt tokens per request."""
    output_tokens: Amount
    """Output tokens per request."""
    ttft_target_s: MaybeAmount
    """TTFT target (null: none)."""
    tpot_target_s: MaybeAmount
    """TPOT target (null: none)."""
    rate_target_requests_per_s: MaybeAmount
    """Rate to sustain (null: the most throughput on the budget)."""
    best: BestSplit | None
    """The best split (null: none meets the targets)."""
    colocated: Colocated | None
    """The best colocated deployment of the budget (null: none meets the targets)."""
    gain_over_colocated_pct: Maybe
    """Disaggregated over colocated output tokens/s, − 1, in percent (null: either has none)."""
    options: list[Split]
    """The best split of each shape, best first."""
    colocated_options: list[Colocated]
    """Colocated deployments, best first."""
    launch: LaunchLines | None
    """The best split's launch lines (null: no best)."""
    ratio_sweep: list[SweepRow]
    """The best split at each (input, output) of --sweep-input/--sweep-output (empty without)."""
    plot: str | None = None
    """Where --plot wrote the sweep's picture."""

