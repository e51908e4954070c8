"""The decode work of one step: B requests with their context lengths.

Three shapes, one representation — `lengths` and `counts`, both [P, R] (P operating points, R
request classes):
- equal lengths, broadcast over arrays of batch and context (R = 1, vectorized sweeps);
- a list of per-request lengths (R = number of requests, counts 1);
- a histogram (bin lengths and request counts), expanded to individual requests so the busiest
  owner can be found.

`busiest_owner_counts` answers the owner layouts' question: with each request's KV on one of T
ranks, balanced by KV bytes (greedy longest-first onto the least-loaded rank), which requests
land on the most loaded rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError


def _check_finite_positive(name: str, arr: np.ndarray, allow_zero: bool = False) -> None:
    if not np.all(np.isfinite(arr)):
        raise SpecError(f"{name} must be finite (got NaN or inf)")
    bad = arr < 0 if allow_zero else arr <= 0
    if np.any(bad):
        raise SpecError(f"{name} must be {'≥ 0' if allow_zero else '> 0'} (got {arr[bad].flat[0]:g})")


@dataclass(frozen=True)
class DecodeLoad:
    lengths: np.ndarray  # [P, R] context tokens of each request class
    counts: np.ndarray  # [P, R] requests in each class

    @property
    def batch(self) -> np.ndarray:
        """[P] decode requests in the step."""
        return self.counts.sum(axis=-1)

    @property
    def total_tokens(self) -> np.ndarray:
        """[P] context tokens over all requests."""
        return (self.lengths * self.counts).sum(axis=-1)

    @property
    def mean_context(self) -> np.ndarray:
        return self.total_tokens / np.maximum(self.batch, 1.0)

    @property
    def points(self) -> int:
        return self.lengths.shape[0]

    @classmethod
    def equal(cls, batch, context) -> "DecodeLoad":
        """Every request at the same context; `batch` and `context` broadcast against each other."""
        b, c = np.broadcast_arrays(np.asarray(batch, dtype=np.float64), np.asarray(context, dtype=np.float64))
        _check_finite_positive("batch", b, allow_zero=True)
        _check_finite_positive("context", c)
        if np.any(b != np.floor(b)):
            raise SpecError("batch must be a whole number of requests")
        return cls(lengths=c.reshape(-1, 1), counts=b.reshape(-1, 1))

    @classmethod
    def from_lengths(cls, lengths) -> "DecodeLoad":
        """One operating point: each request's context length."""
        l = np.asarray(lengths, dtype=np.float64).reshape(1, -1)
        if l.size == 0:
            raise SpecError("context list is empty")
        _check_finite_positive("context", l)
        return cls(lengths=l, counts=np.ones_like(l))

    @classmethod
    def from_histogram(cls, bin_lengths, bin_counts) -> "DecodeLoad":
        """One operating point from a histogram: `bin_counts[i]` requests at `bin_lengths[i]`."""
        l = np.asarray(bin_lengths, dtype=np.float64).ravel()
        n = np.asarray(bin_counts, dtype=np.float64).ravel()
        if l.shape != n.shape:
            raise SpecError(f"histogram has {l.size} lengths but {n.size} counts")
        _check_finite_positive("context", l)
        _check_finite_positive("histogram count", n, allow_zero=True)
        if np.any(n != np.floor(n)):
            raise SpecError("histogram counts must be whole numbers")
        if n.sum() > 1_000_000:
            raise SpecError(f"histogram holds {int(n.sum())} requests; at most 1,000,000")
        return cls.from_lengths(np.repeat(l, n.astype(np.int64)))


def _lpt_counts(load: DecodeLoad, weights: np.ndarray, ranks: int, busiest: bool) -> np.ndarray:
    out = np.zeros_like(load.counts)
    for p in range(load.points):
        w = np.repeat(weights[p], load.counts[p].astype(np.int64))
        cls_of = np.repeat(np.arange(load.counts.shape[1]), load.counts[p].astype(np.int64))
        order = np.argsort(-w, kind="stable")
        rank_load = np.zeros(ranks)
        owner = np.empty(w.size, dtype=np.int64)
        for i in order:
            r = int(np.argmin(rank_load))
            owner[i] = r
            rank_load[r] += w[i]
        chosen = int(np.argmax(rank_load)) if busiest else int(np.argmin(rank_load))
        np.add.at(out[p], cls_of[owner == chosen], 1.0)
    return out


def lightest_owner_counts(load: DecodeLoad, weights: np.ndarray, ranks: int) -> np.ndarray:
    """[P, R] requests on the least loaded owner (⌊B/T⌋ for equal lengths), same balancing."""
    if ranks == 1:
        return load.counts
    if load.counts.shape[1] == 1:
        return np.floor(load.counts / ranks)
    return _lpt_counts(load, weights, ranks, busiest=False)


def busiest_owner_counts(load: DecodeLoad, weights: np.ndarray, ranks: int) -> np.ndarray:
    """[P, R] how many requests of each class sit on the most loaded of `ranks` owners.

    `weights` [P, R] is each request's KV bytes. Equal-length classes (R = 1) take the closed
    form ⌈B/T⌉; lists use longest-processing-time-first greedy (within 4/3 of optimal) per point.
    """
    if ranks == 1:
        return load.counts
    if load.counts.shape[1] == 1:
        return np.ceil(load.counts / ranks)
    return _lpt_counts(load, weights, ranks, busiest=True)
