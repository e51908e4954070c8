"""Pricing a step's resource vector into times, and the floors.

Five resources price into time on the hardware — HBM bytes / bandwidth, FLOPs / peak (per
dtype), network bytes / link bandwidth, network messages × per-collective latency, and host-link
bytes / host-link bandwidth (a host KV tier's misses, as contiguous-equivalent bytes:
planner.hardware.host_link; 0 without a tier). KV capacity is a wall, not a time: it decides
whether the step fits at all (with a host tier, two walls: the HBM budget and host memory).

The network has two tiers: the scale-up links inside a node and each GPU's NIC between nodes.
Each tier's bytes and messages are priced at its own rate and summed into the one network-bytes
and one network-messages time (a group on one node has no scale-out share).

  floor_max_s = max of the timed resources' times  (perfect overlap: a lower bound)
  floor_sum_s = sum of them                          (no overlap)

Every consumer reads TIMED_RESOURCES (and `ResourceTimes.stacked()` in its order), never a count.

`Pricing` holds the rates; `Pricing.datasheet(hw)` uses the peaks (floors), and
`Pricing.achieved(hw)` the peaks × the hardware file's efficiency defaults. Calibration builds
its own `Pricing` from fitted rates; this module never changes a spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.hardware.spec import HardwareSpec

TIMED_RESOURCES: tuple[str, ...] = ("hbm", "compute", "network_bytes", "network_messages", "host_link")
RESOURCES: tuple[str, ...] = TIMED_RESOURCES + ("kv_capacity",)


@dataclass(frozen=True)
class Pricing:
    """Rates the timed resources are priced at."""

    hbm_bytes_per_s: float
    flops_per_s: dict[str, float]  # by compute dtype
    link_bytes_per_s: float  # scale-up, per direction
    message_latency_s: float  # scale-up
    label: str = "datasheet"
    scaleout_bytes_per_s: float | None = None  # NIC per GPU, per direction (None: the scale-up rate)
    scaleout_latency_s: float | None = None  # a collective that crosses nodes (None: the scale-up latency)
    host_link_bytes_per_s: float = float("inf")  # contiguous host-to-device rate (inf: no host link priced)

    @property
    def scaleout_link_bytes_per_s(self) -> float:
        return self.link_bytes_per_s if self.scaleout_bytes_per_s is None else self.scaleout_bytes_per_s

    @property
    def scaleout_message_latency_s(self) -> float:
        return self.message_latency_s if self.scaleout_latency_s is None else self.scaleout_latency_s

    @classmethod
    def datasheet(cls, hw: HardwareSpec) -> "Pricing":
        p, so = hw.peak, hw.scaleout
        return cls(p.hbm_bandwidth_bytes_per_s, {d: hw.flops_per_s(d) for d in ("bf16", "fp8", "fp4")},
                   p.scaleup_bandwidth_bytes_per_s_per_direction, p.collective_latency_s, "datasheet",
                   so.nic_bandwidth_bytes_per_s_per_direction, so.collective_latency_s,
                   p.host_link_bandwidth_bytes_per_s)

    @classmethod
    def achieved(cls, hw: HardwareSpec) -> "Pricing":
        p, e, so = hw.peak, hw.efficiency, hw.scaleout
        return cls(p.hbm_bandwidth_bytes_per_s * e.hbm, {d: hw.flops_per_s(d) * e.flops for d in ("bf16", "fp8", "fp4")},
                   p.scaleup_bandwidth_bytes_per_s_per_direction * e.network, p.collective_latency_s, "achieved",
                   so.nic_bandwidth_bytes_per_s_per_direction * e.scaleout, so.collective_latency_s,
                   p.host_link_bandwidth_bytes_per_s * e.host_link)


@dataclass(frozen=True)
class ResourceTimes:
    """Per-resource times [P] and the floors."""

    hbm_s: np.ndarray
    compute_s: np.ndarray
    network_bytes_s: np.ndarray
    network_messages_s: np.ndarray
    # a host KV tier's fetches [P]; NOTE: the float 0.0 without a tier, so the sweep's floors pay no
    # array op for a resource that carries nothing (stacked() broadcasts it)
    host_link_s: np.ndarray | float = 0.0

    def stacked(self) -> np.ndarray:
        """[R, P] in TIMED_RESOURCES order."""
        h = self.host_link_s
        if type(h) is float:
            h = np.full(np.shape(self.hbm_s), h)
        return np.stack([self.hbm_s, self.compute_s, self.network_bytes_s, self.network_messages_s, h])

    @property
    def floor_max_s(self) -> np.ndarray:
        m = np.maximum(np.maximum(self.hbm_s, self.compute_s), np.maximum(self.network_bytes_s, self.network_messages_s))
        return m if type(self.host_link_s) is float else np.maximum(m, self.host_link_s)

    @property
    def floor_sum_s(self) -> np.ndarray:
        s = self.hbm_s + self.compute_s + self.network_bytes_s + self.network_messages_s
        return s if type(self.host_link_s) is float else s + self.host_link_s

    @property
    def binding_index(self) -> np.ndarray:
        """[P] index into TIMED_RESOURCES of the largest time (the first of equal ones, as argmax)."""
        top = self.floor_max_s
        if np.isnan(top).any():  # argmax's rule for NaN (the first NaN wins) is not a max's
            return np.argmax(self.stacked(), axis=0)
        # NOTE: the max is one of the times exactly, so the first time equal to it is argmax's pick;
        # writing the index from the last resource to the first keeps the first, without the [R, P] stack
        times = (self.hbm_s, self.compute_s, self.network_bytes_s, self.network_messages_s, self.host_link_s)
        idx = np.zeros(np.shape(top), dtype=np.intp)
        for i in range(len(times) - 1, 0, -1):
            np.copyto(idx, i, where=times[i] == top)
        return idx


def price(hbm_bytes: np.ndarray, flops_by_dtype: dict[str, np.ndarray], network_bytes: np.ndarray,
          network_messages: np.ndarray, pricing: Pricing, scaleout_bytes=0.0, scaleout_messages=0.0,
          host_link_bytes=None) -> ResourceTimes:
    """Times of the timed resources. `network_bytes`/`network_messages` are the scale-up tier's;
    the scale-out tier's bytes and messages add at their own rates; `host_link_bytes` [P] are a
    host tier's contiguous-equivalent fetch bytes (None: no tier, zero time)."""
    compute = None
    for d, f in flops_by_dtype.items():  # sum() over the dtypes, added in place into the first quotient
        x = f / pricing.flops_per_s[d]
        compute = x if compute is None else _plus(compute, x)
    compute = 0 if compute is None else compute
    net_s = network_bytes / pricing.link_bytes_per_s
    if not _is_zero(scaleout_bytes):  # NOTE: + 0 is exact: a one-node group adds nothing
        net_s = _plus(net_s, scaleout_bytes / pricing.scaleout_link_bytes_per_s)
    lat, so_lat = pricing.message_latency_s, pricing.scaleout_message_latency_s
    m, so_m = constant(network_messages), constant(scaleout_messages)
    if m is not None and so_m is not None:  # launch counts the same at every point: one product, broadcast
        msg_s = np.broadcast_to(m * lat + so_m * so_lat, np.shape(network_messages))
    else:
        msg_s = network_messages * lat + scaleout_messages * so_lat
    return ResourceTimes(
        hbm_s=np.asarray(hbm_bytes / pricing.hbm_bytes_per_s, dtype=np.float64),
        compute_s=np.asarray(compute, dtype=np.float64),
        network_bytes_s=np.asarray(net_s, dtype=np.float64),
        network_messages_s=np.asarray(msg_s, dtype=np.float64),
        host_link_s=(0.0 if host_link_bytes is None
                     else np.asarray(host_link_bytes / pricing.host_link_bytes_per_s, dtype=np.float64)),
    )


def constant(x) -> np.float64 | None:
    """The one value of a scalar or of a broadcast of one value over the points (all strides 0), else None."""
    if np.ndim(x) == 0:
        return np.float64(x)
    if isinstance(x, np.ndarray) and x.size > 0 and not any(x.strides):
        return np.float64(x.flat[0])
    return None


def _is_zero(x) -> bool:
    return np.ndim(x) == 0 and x == 0.0 and not np.signbit(x)


def _plus(a, b):
    """a + b, in place where `a` is a float64 array of the result's shape this module made."""
    if isinstance(a, np.ndarray) and a.dtype == np.float64 and a.flags.writeable \
            and a.shape == np.broadcast_shapes(a.shape, np.shape(b)):
        a += b
        return a
    return a + b
