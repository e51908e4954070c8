"""Request ordering: which waiting request is admitted next, and which running one is preempted
when KV runs short.

- `fcfs`: arrival order; preempt the latest arrival (vLLM's default).
- `srpt-oracle`: shortest remaining output first with the *true* output lengths (a baseline no
  server has); preempt the longest remaining.
- `boost`: prediction-free soft priority. Key (smaller = sooner), in seconds:

      key = queued_s + β · E_i,   E_i = prefill_s(tokens to prefill) + tpot_s · E[remaining | attained]

  where E[remaining | attained a] is the mean residual life of the *observed* distribution of
  completed output lengths (a sliding window of the last `window` completions) — no
  per-request prediction. β (`boost`) is the one knob: 0 is FCFS; large β is shortest-expected-
  first; in between a request's wait offsets its expected cost one second for 1/β seconds, so
  nothing starves. `queued_s` is when the request last joined the queue: its arrival, or for a
  preempted request the time it was preempted. NOTE: the wait that ages a request counts from when
  it was last served, so a request that has never produced a token keeps the wait since its
  arrival — its first token (TTFT) is still owed — while a preempted one, whose first token is
  out, starts waiting again. Aged from arrival instead, a preempted request (same arrival, shorter
  mean residual output once it has attained some) was re-admitted ahead of fresh requests when all
  arrive together, and fresh requests waited for their first token (shrinking batch on TP:
  P99 TTFT +91–188 % vs oracle SRPT). Preemption is cache-aware: the victim maximises key − recompute_s, where a
  running request's key is arrival_s + β · tpot_s · E[remaining | attained] (its prefill is done)
  and recompute_s the prefill of its whole context (which preemption throws away): the
  lowest-priority request that is cheapest to recompute.

  Displacement (boost only): when the batch is full (max_batch running) and the queue's head is
  still owed its first token, the head takes the place of the victim (chosen as above among the
  running requests that arrived no earlier than it) if the victim's key less its recompute_s is
  above the head's key. NOTE: without it, requests that arrive together can't be told apart
  (no length prediction: all have the same E), so a full batch admits them in effect at random,
  and slots held by the long ones hold back everyone's first token; the oracle admits the
  shortest first (shrinking batch, 256 cap: boost's P99 TTFT was +28 % vs the oracle). With it,
  a request that has run long (so, by the observed distribution, is likely to run long) makes way
  for a fresh one: least-attained-service among equals, the one input boost has. The two limits
  keep its cost bounded and FCFS's fairness: a request never displaces an older one (in an
  open workload the running ones mostly arrived first, so little changes there), and only a request
  with no token yet displaces (one wave of preemptions, not processor sharing among the long
  ones: tried without this limit, 2.3–2.6 preemptions per request and P99 TTLT 9–16 points
  worse). The oracle baseline orders admission only: with lengths known, displacing would be a
  policy of its own.

Does not: decide admission capacity or run anything (loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.errors import SpecError

ORDERS: tuple[str, ...] = ("fcfs", "srpt-oracle", "boost")
DEFAULT_BOOST = 1.0  # NOTE: chosen a priori (expected cost weighs as much as waiting time), not tuned


@dataclass
class LengthStats:
    """Sliding window of completed output lengths and their mean residual life."""

    window: int = 1024
    refresh_every: int = 32
    _buf: list[float] = field(init=False)  # NOTE: a list: one add per completion, a copy per refresh
    _n: int = field(default=0, init=False)
    _sorted: np.ndarray = field(init=False)
    _suffix: np.ndarray = field(init=False)
    _since: int = field(default=0, init=False)
    version: int = field(default=0, init=False)
    _snapshot: list[float] | None = field(default=None, init=False)  # the window at the last refresh, unsorted
    _suffix_stale: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._buf = [0.0] * self.window
        self._sorted = np.zeros(0)
        self._suffix = np.zeros(1)

    def add(self, output_tokens: float) -> None:
        self._buf[self._n % self.window] = output_tokens
        self._n += 1
        self._since += 1
        if self._since >= self.refresh_every or self._n <= self.refresh_every:
            self._refresh()

    def _refresh(self) -> None:
        # NOTE: a refresh keeps a copy of the window (~2 µs) and sorts it when first read (~75 µs
        # with the suffix sums): with FCFS only the KV projection reads it, every 256 decode steps,
        # so most refreshes are never sorted (the simulator's chat load: 16 sorts for 93 refreshes)
        self._snapshot = self._buf[: min(self._n, self.window)]
        self._since = 0
        self.version += 1

    def _sort(self) -> None:
        self._sorted = np.sort(np.array(self._snapshot))
        self._snapshot = None
        self._suffix_stale = True

    @property
    def sorted_lengths(self) -> np.ndarray:
        """The window's lengths at the last refresh, ascending (read-only use)."""
        if self._snapshot is not None:
            self._sort()
        return self._sorted

    def expected_remaining(self, attained: np.ndarray, default: float) -> np.ndarray:
        """E[X − a | X > a] per attained value; `default` before any completion, and `a` itself
        (Lindy) for requests already longer than every observed one."""
        a = np.asarray(attained, dtype=np.float64)
        srt = self.sorted_lengths
        if self._suffix_stale:
            self._suffix = np.concatenate([np.cumsum(srt[::-1])[::-1], [0.0]])
            self._suffix_stale = False
        n = srt.size
        if n == 0:
            return np.full(a.shape, default)
        idx = np.searchsorted(srt, a, side="right")
        cnt = n - idx
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_above = self._suffix[idx] / cnt
        return np.where(cnt > 0, mean_above - a, np.maximum(a, 1.0))


@dataclass
class Ordering:
    """One of ORDERS. `keys` ranks waiting requests, `victim` picks a preemption victim."""

    name: str
    boost: float = DEFAULT_BOOST
    stats: LengthStats = field(default_factory=LengthStats)
    tpot_s: float = 0.02  # running estimate, updated by the loop
    prefill_s_per_token: float = 1e-5  # from the tables, set by the loop
    default_output_tokens: float = 256.0

    def __post_init__(self) -> None:
        if self.name not in ORDERS:
            raise SpecError(f"order={self.name!r} is not one of {', '.join(ORDERS)}")
        if not np.isfinite(self.boost) or self.boost < 0:
            raise SpecError(f"boost={self.boost} must be a finite number ≥ 0")

    @property
    def keys_are_arrival(self) -> bool:
        """Whether `keys` is the arrival time itself (then requests in arrival order are in key order)."""
        return self.name == "fcfs"

    @property
    def dynamic_keys(self) -> bool:
        """Whether keys change as statistics change (then the loop re-sorts on completions)."""
        return self.name == "boost"

    def _expected_cost_s(self, prefill_tokens, generated) -> np.ndarray:
        rem = self.stats.expected_remaining(generated, self.default_output_tokens)
        return prefill_tokens * self.prefill_s_per_token + self.tpot_s * rem

    def keys(self, arrival_s, prefill_tokens, generated, output_tokens, queued_s=None) -> np.ndarray:
        """Admission keys (smaller first) of waiting requests, arrays [W]; `queued_s` [W]: when each
        last joined the queue (None: its arrival); only boost reads it."""
        if self.name == "fcfs":
            return np.asarray(arrival_s, dtype=np.float64)
        if self.name == "srpt-oracle":
            return (output_tokens - generated).astype(np.float64)
        since = arrival_s if queued_s is None else queued_s
        return since + self.boost * self._expected_cost_s(prefill_tokens, generated)

    def victim(self, arrival_s, context_tokens, generated, output_tokens) -> int:
        """Index (into the given arrays [R]) of the running request to preempt."""
        if self.name == "fcfs":
            return int(np.argmax(arrival_s))
        if self.name == "srpt-oracle":
            return int(np.argmax(output_tokens - generated))
        return int(np.argmax(self._victim_scores(arrival_s, context_tokens, generated)))

    def _victim_scores(self, arrival_s, context_tokens, generated) -> np.ndarray:
        """boost: a running request's key less the prefill its preemption throws away, [R].
        NOTE: a running request's KV is built, so its priority counts only its expected remaining
        decode; charging it the prefill of its context too (as for a waiting request) cancels the
        recompute term exactly at β = 1 and the choice stops being cache-aware."""
        recompute_s = context_tokens * self.prefill_s_per_token
        rem = self.stats.expected_remaining(generated, self.default_output_tokens)
        return arrival_s + self.boost * self.tpot_s * rem - recompute_s

    @property
    def displaces(self) -> bool:
        """Whether a waiting request may take a running one's place when the batch is full."""
        return self.name == "boost"

    def displace(self, head_key: float, head_arrival_s: float, arrival_s, context_tokens, generated) -> int:
        """boost, the batch full: index (into the running requests' arrays [R]) of the one the
        waiting head replaces, or −1: `victim`'s choice among those that arrived no earlier than the
        head, when its key less the prefill its preemption throws away is above the head's key
        (`keys`): the head is due sooner by more than the recompute costs. NOTE: a request never
        displaces an older one, so displacement reorders only what arrival order leaves open."""
        score = np.where(arrival_s >= head_arrival_s, self._victim_scores(arrival_s, context_tokens, generated), -np.inf)
        v = int(np.argmax(score))
        return v if score[v] > head_key else -1
