"""What the serving loop is configured with and what it returns: `LoopConfig`, a `SwitchRecord`
per committed (or aborted) switch, and the per-request `ServeResult`. Types only (loop.py runs
them; metrics.py summarizes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.errors import SpecError
from runtime_policy.tables import StepTimeTable


@dataclass(frozen=True)
class LoopConfig:
    """The serving loop's settings; what is None follows the deployment's engine scheduler
    (planner.engines.scheduling, compiled into the tables per layout)."""

    max_batch: int = 4096  # requests holding KV at once (every owner group together)
    # the engine's chunk setting (SGLang --chunked-prefill-size, vLLM --max-num-batched-tokens,
    # TRT-LLM max_num_tokens): each owner group's chunk follows from it as the engine divides it;
    # None: the engine's default
    prefill_chunk_tokens: int | None = None
    max_run_steps: int = 64  # the policy is consulted at least this often
    admit_watermark_fraction: float = 0.01  # KV pool share admission leaves free
    # "separate": a group prefills or decodes in a step (SGLang); "mixed": both (vLLM, TRT-LLM);
    # None: the engine's. NOTE: the torch executor runs a step's decodes and chunk together: mixed
    prefill_mode: str | None = None
    # None: colocated (a request's prompt is prefilled here). A number: this loop is the decode pool of
    # a disaggregated deployment (runtime_policy/disagg.py): a request arrives with its prompt's KV
    # handed off and recomputes only its last `handoff_recompute_tokens` prompt tokens (SGLang 0: the
    # prebuilt batch; vLLM 1: the last prompt token), unless it was preempted here (then all of it)
    handoff_recompute_tokens: int | None = None

    def check(self, tables: StepTimeTable) -> None:
        if not 1 <= self.max_batch <= tables.max_tokens - tables.max_prefill_tokens:
            raise SpecError(f"max_batch={self.max_batch} must be in [1, {tables.max_tokens - tables.max_prefill_tokens}]")
        if self.prefill_chunk_tokens is not None and not 1 <= self.prefill_chunk_tokens <= tables.max_prefill_tokens:
            raise SpecError(f"prefill_chunk_tokens={self.prefill_chunk_tokens} must be in [1, {tables.max_prefill_tokens}]")
        if self.max_run_steps < 1:
            raise SpecError(f"max_run_steps={self.max_run_steps} must be ≥ 1")
        if self.prefill_mode not in (None, "separate", "mixed"):
            raise SpecError(f"prefill_mode={self.prefill_mode!r} must be separate or mixed")
        if self.handoff_recompute_tokens is not None and self.handoff_recompute_tokens < 0:
            raise SpecError(f"handoff_recompute_tokens={self.handoff_recompute_tokens} must be ≥ 0")

    def group_chunks(self, tables: StepTimeTable) -> list[int]:
        """[L] each layout's prompt tokens per owner group per step (0 where the model can't run it)."""
        out = []
        for sch in tables.info.schedulers:
            if sch is None:
                out.append(0)
            elif self.prefill_chunk_tokens is None:
                out.append(min(sch.chunk_tokens_per_group, tables.max_prefill_tokens))
            else:
                out.append(min(sch.per_group_chunk(self.prefill_chunk_tokens), tables.max_prefill_tokens))
        return out


@dataclass(frozen=True)
class SwitchRecord:
    from_layout: str
    to_layout: str
    started_s: float
    at_s: float  # commit (or abort) time
    link_s: float  # predicted
    cost_s: float  # predicted interference + commit stall
    reason: str
    stall_s: float = 0.0  # the commit stall the executor returned (the torch executor: measured)
    aborted: str = ""  # why the executor aborted it ("": committed)


@dataclass
class ServeResult:
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    status: np.ndarray
    preemptions: np.ndarray
    switches: list[SwitchRecord] = field(default_factory=list)  # committed
    steps: int = 0
    decode_steps: int = 0
    layout_time_s: dict[str, float] = field(default_factory=dict)
    timeline: dict[str, list] = field(default_factory=dict)  # t_s, layout, batch, kv_used_fraction
    aborted_switches: list[SwitchRecord] = field(default_factory=list)
    cant_decide: int = 0  # CANT_DECIDE answers the policy gave (it stayed)
