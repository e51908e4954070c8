"""The mixer-variant protocol and its registry: what one decoder layer's token mixer (an
attention variant, or a recurrent-state variant such as Gated DeltaNet, KDA or Mamba2) declares.

A variant is one small frozen object that answers, per layer and vectorized over context
lengths `L` (tokens, numpy arrays), the few questions the step model and the layouts ask:
- memory: bytes it keeps for one request at context L, by component, and which kind of memory
  each component is (`memory_kind`): 'token' (grows with L: KV pages), 'window' (grows with L up
  to a window, then stays: a sliding window's pages) or 'state' (fixed per request: a recurrent
  state, a compressor's ring); engines pool the kinds differently (planner.engines), and layouts
  split or replicate each (`kv_head_split`: which components tensor parallelism splits by heads);
- work: bytes one decode query reads, bytes a step writes, attention FLOPs of a decode query and
  of a causal prefill chunk (by component: the per-head core, and work like DSA's indexer that
  no layout splits by heads);
- weights: parameters by component and which of them head-sharding splits, as engines run it;
- shape: the widths of a decode query and output per head (what DCP/DOP move), the decode kernel
  an engine runs for it, a sparse variant's top-k and its latency, how many heads TP can split,
  whether its cache can be interleaved over ranks by tokens (CP/DCP), its window, and the
  context lengths where its per-request costs bend (`knees`, for the runtime's tables);
- a host KV tier: which of its cache components a host tier may keep in host memory and how a
  decode step selects from them (`host_access`, an `AccessPattern`; None for a variant that reads
  its whole KV every step). A new sparse variant declares its pattern in its own module.
Layouts read a model only through these. Variants register with `@register_attention`; the
loader asks each registered variant, most specific first, whether it claims a layer of a
config (`from_hf_config(cfg, layer)`, `layer` the planner.models.config.LayerType the config's
patterns give). A new variant is one module in this package; nothing else is edited.

Not here: how layouts split these loads across ranks (planner.layouts), pricing (resources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from planner.errors import SpecError
from planner.models.config import HFConfig, LayerType
from planner.registry import Registry

_REGISTRY: Registry = Registry(__package__, "attention variant", key=lambda cls: cls.kind)
register_attention = _REGISTRY.register  # class decorator: findable by name and by the config loader
discover = _REGISTRY.discover


def variant_for_layer(cfg: HFConfig, layer: LayerType) -> "AttentionVariant | None":
    """The most specific registered variant that claims this layer of the config, or None."""
    return _REGISTRY.claim(cfg, layer)


KV_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0}
TOKEN, WINDOW, STATE = "token", "window", "state"
MEMORY_KINDS: tuple[str, ...] = (TOKEN, WINDOW, STATE)


@dataclass(frozen=True)
class AccessPattern:
    """How a variant's decode step reads its KV, as far as a host KV tier cares (planner.host_tier).

    Units: an *entry* is one row of the tiered components — one token's latent for DSA, one
    compressed entry (4 tokens) for DeepSeek-V4's CSA layers, one token's K/V for block-sparse
    GQA. A host tier's budget, its working set and its misses count entries."""

    tiered: tuple[str, ...]  # kv_stored_bytes components ('token' kind) that may live in host memory
    resident: tuple[str, ...]  # components that stay whole in HBM (scanned every step, or dense)
    tokens_per_entry: float  # context tokens per tiered entry (DSA 1, DeepSeek-V4 C4 4)
    selected_entries: float  # tiered entries one decode query reads at long context (its top-k span)
    block_entries: int  # selection unit in entries: 1, or a block-sparse variant's whole blocks
    source: str  # the engine behaviour this follows


@dataclass(frozen=True)
class WeightPart:
    """One group of a layer's mixer weights and how head-sharding layouts hold it."""

    params: float  # one layer
    head_sharded: bool  # split by query heads under TP-like layouts; False: every rank holds it whole


@dataclass(frozen=True)
class AttentionVariant:
    """Base of every mixer variant. Subclasses are frozen dataclasses that set `kind` and `priority`."""

    kind: ClassVar[str] = "base"
    priority: ClassVar[int] = 0  # higher = tried first by the config loader
    recurrent: ClassVar[bool] = False  # a recurrent-state mixer (no per-token KV), not attention

    num_heads: int

    # ---- what the config loader calls -------------------------------------------------------
    @classmethod
    def from_hf_config(cls, cfg: HFConfig, layer: LayerType) -> "AttentionVariant | None":
        raise NotImplementedError

    # ---- memory -----------------------------------------------------------------------------
    def supported_kv_dtypes(self) -> tuple[str, ...]:
        return ("bf16", "fp8")

    def kv_splittable_heads(self) -> int:
        """Heads tensor parallelism can split the cache by; TP ranks beyond this replicate it."""
        raise NotImplementedError

    def kv_head_split(self, component: str) -> bool:
        """Whether tensor parallelism splits this cache component by heads (False: every TP rank
        keeps it whole, as MiniMax-M3's single index-key head)."""
        return True

    def memory_kind(self, component: str) -> str:
        """'token', 'window' or 'state' (module docstring) of one `kv_stored_bytes` component."""
        return TOKEN

    def kv_stored_bytes(self, context_tokens: np.ndarray, kv_dtype: str) -> dict[str, np.ndarray]:
        """Bytes (by component) kept for one request of `context_tokens` tokens, one layer."""
        raise NotImplementedError

    def token_bytes(self, kv_dtype: str) -> float:
        """Bytes one new token adds to the per-token and window components, one layer."""
        one = np.asarray([1.0])
        return float(sum(v[0] for k, v in self.kv_stored_bytes(one, kv_dtype).items() if self.memory_kind(k) != STATE))

    def token_rate(self, kv_dtype: str) -> float:
        """Bytes each context token adds to the 'token' components (no window caps them), one layer."""
        one = np.asarray([1.0])
        return float(sum(v[0] for k, v in self.kv_stored_bytes(one, kv_dtype).items() if self.memory_kind(k) == TOKEN))

    def state_bytes(self, kv_dtype: str) -> float:
        """Fixed bytes per request (the 'state' components), one layer."""
        one = np.asarray([1.0])
        return float(sum(v[0] for k, v in self.kv_stored_bytes(one, kv_dtype).items() if self.memory_kind(k) == STATE))

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """Bytes stored per cached token per layer, per-token and window components (the
        capacity tables' per-token figure; the per-request state is `state_bytes`)."""
        return self.token_bytes(kv_dtype)

    def memory_kinds(self) -> frozenset[str]:
        """The memory kinds its cache components are ('token', 'window', 'state')."""
        one = np.asarray([1.0])
        return frozenset(self.memory_kind(k) for k in self.kv_stored_bytes(one, self.supported_kv_dtypes()[0]))

    def window_tokens(self) -> int | None:
        """The window a 'window' component is capped at (None: no window)."""
        return None

    def token_splittable(self) -> bool:
        """Whether the cache can be interleaved over ranks by tokens (CP, DCP): False for a
        recurrent state, which is one per request."""
        return not self.recurrent

    # ---- work -------------------------------------------------------------------------------
    def kv_read_bytes(self, context_tokens: np.ndarray, kv_dtype: str) -> dict[str, np.ndarray]:
        """Bytes (by component) one decode query reads at this context, one layer."""
        raise NotImplementedError

    def kv_write_bytes(self, new_tokens, requests, kv_dtype: str):
        """Bytes a step writes for `new_tokens` new tokens of `requests` requests, one layer: each
        token's record, and each request's state once (a recurrent state is rewritten per step)."""
        out = np.asarray(new_tokens, dtype=np.float64) * self.token_bytes(kv_dtype)
        s = self.state_bytes(kv_dtype)
        return out + np.asarray(requests, dtype=np.float64) * s if s else out

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

    # ---- weights ----------------------------------------------------------------------------
    def weight_params(self) -> dict[str, float]:
        """Projection parameters by component ('attention', 'indexer'…), one layer."""
        return {k: p.params for k, p in self.weight_parts().items()}

    def weight_parts(self) -> dict[str, WeightPart]:
        """The layer's weights in the groups a layout places differently: which ones a
        head-sharding layout splits and which ones it replicates (engines replicate some that the
        idea of TP would shard)."""
        raise NotImplementedError

    # ---- shape ------------------------------------------------------------------------------
    def decode_query_width(self) -> int:
        """Elements of one head's query as the decode kernel reads it (absorbed MLA: latent + rope)."""
        raise NotImplementedError

    def decode_output_width(self) -> int:
        """Elements of one head's attention output before the output path (absorbed MLA: latent)."""
        raise NotImplementedError

    def decode_kernel(self, arch: str | None, kv_dtype: str) -> str:
        """The decode kernel engines run for this variant on a GPU generation (a name in
        planner.models.attention.kernels); a deployment may override it for attention layers."""
        return "unpadded"

    def topk_tokens(self) -> float | None:
        """Entries a sparse variant selects per query (DSA's index_topk), None for dense attention."""
        return None

    def topk_latency_s(self, row_tokens: np.ndarray) -> np.ndarray:
        """Seconds one top-k selection over rows of `row_tokens` scores takes, one layer (rows in
        parallel, one CTA each); 0 for dense attention."""
        return np.zeros_like(as_tokens(row_tokens))

    def topk_row_scores(self, context_tokens: np.ndarray) -> np.ndarray:
        """Scores in one request's top-k row at this context (DSA: one per token; DeepSeek-V4's
        CSA: one per compressed entry)."""
        return as_tokens(context_tokens)

    def knees(self) -> tuple[float, ...]:
        """Context lengths (tokens) where this variant's per-request costs bend: a window, the
        span a top-k covers. Between knees, every cost is linear in L."""
        return ()

    def host_access(self) -> AccessPattern | None:
        """How a host KV tier may hold this layer's KV; None (the default): the layer reads its
        whole KV every step, so a tier keeps all of it in HBM and fetches nothing for it."""
        return None

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

    def describe(self) -> str:
        """A short name for tables and messages ('gqa', 'sliding(1024)')."""
        w = self.window_tokens()
        return f"{self.kind}({w})" if w else self.kind


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


def need(cfg: HFConfig, key: str, kind: str, lo: int = 1) -> int:
    """A required integer field, or one clear SpecError naming it."""
    if not cfg.has(key):
        raise SpecError(f"{kind} attention needs field '{key}'")
    return cfg.int(key, lo=lo)


Factory = Callable[[HFConfig, LayerType], AttentionVariant | None]
