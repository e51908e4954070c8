"""Unit constants and dtype byte widths. SI inside the code; GiB, ms and tokens/s only at the edges."""

from typing import Literal

GB = 1e9
GiB = float(1 << 30)
TB = 1e12
MiB = float(1 << 20)

WeightDtype = Literal["bf16", "fp8", "fp4"]
KvDtype = Literal["bf16", "fp8", "fp8_dsa"]
ComputeDtype = Literal["bf16", "fp8", "fp4"]

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp4")
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp8_dsa")

# Bytes per parameter. fp4 counts one 8-bit scale per 16 values (NVFP4 micro-block), i.e.
# 0.5 + 1/16 bytes; fp8 block scales (128x128, fp32) add ~0.02 % and are ignored
# (reference/models.md).
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16.0}
