"""A validated deployment: model, hardware, layout, dtypes and memory settings.

Validation happens once here (SpecError with the field and both values); the step model then
takes the deployment as plain numbers and arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.errors import SpecError
from planner.hardware.spec import HardwareSpec
from planner.layouts.base import AttentionLayout, MoESplit, attention_layouts, moe_splits
from planner.models.attention.kernels import DecodeKernel, decode_kernel, gpu_arch
from planner.models.spec import ModelSpec
from planner.units import WEIGHT_BYTES_PER_PARAM, WEIGHT_DTYPES

ATTN_LAYOUTS: tuple[str, ...] = ("tp", "cp", "dcp", "dp", "dop")
MOE_SPLITS: tuple[str, ...] = ("ep", "tp")
DEFAULT_MEM_FRACTION = 0.88  # SGLang's mem_fraction_static is typically 0.85–0.90 (reference/models.md)
DEFAULT_PAGE_TOKENS = 64


@dataclass(frozen=True)
class Deployment:
    model: ModelSpec
    hardware: HardwareSpec
    attn: str
    moe: str
    gpus: int
    replicas: int
    weight_dtype: str
    kv_dtype: str
    mem_fraction: float
    page_tokens: int
    reserve_bytes: float
    attention_kernel: str | None = None  # decode kernel override (planner.models.attention.kernels); None: the variant's engine default

    @property
    def ranks(self) -> int:
        """T: GPUs in one group (gpus / replicas)."""
        return self.gpus // self.replicas

    @property
    def attention_layout(self) -> AttentionLayout:
        return attention_layouts()[self.attn]

    @property
    def moe_split(self) -> MoESplit:
        return moe_splits()[self.moe]

    @property
    def arch(self) -> str | None:
        """The GPU generation (planner.models.attention.kernels.gpu_arch)."""
        return gpu_arch(self.hardware)

    @property
    def decode_kernel(self) -> DecodeKernel:
        """The decode attention kernel whose head tile the step pads to."""
        return decode_kernel(self.attention_kernel or self.model.attention.decode_kernel(self.arch, self.kv_dtype))

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES_PER_PARAM[self.weight_dtype]

    def label(self) -> str:
        rep = f"×{self.replicas}" if self.replicas > 1 else ""
        return f"{self.attn}/{self.moe} T={self.ranks}{rep}"


def _finite_positive(name: str, value: float) -> None:
    if value is None or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{name}={value} must be a positive finite number")


def make_deployment(model: ModelSpec, hardware: HardwareSpec, *, attn: str = "tp", moe: str = "ep", gpus: int = 8,
                    replicas: int = 1, weight_dtype: str | None = None, kv_dtype: str | None = None,
                    mem_fraction: float = DEFAULT_MEM_FRACTION, page_tokens: int = DEFAULT_PAGE_TOKENS,
                    reserve_bytes: float = 0.0, attention_kernel: str | None = None) -> Deployment:
    if attn not in ATTN_LAYOUTS:
        raise SpecError(f"attn={attn!r} is not a layout; choose one of {', '.join(ATTN_LAYOUTS)}")
    if moe not in MOE_SPLITS:
        raise SpecError(f"moe={moe!r} is not a split; choose one of {', '.join(MOE_SPLITS)}")
    if isinstance(gpus, bool) or int(gpus) != gpus or gpus < 1:
        raise SpecError(f"gpus={gpus} must be a positive whole number")
    if isinstance(replicas, bool) or int(replicas) != replicas or replicas < 1:
        raise SpecError(f"replicas={replicas} must be a positive whole number")
    gpus, replicas = int(gpus), int(replicas)
    if gpus % replicas:
        raise SpecError(f"gpus={gpus} is not divisible by replicas={replicas}")
    ranks = gpus // replicas
    domain = hardware.peak.scaleup_domain_gpus
    if ranks > domain:
        raise SpecError(f"a group of {ranks} GPUs exceeds {hardware.name}'s scale-up domain of {domain}; "
                        f"use --replicas {math.ceil(gpus / domain)} or more (multi-node groups are not modelled)")
    _finite_positive("mem_fraction", mem_fraction)
    if mem_fraction > 1.0:
        raise SpecError(f"mem_fraction={mem_fraction} must be ≤ 1")
    if isinstance(page_tokens, bool) or int(page_tokens) != page_tokens or page_tokens < 1:
        raise SpecError(f"page_tokens={page_tokens} must be a positive whole number")
    if not math.isfinite(reserve_bytes) or reserve_bytes < 0:
        raise SpecError(f"reserve={reserve_bytes} must be ≥ 0")
    wdt = weight_dtype or model.default_weight_dtype
    if wdt not in WEIGHT_DTYPES:
        raise SpecError(f"weight_dtype={wdt!r} is not one of {', '.join(WEIGHT_DTYPES)}")
    kdt = kv_dtype or model.default_kv_dtype(hardware.name)
    model.attention.check_kv_dtype(kdt)
    if model.mlp.kind == "dense" and moe == "ep":
        raise SpecError(f"moe=ep needs a mixture-of-experts model; {model.name} is dense (use --moe tp)")
    attention_layouts()[attn].check(model, ranks)
    model.mlp.check_tp(ranks, moe)
    if attention_kernel is not None:
        decode_kernel(attention_kernel)  # SpecError naming the known kernels
    return Deployment(model, hardware, attn, moe, gpus, replicas, wdt, kdt, float(mem_fraction), int(page_tokens),
                      float(reserve_bytes), attention_kernel)
