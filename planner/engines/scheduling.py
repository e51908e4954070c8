"""How an engine schedules, as declared facts: one `SchedulerSpec` per (engine, deployment), read by
the serving loop that simulates a workload (runtime_policy.loop) and by the serving-row pricing that
calibrates and validates (calibration.serving), so both run the engine's scheduler, not two guesses.

What every engine here shares (each fact is cited in its engine module):
- **one scheduler per owner group**: with data-parallel attention each attention-DP rank runs its own
  scheduler with its own waiting queue, running batch, chunk budget and running-request cap (SGLang:
  one Scheduler per DP rank; vLLM: one EngineCore per DP rank; TRT-LLM: one PyExecutor per
  attention-DP rank), and all groups step together (an idle group runs an empty or dummy batch for
  the MoE collectives). A layout of G owner groups (planner Placement) has G schedulers; TP, CP and
  DCP have one;
- **admission** is capped by the KV pool and by the running-request cap; what doesn't fit waits in
  its group's queue (TTFT absorbs the wait);

and where they differ:
- `prefill_mode`: "separate" — a step runs either a prefill (extend) batch or a decode batch, prefill
  first, so a group's decodes wait while it prefills (SGLang without --enable-mixed-chunk); "mixed" —
  one token budget per step, the running decodes first, the rest a prefill chunk in the same step
  (vLLM V1, TRT-LLM's in-flight batching);
- `chunk_tokens_per_group`: prompt tokens one group's scheduler takes per step (SGLang
  chunked_prefill_size // dp_size; vLLM max_num_batched_tokens per engine core, decodes included;
  TRT-LLM max_num_tokens per rank, decodes included);
- `running_cap_per_group`: requests one group runs at once (SGLang max_running_requests // dp_size,
  or its own derivation from the pool; vLLM max_num_seqs per core; TRT-LLM max_batch_size per rank);
- `routing`: how a new request picks a group (SGLang round robin at dispatch; vLLM the engine core
  with the least waiting·4 + running; TRT-LLM the rank with the fewest active prompt tokens,
  longest prompts first);
- `preemption`: who leaves when KV runs out (SGLang retracts the request with the fewest output
  tokens, ties the longest prompt; vLLM the newest running request; TRT-LLM's default
  GUARANTEED_NO_EVICT reserves each request's prompt + max output up front and never evicts);
- `reserve_output_tokens`: output tokens an admission reserves (TRT-LLM: all of them; vLLM: none;
  SGLang reserves its new request's clipped max_new_tokens and a decaying share of the running
  requests' — not modelled: 0 here, see the SGLang module).

Does not: price steps (the step model), or run anything (the serving loop runs these rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

PrefillMode = Literal["separate", "mixed"]
Routing = Literal["round_robin", "least_loaded", "fewest_prompt_tokens"]
Preemption = Literal["fewest_output_first", "newest_first", "never"]
PREFILL_MODES: tuple[str, ...] = ("separate", "mixed")
ROUTINGS: tuple[str, ...] = ("round_robin", "least_loaded", "fewest_prompt_tokens")
PREEMPTIONS: tuple[str, ...] = ("fewest_output_first", "newest_first", "never")


@dataclass(frozen=True)
class SchedulerSpec:
    """How one engine schedules one deployment (module docstring); counts per owner group."""

    engine: str
    owner_groups: int  # schedulers that step together (the placement's owner groups)
    prefill_mode: PrefillMode
    chunk_tokens_per_group: int  # prompt tokens (mixed: all tokens, decodes first) per group per step
    running_cap_per_group: float  # requests running in one group at once (inf: the pool decides)
    routing: Routing
    preemption: Preemption
    reserve_output_tokens: bool  # admission reserves every request's remaining output tokens
    source: str  # the engine code these facts come from
    # the engine's one chunk setting is divided over its groups (SGLang: chunked_prefill_size //
    # dp_size), or each group has the whole of it (vLLM's max_num_batched_tokens per engine core)
    chunk_split_over_groups: bool = False

    def __post_init__(self) -> None:
        if self.prefill_mode not in PREFILL_MODES or self.routing not in ROUTINGS or self.preemption not in PREEMPTIONS:
            raise ValueError(f"{self.engine}: unknown scheduling fact in {self}")
        if self.owner_groups < 1 or self.chunk_tokens_per_group < 1 or not self.running_cap_per_group >= 1:
            raise ValueError(f"{self.engine}: scheduler counts must be ≥ 1 ({self})")

    def per_group_chunk(self, engine_chunk_tokens: int) -> int:
        """A group's chunk when the engine's own setting is `engine_chunk_tokens` (the launch line's
        --chunked-prefill-size / --max-num-batched-tokens / --max_num_tokens)."""
        return max(engine_chunk_tokens // self.owner_groups, 1) if self.chunk_split_over_groups else engine_chunk_tokens

    @property
    def engine_chunk_tokens(self) -> int:
        """The engine's own chunk setting this per-group chunk comes from."""
        return self.chunk_tokens_per_group * (self.owner_groups if self.chunk_split_over_groups else 1)

    @property
    def running_cap(self) -> float:
        """Requests the whole deployment group runs at once."""
        return self.running_cap_per_group * self.owner_groups

    def group_chunk_tokens(self, decoding_in_group: float) -> float:
        """Prompt tokens one group's step can take next to `decoding_in_group` decodes: the whole
        chunk budget when prefill runs as its own batch; what the decodes leave of the token budget
        when they share it (at least 1: vLLM schedules the running requests first)."""
        if self.prefill_mode == "separate":
            return float(self.chunk_tokens_per_group)
        return max(float(self.chunk_tokens_per_group) - decoding_in_group, 1.0)

    def describe(self) -> dict:
        """JSON view (counts per owner group; units in keys)."""
        cap = self.running_cap_per_group
        return {"engine": self.engine, "owner_groups": self.owner_groups, "prefill_mode": self.prefill_mode,
                "chunk_tokens_per_group": self.chunk_tokens_per_group,
                "running_cap_per_group": None if math.isinf(cap) else cap, "routing": self.routing,
                "preemption": self.preemption, "reserve_output_tokens": self.reserve_output_tokens,
                "source": self.source}
