"""A host KV tier: the full KV of sparse-attention layers lives in pinned host memory, each request
keeps a fixed HBM budget of slots for the entries its next steps are likely to touch, and each
step fetches its misses over the host link. What this module prices:

- which KV is tiered and which stays resident follows each layer group's declared access pattern
  (`AttentionVariant.host_access()`, declared in the variant's own module: dsa.py, dsv4.py,
  block_sparse.py). A model is a stack of layer groups (`model.mixers`); the tier is priced per
  group and summed. A group whose variant declares a pattern and selects top-k is tiered
  (DSA's latents; DeepSeek-V4's C4/CSA layers' compressed entries), its resident components
  (DSA's indexer keys; V4's indexer keys, window and compressor ring) stay whole in HBM; every
  other group (V4's C128/HCA and window-only layers, a hybrid's dense layers) keeps all its KV in
  HBM and fetches nothing (SGLang HiSparse for V4: "only C4 KV goes to host; C4-indexer and C128
  stay on device");
- units: everything below counts *entries*, the rows of the tiered components
  (`AccessPattern.tokens_per_entry` context tokens each: 1 for DSA, 4 for a V4 C4 layer, whose
  host pool holds L // 4 entries per request: SGLang hisparse_coordinator.py `host_token_len`).
  The budget b is in entries (HiSparse's `device_buffer_size` slots); a request of context L
  tokens has E = L / tokens_per_entry entries and selects min(E, k) of them per layer
  (k = `selected_entries`: index_topk for DSA and V4, the attended blocks' rows for block-sparse);
- misses: a fraction f = max(0, 1 − b/E) of its entries is only in host memory; of its selection
  a fraction r (the locality: entries its previous step already touched, so the bucketed LRU
  still holds them) always hits, the rest land uniformly over the context and miss with
  probability f:
      miss entries per request and layer = min(E, k) · (1 − r) · f
  (benchmarks/results/host_tier/README.md, "Misses follow (1 − r) · f", measured through the
  executor's bucketed LRU: 9.2 % at r = 0.9, f = 0.9);
- page amplification: fetching in units of P entries, a run of c consecutive selected entries at
  a random offset touches (c + P − 1)/P pages, so the fetched rows are (c + P − 1)/c times the
  missed rows (the README's 4.9× at c = 16, P = 64, formula 4.94; 2.0× at c = 64, 1.98);
- the host-link time: fetched bytes at the rate of their unit size (planner.hardware.host_link),
  as contiguous-equivalent bytes the sixth timed resource (`host_link`) prices;
- capacity as two walls: HBM holds the resident components, the untiered groups' KV and b slots
  per request and tiered layer (the budget × requests: SGLang HiSparse gives each request a fixed
  `device_buffer_size` of slots, docs/advanced_features/hisparse_guide.md), host memory holds
  every tiered entry. A rank's tiered bytes are the layout's own share of the tiered components
  (`tiered_inputs`: its token or head split, page rounding, and the whole window a CP rank keeps),
  the rest of the group's share stays in HBM;
- feasibility: one step's touched entries, k · (c + P − 1)/c, must fit the budget in every tiered
  group, or the cache can't hold a step (the executor's resolver found no slot at exactly the
  points this rule refuses: 64K with 103 64-row pages, scattered c = 1 indices at 1,024 pages).

Defaults: `hbm_budget_tokens` 4096 slots (entries; the HiSparse guide's "fixed-size device buffer
(e.g., 4K tokens)"), `page_rows` 1 (HiSparse swaps single entries: a warp per item, SGLang PR
#33085), `run_tokens` 16 (the executor's synthetic trace), `locality` 0.8. NOTE: no published
figure of the overlap between consecutive steps' top-k sets was found (searched: HiSparse, ESS
arXiv 2512.10576, GVR arXiv 2604.22312 — which reports DSA top-k as temporally stable but gives no
overlap ratio — IndexCache, Levy arXiv 2603.13430), and the executor run could not measure one on
real weights; 0.8 is a stated conservative choice: it gives twice the misses of the executor's
r = 0.9 trace. The same defaults serve DeepSeek-V4 (no V4-specific overlap figure either).

Ignores (NOTE): the eager device-to-host backup of each new token (the other direction of a
full-duplex link), the resolve/LRU kernel's own time (engines fuse it with the copy; the executor's
torch resolver is not a floor), overlap of the fetch with attention (the floor's max already
assumes perfect overlap), the extra page SGLang adds to each V4 device buffer. Owner layouts with
unequal lengths use the group's mean fractions, not the busiest owner's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import SpecError
from planner.models.attention.base import AccessPattern, AttentionVariant, discover

DEFAULT_BUDGET_TOKENS = 4096
DEFAULT_LOCALITY = 0.8
DEFAULT_RUN_TOKENS = 16.0


class HostTierSpec(BaseModel):
    """A deployment's host KV tier (frozen)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    hbm_budget_tokens: int = Field(default=DEFAULT_BUDGET_TOKENS, ge=1, le=1 << 24, description="HBM slots per request and tiered layer, in entries: tokens for DSA, compressed entries (4 tokens) for a DeepSeek-V4 C4 layer (HiSparse device_buffer_size).")
    locality: float = Field(default=DEFAULT_LOCALITY, ge=0.0, le=1.0, description="Fraction of a request's top-k its previous step already touched.")
    page_rows: int = Field(default=1, ge=1, le=1 << 16, description="Rows per host-link unit (1: entry granularity; 64: SGLang pages).")
    run_tokens: float = Field(default=DEFAULT_RUN_TOKENS, ge=1.0, le=1 << 20, description="Mean run of consecutive selected entries (page amplification).")
    reference_context_tokens: int = Field(default=131072, ge=1, le=1 << 24, description="Context at which the serving loop's token wall equals the tier's two walls (runtime_policy/host_tier_tables.py).")


def access_pattern(variant) -> AccessPattern:
    """The variant's declared pattern; SpecError for a variant that reads its whole KV each step."""
    pat = variant.host_access()
    if pat is None or variant.topk_tokens() is None:
        raise SpecError(f"host tier needs sparse attention; {variant.describe()} attention reads its whole KV every step "
                        f"(kinds that declare an access pattern: {', '.join(tiered_kinds())})")
    return pat


def tiered_kinds() -> list[str]:
    """Registered variant kinds whose module declares a host access pattern (the registry's, no list)."""
    return [k for k, cls in discover().items() if cls.host_access is not AttentionVariant.host_access]


def tiered_groups(model) -> list[tuple[object, int, AccessPattern]]:
    """(variant, layers, pattern) of every layer group a host tier keeps in host memory: its
    variant declares a pattern and selects top-k."""
    out = []
    for v, n in model.mixers:
        pat = v.host_access() if v is not None else None
        if pat is not None and v.topk_tokens() is not None:
            out.append((v, n, pat))
    return out


def entry_bytes(variant, pat: AccessPattern, kv_dtype: str) -> float:
    """Bytes of one tiered entry, one layer (584 for a V4 C4 entry, 1152 for a bf16 DSA latent)."""
    per_tok = variant.kv_stored_bytes(np.ones(1), kv_dtype)
    return float(sum(per_tok[k][0] for k in pat.tiered)) * pat.tokens_per_entry


def tiered_kv_fraction(model, kv_dtype: str) -> float:
    """Of the bytes one cached token occupies (`model.kv_bytes_per_token`, all layers, below every
    window: what the runtime tables count tokens in), the part a host tier keeps in host memory,
    layer-weighted over the groups: Σ_tiered layers × tiered bytes per token / Σ_all layers ×
    bytes per token. So tokens × kv_bytes_per_token × this = the tokens' host bytes. DSV3.2
    (bf16): 61·1152 / 61·1284 = 0.897; DSV4-Flash: 21·146 / 28,962 = 0.106."""
    one = np.ones(1)
    host = sum(float(sum(v.kv_stored_bytes(one, kv_dtype)[k][0] for k in pat.tiered)) * n
               for v, n, pat in tiered_groups(model))
    total = model.kv_bytes_per_token(kv_dtype)
    return host / total if total > 0 else 0.0


def page_amplification(run_tokens: float, page_rows: int, block_tokens: int = 1) -> float:
    """Fetched rows per missed row: (c + P − 1)/c for runs of c entries at random offsets in P-entry
    units; 1 at entry granularity, and 1 when selections are whole blocks the unit divides."""
    if page_rows <= 1 or (block_tokens > 1 and block_tokens % page_rows == 0):
        return 1.0
    return (run_tokens + page_rows - 1.0) / run_tokens


def host_fraction(context_tokens, budget_tokens: float, tokens_per_entry: float = 1.0) -> np.ndarray:
    """f = max(0, 1 − b/E), E = L / tokens_per_entry: the fraction of a request's entries only in
    host memory (b in entries: a V4 C4 layer at L = 131,072 has E = 32,768, so b = 4096 gives
    f = 0.875)."""
    entries = np.asarray(context_tokens, dtype=np.float64) / tokens_per_entry
    return np.maximum(0.0, 1.0 - budget_tokens / np.maximum(entries, 1.0))


def miss_entries(selected_entries, locality: float, fraction) -> np.ndarray:
    """Entries per request and layer that miss the HBM budget: selected · (1 − r) · f."""
    return np.asarray(selected_entries, dtype=np.float64) * (1.0 - locality) * np.asarray(fraction, dtype=np.float64)


def fetched_bytes(read_bytes, locality: float, fraction, amplification: float) -> np.ndarray:
    """Host-link bytes of a step's misses: the tiered bytes its selections read × (1 − r) × f ×
    page amplification (one formula: the step model and the check against the executor's
    measured steps both call it)."""
    return miss_entries(read_bytes, locality, fraction) * amplification


def working_set_rows(selected_entries: float, spec: HostTierSpec, block_entries: int = 1) -> float:
    """Entries one step touches per request and layer: selected entries · page amplification."""
    return selected_entries * page_amplification(spec.run_tokens, spec.page_rows, block_entries)


def check_tier(model, spec: HostTierSpec) -> None:
    """SpecError (one line, with the numbers) when no layer group can tier, or when the budget
    can't hold one step of a tiered group."""
    groups = tiered_groups(model)
    if not groups:
        kinds = ", ".join(f"{v.describe()}×{n}" for v, n in model.mixers if v is not None)
        raise SpecError(f"host tier needs sparse attention; {model.name} has no layer group that selects top-k "
                        f"entries ({kinds}; kinds that declare an access pattern: {', '.join(tiered_kinds())})")
    for v, _, pat in groups:
        need = working_set_rows(pat.selected_entries, spec, pat.block_entries)
        if need > spec.hbm_budget_tokens:
            raise SpecError(f"host tier hbm_budget_tokens={spec.hbm_budget_tokens} cannot hold one step: {v.describe()} "
                            f"selects {pat.selected_entries:g} entries; in {spec.page_rows}-row pages that touches "
                            f"{need:,.0f} per request and layer (runs of {spec.run_tokens:g}); raise the budget or "
                            f"fetch smaller pages")


@dataclass(frozen=True)
class HostTierCost:
    """A step's host tier on the busiest rank, arrays [P], all layers (every group summed)."""

    host_link_bytes: np.ndarray  # fetched bytes over the host link
    host_link_equivalent_bytes: np.ndarray  # the same at the contiguous rate (what `host_link` prices)
    miss_entries: np.ndarray  # selected entries that missed the budget
    hbm_kv_resident_bytes: np.ndarray  # resident components + the budget slots + the untiered groups' KV
    host_kv_resident_bytes: np.ndarray  # tiered components, every entry
    host_pool_bytes: float  # pinned host memory of one GPU
    unit_bytes: float  # bytes of one host-link unit (of the tiered group with the most layers)
    amplification: float  # fetched rows per missed row (same group)
    tiered_layers: int = 0  # layers whose KV is tiered
    tiered_groups: tuple[str, ...] = ()  # 'dsv4(c4)×21': the tiered groups

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


class _TieredView:
    """A layer group's variant as a layout sees it, its stored components narrowed to the tiered
    ones: the layout's own share of this view is the rank's tiered bytes, with its split (tokens
    over CP ranks, heads under TP), its page rounding and its windows (a CP rank keeps a whole
    window) — no ratio of whole-request bytes."""

    def __init__(self, variant, tiered: tuple[str, ...]):
        self._variant, self._tiered = variant, tiered

    def __getattr__(self, name):
        return getattr(self._variant, name)

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        st = self._variant.kv_stored_bytes(context_tokens, kv_dtype)
        return {k: st[k] for k in self._tiered}


def tiered_inputs(inp):
    """The ShareInputs of a layer group's tiered components (None: the group doesn't tier). A
    layout's share of them is the rank's tiered bytes (`rank_tier`'s `tiered_share`)."""
    att = inp.attention
    pat = att.host_access() if att is not None else None
    if pat is None or att.topk_tokens() is None:
        return None
    return replace(inp, attention=_TieredView(att, pat.tiered))


def rank_tier(dep, groups) -> HostTierCost | None:
    """The host tier of one candidate rank, summed over the layer groups: `groups` holds
    (ShareInputs, AttentionShare, layers, tiered_share) per distinct mixer, the shares the layout's
    same candidate rank (per layer); `tiered_share` the layout's share of `tiered_inputs(inp)` on
    that rank (None for an untiered group). None when the deployment has no tier."""
    spec = dep.host_tier
    if spec is None:
        return None
    zero = np.zeros(groups[0][0].load.points)
    fetched, equiv, missed, hbm, host = zero, zero, zero, zero, zero
    hl = dep.hardware.host_link
    unit, amp, tiered_layers, names, most = 0.0, 1.0, 0, [], 0
    for inp, share, n, tiered_share in groups:
        att, layers = inp.attention, float(n)
        stored = share.kv_stored_bytes * layers
        if tiered_share is None:
            hbm = hbm + stored  # an untiered group: all its KV stays in HBM, nothing is fetched
            continue
        pat = att.host_access()
        tpe = pat.tokens_per_entry
        entry_b = entry_bytes(att, pat, inp.kv_dtype)
        lengths, counts = inp.load.lengths, inp.load.counts  # [P, R], tokens
        sel = np.minimum(lengths / tpe, pat.selected_entries)  # entries each request selects
        f = host_fraction(lengths, spec.hbm_budget_tokens, tpe)
        w = np.maximum((sel * counts).sum(axis=-1), 1e-300)
        f_read = (sel * f * counts).sum(axis=-1) / w  # read-weighted host fraction [P]
        # the requests whose KV the rank stores: the decodes and, in a step with a chunk, the prefilling one
        chunk = inp.prefill_tokens > 0
        req = counts.sum(axis=-1) + chunk
        tokens = (lengths * counts).sum(axis=-1) + np.where(chunk, inp.prefill_context + inp.prefill_tokens, 0.0)
        mean_entries = np.maximum(tokens / np.maximum(req, 1.0), 1.0) / tpe
        read = sum(share.kv_read_bytes.get(k, 0.0) for k in pat.tiered)  # tiered reads on this rank, one layer
        g_amp = page_amplification(spec.run_tokens, spec.page_rows, pat.block_entries)
        g_fetched = fetched_bytes(read, spec.locality, f_read, g_amp) * layers
        g_unit = entry_b * spec.page_rows
        tiered_stored = tiered_share.kv_stored_bytes * layers
        # NOTE: the budget is a fixed allocation per request (HiSparse), b slots whatever L: the rank's
        # tiered bytes scale by b / mean E (exact for equal lengths and for spread layouts)
        budget = tiered_stored * (spec.hbm_budget_tokens / np.maximum(mean_entries, 1e-300))
        fetched = fetched + g_fetched
        equiv = equiv + g_fetched * hl.granularity_factor(g_unit)
        missed = missed + miss_entries(read, spec.locality, f_read) / entry_b * layers
        hbm = hbm + stored - tiered_stored + budget
        host = host + tiered_stored
        tiered_layers += n
        names.append(f"{att.describe()}×{n}")
        if n > most:
            most, unit, amp = n, g_unit, g_amp
    return HostTierCost(
        host_link_bytes=np.asarray(fetched, dtype=np.float64),
        host_link_equivalent_bytes=np.asarray(equiv, dtype=np.float64),
        miss_entries=np.asarray(missed, dtype=np.float64),
        hbm_kv_resident_bytes=np.asarray(hbm, dtype=np.float64),
        host_kv_resident_bytes=np.asarray(host, dtype=np.float64),
        host_pool_bytes=float(hl.host_memory_bytes_per_gpu),
        unit_bytes=float(unit),
        amplification=float(amp),
        tiered_layers=tiered_layers,
        tiered_groups=tuple(names),
    )
