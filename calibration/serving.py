"""A serving-benchmark row as the steps an engine runs, per output token of one request: the
closed-loop steady state of the engine's own scheduler (planner.engines.scheduling — the facts the
serving loop, runtime_policy/loop.py, runs step by step; tests/calibration/test_serving_rows.py
holds the two to the same TPOT on the same rows).

A serving row (isl, osl, concurrency C, TPOT) is the steady state of C requests always in
flight. Benchmark tools define TPOT per request as (e2e − ttft)/(osl − 1) (vllm
vllm/benchmarks/serve.py `calculate_metrics`; SGLang's bench_serving the same), so it is the
mean time between one request's tokens, and it includes every step that ran while the request
decoded: its own decode steps and the prefill chunks of requests admitted meanwhile.

Per deployment group (C/replicas requests), as the engine schedules it:
- **running**: n = min(C, the requests the KV pool holds at the mean context isl + osl/2, the
  engine's running-request cap over its owner groups); the other C − n wait in the queue (their
  TTFT absorbs the wait; TPOT is the running batch's);
- **one scheduler per owner group** (G of them: the placement's): each runs n/G requests and admits
  its own new ones, with τ tokens accepted per decode step (1 without speculative decoding; a step
  then verifies B·(k+1) query tokens): a request's decode lasts osl/τ steps, so a group admits
  ρ = (n/G)·isl·τ/osl prompt tokens per step, in chunks of at most its chunk (`chunk`, per group:
  SGLang's chunked_prefill_size // dp_size, vLLM's max_num_batched_tokens per engine core);
- **mixed** (vLLM, TRT-LLM): a chunk shares a step with the group's decodes, in one token budget
  that the decodes take first (vllm/v1/core/sched/scheduler.py schedules running requests before
  waiting ones); a fraction p = f = ρ/s of a group's steps carries a chunk of s tokens;
- **separate** (SGLang, no --enable-mixed-chunk): a group runs its prefill batch as a step of its
  own, its decodes waiting: f = ρ/s prefill steps per decode step, so p = f/(1 + f) of its steps
  prefill; a request's token comes once per decode step of its group: TPOT = E[step]/(1 − p);
- with G groups each prefilling independently in a p share of steps, a step has no chunk with
  probability (1 − p)^G, else k̄ = G·p / (1 − (1 − p)^G) chunks on average (the MLP side sees them
  all; the busiest rank runs one); with G = 1 this is the one-chunk reading of old: TPOT =
  ((1 − f)·t_dec + f·t_mix)/τ mixed, (t_dec + f·t_pre)/τ separate.
A chunk is the prompts waiting when a step is built: with λ = ρ/isl prompts arriving per step
(closed loop: a finished request's successor), a share 1 − e^−λ of the steps find at least one, and
then isl·λ/(1 − e^−λ) tokens of them on average (≈ one prompt when λ is small), at most `chunk`; a prompt longer than `chunk` is cut into ⌈isl/chunk⌉ chunks, the
later ones attending to the earlier ones (mean prefix (isl − s)/2). Decoding requests sit at
isl + osl/2 tokens of context on average. If ρ exceeds what the engine can prefill (f > 1 for a
mixing engine), the row is not a steady state: every step is priced with a full chunk.

Does not: price TTFT's prefill or the queue's wait into TPOT (the wait is reported: `row_queue`),
the draft model's cost (MTP layers are not counted), or prefix caching.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


ENGINES: tuple[str, ...] = ("sglang", "vllm", "trtllm")
MIXED_CHUNK_ENGINES = frozenset({"vllm", "trtllm"})


def default_chunk_tokens(engine: str, dep) -> int:
    """Prefill tokens one owner group's scheduler runs per step by default, for a row that ran on
    `dep`'s hardware and layout under `engine`: the engine's scheduler (planner.engines: SGLang
    `chunked_prefill_size` 8192 below 160 GiB, 16384 at or above, divided by dp_size under DP
    attention; vLLM `max_num_batched_tokens` 8192 on ≥ 70 GiB GPUs other than Ampere, else 2048,
    per engine core; TensorRT-LLM `max_num_tokens` 8192 per rank)."""
    from planner.deployment import replace_deployment
    from planner.engines.base import engines  # lazy: the engines import the step model

    known = engines()
    if engine not in known:
        raise ValueError(f"engine={engine!r} is not one of {', '.join(ENGINES)}")
    d = dep if dep.engine == engine else replace_deployment(dep, engine=engine)
    return int(known[engine].scheduler(d).chunk_tokens_per_group)


@dataclass(frozen=True)
class StepKind:
    """One kind of step a serving row runs, and how many of them per output token of a request."""

    batch: float  # decode requests in the step, whole deployment group (the step model takes the busiest owner's)
    context: float  # their mean context, tokens
    prefill_tokens: float  # chunk tokens in the step, per owner group that prefills
    prefill_context: float  # the chunk's cached prefix
    query_tokens: float  # query tokens per decode request (k + 1 when verifying k drafts)
    weight: float  # steps of this kind per output token of one request
    prefill_groups: float = 1.0  # owner groups running a chunk in the step (mean, ≥ 1 where it has one)


@dataclass(frozen=True)
class RowQueue:
    """How many of a row's requests run and how many wait (module docstring), per deployment group."""

    concurrency: float  # requests in flight per group
    running: float  # decoding at once: min(C, pool, cap)
    queued: float  # waiting for admission
    pool_requests: float  # what the KV pool holds at the mean context
    running_cap: float  # the engine's cap over its owner groups

    def queue_wait_s(self, tpot_s: float, osl: float) -> float:
        """The mean wait of a request in the queue before admission (TTFT's part that TPOT leaves
        out): the running batch finishes n/(osl·TPOT) requests per second, each freeing a slot for
        the queue's head, so the `queued` ahead of a new request take queued·osl·TPOT/n (Little)."""
        return self.queued * osl * tpot_s / self.running


def row_queue(concurrency: float, replicas: int, pool_requests: float = math.inf,
              running_cap: float = math.inf) -> RowQueue:
    """The running batch and the queue of a row (module docstring); `pool_requests` and
    `running_cap` are per deployment group."""
    c = concurrency / replicas
    n = max(min(c, pool_requests, running_cap), 1.0)
    return RowQueue(c, n, max(c - n, 0.0), pool_requests, running_cap)


def serving_steps(isl: float, osl: float, concurrency: float, replicas: int, engine: str, chunk: int,
                  spec_tokens: int = 0, accept_len: float = 1.0, groups: int = 1, running: float | None = None,
                  mode: str | None = None) -> list[StepKind]:
    """The steps behind one serving row's TPOT (module docstring), per deployment group: `groups`
    owner groups, each with its own chunk of `chunk` tokens; `running` the requests that decode at
    once (None: all of concurrency/replicas); `mode` "separate"/"mixed" (None: the engine's, from
    MIXED_CHUNK_ENGINES)."""
    c = concurrency / replicas if running is None else running
    q = 1.0 + spec_tokens
    tau = accept_len if spec_tokens else 1.0
    ctx = isl + osl / 2.0
    g = float(groups)
    per_group = c / g
    rho = per_group * isl * tau / osl  # prompt tokens a group admits per decode step
    mixed = (mode == "mixed") if mode is not None else engine in MIXED_CHUNK_ENGINES
    budget = float(chunk)
    if mixed:
        # NOTE: vLLM's token budget covers the decode tokens first (vllm/v1/core/sched/scheduler.py
        # schedules running requests before waiting ones); a budget the decodes fill leaves one token
        budget = max(budget - per_group * q, 1.0)
    if isl <= budget:
        # NOTE: a scheduler prefills whatever waits when it builds a batch (SGLang
        # get_new_batch_prefill before each decode; vLLM's waiting queue after the running one): with
        # λ = ρ/isl prompts finishing and re-arriving per step (Poisson over the running batch), a
        # share 1 − e^−λ of the steps find some waiting, isl·λ/(1 − e^−λ) tokens of them on average
        lam = rho / isl
        s = min(budget, isl * lam / -math.expm1(-lam)) if lam > 0 else float(isl)
        prefix = 0.0
    else:
        s = budget
        prefix = (isl - s) / 2.0
    f = rho / s
    if mixed:
        p = min(f, 1.0)  # prefill-bound past 1: every step carries a full chunk (not a steady state)
    else:
        p = f / (1.0 + f)
    none = (1.0 - p) ** g  # a step where no group prefills
    # the mean groups prefilling, given one does (exactly 1 with one group)
    chunks = 1.0 if g == 1.0 else min(g * p / (1.0 - none), g) if none < 1.0 else g
    norm = tau if mixed else tau * (1.0 - p)  # a request's token comes in every step / its group's decode steps
    whole = c * replicas  # StepKind.batch is the whole deployment's (the step model takes one replica's)
    decode = StepKind(whole, ctx, 0.0, 0.0, q, none / norm)
    busy = whole if mixed else max(whole * (g - chunks) / g, 0.0)  # separate: the prefilling groups' decodes wait
    chunked = StepKind(busy, ctx, s, prefix, q, (1.0 - none) / norm, max(chunks, 1.0))
    return [k for k in (decode, chunked) if k.weight > 0 and math.isfinite(k.weight)]
