"""What every recurrent-state mixer (Gated DeltaNet, KDA, Mamba2) shares: a fixed per-request
state — a short-convolution window (`conv_width` = kernel − 1 rows of `conv_channels`) and one
recurrent state matrix per head (`state_heads` × `state_rows` × `state_cols`) — read and written
once per decode step, split by heads under TP, never split by tokens (it is one per request).

Memory: 'state' kind only; bytes = conv_channels·conv_width·conv_bytes + heads·rows·cols·
ssm_bytes per layer, the shapes vLLM builds in `MambaStateShapeCalculator` (vllm/model_executor/
layers/mamba/mamba_utils.py: `gated_delta_net_state_shape`, `kda_state_shape`,
`mamba2_state_shape`) and SGLang in `Mamba2StateShape.create` / `KimiLinearStateShape`
(python/sglang/srt/configs/mamba_utils.py). Dtypes (`state_dtypes`): the conv state is the model
dtype (bf16: SGLang `SGLANG_MAMBA_CONV_DTYPE` default, vLLM `mamba_cache_dtype` auto); the
recurrent state is the config's `mamba_ssm_dtype` / `mamba_ssm_cache_dtype` when it declares one
(SGLang `mamba2_state_dtype`; vLLM copies Qwen3.5's `mamba_ssm_dtype` into
`mamba_ssm_cache_dtype`, and NemotronH's defaults to float32), else float32 (SGLang's default;
NOTE: vLLM's generic 'auto' would be the model dtype for a family that declares neither).

Work: a decode step reads the state and writes it back (`kv_write_bytes`: the state once per
request); FLOPs per token are `flops_per_state_element` × the state's elements (the variants say
where theirs comes from), constant in context; a prefill chunk costs the same per token (the
chunked scans' intra-chunk terms are left out: a lower bound). Decode query/output widths (what
DOP routes to a request's owner) are the mixer's per-head inputs and outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.attention.base import STATE, AttentionVariant, as_tokens
from planner.models.config import HFConfig

DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "fp16": 2.0}


def ssm_state_bytes(cfg: HFConfig) -> float:
    """Bytes per element of the recurrent state (module docstring)."""
    name = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype") or "float32"
    if not isinstance(name, str) or name.lower() not in DTYPE_BYTES:
        raise SpecError(f"field 'mamba_ssm_dtype'={name!r} is not a dtype the planner knows "
                        f"({', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[name.lower()]


@dataclass(frozen=True)
class RecurrentState(AttentionVariant):
    kind: ClassVar[str] = "recurrent"
    recurrent: ClassVar[bool] = True
    flops_per_state_element: ClassVar[float] = 1.0

    hidden_size: int = 0
    conv_channels: int = 0
    conv_width: int = 0  # kernel − 1
    state_heads: int = 1
    state_rows: int = 1
    state_cols: int = 1
    split_heads: int = 1  # heads TP splits state and weights by
    conv_bytes: float = 2.0
    ssm_bytes: float = 4.0

    def supported_kv_dtypes(self):
        return ("bf16", "fp8", "fp8_dsa")  # the state keeps its own dtypes whatever the KV's

    def kv_splittable_heads(self):
        return self.split_heads

    def memory_kind(self, component):
        return STATE

    def _state(self) -> dict[str, float]:
        return {"conv_state": self.conv_channels * self.conv_width * self.conv_bytes,
                "ssm_state": self.state_heads * self.state_rows * self.state_cols * self.ssm_bytes}

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        one = np.ones_like(as_tokens(context_tokens))
        return {k: one * v for k, v in self._state().items()}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        return self.kv_stored_bytes(context_tokens, kv_dtype)

    def token_bytes(self, kv_dtype):
        return 0.0

    def state_bytes(self, kv_dtype):
        return float(sum(self._state().values()))

    def _flops_per_token(self) -> float:
        return self.flops_per_state_element * self.state_heads * self.state_rows * self.state_cols

    def decode_flops(self, context_tokens):
        return np.ones_like(as_tokens(context_tokens)) * self._flops_per_token()

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return as_tokens(chunk_tokens) * self._flops_per_token()

    def decode_output_width(self):
        return self.state_rows

    def check_tp(self, tp):
        if self.split_heads % tp:
            raise SpecError(f"{self.kind}: its {self.split_heads} heads are not divisible by tp={tp}")
