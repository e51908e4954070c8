"""Hardware specs: one YAML file per GPU, validated into a frozen `HardwareSpec`.

Datasheet peaks (`peak`) and achieved-efficiency defaults (`efficiency`) are separate fields:
floors are priced on the peaks, so a measurement can never legitimately beat them; the
efficiencies are defaults that calibration replaces with fitted values. This module does not
price anything; `planner.resources` does.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import SpecError

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
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"hardware file {path}: cannot read YAML ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"hardware file {path}: expected a mapping at the top level")
    try:
        spec = HardwareSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise SpecError(f"hardware file {path}: field '{loc}': {err['msg']}") from None
    for field, value in spec.peak.model_dump().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"hardware file {path}: field 'peak.{field}' is not finite")
    return spec


@lru_cache(maxsize=64)
def _load_cached(key: str) -> HardwareSpec:
    return _parse(Path(key))


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A built-in GPU by name (case-insensitive) or any YAML file by path."""
    builtin = DATA_DIR / f"{name_or_path.lower()}.yaml"
    if builtin.is_file():
        return _load_cached(str(builtin))
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SpecError(f"hardware file not found: {name_or_path}")
        return _load_cached(str(path.resolve()))
    raise SpecError(f"unknown hardware '{name_or_path}'; built in: {', '.join(builtin_hardware_names())}, or a path to a YAML file")
