"""A host KV tier: the full KV of sparse-attention layers lives in pinned host memory, each request
keeps a fixed HBM budget of slots for the entries its next steps are likely to touch, and each
step fetches its misses over the host link. What this module prices:

- which KV is tiered and which stays resident follows the attention variant's declared access
  pattern (`ACCESS_PATTERNS`, keyed by the variant's kind): DSA's latents are tiered and read for
  the top-k entries; its indexer keys are scanned every step, so they stay whole in HBM;
- misses: a request with context L and a budget of b slots has a fraction f = max(0, 1 − b/L) of
  its entries only in host memory; of its top-k selection a fraction r (the locality: entries its
  previous step already touched, so the bucketed LRU still holds them) always hits, the rest land
  uniformly over the context and miss with probability f:
      miss entries per request and layer = selected · (1 − r) · f
  (benchmarks/results/host_tier/README.md, "Misses follow (1 − r) · f", measured through the
  executor's bucketed LRU: 9.2 % at r = 0.9, f = 0.9);
- page amplification: fetching in units of P rows, a run of c consecutive selected tokens at a
  random offset touches (c + P − 1)/P pages, so the fetched rows are (c + P − 1)/c times the
  missed rows (the README's 4.9× at c = 16, P = 64, formula 4.94; 2.0× at c = 64, 1.98);
- the host-link time: fetched bytes at the rate of their unit size (planner.hardware.host_link),
  as contiguous-equivalent bytes the sixth timed resource (`host_link`) prices;
- capacity as two walls: HBM holds the resident components plus b slots per request (the
  budget × requests: SGLang HiSparse gives each request a fixed `device_buffer_size` of slots,
  docs/advanced_features/hisparse_guide.md), host memory holds every tiered token;
- feasibility: one step's touched rows, top-k · (c + P − 1)/c, must fit the budget, or the cache
  can't hold a step (the executor's resolver found no slot at exactly the points this rule refuses:
  64K with 103 64-row pages, scattered c = 1 indices at 1,024 pages).

Defaults: `hbm_budget_tokens` 4096 (the HiSparse guide's "fixed-size device buffer (e.g., 4K
tokens)"), `page_rows` 1 (HiSparse swaps single entries: a warp per item, SGLang PR #33085),
`run_tokens` 16 (the executor's synthetic trace), `locality` 0.8. NOTE: no published figure of the
overlap between consecutive steps' top-k sets was found (searched: HiSparse, ESS arXiv 2512.10576,
GVR arXiv 2604.22312 — which reports DSA top-k as temporally stable but gives no overlap ratio —
IndexCache, Levy arXiv 2603.13430), and the executor run could not measure one on real weights;
0.8 is a stated conservative choice: it gives twice the misses of the executor's r = 0.9 trace.

Ignores (NOTE): the eager device-to-host backup of each new token (the other direction of a
full-duplex link), the resolve/LRU kernel's own time (engines fuse it with the copy; the executor's
torch resolver is not a floor), overlap of the fetch with attention (the floor's max already
assumes perfect overlap). Owner layouts with unequal lengths use the group's mean fractions, not
the busiest owner's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import SpecError

DEFAULT_BUDGET_TOKENS = 4096
DEFAULT_LOCALITY = 0.8
DEFAULT_RUN_TOKENS = 16.0


class HostTierSpec(BaseModel):
    """A deployment's host KV tier (frozen)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hbm_budget_tokens: int = Field(default=DEFAULT_BUDGET_TOKENS, ge=1, le=1 << 24, description="HBM slots per request (and layer) for tiered entries (HiSparse device_buffer_size).")
    locality: float = Field(default=DEFAULT_LOCALITY, ge=0.0, le=1.0, description="Fraction of a request's top-k its previous step already touched.")
    page_rows: int = Field(default=1, ge=1, le=1 << 16, description="Rows per host-link unit (1: entry granularity; 64: SGLang pages).")
    run_tokens: float = Field(default=DEFAULT_RUN_TOKENS, ge=1.0, le=1 << 20, description="Mean run of consecutive selected entries (page amplification).")
    reference_context_tokens: int = Field(default=131072, ge=1, le=1 << 24, description="Context at which the serving loop's token wall equals the tier's two walls (runtime_policy/host_tier_tables.py).")


@dataclass(frozen=True)
class AccessPattern:
    """How a variant's decode step reads its KV, as far as a host tier cares."""

    tiered: tuple[str, ...]  # kv_stored_bytes components that live in host memory
    resident: tuple[str, ...]  # components that stay whole in HBM (scanned every step, or dense)
    block_tokens: int  # selection unit: 1 for entries; a block-sparse variant selects whole blocks
    source: str


# NOTE: keyed by the attention variant's kind, with its kv_stored_bytes component names: dsa.py
# ('kv', 'indexer'), dsv4.py ('compressed' C4 or C128 entries, 'window', 'indexer', 'compressor_state';
# only a CSA layer, the one with top-k, can tier), block_sparse.py ('kv', 'indexer'). A stack of
# several attention groups prices the tier on its primary attention group (planner.step).
ACCESS_PATTERNS: dict[str, AccessPattern] = {
    "dsa": AccessPattern(("kv",), ("indexer",), 1,
                         "SGLang HiSparse (docs/advanced_features/hisparse_guide.md): DSA latents in host memory, "
                         "top-k entries swapped in; the indexer scores every token each step, so its keys stay on device"),
    "dsv4": AccessPattern(("compressed",), ("indexer", "window", "compressor_state"), 1,
                          "SGLang HiSparse for DeepSeek-V4: only C4 KV goes to host; C4-indexer and C128 stay on device "
                          "(shared/reference/frontier-models-and-engines.md §3)"),
    "block_sparse": AccessPattern(("kv",), ("indexer",), 128,
                                  "MiniMax-M3 MSA: the indexer selects top-k 128-token KV blocks (vLLM "
                                  "vllm/models/minimax_m3/common/sparse_attention.py); index keys scanned each step"),
}


def access_pattern(variant) -> AccessPattern:
    """The variant's declared pattern; SpecError for a variant that reads its whole KV each step."""
    pat = ACCESS_PATTERNS.get(variant.kind)
    if pat is None or variant.topk_tokens() is None:
        raise SpecError(f"host tier needs sparse attention; {variant.kind} attention reads its whole KV every step "
                        f"(tiered kinds: {', '.join(ACCESS_PATTERNS)})")
    return pat


def page_amplification(run_tokens: float, page_rows: int, block_tokens: int = 1) -> float:
    """Fetched rows per missed row: (c + P − 1)/c for runs of c entries at random offsets in P-row
    units; 1 at entry granularity, and 1 when selections are whole blocks the unit divides."""
    if page_rows <= 1 or (block_tokens > 1 and block_tokens % page_rows == 0):
        return 1.0
    return (run_tokens + page_rows - 1.0) / run_tokens


def host_fraction(context_tokens, budget_tokens: float) -> np.ndarray:
    """f = max(0, 1 − b/L): the fraction of a request's entries only in host memory."""
    ctx = np.asarray(context_tokens, dtype=np.float64)
    return np.maximum(0.0, 1.0 - budget_tokens / np.maximum(ctx, 1.0))


def miss_entries(selected_entries, locality: float, fraction) -> np.ndarray:
    """Entries per request and layer that miss the HBM budget: selected · (1 − r) · f."""
    return np.asarray(selected_entries, dtype=np.float64) * (1.0 - locality) * np.asarray(fraction, dtype=np.float64)


def fetched_bytes(read_bytes, locality: float, fraction, amplification: float) -> np.ndarray:
    """Host-link bytes of a step's misses: the tiered bytes its selections read × (1 − r) × f ×
    page amplification (one formula: the step model and the check against the executor's
    measured steps both call it)."""
    return miss_entries(read_bytes, locality, fraction) * amplification


def working_set_rows(topk: float, spec: HostTierSpec, block_tokens: int = 1) -> float:
    """Rows one step touches per request and layer: top-k · page amplification."""
    return topk * page_amplification(spec.run_tokens, spec.page_rows, block_tokens)


def check_tier(model, spec: HostTierSpec) -> None:
    """SpecError (one line, with the numbers) when the model or the budget can't run the tier."""
    att = model.attention
    groups = [v for v, _ in model.mixers if v is not None]
    if len(groups) > 1:
        # NOTE: rank_tier prices one attention group's share over every layer; a stack of several
        # (DeepSeek-V4's CSA, HCA and window layers) would be priced as if all layers were one kind
        raise SpecError(f"host tier: {model.name} has {len(groups)} attention layer groups "
                        f"({', '.join(sorted({v.kind for v in groups}))}); the tier is priced for one attention stack only")
    pat = access_pattern(att)
    need = working_set_rows(att.topk_tokens(), spec, pat.block_tokens)
    if need > spec.hbm_budget_tokens:
        raise SpecError(f"host tier hbm_budget_tokens={spec.hbm_budget_tokens} cannot hold one step: top-k "
                        f"{att.topk_tokens():g} in {spec.page_rows}-row pages touches {need:,.0f} rows per request "
                        f"and layer (runs of {spec.run_tokens:g}); raise the budget or fetch smaller pages")


@dataclass(frozen=True)
class HostTierCost:
    """A step's host tier on the busiest rank, arrays [P], all layers."""

    host_link_bytes: np.ndarray  # fetched bytes over the host link
    host_link_equivalent_bytes: np.ndarray  # the same at the contiguous rate (what `host_link` prices)
    miss_entries: np.ndarray  # selected entries that missed the budget
    hbm_kv_resident_bytes: np.ndarray  # resident components + the budget slots
    host_kv_resident_bytes: np.ndarray  # tiered components, every token
    host_pool_bytes: float  # pinned host memory of one GPU
    unit_bytes: float  # bytes of one host-link unit
    amplification: float  # fetched rows per missed row

    @property
    def host_fits(self) -> np.ndarray:
        return self.host_kv_resident_bytes <= self.host_pool_bytes

    def where(self, keep: np.ndarray, other: "HostTierCost") -> "HostTierCost":
        """Per point: this candidate rank's values where `keep`, else `other`'s."""
        vals = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("host_link_bytes", "host_link_equivalent_bytes", "miss_entries", "hbm_kv_resident_bytes",
                     "host_kv_resident_bytes"):
            vals[name] = np.where(keep, getattr(self, name), getattr(other, name))
        return HostTierCost(**vals)


def rank_tier(dep, inp, share) -> HostTierCost | None:
    """The host tier of one candidate rank: `inp` the step's ShareInputs (the group's decode
    requests and prefill chunk), `share` the layout's busiest-rank AttentionShare (per layer).
    None when the deployment has no tier."""
    spec = dep.host_tier
    if spec is None:
        return None
    m, att = dep.model, dep.model.attention
    pat = access_pattern(att)
    layers = float(m.num_layers)
    one = np.ones(1)
    per_tok = {k: float(v[0]) for k, v in att.kv_stored_bytes(one, dep.kv_dtype).items()}
    row_bytes = sum(per_tok.get(k, 0.0) for k in pat.tiered)
    tiered_frac = row_bytes / sum(per_tok.values())
    lengths, counts = inp.load.lengths, inp.load.counts  # [P, R]
    topk = att.topk_tokens()
    sel = np.minimum(lengths, topk)
    f = host_fraction(lengths, spec.hbm_budget_tokens)
    w = np.maximum((sel * counts).sum(axis=-1), 1e-300)
    f_read = (sel * f * counts).sum(axis=-1) / w  # read-weighted host fraction [P]
    # the requests whose KV the rank stores: the decodes and, in a step with a chunk, the prefilling one
    chunk = inp.prefill_tokens > 0
    n = counts.sum(axis=-1) + chunk
    tokens = (lengths * counts).sum(axis=-1) + np.where(chunk, inp.prefill_context + inp.prefill_tokens, 0.0)
    mean_ctx = np.maximum(tokens / np.maximum(n, 1.0), 1.0)
    read = sum(share.kv_read_bytes.get(k, 0.0) for k in pat.tiered)  # the tiered reads on this rank, one layer
    amp = page_amplification(spec.run_tokens, spec.page_rows, pat.block_tokens)
    missed = miss_entries(read, spec.locality, f_read)  # in bytes of missed rows
    fetched = fetched_bytes(read, spec.locality, f_read, amp) * layers
    unit = row_bytes * spec.page_rows
    stored = share.kv_stored_bytes * layers
    tiered_stored = stored * tiered_frac
    # NOTE: the budget is a fixed allocation per request (HiSparse), b slots whatever L: the rank's
    # tiered bytes scale by b / mean L (exact for equal lengths and for spread layouts)
    budget = tiered_stored * (spec.hbm_budget_tokens / mean_ctx)
    hl = dep.hardware.host_link
    return HostTierCost(
        host_link_bytes=np.asarray(fetched, dtype=np.float64),
        host_link_equivalent_bytes=np.asarray(fetched * hl.granularity_factor(unit), dtype=np.float64),
        miss_entries=np.asarray(missed / row_bytes * layers, dtype=np.float64),
        hbm_kv_resident_bytes=np.asarray(stored - tiered_stored + budget, dtype=np.float64),
        host_kv_resident_bytes=np.asarray(tiered_stored, dtype=np.float64),
        host_pool_bytes=float(hl.host_memory_bytes_per_gpu),
        unit_bytes=float(unit),
        amplification=float(amp),
    )
