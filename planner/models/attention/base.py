"""The attention-variant protocol and its registry.

An attention variant is one small frozen object that answers, per layer and vectorized over
context lengths `L` (tokens, numpy arrays), the few questions the step model asks: bytes of KV
stored per request, bytes of KV read by one decode query, attention FLOPs of one decode query
and of a causal prefill chunk (by component: the per-head core, and work like DSA's indexer that
no layout splits by heads), weight parameters (and which of them head-sharding splits, as
engines run it), the widths of a decode query and output per head, the decode kernel an engine
runs for it, a sparse variant's top-k and its latency, and how many KV heads tensor parallelism
can split. Layouts read the model only through these. Variants register with `@register_attention`, and the Hugging Face loader
asks each registered variant, most specific first, whether it claims a config. A new variant is
one module in this package; nothing else is edited (modules are imported by `discover()`).

Per-layer figures for a model whose layers differ (alternating full/sliding) are the mean over
layers, so `num_layers × per-layer` is the model total.

Not here: how layouts split these loads across ranks (planner.layouts), pricing (resources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.registry import Registry

_REGISTRY: Registry = Registry(__package__, "attention variant", key=lambda cls: cls.kind)
register_attention = _REGISTRY.register  # class decorator: findable by name and by the config loader
discover = _REGISTRY.discover


def variant_from_hf_config(cfg: dict[str, Any]) -> "AttentionVariant | None":
    """The most specific registered variant that claims this config, or None."""
    return _REGISTRY.claim(cfg)


KV_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class WeightPart:
    """One group of a layer's attention weights and how head-sharding layouts hold it."""

    params: float  # one layer
    head_sharded: bool  # split by query heads under TP-like layouts; False: every rank holds it whole


@dataclass(frozen=True)
class AttentionVariant:
    """Base of every variant. Subclasses are frozen dataclasses that set `kind` and `priority`."""

    kind: ClassVar[str] = "base"
    priority: ClassVar[int] = 0  # higher = tried first by the config loader

    num_heads: int

    # ---- what the config loader calls -------------------------------------------------------
    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> "AttentionVariant | None":
        raise NotImplementedError

    # ---- what the step model calls (per layer) ----------------------------------------------
    def supported_kv_dtypes(self) -> tuple[str, ...]:
        return ("bf16", "fp8")

    def kv_splittable_heads(self) -> int:
        """KV heads tensor parallelism can split; TP ranks beyond this replicate KV."""
        raise NotImplementedError

    def kv_stored_bytes(self, context_tokens: np.ndarray, kv_dtype: str) -> dict[str, np.ndarray]:
        """Bytes of KV (by component) stored for one request of `context_tokens` tokens, one layer."""
        raise NotImplementedError

    def kv_read_bytes(self, context_tokens: np.ndarray, kv_dtype: str) -> dict[str, np.ndarray]:
        """Bytes of KV (by component) one decode query reads at this context, one layer."""
        raise NotImplementedError

    def decode_flops(self, context_tokens: np.ndarray) -> np.ndarray:
        """Attention-core FLOPs (not projections) of one decode query, all heads, one layer."""
        raise NotImplementedError

    def prefill_flops(self, chunk_tokens: np.ndarray, prefix_tokens: np.ndarray) -> np.ndarray:
        """Attention-core FLOPs of a causal prefill chunk of `chunk_tokens` queries whose request
        already has `prefix_tokens` cached, one layer."""
        raise NotImplementedError

    def decode_flops_by_component(self, context_tokens: np.ndarray) -> dict[str, np.ndarray]:
        """`decode_flops` by component. 'attention_core' is per query head: a head-sharding layout
        splits it by heads and a decode kernel pads it to its head tile. Any other component
        (DSA's 'indexer') scores tokens with heads of its own, whole on every rank that holds the
        tokens."""
        return {"attention_core": self.decode_flops(context_tokens)}

    def prefill_flops_by_component(self, chunk_tokens: np.ndarray, prefix_tokens: np.ndarray) -> dict[str, np.ndarray]:
        """`prefill_flops` by component, named as in `decode_flops_by_component`."""
        return {"attention_core": self.prefill_flops(chunk_tokens, prefix_tokens)}

    def weight_params(self) -> dict[str, float]:
        """Projection parameters by component ('attention', 'indexer'…), one layer."""
        raise NotImplementedError

    def weight_parts(self) -> dict[str, WeightPart]:
        """The layer's weights in the groups a layout places differently: which ones a
        head-sharding layout splits and which ones it replicates (engines replicate some that the
        idea of TP would shard). Default: every component of `weight_params` split by heads."""
        return {k: WeightPart(v, True) for k, v in self.weight_params().items()}

    def decode_query_width(self) -> int:
        """Elements of one head's query as the decode kernel reads it (absorbed MLA: latent + rope)."""
        raise NotImplementedError

    def decode_output_width(self) -> int:
        """Elements of one head's attention output before the output path (absorbed MLA: latent)."""
        raise NotImplementedError

    def decode_kernel(self, arch: str | None, kv_dtype: str) -> str:
        """The decode kernel engines run for this variant on a GPU generation (a name in
        planner.models.attention.kernels); a deployment may override it."""
        return "unpadded"

    def topk_tokens(self) -> float | None:
        """Tokens a sparse variant selects per query (DSA's index_topk), None for dense attention."""
        return None

    def topk_latency_s(self, row_tokens: np.ndarray) -> np.ndarray:
        """Seconds one top-k selection over rows of `row_tokens` scores takes, one layer (rows in
        parallel, one CTA each); 0 for dense attention."""
        return np.zeros_like(as_tokens(row_tokens))

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """Bytes stored per cached token per layer, all components (for capacity tables)."""
        one = np.asarray([1.0])
        return float(sum(v[0] for v in self.kv_stored_bytes(one, kv_dtype).values()))

    def check_tp(self, tp: int) -> None:
        """Raise SpecError if heads cannot be sharded over `tp` ranks."""
        if self.num_heads % tp:
            raise SpecError(f"num_attention_heads={self.num_heads} is not divisible by tp={tp}")

    def check_kv_dtype(self, kv_dtype: str) -> None:
        if kv_dtype not in self.supported_kv_dtypes():
            raise SpecError(
                f"kv_dtype={kv_dtype} is not supported by {self.kind} attention "
                f"(supported: {', '.join(self.supported_kv_dtypes())})"
            )


def causal_pairs(chunk_tokens: Any, prefix_tokens: Any, cap: float = np.inf) -> np.ndarray:
    """Σ over a chunk's P queries of the keys each attends to, min(C + i, cap) for i = 1…P
    (causal, C cached prefix tokens, at most `cap` keys per query)."""
    p = np.asarray(chunk_tokens, dtype=np.float64)
    a = np.asarray(prefix_tokens, dtype=np.float64) + 1.0  # keys seen by the first query
    last = a + p - 1.0
    uncapped = p * (a + last) / 2.0
    if not np.isfinite(cap):
        return np.where(p > 0, uncapped, 0.0)
    w = float(cap)
    # queries whose key count stays under the cap, then the rest at the cap
    n_under = np.clip(w - a + 1.0, 0.0, p)
    under = n_under * (a + (a + n_under - 1.0)) / 2.0
    return np.where(p > 0, np.where(last <= w, uncapped, under + (p - n_under) * w), 0.0)


def as_tokens(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def need(cfg: dict[str, Any], key: str, kind: str) -> Any:
    """A required config field, or one clear SpecError naming it."""
    if cfg.get(key) is None:
        raise SpecError(f"config.json: {kind} attention needs field '{key}'")
    return cfg[key]


Factory = Callable[[dict[str, Any]], AttentionVariant | None]
