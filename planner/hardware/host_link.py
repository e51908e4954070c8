"""The host link (PCIe / C2C) as a KV tier sees it: host memory per GPU and the rate of a fetch by
its transfer granularity.

A host KV tier fetches its misses in units (one row, or one page of P rows) scattered over pinned
host memory, and the link's rate depends on the unit: a contiguous copy reaches ~55 GB/s on PCIe
Gen5 x16, a zero-copy gather kernel of 132-byte rows 7 GB/s. The spec holds two measured curves
(rate by unit bytes) — the zero-copy gather kernel and one copy call per block — and prices a
unit at the faster of the two, interpolated linearly in log(unit bytes) and clamped at the ends
of the measured range. What a step pays is expressed as *contiguous-equivalent bytes*: the bytes
that take as long as the fetch at the contiguous rate (`granularity_factor` ≥ 1 times the bytes),
so the planner's Pricing keeps one host-link rate (the datasheet peak for floors, × the measured
contiguous fraction for achieved) and a calibration can scale it like any other link.

NOTE: the curves are the measured best paths on the lent H200 (PCIe Gen5 x16), from
benchmarks/results/host_tier/rates.json (the executor's own gather kernel `copy_units`, device
event time, median of 8, and its contiguous pinned copy) and, for per-block copies,
shared/reference/frontier-models-and-engines.md §3 (one cudaMemcpyAsync per block from random host
offsets). A GPU file may override every figure (`host_link:` in its YAML). Their shape is the
link's (PCIe read requests of small rows are latency-bound); the floor scales the shape to the
datasheet peak so a measurement can't beat it.

Does not: decide what is fetched (planner.host_tier) or price anything itself.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Frozen(BaseModel):
    # NOTE: defer_build: pydantic builds a validator the first time one is needed, not at import; a CLI
    # call that reads its spec from planner.spec_cache builds none (~20 ms of its start)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class RatePoint(_Frozen):
    """One measured fetch rate: units of `unit_bytes` at random host offsets."""

    unit_bytes: float = Field(gt=0, description="Bytes of one transfer unit (a row, or a page of rows).")
    rate_bytes_per_s: float = Field(gt=0, description="Achieved host-to-device rate for units of that size, bytes/s.")


def _points(*pairs: tuple[float, float]) -> tuple[RatePoint, ...]:
    """The measured points below, unvalidated (constants: validating them built RatePoint's validator at import)."""
    return tuple(RatePoint.model_construct(unit_bytes=float(u), rate_bytes_per_s=float(r)) for u, r in pairs)


# NOTE: benchmarks/results/host_tier/rates.json (kernel_grid16xSM_w8, 1 x H200, commit 081660f):
# 132 B 6.96, 584 B 27.2, 656 B 30.4, 1152 B 50.9 GB/s; 64-row pages of those rows 50.9-51.2 GB/s.
GATHER_KERNEL_RATES = _points((132.0, 6.96e9), (584.0, 27.2e9), (656.0, 30.4e9), (1152.0, 50.9e9),
                              (8448.0, 50.9e9), (73728.0, 51.2e9))
# NOTE: shared/reference/frontier-models-and-engines.md §3 (one cudaMemcpyAsync per block, 1 x H200)
COPY_PER_BLOCK_RATES = _points((4096.0, 1.3e9), (16384.0, 5.1e9), (32768.0, 9.3e9), (65536.0, 15.6e9),
                               (262144.0, 34.5e9), (1048576.0, 47.5e9), (2097152.0, 51.0e9))
CONTIGUOUS_RATE_BYTES_PER_S = 55.3e9  # rates.json contiguous_copy, 256 MiB pinned H2D (55.5 in hardware.md)
# NOTE: an 8 x H200 HGX/DGX server carries 2 TB of system memory (NVIDIA DGX H200 datasheet), 250 GB
# per GPU; SGLang's HiSparse guide sizes host_to_device_ratio 10 for ~2 TB of host RAM
# (docs/advanced_features/hisparse_guide.md, shared/reference/frontier-models-and-engines.md §3).
HOST_BYTES_PER_GPU = 2e12 / 8


class HostLinkSpec(_Frozen):
    """Host memory per GPU and the host link's fetch rate by transfer granularity."""

    host_memory_bytes_per_gpu: float = Field(default=HOST_BYTES_PER_GPU, gt=0, description="Pinned host memory one GPU's KV tier may use, bytes.")
    contiguous_bytes_per_s: float = Field(default=CONTIGUOUS_RATE_BYTES_PER_S, gt=0, description="Measured contiguous pinned host-to-device copy, bytes/s.")
    gather_kernel: tuple[RatePoint, ...] = Field(default=GATHER_KERNEL_RATES, description="Zero-copy gather kernel: rate by unit bytes.")
    copy_per_block: tuple[RatePoint, ...] = Field(default=COPY_PER_BLOCK_RATES, description="One copy call per unit: rate by unit bytes.")

    @field_validator("gather_kernel", "copy_per_block")
    @classmethod
    def _sorted(cls, v: tuple[RatePoint, ...]) -> tuple[RatePoint, ...]:
        if not v:
            raise ValueError("needs at least one measured rate")
        if any(b.unit_bytes <= a.unit_bytes for a, b in zip(v, v[1:])):
            raise ValueError("rates must be listed by increasing unit_bytes")
        return v

    def rate_bytes_per_s(self, unit_bytes: float) -> float:
        """The faster measured path for units of `unit_bytes`, never above the contiguous copy."""
        best = max(_interpolate(self.gather_kernel, unit_bytes), _interpolate(self.copy_per_block, unit_bytes))
        return min(best, self.contiguous_bytes_per_s)

    def granularity_factor(self, unit_bytes: float) -> float:
        """Contiguous-equivalent bytes per fetched byte for units of `unit_bytes` (≥ 1)."""
        return self.contiguous_bytes_per_s / self.rate_bytes_per_s(unit_bytes)


def _interpolate(points: tuple[RatePoint, ...], unit_bytes: float) -> float:
    """Rate at `unit_bytes`, linear in log(unit bytes) between measured points, clamped at the ends."""
    if unit_bytes <= points[0].unit_bytes:
        return points[0].rate_bytes_per_s
    if unit_bytes >= points[-1].unit_bytes:
        return points[-1].rate_bytes_per_s
    for a, b in zip(points, points[1:]):
        if unit_bytes <= b.unit_bytes:
            w = math.log(unit_bytes / a.unit_bytes) / math.log(b.unit_bytes / a.unit_bytes)
            return a.rate_bytes_per_s + w * (b.rate_bytes_per_s - a.rate_bytes_per_s)
    return points[-1].rate_bytes_per_s
