"""Dimensions of the MLA decode stack the torch executor runs.

What it does: one frozen dataclass (`MLADims`) holding the model dimensions an MLA decode step
needs, built from a planner model spec (duck-typed, read by attribute name), from the
DeepSeek-V3.2 numbers in `shared/reference/models.md`, or small factories for CPU tests.
What it does not do: import torch or the planner, or know about layouts beyond the
divisibility checks a world size imposes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


MLA_SHAPED = ("mla", "dsa")  # mixer kinds (planner registry names) whose decode the MLA layers run


@dataclass(frozen=True)
class MLADims:
    """Dimensions of one MLA decode stack (absorbed MLA, latent KV cache)."""

    hidden_size: int
    """Residual stream width D."""
    num_heads: int
    """Query heads H (MLA keeps one latent KV head)."""
    q_lora_rank: int
    """Query low-rank width (q_a output)."""
    kv_lora_rank: int
    """Latent KV width C (the cached part that is also V after absorption)."""
    qk_nope_head_dim: int
    """Per-head query/key width without rotary embedding."""
    qk_rope_head_dim: int
    """Per-head rotary width R; the cache stores it post-RoPE beside the latent."""
    v_head_dim: int
    """Per-head value width before the output projection."""
    intermediate_size: int
    """Dense FFN width I (SwiGLU gate/up/down). No MoE: the FFN is dense in this stack."""
    num_layers: int
    """Layers in the stack that is run (a configurable depth, not the model's full depth)."""
    page_size: int = 64
    """Tokens per KV page."""
    rope_theta: float = 10000.0
    """RoPE base."""
    rms_eps: float = 1e-6
    """RMSNorm epsilon."""

    def __post_init__(self) -> None:
        for name in (
            "hidden_size", "num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "intermediate_size", "num_layers", "page_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"MLADims.{name}={value!r} must be a positive int")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"MLADims.qk_rope_head_dim={self.qk_rope_head_dim} must be even for RoPE")

    @property
    def latent_dim(self) -> int:
        """Width of one cached token: latent C plus rotary key R (576 for DeepSeek)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """1/sqrt(nope + rope), the scale of q·k before softmax (YaRN mscale ignored)."""
        return (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5

    def head_params(self) -> int:
        """Per-head attention weights of one layer, all heads (what TP/DOP shard and CP/DP-attention
        replicate): q_b [H, N+R, Q], the absorbed key and value halves [H, N, C] and [H, C, V], o [H, V, D]."""
        per_head = ((self.qk_nope_head_dim + self.qk_rope_head_dim) * self.q_lora_rank
                    + self.qk_nope_head_dim * self.kv_lora_rank + self.kv_lora_rank * self.v_head_dim
                    + self.v_head_dim * self.hidden_size)
        return self.num_heads * per_head

    def kv_bytes_per_page(self, element_bytes: int) -> int:
        """Bytes of one page across all layers of the stack."""
        return self.num_layers * self.page_size * self.latent_dim * element_bytes

    def check_world_size(self, world_size: int) -> None:
        """Raise a one-line ValueError when heads or FFN width don't split over world_size."""
        if world_size <= 0:
            raise ValueError(f"world_size={world_size} must be positive")
        if self.num_heads % world_size:
            raise ValueError(f"num_heads={self.num_heads} is not divisible by world_size={world_size}")
        if self.intermediate_size % world_size:
            raise ValueError(
                f"intermediate_size={self.intermediate_size} is not divisible by world_size={world_size}"
            )

    def with_layers(self, num_layers: int) -> "MLADims":
        """The same dimensions with another depth."""
        return replace(self, num_layers=num_layers)

    @classmethod
    def from_model_spec(cls, spec: Any, num_layers: int | None = None, page_size: int = 64) -> "MLADims":
        """Read an MLA model spec by attribute name (planner.models.ModelSpec or any look-alike).

        Reads `hidden_size`, `num_layers`, `intermediate_size` and `attention.{num_heads,
        q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim}`.
        """
        # NOTE: a layered model runs only if every mixer is MLA-shaped (MLA, DSA): a stack with
        # recurrent, sliding or other layers is refused by name, never run as an MLA stack
        others = [f"{getattr(v, 'kind', v)} ×{n}" for v, n in getattr(spec, "mixers", ())
                  if getattr(v, "kind", None) not in MLA_SHAPED]
        if others:
            raise ValueError(f"model spec is not MLA: the torch executor runs MLA decode layers; {getattr(spec, 'name', 'this model')} "
                             f"has {', '.join(others)} layers")
        attention = getattr(spec, "attention", None)
        missing = [
            name for name in ("num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                              "qk_rope_head_dim", "v_head_dim")
            if getattr(attention, name, None) is None
        ]
        if attention is None or missing:
            raise ValueError(f"model spec is not MLA: spec.attention lacks {missing or 'everything'}")
        return cls(
            hidden_size=int(spec.hidden_size),
            num_heads=int(attention.num_heads),
            q_lora_rank=int(attention.q_lora_rank),
            kv_lora_rank=int(attention.kv_lora_rank),
            qk_nope_head_dim=int(attention.qk_nope_head_dim),
            qk_rope_head_dim=int(attention.qk_rope_head_dim),
            v_head_dim=int(attention.v_head_dim),
            intermediate_size=int(spec.intermediate_size),
            num_layers=int(num_layers if num_layers is not None else spec.num_layers),
            page_size=page_size,
        )


# DeepSeek-V3.2 numbers from shared/reference/models.md (config.json fields). Frozen, so a
# module-level constant is not mutable state.
DEEPSEEK_V32 = MLADims(
    hidden_size=7168,
    num_heads=128,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    intermediate_size=18432,
    num_layers=61,
)


def deepseek_v32(num_layers: int = 61) -> MLADims:
    """DeepSeek-V3.2 dimensions with a chosen depth (61 is the model's)."""
    return DEEPSEEK_V32.with_layers(num_layers)


def tiny_dims(num_heads: int = 8, num_layers: int = 2, page_size: int = 4) -> MLADims:
    """Small dimensions for CPU tests: every structural feature, few FLOPs."""
    return MLADims(
        hidden_size=64,
        num_heads=num_heads,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        intermediate_size=96,
        num_layers=num_layers,
        page_size=page_size,
    )
