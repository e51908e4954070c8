"""A serving-benchmark row as the steps an engine runs, per output token of one request.

A serving row (isl, osl, concurrency C, TPOT) is the steady state of C requests always in
flight. Benchmark tools define TPOT per request as (e2e − ttft)/(osl − 1) (vllm
vllm/benchmarks/serve.py `calculate_metrics`; SGLang's bench_serving the same), so it is the
mean time between one request's tokens, and it includes every step that ran while the request
decoded: its own decode steps and the prefill chunks of requests admitted meanwhile.

Per group (C/replicas requests), with τ tokens accepted per decode step (1 without speculative
decoding; a step then verifies B·(k+1) query tokens), a request's decode lasts osl/τ steps and
the group admits C·τ/osl new requests per step, i.e. ρ = C·isl·τ/osl prompt tokens per step.
Engines prefill those in chunks of at most `chunk` tokens (`default_chunk_tokens`):
- vLLM and TensorRT-LLM mix a chunk into a decode step (vLLM V1's scheduler fills one token
  budget, decodes first; TRT-LLM's in-flight batching): a fraction f = ρ/s of the steps carries a
  chunk of s tokens next to the decodes, the rest are decode-only. TPOT = ((1 − f)·t_dec + f·t_mix)/τ.
- SGLang (default `enable_mixed_chunk` off) runs a prefill batch as a step of its own, during
  which no request decodes: f = ρ/s prefill steps per decode step. TPOT = (t_dec + f·t_pre)/τ.
A chunk is one prompt's (s = its length when it fits) or, when several prompts arrive per step,
up to `chunk` tokens of them; a prompt longer than `chunk` is cut into ⌈isl/chunk⌉ chunks, the
later ones attending to the earlier ones (mean prefix (isl − s)/2). Decoding requests sit at
isl + osl/2 tokens of context on average. If ρ exceeds what the engine can prefill (f > 1 for a
mixing engine), the row is not a steady state: every step is priced with a full chunk.

Does not: model TTFT or queueing, the draft model's cost (MTP layers are not counted), or
prefix caching.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


ENGINES: tuple[str, ...] = ("sglang", "vllm", "trtllm")
MIXED_CHUNK_ENGINES = frozenset({"vllm", "trtllm"})


def default_chunk_tokens(engine: str, dep) -> int:
    """Prefill tokens an engine runs per step by default, for a row that ran on `dep`'s hardware and
    layout. SGLang and vLLM: their engine models' `chunked_prefill_tokens` (planner.engines: SGLang
    `chunked_prefill_size` 8192 below 160 GiB, 16384 at or above, divided by dp_size under
    DP-attention; vLLM `max_num_batched_tokens` 8192 on ≥ 70 GiB GPUs other than Ampere, else 2048).
    TensorRT-LLM has no memory model here: `max_num_tokens` 8192 (tensorrt_llm/builder.py BuildConfig)."""
    from planner.engines.base import engines  # lazy: the engines import the step model

    if engine == "trtllm":
        return 8192
    known = engines()
    if engine not in known:
        raise ValueError(f"engine={engine!r} is not one of {', '.join(ENGINES)}")
    return int(known[engine].chunked_prefill_tokens(dep))


@dataclass(frozen=True)
class StepKind:
    """One kind of step a serving row runs, and how many of them per output token of a request."""

    batch: float  # decode requests in the step, whole deployment (the step model takes the busiest group's)
    context: float  # their mean context, tokens
    prefill_tokens: float  # chunk tokens in the step
    prefill_context: float  # the chunk's cached prefix
    query_tokens: float  # query tokens per decode request (k + 1 when verifying k drafts)
    weight: float  # steps of this kind per output token of one request


def serving_steps(isl: float, osl: float, concurrency: float, replicas: int, engine: str, chunk: int,
                  spec_tokens: int = 0, accept_len: float = 1.0) -> list[StepKind]:
    """The steps behind one serving row's TPOT (module docstring), per group."""
    c = concurrency / replicas
    q = 1.0 + spec_tokens
    tau = accept_len if spec_tokens else 1.0
    ctx = isl + osl / 2.0
    rho = c * isl * tau / osl  # prompt tokens admitted per decode step
    mixed = engine in MIXED_CHUNK_ENGINES
    budget = float(chunk)
    if mixed:
        # NOTE: vLLM's token budget covers the decode tokens first (vllm/v1/core/sched/scheduler.py
        # schedules running requests before waiting ones); a budget the decodes fill leaves one token
        budget = max(budget - c * q, 1.0)
    if isl <= budget:
        s = min(budget, max(isl, rho))
        prefix = 0.0
    else:
        s = budget
        prefix = (isl - s) / 2.0
    f = rho / s
    if mixed and f > 1.0:
        f = 1.0  # prefill-bound: every step carries a full chunk (not a steady state)
    decode = StepKind(concurrency, ctx, 0.0, 0.0, q, (1.0 - f if mixed else 1.0) / tau)
    chunked = StepKind(concurrency if mixed else 0.0, ctx, s, prefix, q, f / tau)
    return [k for k in (decode, chunked) if k.weight > 0 and math.isfinite(k.weight)]
