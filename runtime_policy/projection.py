"""The running set's expected KV peak, from the observed output lengths (no per-request prediction).

A running request has produced `a` tokens; by the observed distribution of completed output
lengths (the sliding window the boost ordering keeps, `LengthStats`), it is still running `s`
steps from now with probability N(a + s) / N(a), N(x) = how many observed lengths exceed x, and
then holds its context + s tokens. The running set's expected KV `s` steps ahead is the sum of
those, and its expected peak is the largest over a geometric grid of `s` (the set grows while its
requests run and shrinks as they finish). A request longer than every observed one gets the
survival whose mean residual life is its attained length (the Lindy rule
`LengthStats.expected_remaining` uses): a Pareto tail of index 2, P(still running at s) =
(a / (a + s))², under which its expected KV never rises above its current one (c ≥ a): it is as
likely to finish as to grow. NOTE: a deterministic "runs as long again" doubles every such
request's KV, and in a batch that started together every running request is past every observed
one: the projection then saw the running set double and moved DP → DOP at 262 s on the
calibrated DS-V3.2 shrinking batch, where DP stays best (1.051× of fixed DP instead of 1.086×).

What the policy reads: the peak's growth over the current KV, for all ranks and for the busiest
owner (the peak of each owner's requests, owners kept), so a layout's pool can be compared with
what the running set will need, not only what it holds now.

Does not: count admissions or preemptions to come, or see the unobserved part of the
distribution: in a batch that started together the window holds only lengths shorter than what
every running request has attained, so it projects no growth there; it sees growth where running
requests are younger than the completed ones (an open workload, requests admitted later). It is
zero before the first completion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime_policy.kv_ledger import group_counts

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop

# NOTE: steps ahead at which the expected KV is evaluated: doubling from 16 to 2^20 (17 points),
# which covers any output length a server runs; the peak is read to within the grid's factor of 2
# in time, where the expected KV changes slowly (it is a sum over many requests).
HORIZON_STEPS = 16.0 * 2.0 ** np.arange(17)
PROJECTION_EVERY_STEPS = 256  # NOTE: the policy's cooldown scale: the serving loop refreshes the projection this often (decode steps)


def expected_kv_peak_growth(sorted_lengths: np.ndarray, context_tokens: np.ndarray, attained_tokens: np.ndarray,
                            owners: np.ndarray, ranks: int) -> tuple[float, float]:
    """(growth of all ranks' KV, growth of the busiest owner's) from now to the expected peak, in
    tokens, both ≥ 0. Arrays [B]: each running request's context, output produced so far and owner
    rank; `sorted_lengths` [n] the observed output lengths, ascending (n = 0: no projection, 0, 0)."""
    n = sorted_lengths.shape[0]
    b = context_tokens.shape[0]
    if n == 0 or b == 0:
        return 0.0, 0.0
    c = np.asarray(context_tokens, dtype=np.float64)
    a = np.asarray(attained_tokens, dtype=np.float64)
    # beyond the longest observed length only requests past it still run, and their expected KV
    # only falls (module docstring): the grid stops there
    s = HORIZON_STEPS[: int(np.searchsorted(HORIZON_STEPS, float(sorted_lengths[-1]))) + 1, None]  # [G, 1]
    alive0 = n - np.searchsorted(sorted_lengths, a, side="right")  # [B] observed lengths above a
    alive = n - np.searchsorted(sorted_lengths, a[None, :] + s, side="right")  # [G, B]
    with np.errstate(divide="ignore", invalid="ignore"):
        lindy = np.maximum(a, 1.0)
        p = np.where(alive0 > 0, alive / alive0, (lindy / (lindy + s)) ** 2)  # [G, B] P(still running)
    kv = (c[None, :] + s) * p  # [G, B]
    g = kv.shape[0]
    idx = (np.arange(g)[:, None] * ranks + np.asarray(owners, dtype=np.int64)[None, :]).ravel()
    per_owner = np.bincount(idx, weights=kv.ravel(), minlength=g * ranks).reshape(g, ranks)  # [G, T]
    now_owner = np.bincount(owners, weights=c, minlength=ranks)  # [T]
    total_now = float(c.sum())
    total_peak = max(float(per_owner.sum(axis=1).max()), total_now)
    owner_peak = max(float(per_owner.max()), float(now_owner.max()))
    return total_peak - total_now, owner_peak - float(now_owner.max())


def project_growth(loop: "ServingLoop", total: float) -> None:
    """Refresh a serving loop's projected KV growth for its policy (every PROJECTION_EVERY_STEPS decode steps)."""
    dec, state = loop.dec, loop.state
    loop.proj_at = dec.dsteps + PROJECTION_EVERY_STEPS
    lens = loop.ordering.stats.sorted_lengths
    # NOTE: no request's expected KV grows by more than the longest observed length
    # (projection.py), so below this bound the running set can't outgrow the layout it runs
    # in, and the projection (~10 µs per 100 requests) is skipped: none is reported
    longest = float(lens[-1]) if lens.shape[0] else 0.0
    g = loop.groups[loop.layout]
    if g > 1:
        bound = loop.kv.busiest(loop.layout) + (max(group_counts(dec.per_owner, g)) + len(loop.prefill_q)) * longest
    else:
        bound = loop.kv.busiest(loop.layout) + (dec.b + len(loop.prefill_q)) * longest
    if lens.shape[0] and bound > loop.cap[loop.layout]:
        state.kv_growth_tokens, state.owner_kv_growth_tokens = _kv_growth(loop)
    else:
        state.kv_growth_tokens = state.owner_kv_growth_tokens = 0.0

def _kv_growth(loop: "ServingLoop") -> tuple[float, float]:
    """The running set's expected KV peak over its KV now (projection.py), all and busiest owner."""
    dec = loop.dec
    ids, c0, own = dec.arrays()
    ctx = c0 + dec.dsteps
    if loop.prefill_q:
        q = np.asarray(loop.prefill_q, dtype=np.int64)
        q_own = np.array([loop.owner[i] for i in loop.prefill_q], dtype=np.int64)
        ids, ctx, own = np.concatenate([ids, q]), np.concatenate([ctx, loop.ctxf[q]]), np.concatenate([own, q_own])
    return expected_kv_peak_growth(loop.ordering.stats.sorted_lengths, ctx, ctx - loop.inp[ids], own, loop.T)
