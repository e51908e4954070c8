"""Walls: as load grows along one axis (batch at fixed context, or context at fixed batch), the
load where each resource becomes binding, the KV wall where capacity runs out, and their order.

A timed resource's wall is the smallest load in the range at which its time is the largest of
the timed resources' (resources binding from the start have their wall at the start); it is None if the
resource never binds in the range. The KV wall is the smallest load whose KV doesn't fit.
Walls are located on a geometric grid and refined by bisection (to one request or one token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from planner.load import DecodeLoad
from planner.resources.vector import TIMED_RESOURCES
from planner.step import StepCost, step_cost

AXES = ("batch", "context")


@dataclass(frozen=True)
class Walls:
    axis: str
    fixed: float  # the other axis' value
    loads: np.ndarray  # [N] grid along the axis
    cost: StepCost  # the step priced at every load of the grid
    walls: dict[str, float | None]  # resource (incl. 'kv_capacity') -> load
    order: list[tuple[str, float]]  # walls hit, by load

    @property
    def times_s(self) -> dict[str, np.ndarray]:
        """Timed resource -> [N] seconds."""
        return dict(zip(TIMED_RESOURCES, self.cost.times.stacked()))

    @property
    def floor_max_s(self) -> np.ndarray:
        return self.cost.floor_max_s

    @property
    def floor_sum_s(self) -> np.ndarray:
        return self.cost.floor_sum_s

    @property
    def binding(self) -> np.ndarray:
        """[N] resource names ('kv_capacity' where KV doesn't fit)."""
        return self.cost.binding

    @property
    def first_wall(self) -> tuple[str, float] | None:
        """The first wall hit as load grows past the start of the range."""
        start = float(self.loads[0])
        later = [(r, x) for r, x in self.order if x > start]
        return later[0] if later else None


def _cost(dep, axis, load, fixed):
    if axis == "batch":
        return step_cost(dep, DecodeLoad.equal(load, fixed))
    return step_cost(dep, DecodeLoad.equal(fixed, load))


def _refine(pred, lo: float, hi: float, integer: bool) -> float:
    """Smallest x in (lo, hi] with pred(x) true, given pred(lo) false and pred(hi) true."""
    tol = 1.0 if integer else max(1.0, 1e-4 * hi)
    while hi - lo > tol:
        mid = np.floor((lo + hi) / 2) if integer else (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)


def walls(dep: Deployment, axis: str, fixed: float, lo: float, hi: float, points: int = 256) -> Walls:
    if axis not in AXES:
        raise SpecError(f"along={axis!r} must be one of {', '.join(AXES)}")
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        raise SpecError(f"range [{lo}, {hi}] must satisfy 0 < lo < hi")
    if not np.isfinite(fixed) or fixed <= 0:
        raise SpecError(f"fixed {'context' if axis == 'batch' else 'batch'}={fixed} must be positive")
    integer = axis == "batch"
    grid = np.unique(np.geomspace(lo, hi, points))
    if integer:
        grid = np.unique(np.round(grid))
    c = _cost(dep, axis, grid, fixed)
    bind_idx = c.times.binding_index
    result: dict[str, float | None] = {}
    for r, name in enumerate(TIMED_RESOURCES):
        hits = np.nonzero(bind_idx == r)[0]
        if hits.size == 0:
            result[name] = None
            continue
        i = int(hits[0])
        if i == 0:
            result[name] = float(grid[0])
            continue

        def binds(x, r=r):
            t = _cost(dep, axis, np.asarray([x]), fixed).times.stacked()[:, 0]
            return int(np.argmax(t)) == r

        result[name] = _refine(binds, float(grid[i - 1]), float(grid[i]), integer)
    misses = np.nonzero(~c.kv_fits)[0]
    if misses.size == 0:
        result["kv_capacity"] = None
    elif misses[0] == 0:
        result["kv_capacity"] = float(grid[0])
    else:
        i = int(misses[0])
        result["kv_capacity"] = _refine(lambda x: not bool(_cost(dep, axis, np.asarray([x]), fixed).kv_fits[0]),
                                        float(grid[i - 1]), float(grid[i]), integer)
    order = sorted(((k, v) for k, v in result.items() if v is not None), key=lambda kv: kv[1])
    return Walls(axis, float(fixed), grid, c, result, order)
