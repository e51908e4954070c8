"""Hardware specs: one YAML file per GPU, validated into a frozen `HardwareSpec`.

Datasheet peaks (`peak`) and achieved-efficiency defaults (`efficiency`) are separate fields:
floors are priced on the peaks, so a measurement can never legitimately beat them; the
efficiencies are defaults that calibration replaces with fitted values. Beside them:
- `memory`: HBM as the runtime reports it (torch `total_memory`, nvidia-smi MiB, the CUDA
  context), which is what engines size KV pools from; the datasheet `peak.hbm_bytes` is kept;
- `host_link`: host memory per GPU and the host link's fetch rate by transfer granularity, for a
  host KV tier (planner.hardware.host_link; the datasheet peak is `peak.host_link_bandwidth_bytes_per_s`);
- `scaleout`: the tier beyond the scale-up domain (the NIC per GPU and a cross-node collective's
  latency), for groups that span nodes;
- `vendor`, `arch`, `compute_capability`: the generation engine defaults key on (SGLang's DSA
  KV dtype follows the compute capability, never the GPU's name).
Every field may be set in a user YAML; `sources` names where each figure comes from.

This module does not price anything (`planner.resources` does) and applies no engine rule
(`planner.engines` does).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import SpecError
from planner.hardware.host_link import HostLinkSpec
from planner.inputs import (HARDWARE_MAX_BYTES, field_error, file_stamp, is_file, load_yaml_file, path_kind, shown_number,
                            shown_path)
from planner.units import MiB

DATA_DIR = Path(__file__).parent / "data"


class _Frozen(BaseModel):
    # NOTE: defer_build: built when a file is first validated, not at import (planner.spec_cache)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class PeakSpec(_Frozen):
    """Datasheet peaks (dense, no 2:4 sparsity)."""

    hbm_bytes: float = Field(gt=0, description="HBM capacity per GPU, bytes.")
    hbm_bandwidth_bytes_per_s: float = Field(gt=0, description="HBM bandwidth per GPU, bytes/s.")
    bf16_flops_per_s: float = Field(gt=0, description="Dense BF16 tensor FLOP/s.")
    fp8_flops_per_s: float | None = Field(default=None, gt=0, description="Dense FP8 FLOP/s; None if the chip has no FP8 tensor path.")
    fp4_flops_per_s: float | None = Field(default=None, gt=0, description="Dense FP4 FLOP/s; None if the chip has none.")
    scaleup_bandwidth_bytes_per_s_per_direction: float = Field(gt=0, description="NVLink/xGMI bandwidth per GPU, one direction.")
    scaleup_domain_gpus: int = Field(ge=1, description="GPUs in one scale-up domain.")
    collective_latency_s: float = Field(ge=0, description="Latency of one small collective launch (all-reduce of a few KiB).")
    host_link_bandwidth_bytes_per_s: float = Field(gt=0, description="Host (PCIe/C2C) bandwidth per direction.")


class EfficiencySpec(_Frozen):
    """Achieved fraction of each peak, as defaults before calibration (1.0 = the datasheet)."""

    hbm: float = Field(default=1.0, gt=0, le=1.0, description="Achieved HBM bandwidth / peak.")
    flops: float = Field(default=1.0, gt=0, le=1.0, description="Achieved tensor FLOP/s / peak.")
    network: float = Field(default=1.0, gt=0, le=1.0, description="Achieved scale-up link bandwidth / peak.")
    scaleout: float = Field(default=1.0, gt=0, le=1.0, description="Achieved NIC bandwidth / peak (scale-out tier).")
    host_link: float = Field(default=1.0, gt=0, le=1.0, description="Achieved contiguous host-link bandwidth / peak (a host KV tier's fetches).")


# NOTE: the H200 figures were measured on the lent H200 (shared/reference/hardware.md "Memory an
# engine can allocate"): mem_get_info right after context creation reports 149,557,477,376 B
# free of 150,109,880,320 B, so the context takes 552,402,944 B (0.51 GiB). Other GPUs carry it
# as a lead until measured.
H200_CONTEXT_BYTES = 150_109_880_320 - 149_557_477_376


class MemorySpec(_Frozen):
    """HBM as the runtime sees it. Engines size pools from these, not from the datasheet's "GB"."""

    usable_hbm_bytes: float | None = Field(default=None, gt=0, description="torch.cuda.get_device_properties().total_memory, bytes; None: not declared (the datasheet hbm_bytes is used).")
    smi_total_mib: float | None = Field(default=None, gt=0, description="nvidia-smi memory.total, MiB (SGLang's default fractions read it); None: usable bytes in MiB.")
    context_bytes: float = Field(default=H200_CONTEXT_BYTES, ge=0, description="Taken by the CUDA context and driver before the first allocation, bytes.")


class ScaleOutSpec(_Frozen):
    """The network tier beyond one scale-up domain (per GPU). Defaults: ConnectX-7 NDR and a
    two-node NCCL small all-reduce (shared/reference/hardware.md "Beyond one node")."""

    nic_bandwidth_bytes_per_s_per_direction: float = Field(default=50e9, gt=0, description="NIC bandwidth per GPU, one direction (400 Gb/s = 50 GB/s).")
    collective_latency_s: float = Field(default=46e-6, ge=0, description="Latency of one small collective that crosses nodes (a few-KiB all-reduce over two nodes).")


class HardwareSpec(_Frozen):
    """One GPU kind: datasheet peaks, achieved-efficiency defaults and where the figures come from."""

    name: str = Field(description="Short name, e.g. 'h200'.")
    description: str = Field(default="", description="Human-readable product name.")
    vendor: Literal["nvidia", "amd"] = Field(default="nvidia", description="Runtime family (CUDA or ROCm): engines pick kernels and page sizes by it.")
    arch: Literal["ampere", "hopper", "blackwell", "cdna3", "cdna4", "unknown"] = Field(default="unknown", description="GPU generation.")
    compute_capability: tuple[int, int] | None = Field(default=None, description="(major, minor) as torch.cuda.get_device_capability() reports it; engine defaults key on the major.")
    peak: PeakSpec
    efficiency: EfficiencySpec = Field(default_factory=EfficiencySpec)
    memory: MemorySpec = Field(default_factory=MemorySpec)
    scaleout: ScaleOutSpec = Field(default_factory=ScaleOutSpec)
    host_link: HostLinkSpec = Field(default_factory=HostLinkSpec, description="Host memory per GPU and fetch rates by granularity (planner.hardware.host_link).")
    sources: dict[str, str] = Field(default_factory=dict, description="Field name -> where the figure comes from.")

    @field_validator("name")
    @classmethod
    def _name_nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name must not be empty")
        return v

    @property
    def usable_hbm_bytes(self) -> float:
        """HBM bytes the runtime reports (torch total_memory); the datasheet figure if undeclared."""
        return self.memory.usable_hbm_bytes if self.memory.usable_hbm_bytes is not None else self.peak.hbm_bytes

    @property
    def smi_total_mib(self) -> float:
        """nvidia-smi memory.total in MiB (what SGLang's defaults read); usable bytes if undeclared."""
        return self.memory.smi_total_mib if self.memory.smi_total_mib is not None else math.floor(self.usable_hbm_bytes / MiB)

    @property
    def compute_capability_major(self) -> int | None:
        return self.compute_capability[0] if self.compute_capability else None

    def flops_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; a missing low-precision path falls back to the
        next wider one (an fp4 weight on Hopper runs as fp8 math)."""
        p = self.peak
        if dtype == "fp4" and p.fp4_flops_per_s is not None:
            return p.fp4_flops_per_s
        if dtype in ("fp4", "fp8") and p.fp8_flops_per_s is not None:
            return p.fp8_flops_per_s
        return p.bf16_flops_per_s

    def ridge_flops_per_byte(self, dtype: str) -> float:
        """FLOP per HBM byte where compute and memory time are equal (datasheet)."""
        return self.flops_per_s(dtype) / self.peak.hbm_bandwidth_bytes_per_s


def builtin_hardware_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.yaml"))


def _parse(path: Path) -> HardwareSpec:
    raw = load_yaml_file(path, "hardware file", HARDWARE_MAX_BYTES)
    if not isinstance(raw, dict):
        raise SpecError(f"hardware file {path}: expected a mapping at the top level")
    try:
        spec = HardwareSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"hardware file {path}: {field_error(exc)}") from None
    for part in ("peak", "memory", "scaleout", "host_link"):
        for field, value in getattr(spec, part).model_dump().items():
            if isinstance(value, float) and not math.isfinite(value):
                raise SpecError(f"hardware file {path}: field '{part}.{field}' is not finite")
    for field, value in spec.peak.model_dump().items():
        lo, hi = PEAK_RANGES[field]
        if value is not None and not lo <= value <= hi:
            raise SpecError(f"hardware file {path}: field 'peak.{field}'={shown_number(value)} is outside [{lo:g}, {hi:g}]")
    for field, value in spec.efficiency.model_dump().items():
        if value < MIN_EFFICIENCY:
            raise SpecError(f"hardware file {path}: field 'efficiency.{field}'={shown_number(value)} is below {MIN_EFFICIENCY:g}")
    if spec.usable_hbm_bytes > 1.2 * spec.peak.hbm_bytes:
        raise SpecError(f"hardware file {path}: memory.usable_hbm_bytes={shown_number(spec.usable_hbm_bytes, '.4g')} is more than "
                        f"1.2 × peak.hbm_bytes={shown_number(spec.peak.hbm_bytes, '.4g')}: check the units (bytes, not MiB or GB)")
    if spec.memory.context_bytes >= spec.usable_hbm_bytes:
        raise SpecError(f"hardware file {path}: memory.context_bytes={shown_number(spec.memory.context_bytes, '.4g')} is not below "
                        f"the usable memory ({shown_number(spec.usable_hbm_bytes, '.4g')} bytes): the CUDA context would leave the engine "
                        "nothing; check the units (bytes, not MiB or GB)")
    return spec


# NOTE: physical ranges of a file's peaks, orders of magnitude around every part in data/: a value
# outside them is a unit slip (GB/s typed as B/s), and a rate near zero makes a floor infinite.
PEAK_RANGES: dict[str, tuple[float, float]] = {
    "hbm_bytes": (1e6, 1e15), "hbm_bandwidth_bytes_per_s": (1e6, 1e16), "bf16_flops_per_s": (1e6, 1e20),
    "fp8_flops_per_s": (1e6, 1e20), "fp4_flops_per_s": (1e6, 1e20),
    "scaleup_bandwidth_bytes_per_s_per_direction": (1e3, 1e16), "scaleup_domain_gpus": (1, 1e6),
    "collective_latency_s": (0.0, 1.0), "host_link_bandwidth_bytes_per_s": (1e3, 1e16),
}
MIN_EFFICIENCY = 1e-3  # an achieved fraction below 0.1 % of a datasheet rate is a failed measurement


@lru_cache(maxsize=64)
def _load_cached(key: str, stamp: tuple[int, int]) -> HardwareSpec:
    """`stamp` (mtime, size) keys the cache, so an edited file is read again in a long-lived process.
    A built-in file's spec is also kept between processes (planner.spec_cache)."""
    path = Path(key)
    if path.parent == DATA_DIR:
        from planner.spec_cache import cached_spec

        return cached_spec("hardware", path, lambda: _parse(path))
    return _parse(path)


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A built-in GPU by name (case-insensitive) or any YAML file by path."""
    builtin = DATA_DIR / f"{name_or_path.lower()}.yaml"
    if "/" not in name_or_path and is_file(builtin):
        return _load_cached(str(builtin), file_stamp(str(builtin)))
    path = Path(name_or_path)
    kind = path_kind(path, "hardware file")
    if path.suffix in (".yaml", ".yml") or kind != "missing":
        if kind == "missing":
            raise SpecError(f"hardware file not found: {shown_path(name_or_path)}")
        return _load_cached(str(path.resolve()), file_stamp(str(path)))
    raise SpecError(f"unknown hardware '{shown_path(name_or_path)}'; built in: {', '.join(builtin_hardware_names())}, or a path to a YAML file")
