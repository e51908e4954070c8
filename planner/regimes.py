"""Regimes: the best layout (by either floor) over a batch × context grid.

Every candidate deployment is priced over the whole grid in one vectorized call; a cell's best
layout is the fastest step among those whose KV fits (same batch, so fastest = most tokens/s);
cells where no layout fits are marked -1 (capacity-infeasible). Layouts within `tie_margin` of the
best step time (default `TIE_MARGIN`, 1 %) are a tie: the floors can't tell them apart at that
precision, so a cell names them all rather than a winner by a fraction of a percent; each cell also
carries the runner-up's margin (its time over the best's, minus 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from planner.load import DecodeLoad
from planner.step import StepCost, step_cost


TIE_MARGIN = 0.01  # layouts within 1 % of the best step time tie


@dataclass(frozen=True)
class Regimes:
    batch: np.ndarray  # [nb]
    context: np.ndarray  # [nc]
    labels: list[str]  # one per candidate, 'attn/moe'
    floor: str  # 'max' | 'sum'
    times_s: np.ndarray  # [nl, nb, nc], inf where KV doesn't fit
    best: np.ndarray  # [nb, nc] index into labels, -1 where nothing fits
    costs: list[StepCost]  # per candidate, the grid priced (batch-major, flattened)
    tie_margin: float = TIE_MARGIN
    tied: np.ndarray | None = None  # [nl, nb, nc] within tie_margin of the best (the best included)
    runner_up_margin: np.ndarray | None = None  # [nb, nc] second-fastest / fastest − 1; inf: one fits; nan: none

    def best_label(self, i: int, j: int) -> str:
        k = int(self.best[i, j])
        return self.labels[k] if k >= 0 else "infeasible"

    def tie_labels(self, i: int, j: int) -> list[str]:
        """The layouts tied in a cell, the best first then by time; [best] when it wins clearly, []
        where nothing fits."""
        k = int(self.best[i, j])
        if k < 0:
            return []
        others = sorted((self.times_s[n, i, j], n) for n in np.flatnonzero(self.tied[:, i, j]) if n != k)
        return [self.labels[k]] + [self.labels[n] for _, n in others]


def regimes(deps: list[Deployment], batch, context, floor: str = "max", tie_margin: float = TIE_MARGIN) -> Regimes:
    if floor not in ("max", "sum"):
        raise SpecError(f"floor={floor!r} must be 'max' or 'sum'")
    if not (np.isfinite(tie_margin) and 0 <= tie_margin < 1):
        raise SpecError(f"tie_margin={tie_margin} must be a fraction in [0, 1) (0.01 = 1 %)")
    if not deps:
        raise SpecError("no layouts to compare")
    b = np.asarray(batch, dtype=np.float64)
    c = np.asarray(context, dtype=np.float64)
    bb, cc = np.meshgrid(b, c, indexing="ij")
    load = DecodeLoad.equal(bb.ravel(), cc.ravel())
    times, others, costs = [], [], []
    for d in deps:
        cost = step_cost(d, load)
        costs.append(cost)
        t, o = (cost.floor_max_s, cost.floor_sum_s) if floor == "max" else (cost.floor_sum_s, cost.floor_max_s)
        times.append(np.where(cost.kv_fits, t, np.inf).reshape(bb.shape))
        others.append(np.asarray(o, dtype=np.float64).reshape(bb.shape))
    stack = np.stack(times)
    # NOTE: layouts that tie on the ranking floor (DCP and DOP move the same HBM bytes) are ordered
    # by the other floor, as compare orders them; argmin alone picked whichever was registered first
    tied = stack == stack.min(axis=0, keepdims=True)
    pick = np.argmin(np.where(tied, np.stack(others), np.inf), axis=0)
    best = np.where(np.isfinite(stack).any(axis=0), pick, -1)
    fastest = stack.min(axis=0)
    tied = np.isfinite(stack) & (stack <= fastest * (1.0 + tie_margin))
    with np.errstate(invalid="ignore", divide="ignore"):
        second = np.sort(stack, axis=0)[1] if len(deps) > 1 else np.full(fastest.shape, np.inf)
        margin = np.where(np.isfinite(fastest), second / fastest - 1.0, np.nan)
    return Regimes(b, c, [f"{d.attn}/{d.moe}" for d in deps], floor, stack, best, costs, tie_margin, tied, margin)
