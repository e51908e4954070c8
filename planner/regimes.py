"""Regimes: the best layout (by either floor) over a batch × context grid.

Every candidate deployment is priced over the whole grid in one vectorized call; a cell's best
layout is the fastest step among those whose KV fits (same batch, so fastest = most tokens/s);
cells where no layout fits are marked -1 (capacity-infeasible).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from planner.load import DecodeLoad
from planner.step import StepCost, step_cost


@dataclass(frozen=True)
class Regimes:
    batch: np.ndarray  # [nb]
    context: np.ndarray  # [nc]
    labels: list[str]  # one per candidate, 'attn/moe'
    floor: str  # 'max' | 'sum'
    times_s: np.ndarray  # [nl, nb, nc], inf where KV doesn't fit
    best: np.ndarray  # [nb, nc] index into labels, -1 where nothing fits
    costs: list[StepCost]  # per candidate, the grid priced (batch-major, flattened)

    def best_label(self, i: int, j: int) -> str:
        k = int(self.best[i, j])
        return self.labels[k] if k >= 0 else "infeasible"


def regimes(deps: list[Deployment], batch, context, floor: str = "max") -> Regimes:
    if floor not in ("max", "sum"):
        raise SpecError(f"floor={floor!r} must be 'max' or 'sum'")
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
    return Regimes(b, c, [f"{d.attn}/{d.moe}" for d in deps], floor, stack, best, costs)
