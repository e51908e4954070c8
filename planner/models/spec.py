"""`ModelSpec`: the planner's view of a model — a stack of declared layers plus embeddings — built
from a Hugging Face config.json (built-in cards are such files shipped in `cards/`).

A model is `layers`: groups of identical decoder layers, each a (count, mixer, mlp) with mixer an
attention or recurrent-state variant (planner.models.attention) or None, and mlp a dense, MoE or
dense + MoE variant (planner.models.mlp) or None (Nemotron-H blocks are mixer-only or MLP-only).
Layouts price each group through the variant protocol; the totals over layers (parameters,
bytes per token, bytes per request) are computed here. `mixers` and `mlps` merge groups that
share a variant, so the step model loops over a handful of distinct variants, not 100 layers.

`attention` and `mlp` name the model's primary variants — the attention variant with the most
layers (what picks the decode kernel, the KV dtype rules and the engine's page size) and the MoE
(else dense) variant with the most layers — for the code that asks about one kind.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.models.attention.base import STATE, TOKEN, WINDOW, AttentionVariant
from planner.models.mlp.base import MLPVariant


class LayerGroup(BaseModel):
    """`count` identical decoder layers (not necessarily adjacent; `first_layer` is the lowest index)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    count: int = Field(gt=0)
    first_layer: int = Field(ge=0)
    mixer: AttentionVariant | None = Field(description="Attention / recurrent-state variant; None: no token mixer.")
    mlp: MLPVariant | None = Field(description="Dense / MoE / dense+MoE variant; None: no MLP.")
    weight_dtypes: tuple[tuple[str, str], ...] = Field(
        default=(), description="Checkpoint dtype per part ('mixer', 'routed_experts', 'shared_experts', "
                                "'dense_mlp'; planner.models.quant); a part not listed is bf16.")

    def part_dtype(self, part: str) -> str:
        return dict(self.weight_dtypes).get(part, "bf16")

    def describe(self) -> str:
        m = self.mixer.describe() if self.mixer is not None else "-"
        f = self.mlp.describe() if self.mlp is not None else "-"
        return f"{self.count} × {m} + {f}"


def _merge(pairs) -> tuple:
    out: dict[Any, int] = {}
    for v, n in pairs:
        if v is not None:
            out[v] = out.get(v, 0) + n
    return tuple(out.items())


class ModelSpec(BaseModel):
    """A model as the step model sees it. Frozen; built by `load_model`."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    name: str = Field(description="Built-in card name, the config path it came from, or the Hugging Face repo id it was resolved from.")
    architecture: str = Field(description="`architectures[0]` or `model_type` of the config.")
    num_layers: int = Field(gt=0, description="Decoder layers; MTP draft layers excluded.")
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    intermediate_size: int | None = Field(default=None, description="Dense FFN width, if the model has dense layers.")
    tie_word_embeddings: bool = False
    mtp_layers: int = Field(default=0, ge=0, description="Next-token draft layers; not counted in a decode step.")
    default_weight_dtype: str = Field(description="Checkpoint dtype of linear weights: bf16, fp8 or fp4.")
    layers: tuple[LayerGroup, ...] = Field(min_length=1)
    quantization: dict[str, Any] = Field(default_factory=dict, description="What the quantization files say (method, excluded layers).")
    context_window_tokens: int | None = Field(default=None, gt=0, description="`max_position_embeddings`: the engines' default context length (SGLang sizes its running-request cap from it); None when the config has none.")

    # ---- the stack ----------------------------------------------------------------------------
    @cached_property
    def mixers(self) -> tuple[tuple[AttentionVariant, int], ...]:
        """(variant, layers) of every distinct mixer."""
        return _merge((g.mixer, g.count) for g in self.layers)

    @cached_property
    def mlps(self) -> tuple[tuple[MLPVariant, int], ...]:
        """(variant, layers) of every distinct MLP."""
        return _merge((g.mlp, g.count) for g in self.layers)

    @cached_property
    def attention(self) -> AttentionVariant:
        """The primary mixer: the attention variant with the most layers (a recurrent one if the
        model has no attention)."""
        att = [(v, n) for v, n in self.mixers if not v.recurrent] or list(self.mixers)
        return max(att, key=lambda vn: vn[1])[0]

    @cached_property
    def mlp(self) -> MLPVariant:
        """The primary MLP: the MoE variant with the most layers, else the dense one."""
        moe = [(v, n) for v, n in self.mlps if v.is_moe] or list(self.mlps)
        return max(moe, key=lambda vn: vn[1])[0]

    @property
    def has_moe(self) -> bool:
        return any(v.is_moe for v, _ in self.mlps)

    @property
    def has_state(self) -> bool:
        """Some layer keeps a per-request state (a recurrent mixer, DeepSeek-V4's compressor)."""
        return self.state_bytes_per_request("bf16" if "bf16" in self.attention.supported_kv_dtypes() else "fp8") > 0

    def layer_counts(self) -> dict[str, int]:
        """Layers by mixer kind and by MLP kind ('mixer:gqa', 'mlp:moe', …)."""
        out: dict[str, int] = {}
        for g in self.layers:
            for key in (f"mixer:{g.mixer.kind if g.mixer else 'none'}", f"mlp:{g.mlp.kind if g.mlp else 'none'}"):
                out[key] = out.get(key, 0) + g.count
        return out

    def _kinds(self, side: str) -> str:
        """'gqa' for a uniform stack, 'gdn×45+gqa×15' for a mixed one ('none' layers left out)."""
        counts = {k.split(":", 1)[1]: n for k, n in self.layer_counts().items() if k.startswith(side + ":")}
        counts.pop("none", None)
        if len(counts) == 1:
            return next(iter(counts))
        return "+".join(f"{k}×{n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    # ---- parameters ---------------------------------------------------------------------------
    def params_by_dtype(self) -> dict[str, float]:
        """Linear-weight parameters by checkpoint dtype (embeddings excluded)."""
        from planner.models.mlp.base import component_part

        out: dict[str, float] = {}
        for g in self.layers:
            parts = [("mixer", sum(g.mixer.weight_params().values()))] if g.mixer else []
            parts += [(component_part(k), v) for k, v in (g.mlp.weight_params().items() if g.mlp else ())]
            for part, p in parts:
                dt = g.part_dtype(part)
                out[dt] = out.get(dt, 0.0) + p * g.count
        return out

    @property
    def embedding_params(self) -> float:
        """Input embedding + LM head (one matrix if tied)."""
        return float(self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2))

    @property
    def head_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    def attention_params(self) -> dict[str, float]:
        """Mixer parameters over all layers, by component."""
        out: dict[str, float] = {}
        for v, n in self.mixers:
            for k, p in v.weight_params().items():
                out[k] = out.get(k, 0.0) + p * n
        return out

    def mlp_params(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for v, n in self.mlps:
            for k, p in v.weight_params().items():
                out[k] = out.get(k, 0.0) + p * n
        return out

    def weight_params(self) -> dict[str, float]:
        """All parameters by component."""
        out = dict(self.attention_params())
        for k, v in self.mlp_params().items():
            out[k] = out.get(k, 0.0) + v
        out["embedding"] = self.embedding_params
        return out

    def total_params(self) -> float:
        return float(sum(self.weight_params().values()))

    def active_params_per_token(self) -> float:
        mlp = sum(v.active_params_per_token() * n for v, n in self.mlps)
        return float(sum(self.attention_params().values()) + mlp + self.head_params)

    # ---- memory -------------------------------------------------------------------------------
    def memory_bytes(self, context_tokens, kv_dtype: str) -> dict[str, np.ndarray]:
        """Bytes one request keeps at `context_tokens`, all layers, by memory kind ('token',
        'window', 'state'; planner.models.attention.base)."""
        l = np.asarray(context_tokens, dtype=np.float64)
        out = {TOKEN: np.zeros_like(l), WINDOW: np.zeros_like(l), STATE: np.zeros_like(l)}
        for v, n in self.mixers:
            for comp, b in v.kv_stored_bytes(l, kv_dtype).items():
                out[v.memory_kind(comp)] = out[v.memory_kind(comp)] + b * n
        return out

    def token_bytes_per_token(self, kv_dtype: str) -> float:
        """Bytes each context token adds in the layers whose cache grows without bound."""
        return float(sum(v.token_rate(kv_dtype) * n for v, n in self.mixers))

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """Bytes one cached token occupies below every window (per-token and window layers)."""
        return float(sum(v.token_bytes(kv_dtype) * n for v, n in self.mixers))

    def state_bytes_per_request(self, kv_dtype: str) -> float:
        """Fixed bytes per request (recurrent states, compressor rings), all layers."""
        return float(sum(v.state_bytes(kv_dtype) * n for v, n in self.mixers))

    def summary(self) -> dict[str, Any]:
        p = self.weight_params()
        kdt = "bf16" if "bf16" in self.attention.supported_kv_dtypes() else self.attention.supported_kv_dtypes()[0]
        return {
            "name": self.name,
            "architecture": self.architecture,
            "attention": self.attention.kind,
            "mlp": self.mlp.kind,
            "attention_layers": self._kinds("mixer"),
            "mlp_layers": self._kinds("mlp"),
            "layers": self.num_layers,
            "layer_stack": [g.describe() for g in self.layers],
            "hidden_size": self.hidden_size,
            "num_heads": self.attention.num_heads,
            "kv_splittable_heads": self.attention.kv_splittable_heads(),
            "total_params_b": round(self.total_params() / 1e9, 2),
            "active_params_per_token_b": round(self.active_params_per_token() / 1e9, 2),
            "params_b": {k: round(v / 1e9, 2) for k, v in p.items()},
            "kv_dtype_for_bytes": kdt,
            "kv_bytes_per_token": self.kv_bytes_per_token(kdt),
            "token_bytes_per_token_beyond_windows": self.token_bytes_per_token(kdt),
            "state_bytes_per_request": self.state_bytes_per_request(kdt),
            "default_weight_dtype": self.default_weight_dtype,
        }
