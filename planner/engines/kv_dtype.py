"""KV cache dtype names as the engines spell them, mapped onto the planner's three records.

The planner stores KV as 'bf16', 'fp8' or 'fp8_dsa' (DeepSeek sparse attention's fp8 record:
512 fp8 latent + 4 fp32 scales + 64 bf16 rope = 656 B, + the 132-B indexer key). Engines spell
them `bfloat16`/`bf16`, `fp8`/`fp8_e4m3`/`fp8_e5m2` (SGLang `--kv-cache-dtype`, vLLM
`--kv-cache-dtype`) and `fp8_ds_mla` (vLLM's name for the DSA record; on a DSA model vLLM turns
every fp8 spelling into it, `DeepseekV32ForCausalLM.verify_and_update_config`, and SGLang's
fp8_e4m3 NSA pool stores the same 656-B layout). `auto` is the engine's own default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from planner.engines.base import EngineMemoryModel
    from planner.hardware.spec import HardwareSpec
    from planner.models.spec import ModelSpec

_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
_DSA_FP8 = ("fp8_ds_mla", "fp8_dsa")
KV_DTYPE_NAMES: tuple[str, ...] = ("auto", "bf16", "bfloat16", *_FP8, *_DSA_FP8)
KV_DTYPE_MAPPING = ("auto = the engine's default; bf16 = bfloat16; fp8, fp8_e4m3, fp8_e5m2 = 1-byte KV, and on a DSA "
                    "model (DeepSeek-V3.2, GLM-5) the DSA fp8 record 656 + 132 B, also spelled fp8_ds_mla or fp8_dsa")


def resolve_kv_dtype(model: "ModelSpec", name: str | None, engine: "EngineMemoryModel", hw: "HardwareSpec") -> str:
    """The planner's record ('bf16', 'fp8', 'fp8_dsa') for an engine's KV dtype name."""
    n = "auto" if name is None else str(name).strip().lower()
    dsa = model.attention.kind == "dsa"
    if n == "auto":
        kdt = engine.default_kv_dtype(model, hw)
    elif n in ("bf16", "bfloat16"):
        kdt = "bf16"
    elif n in _FP8:
        kdt = "fp8_dsa" if dsa else "fp8"
    elif n in _DSA_FP8:
        if not dsa:
            raise SpecError(f"kv_dtype={name} is DeepSeek sparse attention's fp8 record; {model.name} has "
                            f"{model.attention.kind} attention (use fp8)")
        kdt = "fp8_dsa"
    else:
        raise SpecError(f"kv_dtype={name!r} is not a KV dtype; choose one of {', '.join(KV_DTYPE_NAMES)}")
    for v, _ in model.mixers:
        v.check_kv_dtype(kdt)
    return kdt
