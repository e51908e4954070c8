"""The step-time formula, in one place: a step's per-resource seconds from the compiled tables
(runtime_policy/tables.py), and the step time those give.

For layout l and timed resource r (R = len(planner.TIMED_RESOURCES)), a step of B decodes and a
prefill chunk of P tokens attending to a cached prefix of C tokens costs

    t_r = base_r[B + P] + chunk_r(P, C) + c1_r·S1 + c2_r·S2
    chunk_r(P, C) = prefill_r[P] + (min(C, knee)·lo_r[P] + (C − min(C, knee))·hi_r[P])   (0 without a chunk)
    step = overhead + max_r t_r + α·(Σ_r t_r − max_r t_r)

(S1 = Σ min(L, top-k), S2 = Σ L over the requests the busiest rank reads; tables.py says what each
table holds). Owner layouts run a chunk on its requests' owner, so a step with a chunk is the slower
candidate of two ranks — the decode-busiest owner (no chunk terms) and the owner running most of
the chunk (its chunk, its own S) — the one with the larger max term, the chunk's owner on a tie.

Two evaluations of the one formula: `step_seconds` in plain Python floats (the policy's `decide`
and the simulator's short runs: a numpy call costs ~1 µs to dispatch, more than the arithmetic of
a row), and `combine` on numpy arrays vectorized over a run's steps (`StepTimeTable.step_s`). Both
add in the same order — base, then chunk, then c1·S1, then c2·S2; the terms' sum left to right —
so they agree bit for bit (tests/runtime_policy/test_step_time.py).

Does not: know about requests, layouts' names or batches (tables.py, policy.py, executor/sim.py).
"""

from __future__ import annotations

import numpy as np

from planner.resources.vector import TIMED_RESOURCES

NO_TOPK = 1e18  # top-k of attention that is not sparse: min(L, top-k) = L
NET_BYTES = TIMED_RESOURCES.index("network_bytes")
_NEG_INF = float("-inf")


def chunk_terms(chunk_row, prefix_tokens: float | None, knee_tokens: float) -> list[float]:
    """[R] what a chunk adds to each resource: `chunk_row` is the table's 3R floats for the chunk's
    size and layout (prefill, prefix slope below the knee, above it); `prefix_tokens` the cached
    prefix it attends to (None: 0)."""
    r = len(chunk_row) // 3
    if prefix_tokens is None:
        return list(chunk_row[:r])
    lo = knee_tokens if knee_tokens < prefix_tokens else prefix_tokens  # = min(C, knee)
    hi = prefix_tokens - lo
    return [q + (lo * a + hi * h) for q, a, h in zip(chunk_row[:r], chunk_row[r:2 * r], chunk_row[2 * r:])]


def step_seconds(base_row, chunk, c1_row, c2_row, s1: float, s2: float, alpha: float,
                 overhead_s: float) -> tuple[float, float]:
    """(step seconds, its largest term) of one step: `base_row` [R] the base table's row for its
    B + P tokens, `chunk` [R] `chunk_terms(...)` or None (no chunk), `c1_row`/`c2_row` [R] the
    per-token coefficients, `s1`/`s2` the step's sums (module docstring)."""
    mx, tot = _NEG_INF, 0.0
    if chunk is None:
        for b, k1, k2 in zip(base_row, c1_row, c2_row):
            v = b + s1 * k1 + s2 * k2
            tot += v
            if v > mx:
                mx = v
    else:
        for b, q, k1, k2 in zip(base_row, chunk, c1_row, c2_row):
            v = b + q + s1 * k1 + s2 * k2
            tot += v
            if v > mx:
                mx = v
    return overhead_s + mx + alpha * (tot - mx), mx


def owner_step_seconds(base_row, chunk, c1_row, c2_row, busy_s1: float, busy_s2: float, own_s1: float,
                       own_s2: float, alpha: float, overhead_s: float) -> float:
    """An owner layout's step with a chunk: the slower of the decode-busiest owner (S = busy_*, no
    chunk) and the chunk's owner (S = own_*, with `chunk`), by the larger max term (a tie: the
    chunk's owner)."""
    own, own_mx = step_seconds(base_row, chunk, c1_row, c2_row, own_s1, own_s2, alpha, overhead_s)
    busy, busy_mx = step_seconds(base_row, None, c1_row, c2_row, busy_s1, busy_s2, alpha, overhead_s)
    return own if own_mx >= busy_mx else busy


def combine(terms: np.ndarray, alpha: float, overhead_s: float) -> np.ndarray:
    """Step seconds from per-resource seconds on the last axis (`step_seconds` vectorized)."""
    mx = terms.max(axis=-1)
    return overhead_s + mx + alpha * (terms.sum(axis=-1) - mx)


def chunk_terms_np(prefill_s: np.ndarray, lo_s: np.ndarray, hi_s: np.ndarray, prefix_tokens: np.ndarray | None,
                   knee_tokens: float) -> np.ndarray:
    """[k, R] `chunk_terms` of k steps: the tables' rows [k, R] for each step's chunk size, and each
    step's prefix [k] (None: 0)."""
    if prefix_tokens is None:
        return prefill_s
    c = np.asarray(prefix_tokens, dtype=np.float64)
    lo = np.minimum(c, knee_tokens)
    return prefill_s + (lo[:, None] * lo_s + (c - lo)[:, None] * hi_s)


def decode_terms_np(base: np.ndarray, chunk: np.ndarray | None, c1_row: np.ndarray, c2_row: np.ndarray,
                    s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """[k, R] per-resource seconds of k steps (`step_seconds`'s terms vectorized): base [k, R],
    chunk [k, R] or None, coefficient rows [R], sums [k]."""
    t = base if chunk is None else base + chunk
    return t + s1[:, None] * c1_row + s2[:, None] * c2_row


def owner_choice_np(busy: np.ndarray, own: np.ndarray, has_chunk: np.ndarray) -> np.ndarray:
    """[k, R] `owner_step_seconds`'s choice vectorized: the chunk owner's terms where the step has
    a chunk and their max is at least the decode-busiest owner's."""
    use_own = has_chunk & (own.max(axis=-1) >= busy.max(axis=-1))
    return np.where(use_own[:, None], own, busy)
