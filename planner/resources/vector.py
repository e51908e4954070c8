"""Pricing a step's resource vector into times, and the floors.

Four resources price into time on the hardware — HBM bytes / bandwidth, FLOPs / peak (per
dtype), network bytes / link bandwidth, network messages × per-collective latency. The fifth,
KV capacity, is a wall, not a time: it decides whether the step fits at all.

  floor_max_s = max of the four times  (perfect overlap: a lower bound)
  floor_sum_s = sum of the four times  (no overlap)

`Pricing` holds the rates; `Pricing.datasheet(hw)` uses the peaks (floors), and
`Pricing.achieved(hw)` the peaks × the hardware file's efficiency defaults. Calibration builds
its own `Pricing` from fitted rates; this module never changes a spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.hardware.spec import HardwareSpec

TIMED_RESOURCES: tuple[str, ...] = ("hbm", "compute", "network_bytes", "network_messages")
RESOURCES: tuple[str, ...] = TIMED_RESOURCES + ("kv_capacity",)


@dataclass(frozen=True)
class Pricing:
    """Rates the four timed resources are priced at."""

    hbm_bytes_per_s: float
    flops_per_s: dict[str, float]  # by compute dtype
    link_bytes_per_s: float  # per direction
    message_latency_s: float
    label: str = "datasheet"

    @classmethod
    def datasheet(cls, hw: HardwareSpec) -> "Pricing":
        p = hw.peak
        return cls(p.hbm_bandwidth_bytes_per_s, {d: hw.flops_per_s(d) for d in ("bf16", "fp8", "fp4")},
                   p.scaleup_bandwidth_bytes_per_s_per_direction, p.collective_latency_s, "datasheet")

    @classmethod
    def achieved(cls, hw: HardwareSpec) -> "Pricing":
        p, e = hw.peak, hw.efficiency
        return cls(p.hbm_bandwidth_bytes_per_s * e.hbm, {d: hw.flops_per_s(d) * e.flops for d in ("bf16", "fp8", "fp4")},
                   p.scaleup_bandwidth_bytes_per_s_per_direction * e.network, p.collective_latency_s, "achieved")


@dataclass(frozen=True)
class ResourceTimes:
    """Per-resource times [P] and the floors."""

    hbm_s: np.ndarray
    compute_s: np.ndarray
    network_bytes_s: np.ndarray
    network_messages_s: np.ndarray

    def stacked(self) -> np.ndarray:
        """[4, P] in TIMED_RESOURCES order."""
        return np.stack([self.hbm_s, self.compute_s, self.network_bytes_s, self.network_messages_s])

    @property
    def floor_max_s(self) -> np.ndarray:
        return np.maximum(np.maximum(self.hbm_s, self.compute_s), np.maximum(self.network_bytes_s, self.network_messages_s))

    @property
    def floor_sum_s(self) -> np.ndarray:
        return self.hbm_s + self.compute_s + self.network_bytes_s + self.network_messages_s

    @property
    def binding_index(self) -> np.ndarray:
        """[P] index into TIMED_RESOURCES of the largest time."""
        return np.argmax(self.stacked(), axis=0)


def price(hbm_bytes: np.ndarray, flops_by_dtype: dict[str, np.ndarray], network_bytes: np.ndarray,
          network_messages: np.ndarray, pricing: Pricing) -> ResourceTimes:
    compute = sum(f / pricing.flops_per_s[d] for d, f in flops_by_dtype.items())
    return ResourceTimes(
        hbm_s=np.asarray(hbm_bytes / pricing.hbm_bytes_per_s, dtype=np.float64),
        compute_s=np.asarray(compute, dtype=np.float64),
        network_bytes_s=np.asarray(network_bytes / pricing.link_bytes_per_s, dtype=np.float64),
        network_messages_s=np.asarray(network_messages * pricing.message_latency_s, dtype=np.float64),
    )
