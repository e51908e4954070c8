"""Hardware specs: one YAML file per GPU, validated into a frozen `HardwareSpec`.

Datasheet peaks (`peak`) and achieved-efficiency defaults (`efficiency`) are separate fields:
floors are priced on the peaks, so a measurement can never legitimately beat them; the
efficiencies are defaults that calibration replaces with fitted values. This module does not
price anything; `planner.resources` does.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import SpecError
from planner.inputs import HARDWARE_MAX_BYTES, field_error, is_file, load_yaml_file, path_kind, shown_path

DATA_DIR = Path(__file__).parent / "data"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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
    network: float = Field(default=1.0, gt=0, le=1.0, description="Achieved link bandwidth / peak.")


class HardwareSpec(_Frozen):
    """One GPU kind: datasheet peaks, achieved-efficiency defaults and where the figures come from."""

    name: str = Field(description="Short name, e.g. 'h200'.")
    description: str = Field(default="", description="Human-readable product name.")
    peak: PeakSpec
    efficiency: EfficiencySpec = Field(default_factory=EfficiencySpec)
    sources: dict[str, str] = Field(default_factory=dict, description="Field name -> where the figure comes from.")

    @field_validator("name")
    @classmethod
    def _name_nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name must not be empty")
        return v

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
    for field, value in spec.peak.model_dump().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"hardware file {path}: field 'peak.{field}' is not finite")
        lo, hi = PEAK_RANGES[field]
        if value is not None and not lo <= value <= hi:
            raise SpecError(f"hardware file {path}: field 'peak.{field}'={value:g} is outside [{lo:g}, {hi:g}]")
    for field, value in spec.efficiency.model_dump().items():
        if value < MIN_EFFICIENCY:
            raise SpecError(f"hardware file {path}: field 'efficiency.{field}'={value:g} is below {MIN_EFFICIENCY:g}")
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
    """`stamp` (mtime, size) keys the cache, so an edited file is read again in a long-lived process."""
    return _parse(Path(key))


def _stamp(path: str) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)  # the read that follows says what is wrong
    return (st.st_mtime_ns, st.st_size)


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A built-in GPU by name (case-insensitive) or any YAML file by path."""
    builtin = DATA_DIR / f"{name_or_path.lower()}.yaml"
    if "/" not in name_or_path and is_file(builtin):
        return _load_cached(str(builtin), _stamp(str(builtin)))
    path = Path(name_or_path)
    kind = path_kind(path, "hardware file")
    if path.suffix in (".yaml", ".yml") or kind != "missing":
        if kind == "missing":
            raise SpecError(f"hardware file not found: {shown_path(name_or_path)}")
        return _load_cached(str(path.resolve()), _stamp(str(path)))
    raise SpecError(f"unknown hardware '{shown_path(name_or_path)}'; built in: {', '.join(builtin_hardware_names())}, or a path to a YAML file")
