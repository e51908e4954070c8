"""`ModelSpec`: the planner's view of a model — attention variant, MLP variant, embeddings —
built from a Hugging Face config.json (built-in cards are such files shipped in `cards/`).

Totals over layers are computed here; per-rank splits are the layouts' business.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.models.attention.base import AttentionVariant
from planner.models.mlp.base import MLPVariant


class ModelSpec(BaseModel):
    """A model as the step model sees it. Frozen; built by `load_model`."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(description="Built-in card name or the config path it came from.")
    architecture: str = Field(description="`architectures[0]` or `model_type` of the config.")
    num_layers: int = Field(gt=0, description="Decoder layers (num_hidden_layers); MTP draft layers excluded.")
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    intermediate_size: int | None = Field(default=None, description="Dense FFN width, if the model has dense layers.")
    tie_word_embeddings: bool = False
    mtp_layers: int = Field(default=0, ge=0, description="Next-token draft layers; not counted in a decode step.")
    default_weight_dtype: str = Field(description="Checkpoint dtype of linear weights: bf16, fp8 or fp4.")
    attention: AttentionVariant
    mlp: MLPVariant

    @property
    def embedding_params(self) -> float:
        """Input embedding + LM head (one matrix if tied)."""
        return float(self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2))

    @property
    def head_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    def attention_params(self) -> dict[str, float]:
        """Attention projection parameters over all layers, by component."""
        return {k: v * self.num_layers for k, v in self.attention.weight_params().items()}

    def weight_params(self) -> dict[str, float]:
        """All parameters by component (billions ×1e9)."""
        out = dict(self.attention_params())
        out.update(self.mlp.weight_params())
        out["embedding"] = self.embedding_params
        return out

    def total_params(self) -> float:
        return float(sum(self.weight_params().values()))

    def active_params_per_token(self) -> float:
        return float(sum(self.attention_params().values()) + self.mlp.active_params_per_token() + self.head_params)

    def summary(self) -> dict[str, Any]:
        p = self.weight_params()
        return {
            "name": self.name,
            "architecture": self.architecture,
            "attention": self.attention.kind,
            "mlp": self.mlp.kind,
            "layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_heads": self.attention.num_heads,
            "kv_splittable_heads": self.attention.kv_splittable_heads(),
            "total_params_b": round(self.total_params() / 1e9, 2),
            "active_params_per_token_b": round(self.active_params_per_token() / 1e9, 2),
            "params_b": {k: round(v / 1e9, 2) for k, v in p.items()},
            "default_weight_dtype": self.default_weight_dtype,
        }
