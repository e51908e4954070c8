"""Triage: where a measured step lands against its floors, and whether to open a profiler.

- below floor_max: the model or a spec is wrong (a floor can't be beaten); the resources whose
  time alone exceeds the measurement are named;
- inside [max, sum]: overlap quality q = (sum − m)/(sum − max), 1 = perfect overlap;
- above floor_sum: a residual (m − sum)/sum the floors don't explain; over the threshold
  (default 15 %) profile the resource with the largest term, under it don't.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError
from planner.resources.vector import TIMED_RESOURCES
from planner.step import StepCost

DEFAULT_THRESHOLD = 0.15


@dataclass(frozen=True)
class Triage:
    measured_s: np.ndarray
    floor_max_s: np.ndarray
    floor_sum_s: np.ndarray
    verdict: np.ndarray  # 'below_floor' | 'inside' | 'above_sum'
    overlap_quality: np.ndarray  # NaN unless inside
    residual_fraction: np.ndarray  # (m − sum)/sum, NaN unless above
    violated_resources: list[list[str]]  # per point, resources whose time alone exceeds m
    profile: np.ndarray  # bool: open a profiler
    profile_resource: np.ndarray  # resource with the largest term where profile, else ''
    threshold: float

    def explain(self, i: int = 0) -> str:
        v = self.verdict[i]
        if v == "below_floor":
            return (f"measured {self.measured_s[i]*1e3:.3f} ms is below the optimistic floor "
                    f"{self.floor_max_s[i]*1e3:.3f} ms: a spec or the model is wrong "
                    f"({', '.join(self.violated_resources[i])} alone take longer than the measurement)")
        if v == "inside":
            return (f"inside [max, sum]: overlap quality {self.overlap_quality[i]:.2f} "
                    f"(1 = perfect overlap); no profiler needed")
        r = self.residual_fraction[i]
        if self.profile[i]:
            return (f"{r:.0%} above the pessimistic floor (threshold {self.threshold:.0%}): "
                    f"profile {self.profile_resource[i]}, the largest term")
        return f"{r:.0%} above the pessimistic floor, under the {self.threshold:.0%} threshold: don't profile"


def triage_step(cost: StepCost, measured_s, threshold: float = DEFAULT_THRESHOLD) -> Triage:
    return triage_floors(measured_s, cost.floor_max_s, cost.floor_sum_s, cost.times.stacked(), threshold)


def triage_floors(measured_s, floor_max_s, floor_sum_s, times_s, threshold: float = DEFAULT_THRESHOLD) -> Triage:
    """`triage_step` on plain arrays: floors [P] and per-resource times [R, P] in TIMED_RESOURCES order (a serving row's
    are its steps' weighted sums)."""
    m = np.asarray(measured_s, dtype=np.float64)
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise SpecError("measured step time must be a positive finite number")
    if not np.isfinite(threshold) or threshold < 0:
        raise SpecError(f"threshold={threshold} must be ≥ 0")
    try:
        m, lo, hi = (np.array(a) for a in np.broadcast_arrays(m, floor_max_s, floor_sum_s))
    except ValueError:
        raise SpecError(f"{m.size} measurements for {np.size(floor_max_s)} operating points") from None
    verdict = np.where(m < lo, "below_floor", np.where(m <= hi, "inside", "above_sum"))
    span = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(span > 0, (hi - m) / span, 1.0)
    q = np.where(verdict == "inside", q, np.nan)
    resid = np.where(verdict == "above_sum", (m - hi) / hi, np.nan)
    stacked = np.broadcast_to(np.asarray(times_s, dtype=np.float64), (len(TIMED_RESOURCES), m.size))  # [R, P]
    violated = [[TIMED_RESOURCES[r] for r in range(stacked.shape[0]) if stacked[r, i] > m[i]] for i in range(m.size)]
    profile = (verdict == "above_sum") & (resid > threshold)
    largest = np.asarray(TIMED_RESOURCES, dtype=object)[np.argmax(stacked, axis=0)]
    return Triage(m, lo, hi, verdict, q, resid, violated, profile, np.where(profile, largest, ""), threshold)
