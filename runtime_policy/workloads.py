"""Seeded, reproducible workloads: request arrival times and input/output lengths.

- `chat`: Poisson arrivals at `rate_per_s`; prompt and output lengths log-normal (medians 1024 and
  256 tokens, σ = 1), a stationary mix of short and long conversations.
- `shrinking`: every request arrives at t = 0 (a reasoning or RL-rollout batch); short prompts
  (median 512) and heavy-tailed outputs (log-normal, median 1500, σ = 1.2, up to 64K): the batch
  starts as many short requests and ends as a few very long ones.
- `bursty`: the chat length mix with gamma inter-arrival times of coefficient of variation 4
  (same mean rate as chat): quiet spells and bursts.
- `longprompt` (agentic / RAG): Poisson arrivals at 1 request/s; prompts log-uniform over
  16K–64K tokens (retrieved documents, tool transcripts); outputs log-normal (median 512, σ 0.8):
  prefill-heavy, the regime where published work finds context parallelism wins.
- `rollout` (a synchronous RL rollout step, GRPO-style): n/8 prompts sampled 8 times each, all
  arriving at t = 0; prompts log-normal (median 1024, σ 0.5; a group's 8 share one prompt length);
  responses log-normal (median 2048, σ 1.2) capped at the rollout's max response length, 32768:
  the top 5 % of responses carry 1 − Φ(1.645 − 1.2) ≈ 33 % of the decoded tokens before the cap
  (28 % of a 512-request draw after it; reasoning-RL
  response lengths are near log-normal, ~5 % of them carrying 30–50 % of the tokens: DARTS,
  arXiv 2605.30859; RollPacker; APRIL). The batch starts as n short requests and ends as a few
  long ones;
- `reasoning`: Poisson arrivals at `rate_per_s` (default 2/s) of short questions (median 256, σ
  0.8) answered with long chains of thought (median 3000, σ 1.0, capped at 32768);
- `agentic` (agent rollouts, e.g. coding agents run as a batch): sessions of several turns, all
  starting within the first 2 s; a session runs a geometric number of turns (mean 8, at most 32);
  each turn's prompt is the session's context so far (task median 2048, σ 0.5; plus each earlier
  turn's output and a tool result of median 1024, σ 1.0) and its output is short (median 256,
  σ 0.8); turn i + 1 arrives after turn i's nominal decode (30 ms a token) and a tool call
  (exponential, mean 2 s). Prompts grow from a few thousand tokens to tens of thousands while
  sessions end: many short requests first, a few long ones last. NOTE: open-loop (a turn's
  arrival does not wait for the simulated previous turn), and prefix caching is not modelled: each
  turn prefills its whole context;
- trace CSV: columns `arrival_s,input_tokens,output_tokens` (header required); a bad row is one
  SpecError naming its line. The Azure LLM inference traces (`TIMESTAMP,ContextTokens,
  GeneratedTokens`) and Mooncake-style JSONL are read as published (runtime_policy/traces.py). Read through planner.inputs (a regular file of at most
  TRACE_MAX_BYTES, UTF-8 with or without a BOM): a FIFO or a device is refused, never waited on.

Parameters are fixed a priori (NOTE: chosen to be typical of each shape, not tuned to any
result); lengths are clipped to [1, 65536] prompt and [1, 65536] output tokens.

Does not: serve anything (loop.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.errors import SpecError
from planner.inputs import path_kind, shown, shown_number

BUILTIN_WORKLOADS: tuple[str, ...] = ("chat", "shrinking", "bursty", "longprompt", "rollout", "reasoning", "agentic")
RATED_WORKLOADS: tuple[str, ...] = ("chat", "bursty", "longprompt", "reasoning")  # the ones --rate sets
MAX_TOKENS = 65536
CHAT_RATE_PER_S = 20.0
LONGPROMPT_RATE_PER_S = 1.0
REASONING_RATE_PER_S = 2.0
ROLLOUT_GROUP = 8  # samples per prompt (GRPO's group)
MAX_RESPONSE_TOKENS = 32768  # a rollout's max response length
AGENT_MEAN_TURNS, AGENT_MAX_TURNS = 8, 32
AGENT_NOMINAL_TOKEN_S = 0.03  # a turn's nominal decode time per output token, before its tool call
AGENT_TOOL_MEAN_S = 2.0


@dataclass(frozen=True)
class Workload:
    name: str
    arrival_s: np.ndarray  # [N] sorted
    input_tokens: np.ndarray  # [N] int64
    output_tokens: np.ndarray  # [N] int64, ≥ 1
    params: dict = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return int(self.arrival_s.size)

    def subset(self, idx: np.ndarray) -> "Workload":
        return Workload(self.name, self.arrival_s[idx], self.input_tokens[idx], self.output_tokens[idx], self.params)


def _lognormal(rng, median: float, sigma: float, n: int, lo: int = 1, hi: int = MAX_TOKENS) -> np.ndarray:
    return np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), lo, hi).astype(np.int64)


def _check_n(n: int) -> None:
    if isinstance(n, bool) or int(n) != n or n < 1 or n > 10_000_000:
        raise SpecError(f"requests={n} must be a whole number in [1, 10,000,000]")


# NOTE: a rate outside this range is no workload (one request a fortnight, or a billion a second),
# and one near 0 makes 1/rate infinite: every arrival at t = inf and a simulation that never ends.
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e9


def _check_rate(rate_per_s: float) -> None:
    if not math.isfinite(rate_per_s) or not MIN_RATE_PER_S <= rate_per_s <= MAX_RATE_PER_S:
        raise SpecError(f"rate={rate_per_s:g} must be between {MIN_RATE_PER_S:g} and {MAX_RATE_PER_S:g} requests per second")


def chat(n: int, seed: int = 0, rate_per_s: float = CHAT_RATE_PER_S) -> Workload:
    _check_n(n)
    _check_rate(rate_per_s)
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    return Workload("chat", arrival - arrival[0], _lognormal(rng, 1024, 1.0, n), _lognormal(rng, 256, 1.0, n),
                    {"rate_per_s": rate_per_s, "input_median_tokens": 1024, "output_median_tokens": 256, "sigma": 1.0})


def shrinking(n: int, seed: int = 0) -> Workload:
    _check_n(n)
    rng = np.random.default_rng(seed)
    return Workload("shrinking", np.zeros(n), _lognormal(rng, 512, 0.5, n), _lognormal(rng, 1500, 1.2, n),
                    {"input_median_tokens": 512, "output_median_tokens": 1500, "output_sigma": 1.2})


def bursty(n: int, seed: int = 0, rate_per_s: float = CHAT_RATE_PER_S, cv: float = 4.0) -> Workload:
    _check_n(n)
    _check_rate(rate_per_s)
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), n)
    arrival = np.cumsum(gaps)
    return Workload("bursty", arrival - arrival[0], _lognormal(rng, 1024, 1.0, n), _lognormal(rng, 256, 1.0, n),
                    {"rate_per_s": rate_per_s, "interarrival_cv": cv})


def longprompt(n: int, seed: int = 0, rate_per_s: float = LONGPROMPT_RATE_PER_S) -> Workload:
    _check_n(n)
    _check_rate(rate_per_s)
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    prompts = np.rint(np.exp(rng.uniform(np.log(16384), np.log(65536), n))).astype(np.int64)
    return Workload("longprompt", arrival - arrival[0], prompts, _lognormal(rng, 512, 0.8, n),
                    {"rate_per_s": rate_per_s, "input_tokens": "log-uniform 16384-65536", "output_median_tokens": 512,
                     "output_sigma": 0.8})


def rollout(n: int, seed: int = 0) -> Workload:
    _check_n(n)
    rng = np.random.default_rng(seed)
    groups = -(-n // ROLLOUT_GROUP)
    prompts = np.repeat(_lognormal(rng, 1024, 0.5, groups), ROLLOUT_GROUP)[:n]
    return Workload("rollout", np.zeros(n), prompts, _lognormal(rng, 2048, 1.2, n, hi=MAX_RESPONSE_TOKENS),
                    {"group": ROLLOUT_GROUP, "input_median_tokens": 1024, "output_median_tokens": 2048,
                     "output_sigma": 1.2, "max_response_tokens": MAX_RESPONSE_TOKENS})


def reasoning(n: int, seed: int = 0, rate_per_s: float = REASONING_RATE_PER_S) -> Workload:
    _check_n(n)
    _check_rate(rate_per_s)
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    return Workload("reasoning", arrival - arrival[0], _lognormal(rng, 256, 0.8, n),
                    _lognormal(rng, 3000, 1.0, n, hi=MAX_RESPONSE_TOKENS),
                    {"rate_per_s": rate_per_s, "input_median_tokens": 256, "output_median_tokens": 3000,
                     "output_sigma": 1.0, "max_response_tokens": MAX_RESPONSE_TOKENS})


def agentic(n: int, seed: int = 0) -> Workload:
    _check_n(n)
    rng = np.random.default_rng(seed)
    arr, inp, out = [], [], []
    while len(arr) < n:
        turns = min(int(rng.geometric(1.0 / AGENT_MEAN_TURNS)), AGENT_MAX_TURNS, n - len(arr))
        t = float(rng.uniform(0.0, 2.0))
        context = int(_lognormal(rng, 2048, 0.5, 1)[0])
        for _ in range(turns):
            o = int(_lognormal(rng, 256, 0.8, 1)[0])
            arr.append(t)
            inp.append(min(context, MAX_TOKENS))
            out.append(o)
            context += o + int(_lognormal(rng, 1024, 1.0, 1)[0])
            t += o * AGENT_NOMINAL_TOKEN_S + float(rng.exponential(AGENT_TOOL_MEAN_S))
    a = np.asarray(arr)
    order = np.argsort(a, kind="stable")
    return Workload("agentic", a[order], np.asarray(inp, dtype=np.int64)[order], np.asarray(out, dtype=np.int64)[order],
                    {"mean_turns": AGENT_MEAN_TURNS, "max_turns": AGENT_MAX_TURNS, "task_median_tokens": 2048,
                     "tool_result_median_tokens": 1024, "output_median_tokens": 256,
                     "nominal_decode_s_per_token": AGENT_NOMINAL_TOKEN_S, "tool_mean_s": AGENT_TOOL_MEAN_S})


def from_csv(path: str | Path, limit: int | None = None) -> Workload:
    """A trace CSV (`arrival_s,input_tokens,output_tokens`, or an Azure trace), read line by line up
    to `limit` requests (None: all; runtime_policy.traces.csv_rows)."""
    p = Path(path)
    want = ["arrival_s", "input_tokens", "output_tokens"]
    from runtime_policy.traces import AZURE_HEADER, csv_rows, from_azure_csv, three_column_rows

    rows = csv_rows(p)
    first = next(rows, None)
    header = [c.strip() for c in first[1]] if first is not None else []
    if header == AZURE_HEADER:
        return from_azure_csv(p, itertools.chain([first], rows), limit)
    if header != want:
        raise SpecError(f"{path}: line 1 must be the header {','.join(want)} (or an Azure LLM inference trace's "
                        f"{','.join(AZURE_HEADER)})")
    arr, inp, out = [], [], []
    for line, row in three_column_rows(rows, path):
        try:
            a, i, o = float(row[0]), float(row[1]), float(row[2])
        except ValueError:
            raise SpecError(f"{path}: line {line}: not a number in {shown(','.join(row))}") from None
        if not math.isfinite(a) or a < 0:
            raise SpecError(f"{path}: line {line}: arrival_s={shown(row[0].strip())} must be ≥ 0")
        for name, v in (("input_tokens", i), ("output_tokens", o)):
            if not math.isfinite(v) or v != int(v) or v < 1 or v > MAX_TOKENS * 16:
                raise SpecError(f"{path}: line {line}: {name}={shown_number(v)} must be a whole number in [1, {MAX_TOKENS * 16}]")
        arr.append(a)
        inp.append(int(i))
        out.append(int(o))
        if limit is not None and len(arr) >= limit:
            break
    if not arr:
        raise SpecError(f"{path}: no requests")
    a = np.asarray(arr)
    order = np.argsort(a, kind="stable")
    return Workload(p.name, a[order], np.asarray(inp, dtype=np.int64)[order], np.asarray(out, dtype=np.int64)[order],
                    {"path": str(p)})


def make_workload(name: str, n: int, seed: int = 0, rate_per_s: float | None = None) -> Workload:
    """A built-in workload by name, or a trace CSV by path (its first n requests; n = 0: all)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise SpecError(f"requests={n!r} must be a whole number")
    if n != 0:  # 0 takes a whole trace
        _check_n(n)
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise SpecError(f"seed={seed} must be a whole number ≥ 0")
    if rate_per_s is not None:
        _check_rate(rate_per_s)
    if name == "chat":
        return chat(n, seed, rate_per_s or CHAT_RATE_PER_S)
    if name == "bursty":
        return bursty(n, seed, rate_per_s or CHAT_RATE_PER_S)
    if name == "shrinking":
        return shrinking(n, seed)
    if name == "longprompt":
        return longprompt(n, seed, rate_per_s or LONGPROMPT_RATE_PER_S)
    if name == "reasoning":
        return reasoning(n, seed, rate_per_s or REASONING_RATE_PER_S)
    if name in ("rollout", "agentic"):
        if rate_per_s is not None:
            raise SpecError(f"workload={name} takes no rate: its requests arrive as a batch (rate applies to "
                            f"{', '.join(RATED_WORKLOADS)})")
        return rollout(n, seed) if name == "rollout" else agentic(n, seed)
    if name.endswith((".jsonl", ".json")):
        from runtime_policy.traces import from_bench_result, from_mooncake_jsonl, is_bench_result

        w = from_bench_result(name, seed) if is_bench_result(name) else from_mooncake_jsonl(name, n or None)
        return w.subset(np.arange(min(n, w.requests))) if n else w
    if name.endswith(".csv") or path_kind(name, "workload file") != "missing":
        return from_csv(name, n or None)  # NOTE: read only up to the n requests the run takes
    raise SpecError(f"workload={name!r} is not one of {', '.join(BUILTIN_WORKLOADS)}, a .csv trace or a Mooncake .jsonl trace")
